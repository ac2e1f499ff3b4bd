//! Draining: a host that is shutting down takes no new calls, lets the calls in flight finish
//! up to a deadline, and cancels what is left, each ending in a `cancelled` outcome that is
//! audited like any other. Every caller (MCP over stdio or HTTP, the agent loop) shuts down
//! through [`super::Host::shutdown`]. [`Tally`] counts what is in flight; `serve` counts the
//! HTTP answers still being written with it too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long cancelled calls get to end (and be audited) once the deadline passed. A call
/// ends at once when cancelled; this bounds only a backend that would not let go.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Things in flight, counted while their guard lives, and a wait until there is none.
#[derive(Debug, Default)]
pub struct Tally {
    count: AtomicUsize,
    /// Woken when the count drops to zero.
    idle: Notify,
}

/// One thing counted in a [`Tally`] until it is dropped.
pub struct Counted<'a>(&'a Tally);

/// One thing counted in a shared [`Tally`] until it is dropped, for guards that must own
/// what they hold (an HTTP response body).
pub struct OwnedCounted(Arc<Tally>);

impl Tally {
    /// Counts one more until the guard is dropped.
    pub fn enter(&self) -> Counted<'_> {
        self.count.fetch_add(1, Ordering::SeqCst);
        Counted(self)
    }

    /// [`Tally::enter`], with a guard that holds the tally itself.
    pub fn enter_owned(self: &Arc<Self>) -> OwnedCounted {
        self.count.fetch_add(1, Ordering::SeqCst);
        OwnedCounted(Arc::clone(self))
    }

    /// How many are counted now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Resolves when nothing is counted.
    pub async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read: a drop to zero between the two still
            // wakes us.
            idle.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Drop for OwnedCounted {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// The calls in flight, and whether new ones are taken.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    draining: AtomicBool,
    /// Cancelled when the shutdown begins: what waits for no call (a subscription to tool
    /// list changes) ends then.
    stopping: CancellationToken,
    in_flight: Tally,
    /// Cancelled at the deadline: every call in flight ends as `cancelled`.
    cancel: CancellationToken,
    cancelled: AtomicUsize,
}

/// What a shutdown found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainReport {
    /// Calls in flight when the shutdown began.
    pub in_flight: usize,
    /// Of those (and of any that joined them through dedup), the ones cancelled at the
    /// deadline.
    pub cancelled: usize,
}

impl Drain {
    /// Counts a call in flight, or `None` once the host is draining. Counted before the
    /// check, so a shutdown that has begun sees every call that passed it.
    pub(crate) fn enter(&self) -> Option<Counted<'_>> {
        let entered = self.in_flight.enter();
        (!self.draining.load(Ordering::SeqCst)).then_some(entered)
    }

    /// Resolves when calls in flight must end.
    pub(crate) async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// Counts one call that ended because it was cancelled.
    pub(crate) fn count_cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Resolves when the shutdown begins.
    pub(crate) async fn stopping(&self) {
        self.stopping.cancelled().await;
    }

    /// Stops taking calls, waits for those in flight up to `deadline`, then cancels the rest
    /// and waits for them to end. A second shutdown (a second signal) with a shorter deadline
    /// cancels sooner; both return when no call is in flight.
    pub(crate) async fn shutdown(&self, deadline: Duration) -> DrainReport {
        self.draining.store(true, Ordering::SeqCst);
        self.stopping.cancel();
        let in_flight = self.in_flight.count();
        if tokio::time::timeout(deadline, self.in_flight.idle())
            .await
            .is_err()
        {
            self.cancel.cancel();
            if tokio::time::timeout(CANCEL_GRACE, self.in_flight.idle())
                .await
                .is_err()
            {
                tracing::error!(
                    "{} call(s) did not end within {CANCEL_GRACE:?} of being cancelled",
                    self.in_flight.count()
                );
            }
        }
        DrainReport {
            in_flight,
            cancelled: self.cancelled.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_call_is_taken_once_draining_and_idle_hosts_drain_at_once() {
        let drain = Drain::default();
        let call = drain.enter().expect("taken before the shutdown");
        drop(call);
        let report = drain.shutdown(Duration::from_secs(3600)).await;
        assert_eq!(report, DrainReport::default());
        assert!(drain.enter().is_none());
    }

    #[tokio::test]
    async fn calls_past_the_deadline_are_cancelled() {
        let drain = std::sync::Arc::new(Drain::default());
        let running = {
            let drain = drain.clone();
            let (entered, taken) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(async move {
                let _call = drain.enter().expect("taken");
                let _ = entered.send(());
                drain.cancelled().await;
                drain.count_cancelled();
            });
            taken.await.expect("entered");
            task
        };
        let report = drain.shutdown(Duration::from_millis(10)).await;
        assert_eq!(
            report,
            DrainReport {
                in_flight: 1,
                cancelled: 1
            }
        );
        running.await.expect("ended");
    }
}
