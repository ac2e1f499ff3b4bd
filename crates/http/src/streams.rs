//! streams: the bounds on answers that stay open, and the count of answers being written. A
//! stream (MCP's standalone stream, a chat run, the catalog's events) takes one of
//! `max-http-streams` places or is refused before anything starts; every POST is counted
//! until its answer ends, so that a shutdown lets the last answers out before it closes the
//! MCP sessions.

use std::sync::Arc;
use toolhost_core::invoke::{OwnedCounted, Tally};

/// True for a request whose answer is a stream that stays open: MCP's standalone stream (a
/// GET of /mcp), a chat run, the catalog's stream. (A `subscriptions/listen` stream is counted
/// by the MCP server itself, which knows it by its body.)
fn is_stream(request: &axum::extract::Request) -> bool {
    let path = request.uri().path();
    let method = request.method();
    if method == axum::http::Method::GET {
        return path == "/mcp" || path == "/api/catalog/events";
    }
    method == axum::http::Method::POST
        && (path == "/api/conversations"
            || (path.starts_with("/api/conversations/") && path.ends_with("/messages")))
}

/// Refuses a stream past `max-http-streams` with a 503 before anything is started, and counts
/// the others until their answer ends.
pub(crate) async fn limit_streams(
    streams: &Arc<toolhost_mcp::StreamSlots>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !is_stream(&request) {
        return next.run(request).await;
    }
    let Some(slot) = streams.try_take() else {
        let refusal = streams.refusal();
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, refusal).into_response();
    };
    let response = next.run(request).await;
    response.map(|body| {
        axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
            let _ = &slot;
            frame
        }))
    })
}

/// Middleware: counts `request` in `answering` from its arrival until its response body
/// ends (or is dropped), so that a shutdown can let the last answers go out before it closes
/// the MCP sessions.
pub(crate) async fn count_answer(
    answering: Arc<Tally>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let open = answering.enter_owned();
    let response = next.run(request).await;
    response.map(|body| axum::body::Body::new(CountedBody { body, _open: open }))
}

/// A response body that keeps its request counted until it ends.
struct CountedBody {
    body: axum::body::Body,
    _open: OwnedCounted,
}

impl http_body::Body for CountedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
