//! streams: the long-lived streams open at once over HTTP and their cap, shared by every
//! kind (MCP's GET stream and `subscriptions/listen`, chat runs, the catalog's).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The long-lived streams open at once over HTTP (MCP's GET stream and `subscriptions/listen`,
/// chat runs, the catalog's), and their cap (`[host] max-http-streams`), shared by every kind.
#[derive(Debug)]
pub struct StreamSlots {
    open: AtomicUsize,
    max: usize,
}

/// One stream's place in [`StreamSlots`], given back when dropped.
#[derive(Debug)]
pub struct StreamSlot(Arc<StreamSlots>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl StreamSlots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(StreamSlots {
            open: AtomicUsize::new(0),
            max: max.max(1),
        })
    }

    /// A place for one more stream, if there is one.
    pub fn try_take(self: &Arc<Self>) -> Option<StreamSlot> {
        if self.open.fetch_add(1, Ordering::SeqCst) >= self.max {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(StreamSlot(Arc::clone(self)))
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The refusal of a stream past the cap.
    pub fn refusal(&self) -> String {
        format!(
            "{} long-lived streams are open, the most this host keeps (max-http-streams); \
             close one or try again later",
            self.max
        )
    }
}
