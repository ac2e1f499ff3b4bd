//! direct: a session-less request at 2026-07-28 whose answer is one message, answered in the
//! HTTP request that carries it. rmcp's streamable HTTP service serves such a request by
//! building a service for it (a server, a peer and its channels, a task to run it and another
//! to wait for it) and reading the answer back through a channel: on the project's machine
//! that was a quarter of the server's CPU for a call of a trivial tool (BENCHMARKS.md, "Where
//! an HTTP call's time goes"). Here the request's server handles it directly, through rmcp's
//! own dispatch ([`rmcp::Service::handle_request`]), so every check of the MCP layer and of
//! `invoke` (identity, access rules, quotas, validation, dedup, limits, audit) is the one code
//! both paths run; only the plumbing around the handler is left out. A request in an open
//! session of an earlier revision, which rmcp serves through the session's worker, is
//! answered the same way by the session's twin ([`crate::twins`]).
//!
//! Only what needs nothing else is taken ([`Direct::may_take`], [`Direct::take`]):
//!
//! - a POST without `Mcp-Session-Id`, `Mcp-Protocol-Version: 2026-07-28`, one `Mcp-Method`
//!   among [`METHODS`] that matches the body's, an `Mcp-Name` (where the method has a name)
//!   equal to the body's, a JSON body of a known length within the body bound, and an
//!   `Accept` that takes both JSON and event streams (what rmcp asks of every client);
//! - a JSON-RPC request whose `_meta` names 2026-07-28 and the client's capabilities, and asks
//!   for no progress (a progress report is sent on the request's own event stream, which only
//!   rmcp's path opens);
//! - or, in an open session (2025-11-25 or 2025-06-18, [`SESSION_REVISIONS`]): a POST with
//!   one `Mcp-Session-Id` of a session that has a twin ([`crate::twins`]), the session's own
//!   `Mcp-Protocol-Version`, the standard headers absent or agreeing with the body, one of
//!   [`METHODS`] asking for no progress, and, for `tools/call`, a tool that cannot ask its
//!   caller mid-call (no sampling or elicitation granted, not an imported server's): a
//!   request to the client would go on the session's stream, not the request's. It runs on
//!   the session's twin with the session's peer, and `notifications/cancelled` for it
//!   cancels it as rmcp would. The answer is JSON, which the handshake revisions allow for
//!   any request.
//!
//! Anything else (another revision, a missing or contradicting header, a listen stream, a
//! body rmcp would refuse) goes on to rmcp, unchanged, which answers it as before.
//! The session-less requests' peer (for messages to the client) is one shared by every
//! direct request, with nowhere to send: nothing a direct request runs sends on it, since
//! progress is excluded and a tool that asks does so in rounds (`input_required` answers),
//! not through the peer. A request whose client goes away while it runs is finished in the
//! background, as rmcp's handler task would be, so its call is audited.

