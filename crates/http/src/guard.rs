//! guard: the guard of `serve --http`: every request but the probes and the protected resource
//! metadata passes it. It refuses other origins, authenticates the request (toolhost-access:
//! loopback, a named token, an access token) and hands the caller on in the request's
//! extensions, where the MCP server and the chat API find it; it binds an MCP session to the
//! identity that opened it, answers a call a scope would allow with `403 insufficient_scope`,
//! keeps `/metrics` to those the rules let read it, and caps the MCP sessions open.
//!
//! Refusals carry RFC 6750's `WWW-Authenticate` challenge (with RFC 9728's
//! `resource_metadata` when a provider is trusted) and a JSON body with `error` and
//! `error_description`; each is audited without its body, at most [`REFUSALS_PER_SECOND`]
//! a second (the rest counted in the next record), so a flood of bad tokens cannot fill the
//! disk.

use crate::accept::Peer;
use crate::hosts::{is_local_origin, is_same_origin};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use toolhost_access::{Access, Refusal};
use toolhost_core::invoke::{Caller, Host, Limited};

/// Refused requests recorded in the audit log per second, at most.
pub(crate) const REFUSALS_PER_SECOND: u32 = 20;
/// The largest `/mcp` POST read ahead to tell a call a scope would allow (step-up); a larger
/// one goes on, and a tool it may not call is refused as unknown.
const STEP_UP_PEEK_BYTES: u64 = 1 << 20;

/// What every HTTP request is checked against.
pub(crate) struct Guard {
    pub(crate) access: Arc<Access>,
    pub(crate) host: Arc<Host>,
    pub(crate) sessions: Arc<LocalSessionManager>,
    pub(crate) max_sessions: usize,
    /// Requests that may open a session and have not finished yet: counted with the open
    /// sessions, so a burst of them cannot all pass the cap before the first one opens.
    pub(crate) opening: AtomicUsize,
    /// The identity (its key) that opened each MCP session: no other may use it.
    pub(crate) owners: Mutex<HashMap<String, [u8; 32]>>,
    /// The refusals audited in the current second, and those left out since the last record.
    pub(crate) refusals: Mutex<Refusals>,
    /// Forwards requests for what another replica holds (with `[fleet] advertise`).
    pub(crate) forward: Option<crate::route::Forward>,
    /// The places of answers that stay open (`max-http-streams`), taken past the guard.
    pub(crate) streams: Arc<toolhost_mcp::StreamSlots>,
}

/// The audit log's share of refusals: at most [`REFUSALS_PER_SECOND`] records a second.
#[derive(Default)]
pub(crate) struct Refusals {
    second: Option<Instant>,
    written: u32,
    skipped: u64,
}

impl Guard {
    pub(crate) fn new(
        access: Arc<Access>,
        host: Arc<Host>,
        sessions: Arc<LocalSessionManager>,
        max_sessions: usize,
        forward: Option<crate::route::Forward>,
        streams: Arc<toolhost_mcp::StreamSlots>,
    ) -> Self {
        Guard {
            streams,
            access,
            host,
            sessions,
            max_sessions,
            opening: AtomicUsize::new(0),
            owners: Mutex::default(),
            refusals: Mutex::default(),
            forward,
        }
    }

    /// `refusal` as an HTTP answer, audited (within the rate); an RFC 6750 error carries its
    /// `WWW-Authenticate` challenge.
    fn refuse(&self, refusal: &Refusal, path: &str) -> Response {
        self.refuse_as(refusal, path, None)
    }

