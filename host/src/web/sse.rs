//! Server-Sent Events as an HTTP body: frames from a channel, a `: keep-alive` comment while
//! nothing else comes, the end when the channel closes; dropping the body (the client went
//! away) cancels what it was streaming.

use bytes::Bytes;
use serde_json::Value;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

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
    frames: mpsc::UnboundedReceiver<Bytes>,
    keep_alive: tokio::time::Interval,
    _cancel_on_drop: Option<DropGuard>,
}

impl EventStream {
    /// Streams what is sent on `frames`; `cancel` is cancelled when the body is dropped
    /// before it ended (or after: cancelling a finished run does nothing).
    pub fn new(frames: mpsc::UnboundedReceiver<Bytes>, cancel: Option<CancellationToken>) -> Self {
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
        match self.frames.poll_recv(context) {
            Poll::Ready(Some(bytes)) => {
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