use crate::McpServer;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorCode, GetExtensions, GetMeta,
    InitializeRequestParams, ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::service::{RequestContext, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::{RoleServer, Service};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;

/// The methods answered directly: those whose answer is one message.
pub const METHODS: &[&str] = &[
    "tools/call",
    "tools/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "completion/complete",
];

/// The revision whose session-less requests are answered directly.
const REVISION: &str = "2026-07-28";

/// The revisions whose requests in an open session are answered directly: those with the
/// `Mcp-Protocol-Version` header on every request.
pub const SESSION_REVISIONS: &[&str] = &["2025-11-25", "2025-06-18"];

/// Requests answered in their own HTTP request (session-less ones, and those of open
/// sessions), for one transport's servers.
pub struct Direct {
    factory: Arc<dyn Fn() -> McpServer + Send + Sync>,
    /// The peer every direct request's context holds (see the module's doc).
    peer: rmcp::service::Peer<RoleServer>,
    /// The service that made the peer, kept for as long as the peer is used.
    _service: RunningService<RoleServer, McpServer>,
    /// The largest body read (rmcp's bound for the requests it reads).
    max_body: usize,
    /// What the factory's servers share: the open sessions' twins among it.
    shared: Arc<crate::Shared>,
}

impl Direct {
    /// Direct answers by the servers `factory` makes, until `shutdown` is cancelled.
    pub fn new(
        factory: impl Fn() -> McpServer + Send + Sync + 'static,
        max_body: usize,
        shutdown: CancellationToken,
    ) -> Self {
        let info = InitializeRequestParams::new(
            Default::default(),
            rmcp::model::Implementation::default(),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28);
        let server = factory();
        let shared = Arc::clone(&server.shared);
        let service = rmcp::service::serve_directly_with_ct(server, Nowhere, Some(info), shutdown);
        Direct {
            peer: service.peer().clone(),
            _service: service,
            factory: Arc::new(factory),
            max_body,
            shared,
        }
    }

    /// rmcp is seeing a request of session `id`: its twin may answer for another half of the
    /// session's idle time ([`crate::twins`]).
    pub fn touch(&self, id: &str) {
        if let Some(twins) = &self.shared.twins {
            twins.touch(id);
        }
    }

    /// Session `id` was ended by its client.
    pub fn forget(&self, id: &str) {
        if let Some(twins) = &self.shared.twins {
            twins.forget(id);
        }
    }

    /// Whether a request with these headers may be answered directly, once its body is read:
    /// cheap, so that every other request goes on to rmcp with its body unread.
    pub fn may_take(&self, method: &http::Method, headers: &HeaderMap) -> bool {
        may_take(method, headers, self.max_body)
    }

    /// The request whose headers [`Direct::may_take`] passed and whose body is `body`, ready
    /// to be answered here, or its head given back when rmcp is to answer it.
    pub fn take(
        &self,
        parts: http::request::Parts,
        body: &[u8],
    ) -> Result<Taken, Box<http::request::Parts>> {
        if parts.headers.contains_key("mcp-session-id") {
            return self.take_in_session(parts, body);
        }
        let Some((id, mut request)) = parsed(body) else {
            return Err(Box::new(parts));
        };
        if !taken(&parts.headers, &request, true) {
            return Err(Box::new(parts));
        }
        let meta = std::mem::take(request.get_meta_mut());
        let complete = meta
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty();
        let revision = meta.protocol_version();
        if !complete
            || revision.as_ref().map(|v| v.as_str()) != Some(REVISION)
            || meta.get_progress_token().is_some()
        {
            return Err(Box::new(parts));
        }
        request.extensions_mut().insert(parts);
        let extensions = std::mem::take(request.extensions_mut());
        let mut context = RequestContext::new(id.clone(), self.peer.clone());
        context.meta = meta;
        context.extensions = extensions;
        Ok(Taken {
            server: Arc::new((self.factory)()),
            request,
            context,
            in_flight: None,
        })
    }

    /// [`Direct::take`] for a request in an open session.
    fn take_in_session(
        &self,
        parts: http::request::Parts,
        body: &[u8],
    ) -> Result<Taken, Box<http::request::Parts>> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let twin = (self.shared.twins.as_ref())
            .zip(header("mcp-session-id"))
            .and_then(|(twins, id)| twins.get(id));
        let Some(twin) = twin else {
            return Err(Box::new(parts));
        };
        let negotiated = twin.peer.peer_info().map(|i| i.protocol_version.clone());
        if negotiated.as_ref().map(ProtocolVersion::as_str) != header("mcp-protocol-version") {
            return Err(Box::new(parts));
        }
        let Some((id, mut request)) = parsed(body) else {
            return Err(Box::new(parts));
        };
        if !METHODS.contains(&request.method()) || !taken(&parts.headers, &request, false) {
            return Err(Box::new(parts));
        }
        if let ClientRequest::CallToolRequest(call) = &request {
            let snapshot = twin.server.host.catalog().snapshot();
            let asks = snapshot
                .get(&call.params.name)
                .is_some_and(|tool| tool.may_ask_its_caller());
            if asks || call.params.request_state.is_some() {
                return Err(Box::new(parts));
            }
        }
        let meta = std::mem::take(request.get_meta_mut());
        if meta.get_progress_token().is_some() || meta.protocol_version().is_some() {
            return Err(Box::new(parts));
        }
        request.extensions_mut().insert(parts);
        let extensions = std::mem::take(request.extensions_mut());
        let mut context = RequestContext::new(id, twin.peer.clone());
        context.meta = meta;
        context.extensions = extensions;
        Ok(Taken {
            in_flight: Some(Arc::clone(&twin.server.in_flight)),
            server: twin.server,
            request,
            context,
        })
    }
}