    /// [`Guard::refuse`] of a request whose caller is known, for the tool `named` (a call
    /// refused by its quota): the audit record names both.
    fn refuse_as(
        &self,
        refusal: &Refusal,
        path: &str,
        named: Option<(Arc<toolhost_contract::Identity>, String)>,
    ) -> Response {
        self.audit_refusal(refusal, path, named);
        let body = serde_json::json!({
            "error": refusal.error,
            "error_description": refusal.description,
        });
        let mut response = (refusal.status, axum::Json(body)).into_response();
        let bearer_error = matches!(
            refusal.error,
            "invalid_request" | "invalid_token" | "insufficient_scope"
        );
        if bearer_error && let Ok(value) = self.access.challenge(refusal).parse() {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    fn audit_refusal(
        &self,
        refusal: &Refusal,
        path: &str,
        named: Option<(Arc<toolhost_contract::Identity>, String)>,
    ) {
        let Some(log) = self.host.audit_log() else {
            return;
        };
        let skipped = {
            let mut counts = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
            if counts.second.is_none_or(|s| s.elapsed().as_secs() >= 1) {
                counts.second = Some(Instant::now());
                counts.written = 0;
            }
            if counts.written >= REFUSALS_PER_SECOND {
                counts.skipped += 1;
                return;
            }
            counts.written += 1;
            std::mem::take(&mut counts.skipped)
        };
        let mut error = format!("{}: {}", refusal.error, refusal.description);
        if skipped > 0 {
            error.push_str(&format!(
                " ({skipped} refusals before this one were not recorded: more than \
                 {REFUSALS_PER_SECOND} a second)"
            ));
        }
        let (identity, tool) = match named {
            Some((identity, tool)) => (Some(identity), tool),
            None => (None, path.to_string()),
        };
        let (trace_id, span_id) = toolhost_core::trace::current_ids().unzip();
        let record = toolhost_audit::AuditRecord {
            time: toolhost_audit::now_rfc3339(),
            session: "http".into(),
            identity,
            tool: toolhost_audit::cut_text(&tool),
            kind: None,
            ensemble: None,
            component: None,
            arguments: serde_json::Value::Null,
            arguments_bytes: None,
            outcome: format!("refused-{}", refusal.status.as_u16()),
            error: Some(toolhost_audit::cut_text(&error)),
            duration_ms: 0.0,
            deduplicated: false,
            result_bytes: 0,
            summary: String::new(),
            trace_id,
            span_id,
        };
        let _ = log.append(&record);
    }
}

/// One request counted in [`Guard::opening`] until it ends.
struct Opening<'a>(&'a AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// True for a request that cannot open a session: one that says it is 2026-07-28 (or later)
/// and names one method other than `initialize` in `Mcp-Method`. rmcp refuses such a request
/// whose body is an `initialize` all the same (the header must match the body at these
/// revisions), so only a real `initialize` opens a session; a request without the headers
/// is counted as one that may.
fn is_sessionless(headers: &HeaderMap) -> bool {
    let modern = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|version| version >= "2026-07-28");
    let mut methods = headers.get_all("mcp-method").iter();
    let method = methods.next();
    modern && methods.next().is_none() && method.is_some_and(|m| m != "initialize")
}

/// Refuses requests from other origins (a web page the user visits must not reach local
/// tools) and requests that do not authenticate (but for the page's own files, which hold
/// nothing and ask for the token); binds MCP sessions to their identity; caps new MCP
/// sessions at `max-mcp-sessions`. rmcp checks the Host header.
pub(crate) async fn guard(guard: &Guard, mut request: Request, next: Next) -> Response {
    if let Some(origin) = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        && !is_local_origin(origin)
        // Only the web chat's paths check the Host header for everything they answer.
        && !(toolhost_web::is_web_path(request.uri().path())
            && is_same_origin(origin, request.headers()))
    {
        return (StatusCode::FORBIDDEN, "cross-origin requests are refused").into_response();
    }
    if toolhost_web::is_page_asset(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let loopback = request
        .extensions()
        .get::<Peer>()
        .is_some_and(|peer| peer.0.ip().is_loopback());
    let path = request.uri().path().to_string();
    // A browser signed in to the web chat carries its access token in a cookie: taken on the
    // page's paths only (never on /mcp), and checked as any token.
    if toolhost_web::is_web_path(&path)
        && !request.headers().contains_key(header::AUTHORIZATION)
        && let Some(token) =
            crate::sign_in::cookie(request.headers(), crate::sign_in::SESSION_COOKIE)
        && let Ok(value) = format!("Bearer {token}").parse()
    {
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    let caller = match (guard.access)
        .authenticate(request.headers(), request.uri(), loopback)
        .await
    {
        Ok(caller) => caller,
        Err(refusal) => return guard.refuse(&refusal, &path),
    };
    if path == "/metrics" && !guard.access.may_read_metrics(&caller) {
        let refusal = Refusal {
            status: StatusCode::FORBIDDEN,
            error: "insufficient_scope",
            description: format!("{} may not read /metrics", caller.identity),
            scope: None,
        };
        return guard.refuse(&refusal, &path);
    }
    let session = (request.headers().get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(id) = &session {
        let owners = guard.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners
            .get(id)
            .is_some_and(|owner| *owner != caller.identity.key())
        {
            // Another identity's session is no session of this one: as if it did not exist.
            return (StatusCode::NOT_FOUND, "no such MCP session").into_response();
        }
    }
    // A request for what another replica holds goes there, before anything is counted here.
    if path == "/mcp"
        && let Some(forward) = &guard.forward
    {
        let local = match &session {
            Some(id) => guard
                .sessions
                .sessions
                .read()
                .await
                .contains_key(id.as_str()),
            None => false,
        };
        if let Some(id) = session.as_deref().filter(|_| local) {
            let routes = forward.routes();
            if request.method() == axum::http::Method::DELETE {
                let id = id.to_string();
                tokio::spawn(async move { routes.drop_session(&id).await });
            } else if routes.due(id) {
                let id = id.to_string();
                tokio::spawn(async move { routes.hold_session(&id).await });
            }
        }
        request = match forward.route(request, local).await {
            Ok(request) => request,
            Err(answer) => return answer,
        };
    }
    // A chat request about a conversation whose run goes on on another replica goes there.
    if let Some(forward) = &guard.forward
        && let Some(conversation) = toolhost_web::conversation_of(&path)
    {
        request = match forward.route_run(request, conversation).await {
            Ok(request) => request,
            Err(answer) => return answer,
        };
    }
    // A call without a session (2026-07-28) is admitted under its identity's quota here; the
    // admission goes on with the request to its call (inside a session, the call's result
    // says so instead), and a refusal is answered once the request is done: a 429 (503 when
    // the fleet's Redis does not answer). So a follow-up, which runs no call, can waive it,
    // and in a fleet the call waits for it beside its dedup (one round trip for both).
    let mut ahead = None;
    if path == "/mcp"
        && session.is_none()
        && (request.headers().get("mcp-method")).is_some_and(|m| m == "tools/call")
        && let Some(admitted) = guard.access.admit_ahead(&caller)
    {
        request.extensions_mut().insert(admitted.clone());
        ahead = Some(admitted);
    }
    if path == "/mcp" && request.method() == axum::http::Method::POST {
        request = match step_up(guard, &caller, request).await {
            Ok(request) => request,
            Err(refusal) => return guard.refuse(&refusal, &path),
        };
    }
    let opens_a_session = request.method() == axum::http::Method::POST
        && session.is_none()
        && !is_sessionless(request.headers());
    let (opening, _counted) = if opens_a_session {
        let opening = guard.opening.fetch_add(1, Ordering::SeqCst);
        (opening, Some(Opening(&guard.opening)))
    } else {
        (0, None)
    };
    if opens_a_session && guard.sessions.sessions.read().await.len() + opening >= guard.max_sessions
    {
        let message = format!(
            "{} MCP sessions are open, the most this host takes (max-mcp-sessions); \
             close one or try again later",
            guard.max_sessions
        );
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    }
    let key = opens_a_session.then(|| caller.identity.key());
    // A call its quota refuses is recorded with whose it was and the tool it named.
    let refused_as = ahead.as_ref().map(|_| {
        let tool = (request.headers().get("mcp-name"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("/mcp")
            .to_string();
        (Arc::clone(&caller.identity), tool)
    });
    request.extensions_mut().insert(caller);
    // Only a request the guard lets through takes a stream's place.
    let response = crate::streams::limit_streams(&guard.streams, request, next).await;
    if let Some(id) = &session
        && path == "/mcp"
        && response.status() == StatusCode::NOT_FOUND
        && !guard
            .sessions
            .sessions
            .read()
            .await
            .contains_key(id.as_str())
    {
        return unknown_session(guard).into_response();
    }
    if let Some(ahead) = ahead
        && let Some(limited) = ahead.refusal().await
    {
        return limited_response(guard, &path, limited, refused_as);
    }
    if let Some(key) = key
        && let Some(opened) =
            (response.headers().get("mcp-session-id")).and_then(|v| v.to_str().ok())
    {
        {
            let open = guard.sessions.sessions.read().await;
            let mut owners = guard.owners.lock().unwrap_or_else(PoisonError::into_inner);
            // Sessions closed since are forgotten: the map holds no more than the open ones.
            owners.retain(|id, _| open.contains_key(id.as_str()));
            owners.insert(opened.to_string(), key);
        }
        // Said in Redis before the client has its id: its next request may reach another
        // replica at once.
        if let Some(forward) = &guard.forward {
            forward.routes().hold_session(opened).await;
        }
    }
    response
}

/// The answer to a request naming an MCP session this host does not hold (rmcp's own says
/// only "Session not found"): what may have happened and what to do, which in a fleet without
/// `advertise` includes that another replica may hold it.
fn unknown_session(guard: &Guard) -> (StatusCode, &'static str) {
    let text = if guard.forward.is_some() {
        "no such MCP session: it ended, or the replica that held it is gone; start a new \
         session (initialize)"
    } else if guard.host.shared_dedup().is_some() {
        "no such MCP session on this replica: another replica of the fleet may hold it, and \
         without [fleet] advertise (or advertise-env) requests are not forwarded to it; set \
         it on every replica, or give this client affinity (docs/fleet.md), then start a new \
         session"
    } else {
        "no such MCP session: it ended or the host restarted; start a new session (initialize)"
    };
    (StatusCode::NOT_FOUND, text)
}

/// The answer to a call its identity's quota refused: `429` (`503` when the fleet's Redis did
/// not answer), with `Retry-After`, recorded with the identity and the tool `named`.
fn limited_response(
    guard: &Guard,
    path: &str,
    limited: Limited,
    named: Option<(Arc<toolhost_contract::Identity>, String)>,
) -> Response {
    let refusal = Refusal {
        status: if limited.unavailable {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::TOO_MANY_REQUESTS
        },
        error: if limited.unavailable {
            "temporarily_unavailable"
        } else {
            "rate_limited"
        },
        description: limited.message,
        scope: None,
    };
    let mut response = guard.refuse_as(&refusal, path, named);
    let seconds = limited.retry_after.as_secs().max(1).to_string();
    if let Ok(value) = seconds.parse() {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// A `tools/call` of an access token's caller for a tool a scope it lacks would allow:
/// refused with `403 insufficient_scope` naming that scope, so that its client can ask for
/// it. Other requests go on with their body as it was.
async fn step_up(guard: &Guard, caller: &Caller, request: Request) -> Result<Request, Refusal> {
    let small = (request.headers().get(header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|length| length <= STEP_UP_PEEK_BYTES);
    if caller.identity.kind != toolhost_contract::IdentityKind::Oauth
        || !guard.access.is_restrictive()
        || !small
    {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, STEP_UP_PEEK_BYTES as usize).await else {
        // The body did not arrive whole: the request fails as it would have.
        return Ok(Request::from_parts(parts, axum::body::Body::empty()));
    };
    let name = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|message| message["method"] == "tools/call")
        .and_then(|message| message["params"]["name"].as_str().map(str::to_string));
    if let Some(name) = name
        && let Some(tool) = guard.host.catalog().snapshot().get(&name).cloned()
        && let Some(refusal) = guard.access.step_up(caller, &tool)
    {
        return Err(refusal);
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// `/.well-known/oauth-protected-resource` (and the form with the resource's path, RFC 9728),
/// outside the guard: a client reads it to learn where to get a token. Served when a
/// provider is trusted, at the paths the settings in force name: a provider added or changed
/// by a reload is served at once, where its challenges send clients.
pub(crate) fn metadata(access: &Arc<Access>) -> axum::Router {
    let serve = {
        let access = Arc::clone(access);
        move |uri: axum::http::Uri| {
            let named = access.metadata_paths().iter().any(|p| p == uri.path());
            let document = if named { access.metadata() } else { None };
            async move {
                match document {
                    Some(document) => axum::Json(document).into_response(),
                    None => StatusCode::NOT_FOUND.into_response(),
                }
            }
        }
    };
    axum::Router::new()
        .route(WELL_KNOWN, axum::routing::get(serve.clone()))
        .route(
            &format!("{WELL_KNOWN}/{{*resource}}"),
            axum::routing::get(serve),
        )
}

/// Where RFC 9728 puts the metadata (before the resource's path, if it has one).
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

#[cfg(test)]
mod tests {
    use crate::hosts::is_local_origin;

    #[test]
    fn only_local_origins_pass() {
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://localhost",
            "http://[::1]:8080",
            "http://[::1]",
        ] {
            assert!(is_local_origin(origin), "{origin}");
        }
        for origin in [
            "https://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io:80",
            "null",
            "http://[::2]",
        ] {
            assert!(!is_local_origin(origin), "{origin}");
        }
    }
}
