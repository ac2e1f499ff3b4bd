//! gate: how many calls of one invoker run at once and how many wait for a turn, whatever
//! kind of backend runs them.

/// How many calls of one invoker may run at once, and how many may wait for a turn; a call
/// past both is refused as `busy` at once rather than queued without bound.
#[derive(Debug)]
pub struct CallGate {
    running: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
    pub max_running: usize,
    pub max_waiting: usize,
}

/// The gate refused a call: every slot is running and the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateFull;

impl CallGate {
    pub fn new(max_running: usize, max_waiting: usize) -> Self {
        CallGate {
            running: tokio::sync::Semaphore::new(max_running.max(1)),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            max_running: max_running.max(1),
            max_waiting,
        }
    }

    /// Waits for a turn, or refuses at once when the queue is full.
    pub(crate) async fn enter(&self) -> Result<tokio::sync::SemaphorePermit<'_>, GateFull> {
        use std::sync::atomic::Ordering;
        if let Ok(permit) = self.running.try_acquire() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(GateFull);
        }
        let permit = self.running.acquire().await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        // The semaphore is never closed.
        permit.map_err(|_| GateFull)
    }
}