/// A request [`Direct::take`] took, with the server that answers it.
pub struct Taken {
    server: Arc<McpServer>,
    request: ClientRequest,
    context: RequestContext<RoleServer>,
    /// In a session: where a `notifications/cancelled` finds it.
    in_flight: Option<Arc<crate::twins::InFlight>>,
}

impl Taken {
    /// Its answer: the HTTP status and the JSON-RPC message as JSON. Dropped before it ends
    /// (the client went away), the handler still ends, in the background.
    pub async fn answer(self) -> (StatusCode, Bytes) {
        let Taken {
            server,
            request,
            context,
            in_flight,
        } = self;
        let id = context.id.clone();
        let cancelled = context.ct.clone();
        let running = in_flight.and_then(|calls| calls.start(id.clone(), cancelled.clone()));
        let handled = Finished::new(async move {
            let _running = running;
            tokio::select! {
                handled = server.handle_request(request, context) => handled,
                () = cancelled.cancelled() => Err(rmcp::ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    "the request was cancelled by its client",
                    None,
                )),
            }
        });
        let message = match handled.await {
            Ok(result) => ServerJsonRpcMessage::response(result, id),
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        let status = status_of(&message);
        // A message of rmcp's own types always serializes.
        let json = serde_json::to_vec(&message).unwrap_or_default();
        (status, Bytes::from(json))
    }
}

/// A `tools/call` request as rmcp's types read it, without their buffering: a JSON-RPC
/// message is an untagged enum and a request's parameters are flattened beside its `_meta`,
/// so rmcp reads every body into an intermediate tree first, and tries each kind of message
/// in turn (making an error of each it is not). This struct reads the one kind straight.
#[derive(serde::Deserialize)]
struct CallBody {
    #[serde(rename = "jsonrpc")]
    _version: rmcp::model::JsonRpcVersion2_0,
    id: rmcp::model::RequestId,
    #[serde(rename = "method")]
    _method: rmcp::model::CallToolRequestMethod,
    params: rmcp::model::CallToolRequestParams,
}

/// The request `body` holds, with its id: a `tools/call` read by [`CallBody`] into exactly
/// the value rmcp's own reading gives (its `_meta` in the request's extensions, as rmcp puts
/// it), anything else by rmcp's reading; `None` for what is not a request.
fn parsed(body: &[u8]) -> Option<(rmcp::model::RequestId, ClientRequest)> {
    if let Ok(call) = serde_json::from_slice::<CallBody>(body) {
        let mut params = call.params;
        let meta = params.meta.take();
        let mut request = rmcp::model::CallToolRequest::new(params);
        if let Some(meta) = meta {
            request.extensions.insert(meta);
        }
        return Some((call.id, ClientRequest::CallToolRequest(request)));
    }
    match serde_json::from_slice(body) {
        Ok(ClientJsonRpcMessage::Request(request)) => Some((request.id, request.request)),
        _ => None,
    }
}

