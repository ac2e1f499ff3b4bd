//! streams: the bound on answers that stay open. A stream (MCP's standalone stream, a chat
//! run, the catalog's events) takes one of `max-http-streams` places or is refused before
//! anything starts; the guard asks here once it has let a request through.

use std::sync::Arc;

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

/// Runs `request` by `next`: a stream past `max-http-streams` is refused with a 503 before
/// anything is started, and the others hold their place until their answer ends.
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
