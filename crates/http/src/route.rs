//! route: a request for what another replica of a fleet holds, forwarded to that replica
//! (`[fleet] advertise`, with Redis). Four things live on one replica and are named by what
//! a client sends again: an MCP session (`Mcp-Session-Id`), a task (its id,
//! `<replica>.<uuid>`), a call waiting for its client's answer (its `requestState`,
//! `<replica>.<token>`) and a web chat run going on (its conversation's id, in the path). A request naming one that this replica does not hold is sent, as it
//! came (method, path, headers, body), to the address the holder advertised in Redis, and
//! the holder's answer, streamed, is this request's answer.
//!
//! What a client sends names at most a replica or a session, never an address: addresses
//! are only read from Redis (`toolhost-state`'s routes). The holder checks the request as it
//! checks any (its token, the session's identity): the replicas share their access
//! configuration and trust each other with nothing more. A forwarded request carries
//! [`FORWARDED_BY`] and is never forwarded again (one hop at most). Every forward is bounded:
//! at most `max-http-connections` at once, its body as `/mcp` bounds it, a connection to the
//! holder within [`CONNECT_TIMEOUT`] and its answer's head within [`ANSWER_TIMEOUT`].

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use toolhost_state::routes::{Route, Routes};

/// The header a forwarded request carries: the name of the replica that forwarded it.
pub(crate) const FORWARDED_BY: &str = toolhost_core::trace::FORWARDED_BY;
/// How long a connection to the holder may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the holder may take to begin its answer (a call answered in one JSON body takes
/// as long as the call: the tool's own `timeout-ms` bounds it; this bounds the rest). Its
/// body then streams as long as the holder sends it.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(330);

/// Forwards requests to the replicas that hold what they name.
pub(crate) struct Forward {
    routes: Arc<Routes>,
    /// The chat, to tell whether a run of a conversation goes on here.
    web: Arc<toolhost_web::Web>,
    client: reqwest::Client,
    at_once: Arc<Semaphore>,
    max_body: usize,
}

/// Where a request names something held: by a session, or in its body.
enum Named {
    Session(String),
    Replica(String),
}