/// [`Direct::may_take`], with the body bound `max_body`.
fn may_take(method: &http::Method, headers: &HeaderMap, max_body: usize) -> bool {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    let length = one(header::CONTENT_LENGTH.as_str()).and_then(|l| l.parse::<usize>().ok());
    let accepts = (headers.get_all(header::ACCEPT).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .collect::<Vec<_>>();
    let json = |t: &str| t.split(';').next().unwrap_or_default().trim() == "application/json";
    let method_named = one("mcp-method").is_some_and(|m| METHODS.contains(&m));
    let revision = one("mcp-protocol-version");
    let addressed = match one("mcp-session-id") {
        // A session's request: the standard headers are optional before 2026-07-28.
        Some(_) => {
            revision.is_some_and(|r| SESSION_REVISIONS.contains(&r))
                && (method_named || !headers.contains_key("mcp-method"))
        }
        None => {
            !headers.contains_key("mcp-session-id") && revision == Some(REVISION) && method_named
        }
    };
    *method == http::Method::POST
        && addressed
        && one(header::CONTENT_TYPE.as_str()).is_some_and(json)
        && length.is_some_and(|l| l <= max_body)
        && accepts.iter().any(|a| a == "application/json")
        && accepts.iter().any(|a| a == "text/event-stream")
}

/// Whether the headers say what the body does: the method, and the name where the method
/// has one (as rmcp checks them, SEP-2243); a name in its Base64 form goes to rmcp. Unless
/// `required`, a header left out agrees.
fn taken(headers: &HeaderMap, request: &ClientRequest, required: bool) -> bool {
    let method = request.method();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if !required && !headers.contains_key("mcp-method") && !headers.contains_key("mcp-name") {
        return true;
    }
    if header("mcp-method") != Some(method) {
        return false;
    }
    let named = match request {
        ClientRequest::CallToolRequest(call) => Some(call.params.name.to_string()),
        ClientRequest::GetPromptRequest(get) => Some(get.params.name.clone()),
        ClientRequest::ReadResourceRequest(read) => Some(read.params.uri.clone()),
        _ => None,
    };
    match named {
        Some(name) => header("mcp-name").is_some_and(|h| !h.starts_with("=?") && h == name),
        None => true,
    }
}

/// The HTTP status of an answer at 2026-07-28, as rmcp gives it: 400 for a version or
/// capability the client lacks or a header that contradicts the body, 404 for an unknown
/// method, 200 for the rest (a JSON-RPC error included).
fn status_of(message: &ServerJsonRpcMessage) -> StatusCode {
    let ServerJsonRpcMessage::Error(error) = message else {
        return StatusCode::OK;
    };
    match error.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// A handler's work, finished in the background if the request is dropped before it ends
/// (its client went away): the call it makes still ends, and is audited.
struct Finished<T: Send + 'static> {
    work: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
}

impl<T: Send + 'static> Finished<T> {
    fn new(work: impl Future<Output = T> + Send + 'static) -> Self {
        Finished {
            work: Some(Box::pin(work)),
        }
    }
}

impl<T: Send + 'static> Future for Finished<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Pending;
        };
        let done = work.as_mut().poll(cx);
        if done.is_ready() {
            self.work = None;
        }
        done
    }
}

impl<T: Send + 'static> Drop for Finished<T> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(work);
        }
    }
}

/// The transport of the service that makes the shared peer: it never receives, and what is
/// sent to it goes nowhere.
pub(crate) struct Nowhere;

impl rmcp::transport::Transport<RoleServer> for Nowhere {
    type Error = std::io::Error;

    fn send(
        &mut self,
        message: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        tracing::debug!("a direct request's peer was sent {message:?}: dropped");
        std::future::ready(Ok(()))
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        std::future::pending()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        headers
    }

