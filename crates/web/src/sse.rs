//! Server-Sent Events as an HTTP body: frames from a channel, a `: keep-alive` comment while
//! nothing else comes, the end when the channel closes; dropping the body (the client went
//! away) cancels what it was streaming.
//!
//! A client that stops reading cannot make the host hold its events without bound: the bytes
//! queued and not yet taken by the connection are counted, and past [`MAX_UNREAD`] the
//! sender refuses further frames and cancels what it streams (a chat run ends; a catalog
//! stream closes). A client that reads at any steady pace never comes near it.

use bytes::Bytes;
use serde_json::Value;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Bytes of events a client may leave unread before its stream is ended.
pub const MAX_UNREAD: usize = 16 << 20;

/// Where a stream's frames are sent from; see [`channel`].
#[derive(Clone)]
pub struct FrameSender {
    sender: mpsc::UnboundedSender<Bytes>,
    unread: Arc<AtomicUsize>,
    max_unread: usize,
    overflowed: Arc<AtomicBool>,
    /// Cancelled when the client leaves more than `max_unread` bytes unread.
    on_overflow: CancellationToken,
}

impl FrameSender {
    /// Queues `frame`; false when the stream is gone, or when the client left more than the
    /// bound unread (then the frame is dropped, and the stream's overflow token cancelled).
    /// A frame is always taken when nothing waits unread, however large (its size is bounded
    /// where it was made): a client that keeps up never trips the bound.
    pub fn send(&self, frame: Bytes) -> bool {
        if self.overflowed.load(Ordering::SeqCst) {
            return false;
        }
        let before = self.unread.fetch_add(frame.len(), Ordering::SeqCst);
        if before > 0 && before + frame.len() > self.max_unread {
            self.unread.fetch_sub(frame.len(), Ordering::SeqCst);
            self.overflowed.store(true, Ordering::SeqCst);
            self.on_overflow.cancel();
            return false;
        }
        self.sender.send(frame).is_ok()
    }

    /// Queues the stream's last frame even past the bound (it is small, and it is the one
    /// that says how the stream ended).
    pub fn send_last(&self, frame: Bytes) {
        self.unread.fetch_add(frame.len(), Ordering::SeqCst);
        let _ = self.sender.send(frame);
    }

    /// True once the client left more than the bound unread.
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::SeqCst)
    }

    /// Completes when the stream's body is gone.
    pub async fn closed(&self) {
        self.sender.closed().await;
    }
}

/// A stream's frames, as its body takes them.
pub struct FrameReceiver {
    receiver: mpsc::UnboundedReceiver<Bytes>,
    unread: Arc<AtomicUsize>,
}

/// A channel of frames whose client may leave at most `max_unread` bytes unread; past that,
/// `on_overflow` is cancelled.
pub fn channel(max_unread: usize, on_overflow: CancellationToken) -> (FrameSender, FrameReceiver) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let unread = Arc::new(AtomicUsize::new(0));
    (
        FrameSender {
            sender,
            unread: Arc::clone(&unread),
            max_unread,
            overflowed: Arc::default(),
            on_overflow,
        },
        FrameReceiver { receiver, unread },
    )
}

/// How often a comment goes out on a stream that has nothing else to say, so that proxies
/// and load balancers do not close it as idle.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event: `event: TYPE` (the `type` of `data`) and `data: JSON`.
pub fn frame(data: &Value) -> Bytes {
    let kind = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    // serde_json writes no raw newline: one `data:` line holds the whole event.
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// The body of an event stream.
pub struct EventStream {
    frames: FrameReceiver,
    keep_alive: tokio::time::Interval,
    _cancel_on_drop: Option<DropGuard>,
}

impl EventStream {
    /// Streams what is sent on `frames`; `cancel` is cancelled when the body is dropped
    /// before it ended (or after: cancelling a finished run does nothing).
    pub fn new(frames: FrameReceiver, cancel: Option<CancellationToken>) -> Self {
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.reset();
        EventStream {
            frames,
            keep_alive,
            _cancel_on_drop: cancel.map(CancellationToken::drop_guard),
        }
    }

    /// The response: `text/event-stream`, never cached or buffered by a proxy.
    pub fn response(self) -> axum::response::Response {
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .header("x-accel-buffering", "no")
            .body(axum::body::Body::new(self))
            .unwrap_or_default()
    }
}

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.frames.receiver.poll_recv(context) {
            Poll::Ready(Some(bytes)) => {
                // Taken by the connection: hyper writes it out before it polls again.
                self.frames.unread.fetch_sub(bytes.len(), Ordering::SeqCst);
                self.keep_alive.reset();
                Poll::Ready(Some(Ok(http_body::Frame::data(bytes))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.keep_alive.poll_tick(context) {
                Poll::Ready(_) => Poll::Ready(Some(Ok(http_body::Frame::data(
                    Bytes::from_static(b": keep-alive\n\n"),
                )))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_leaves_too_much_unread_ends_its_stream() {
        let overflow = CancellationToken::new();
        let (sender, mut receiver) = channel(100, overflow.clone());
        assert!(sender.send(Bytes::from(vec![b'x'; 60])));
        assert!(
            !sender.send(Bytes::from(vec![b'x'; 60])),
            "160 bytes unread"
        );
        assert!(overflow.is_cancelled() && sender.overflowed());
        assert!(
            !sender.send(Bytes::from_static(b"x")),
            "nothing after the overflow"
        );
        sender.send_last(Bytes::from_static(b"done"));
        assert_eq!(receiver.receiver.try_recv().map(|b| b.len()), Ok(60));
        assert_eq!(receiver.receiver.try_recv().map(|b| b.len()), Ok(4));
        // One frame larger than the bound, with nothing unread, is taken.
        let (sender, mut receiver) = channel(100, CancellationToken::new());
        assert!(sender.send(Bytes::from(vec![b'x'; 500])));
        assert_eq!(receiver.receiver.try_recv().map(|b| b.len()), Ok(500));
        // A client that reads as frames come never comes near the bound.
        let (sender, mut receiver) = channel(100, CancellationToken::new());
        for _ in 0..1000 {
            assert!(sender.send(Bytes::from(vec![b'x'; 60])));
            let frame = receiver.receiver.try_recv().expect("frame");
            receiver.unread.fetch_sub(frame.len(), Ordering::SeqCst);
        }
    }
}