impl Forward {
    pub(crate) fn new(
        routes: Arc<Routes>,
        web: Arc<toolhost_web::Web>,
        max_at_once: usize,
        max_body: usize,
    ) -> Option<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build();
        match client {
            Ok(client) => Some(Forward {
                routes,
                web,
                client,
                at_once: Arc::new(Semaphore::new(max_at_once.max(1))),
                max_body,
            }),
            Err(e) => {
                tracing::error!("requests cannot be forwarded between replicas: {e}");
                None
            }
        }
    }

    pub(crate) fn routes(&self) -> Arc<Routes> {
        Arc::clone(&self.routes)
    }

    /// `request` back, to be answered here; or the answer of the replica that holds what it
    /// names (or why it cannot be had). `local_session` says whether this replica holds the
    /// session the request names.
    pub(crate) async fn route(
        &self,
        request: Request,
        local_session: bool,
    ) -> Result<Request, Response> {
        if request.headers().contains_key(FORWARDED_BY) {
            return Ok(request);
        }
        let session = (request.headers().get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let (request, named) = match session {
            Some(_) if local_session => return Ok(request),
            Some(session) => (request, Some(Named::Session(session))),
            None => self.named_in_body(request).await?,
        };
        let route = match &named {
            None => return Ok(request),
            Some(Named::Session(session)) => self.routes.to_session(session).await,
            Some(Named::Replica(replica)) => self.routes.to_replica(replica).await,
        };
        match route {
            Ok(Route::Here) => Ok(request),
            Ok(Route::There { replica, address }) => {
                Err(self.send(request, &replica, &address).await)
            }
            Ok(Route::Gone { replica }) => Err(gone(&replica, &named)),
            Err(down) => Err((
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "this request names what another replica may hold, and the fleet's Redis, \
                     where replicas say what they hold, does not answer: {down}; try again"
                ),
            )
                .into_response()),
        }
    }

    /// `request`, about `conversation` (the chat API's), back to be answered here; or the
    /// answer of the replica running a run of it: its approvals, its questions, its state and
    /// a continuation (refused there while it runs) are that replica's.
    pub(crate) async fn route_run(
        &self,
        request: Request,
        conversation: &str,
    ) -> Result<Request, Response> {
        if request.headers().contains_key(FORWARDED_BY) || self.web.is_running(conversation) {
            return Ok(request);
        }
        match self.routes.to_run(conversation).await {
            Ok(Route::There { replica, address }) => {
                Err(self.send(request, &replica, &address).await)
            }
            Ok(_) => Ok(request),
            // The conversation as kept is served here; an approval of a run elsewhere is
            // then not found, as on one host after the run ended. Redis's fault is logged
            // by its engine when it begins, not at each request.
            Err(down) => {
                tracing::debug!("a chat request's route: {down}");
                Ok(request)
            }
        }
    }

    /// The replica a session-less request's body names, in a `requestState` (a follow-up) or
    /// a `taskId` (a task's poll), read within `/mcp`'s body bound; the request rebuilt with
    /// the same body.
    async fn named_in_body(&self, request: Request) -> Result<(Request, Option<Named>), Response> {
        let method = (request.headers().get("mcp-method")).and_then(|m| m.to_str().ok());
        let names = request.method() == axum::http::Method::POST
            && method.is_some_and(|m| m == "tools/call" || m.starts_with("tasks/"));
        if !names {
            return Ok((request, None));
        }
        let (parts, body) = request.into_parts();
        let body = crate::mcp::read_body(body, self.max_body).await?;
        let named = named_replica(&body).map(Named::Replica);
        Ok((Request::from_parts(parts, Body::from(body)), named))
    }

    /// Sends `request` to `address` (of `replica`), and streams its answer back.
    async fn send(&self, request: Request, replica: &str, address: &str) -> Response {
        let Ok(permit) = Arc::clone(&self.at_once).try_acquire_owned() else {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "this replica forwards as many requests as it takes connections now; try again",
            )
                .into_response();
        };
        let (parts, body) = request.into_parts();
        let body = match crate::mcp::read_body(body, self.max_body).await {
            Ok(body) => body,
            Err(refusal) => return refusal,
        };
        let path = parts.uri.path_and_query().map_or("/mcp", |p| p.as_str());
        let mut headers = hop_by_hop_removed(&parts.headers);
        headers.insert(
            HeaderName::from_static(FORWARDED_BY),
            header::HeaderValue::from_static(self.routes.me()),
        );
        let traced = hop(&parts, &body, replica, &mut headers);
        let sent = self
            .client
            .request(parts.method, format!("{address}{path}"))
            .headers(headers)
            .body(body)
            .send();
        let sent = traced.carry(sent);
        // The answer's head within its time; its body (an event stream, say) as long as the
        // holder sends it.
        let sent = tokio::time::timeout(ANSWER_TIMEOUT, sent).await;
        let answer = match sent {
            Ok(Ok(answer)) => answer,
            Err(_) => {
                let why = format!(
                    "this request names what replica {replica} holds, and it did not answer at \
                     {address} within {} s; try again",
                    ANSWER_TIMEOUT.as_secs()
                );
                return (StatusCode::GATEWAY_TIMEOUT, why).into_response();
            }
            Ok(Err(e)) => {
                tracing::warn!("a request forwarded to replica {replica} at {address}: {e}");
                let why = format!(
                    "this request names what replica {replica} holds, and it did not answer at \
                     {address} ({}); try again, or start over if it is gone",
                    if e.is_connect() {
                        "no connection"
                    } else {
                        "the exchange failed"
                    }
                );
                return (StatusCode::BAD_GATEWAY, why).into_response();
            }
        };
        let status = answer.status();
        let headers = hop_by_hop_removed(answer.headers());
        // The permit is held until the answer has been streamed whole (or dropped).
        let stream = answer.bytes_stream().map(move |chunk| {
            let _held = &permit;
            chunk
        });
        let mut response = Response::new(Body::from_stream(stream));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }
}