    const GOOD: &[(&str, &str)] = &[
        ("content-type", "application/json"),
        ("content-length", "120"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];

    #[test]
    fn a_call_is_read_into_the_very_request_rmcps_reading_gives() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"n":1}}}"#,
            r#"{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"p"},"name":"echo"},"method":"tools/call","id":"a","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"e","requestState":"s","inputResponses":{},"extra":true}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        ];
        for body in bodies {
            let Ok(ClientJsonRpcMessage::Request(theirs)) = serde_json::from_str(body) else {
                panic!("rmcp reads {body}");
            };
            let (id, ours) = parsed(body.as_bytes()).expect("read");
            assert_eq!(id, theirs.id, "{body}");
            assert_eq!(
                serde_json::to_value(&ours).expect("ours"),
                serde_json::to_value(&theirs.request).expect("theirs"),
                "{body}"
            );
            assert_eq!(ours.get_meta(), theirs.request.get_meta(), "{body}");
        }
        // Not a request: neither reading takes it.
        for body in [
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            "[]",
        ] {
            assert!(parsed(body.as_bytes()).is_none(), "{body}");
        }
    }

    #[test]
    fn only_a_session_less_request_of_2026_07_28_with_one_answer_may_be_taken() {
        let post = http::Method::POST;
        assert!(may_take(&post, &headers(GOOD), 4096));
        let with = |change: (&str, &str)| {
            let mut pairs: Vec<(&str, &str)> = GOOD
                .iter()
                .filter(|(n, _)| *n != change.0)
                .copied()
                .collect();
            if !change.1.is_empty() {
                pairs.push(change);
            }
            may_take(&post, &headers(&pairs), 4096)
        };
        for (change, why) in [
            (("mcp-protocol-version", "2025-11-25"), "another revision"),
            (("mcp-protocol-version", ""), "no revision"),
            (("mcp-method", "subscriptions/listen"), "a stream"),
            (("mcp-method", "initialize"), "the handshake"),
            (("mcp-method", ""), "no method"),
            (("content-type", "text/plain"), "not JSON"),
            (("content-length", ""), "a body of no known length"),
            (("content-length", "5000"), "a body past the bound"),
            (("accept", "application/json"), "no event streams accepted"),
            (("accept", "text/event-stream"), "no JSON accepted"),
        ] {
            assert!(!with(change), "{why}");
        }
        assert!(with(("content-type", "application/json; charset=utf-8")));
        assert!(with((
            "accept",
            "text/event-stream;q=0.5, Application/JSON"
        )));
        let mut session = GOOD.to_vec();
        session.push(("mcp-session-id", "s1"));
        assert!(
            !may_take(&post, &headers(&session), 4096),
            "a session at 2026-07-28"
        );
        let mut twice = GOOD.to_vec();
        twice.push(("mcp-method", "tools/list"));
        assert!(!may_take(&post, &headers(&twice), 4096), "two methods");
        assert!(!may_take(&http::Method::GET, &headers(GOOD), 4096), "a GET");
    }

    #[test]
    fn in_a_session_of_a_handshake_revision_the_standard_headers_are_optional() {
        let post = http::Method::POST;
        let base = [
            ("content-type", "application/json"),
            ("content-length", "120"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-session-id", "s1"),
        ];
        let with = |more: &[(&str, &str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(more);
            may_take(&post, &headers(&pairs), 4096)
        };
        assert!(with(&[("mcp-protocol-version", "2025-11-25")]));
        assert!(with(&[("mcp-protocol-version", "2025-06-18")]));
        assert!(with(&[
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/call")
        ]));
        for (more, why) in [
            (&[][..], "no revision"),
            (
                &[("mcp-protocol-version", "2025-03-26")][..],
                "a revision without the header",
            ),
            (
                &[("mcp-protocol-version", "2026-07-28")][..],
                "no sessions at 2026-07-28",
            ),
            (
                &[
                    ("mcp-protocol-version", "2025-11-25"),
                    ("mcp-method", "initialize"),
                ][..],
                "the handshake",
            ),
            (
                &[
                    ("mcp-protocol-version", "2025-11-25"),
                    ("mcp-session-id", "s2"),
                ][..],
                "two sessions",
            ),
        ] {
            assert!(!with(more), "{why}");
        }
    }
}
