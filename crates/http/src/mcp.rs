//! mcp: `/mcp`. A request that needs one answer, session-less at 2026-07-28 or in an open
//! session of an earlier revision, is answered in its own request, through toolhost-mcp's
//! `direct` (the same handler and checks, without a service built per request or the
//! session's worker); every other request, and any that `direct` declines once its body is
//! read, goes to rmcp's streamable HTTP service as it came. Every request of a session that
//! rmcp sees is told to `direct`, which keeps the session's twin answering only while rmcp
//! would keep the session open.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::sync::Arc;
use toolhost_mcp::McpServer;
use toolhost_mcp::direct::Direct;

/// rmcp's service for `/mcp`.
pub(crate) type Rmcp = StreamableHttpService<McpServer, LocalSessionManager>;

/// What `/mcp` needs: the direct path, rmcp's service, and the `Host` names rmcp would take.
pub(crate) struct Mcp {
    pub(crate) direct: Direct,
    pub(crate) rmcp: Rmcp,
    pub(crate) hosts: Arc<crate::hosts::AllowedHosts>,
    /// The longest body `direct` reads (rmcp's bound).
    pub(crate) max_body: usize,
    /// rmcp's sessions: a request of one that has ended goes to rmcp, which says `404`.
    pub(crate) sessions: Arc<LocalSessionManager>,
    pub(crate) metrics: Option<Arc<toolhost_core::metrics::Metrics>>,
}

impl Mcp {
    /// Counts one request answered by `path` (`direct` or `service`).
    fn count(&self, path: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.mcp_http_requests.with_label_values(&[path]).inc();
        }
    }
}

/// Answers one request to `/mcp`.
pub(crate) async fn route(mcp: &Mcp, request: Request) -> Response {
    if !mcp.direct.may_take(request.method(), request.headers()) {
        return rmcp(mcp, request).await;
    }
    // As rmcp checks it for /mcp: a DNS-rebinding page's request carries its own name.
    if !mcp.hosts.allow(request.headers()) {
        return crate::hosts::refusal();
    }
    if let Some(id) = session_id(&request) {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        if !mcp.sessions.has_session(&id.into()).await.unwrap_or(false) {
            return rmcp(mcp, request).await;
        }
    }
    let (parts, body) = request.into_parts();
    let body = match read_body(body, mcp.max_body).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    match mcp.direct.take(parts, &body) {
        Ok(taken) => {
            mcp.count("direct");
            let (status, json) = taken.answer().await;
            let mut response = Response::new(Body::from(json));
            *response.status_mut() = status;
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(parts) => rmcp(mcp, Request::from_parts(*parts, Body::from(body))).await,
    }
}

async fn rmcp(mcp: &Mcp, request: Request) -> Response {
    use tower_service::Service;
    mcp.count("service");
    let session = session_id(&request);
    if let Some(id) = &session {
        mcp.direct.touch(id);
    }
    let ending_a_session = request.method() == http::Method::DELETE;
    // rmcp's service is always ready, and a clone shares its sessions.
    let mut response = match mcp.rmcp.clone().call(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    };
    // A session ended is done, not accepted for later: `204 No Content`, which clients
    // expect (the Python SDK warns at rmcp's `202`).
    if ending_a_session && response.status() == http::StatusCode::ACCEPTED {
        *response.status_mut() = http::StatusCode::NO_CONTENT;
        *response.body_mut() = Body::empty();
        if let Some(id) = &session {
            mcp.direct.forget(id);
        }
    }
    response
}

/// The request's `Mcp-Session-Id`, if it has one.
fn session_id(request: &Request) -> Option<String> {
    let id = request.headers().get("mcp-session-id")?;
    id.to_str().ok().map(str::to_owned)
}

/// A request's body, whole, within `max` bytes; or the `400` that says why not.
pub(crate) async fn read_body(body: Body, max: usize) -> Result<bytes::Bytes, Response> {
    axum::body::to_bytes(body, max).await.map_err(|e| {
        let why = format!("the request body could not be read: {e}");
        (StatusCode::BAD_REQUEST, why).into_response()
    })
}