/// The hop's client span (`forward`), continuing the trace the request carries (its `_meta`,
/// else its headers), and named in the forwarded request's `traceparent` header, which the
/// holder reads first in a forwarded request. Nothing read or parsed when nothing is traced.
fn hop(
    parts: &axum::http::request::Parts,
    body: &[u8],
    replica: &str,
    headers: &mut HeaderMap,
) -> toolhost_core::trace::Traced {
    use toolhost_core::trace::{Carrier, KeyValue, SpanBuilder, SpanKind, TRACES_ON, entry};
    use toolhost_core::trace::{Traced, injected};
    if !TRACES_ON.load(std::sync::atomic::Ordering::Relaxed) {
        return Traced::none();
    }
    let message: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let meta = (message.as_ref())
        .and_then(|m| m.pointer("/params/_meta"))
        .and_then(|meta| meta.as_object());
    let carrier = Carrier {
        meta,
        headers: Some(&parts.headers),
    };
    let span = entry(&carrier, || {
        SpanBuilder::from_name("forward")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("toolhost.replica", replica.to_string()),
                KeyValue::new("http.request.method", parts.method.to_string()),
            ])
    });
    if !span.is_traced() {
        return span;
    }
    for (key, value) in span.in_scope(injected).unwrap_or_default() {
        if let (Ok(name), Some(Ok(value))) = (
            HeaderName::from_bytes(key.as_bytes()),
            value.as_str().map(header::HeaderValue::from_str),
        ) {
            headers.insert(name, value);
        }
    }
    span
}

/// The answer for what a replica that is gone held.
fn gone(replica: &str, named: &Option<Named>) -> Response {
    let what = match named {
        Some(Named::Session(_)) => "this MCP session was held by replica",
        _ => "what this request names was held by replica",
    };
    (
        StatusCode::NOT_FOUND,
        format!("{what} {replica}, which is gone; start over (a new session, the call again)"),
    )
        .into_response()
}

/// The replica named by a JSON-RPC body's `params.requestState` or `params.taskId`
/// (`<replica>.<rest>`), if either is there. Found by a look for the key before the body is
/// parsed: most calls name neither.
fn named_replica(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Message {
        params: Option<Params>,
    }
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "requestState")]
        request_state: Option<String>,
        #[serde(rename = "taskId")]
        task_id: Option<String>,
    }
    let mentions = |key: &[u8]| body.windows(key.len()).any(|w| w == key);
    if !mentions(b"\"requestState\"") && !mentions(b"\"taskId\"") {
        return None;
    }
    let message: Message = serde_json::from_slice(body).ok()?;
    let params = message.params?;
    let named = params.request_state.or(params.task_id)?;
    let (replica, _) = named.split_once('.')?;
    toolhost_state::is_replica(replica).then(|| replica.to_string())
}

/// `headers` without those of one hop (RFC 9110 7.6.1) and the length (set again).
fn hop_by_hop_removed(headers: &HeaderMap) -> HeaderMap {
    let mut kept = headers.clone();
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::CONTENT_LENGTH,
    ] {
        kept.remove(name);
    }
    kept.remove("keep-alive");
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_named_by_a_request_state_or_a_task_id_and_nothing_else() {
        let me = "0123456789abcdef";
        let body = |params: &str| format!(r#"{{"jsonrpc":"2.0","id":1,"params":{params}}}"#);
        let state = body(&format!(r#"{{"name":"t","requestState":"{me}.abc"}}"#));
        assert_eq!(named_replica(state.as_bytes()).as_deref(), Some(me));
        let task = body(&format!(r#"{{"taskId":"{me}.5f0c"}}"#));
        assert_eq!(named_replica(task.as_bytes()).as_deref(), Some(me));
        for other in [
            body(r#"{"name":"t","arguments":{}}"#),
            body(r#"{"requestState":"not-a-replica.abc"}"#),
            body(r#"{"taskId":"http://evil:1.abc"}"#),
            body(r#"{"requestState":17}"#),
            "not json \"requestState\"".to_string(),
        ] {
            assert_eq!(named_replica(other.as_bytes()), None, "{other}");
        }
    }
}
