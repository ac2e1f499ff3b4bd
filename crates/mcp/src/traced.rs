//! traced: the server span of an MCP request, as OpenTelemetry's MCP semantic conventions
//! name it (`{mcp.method.name} {target}`, kind server; `mcp.method.name`, `gen_ai.tool.name`,
//! `gen_ai.prompt.name`, `mcp.resource.uri`, `jsonrpc.request.id`, `mcp.protocol.version`,
//! `mcp.session.id`, `network.transport`; `error.type`, `tool_error` for a result with
//! `isError`), for `tools/call` and the other requests ([`served`]). Its parent is the trace context
//! the request carries (`_meta`, else the HTTP headers: [`toolhost_core::trace`]). Made only
//! when spans are exported and the sampler keeps the trace ([`entry`]).

use rmcp::RoleServer;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;
use toolhost_core::invoke::Session;
use toolhost_core::trace::{Carrier, TARGET, entry};
use tracing::field::Empty;

/// What a request is about: the span's name has a tool's or a prompt's name (a catalog's,
/// bounded), never a resource's URI (an attribute, cut at [`MAX_URI`]).
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    Tool(&'a str),
    Prompt(&'a str),
    Resource(&'a str),
    None,
}

/// The longest resource URI a span records.
const MAX_URI: usize = 1024;
/// The longest tool or prompt name a span records (the catalog's are at most 64 bytes; a
/// client may send any).
const MAX_NAME: usize = 128;

/// The server span of the request of `context`, for `method` on `target`.
pub(crate) fn server_span<'a>(
    method: &'static str,
    target: Target<'a>,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    let parts = context.extensions.get::<http::request::Parts>();
    let meta = Some(&**context.meta);
    let headers = parts.map(|p| &p.headers);
    let cut = |text: &'a str, at: usize| &text[..text.floor_char_boundary(at)];
    let (tool, prompt, uri) = match target {
        Target::Tool(tool) => (Some(cut(tool, MAX_NAME)), None, None),
        Target::Prompt(prompt) => (None, Some(cut(prompt, MAX_NAME)), None),
        Target::Resource(uri) => (None, None, Some(cut(uri, MAX_URI))),
        Target::None => (None, None, None),
    };
    entry(&Carrier { meta, headers }, || {
        tracing::info_span!(
            target: TARGET,
            "mcp.server",
            otel.name = %match tool.or(prompt) {
                Some(target) => format!("{method} {target}"),
                None => method.to_string(),
            },
            otel.kind = "server",
            otel.status_code = Empty,
            mcp.method.name = method,
            gen_ai.tool.name = tool,
            gen_ai.prompt.name = prompt,
            mcp.resource.uri = uri,
            gen_ai.operation.name = tool.map(|_| "execute_tool"),
            jsonrpc.request.id = %context.id,
            mcp.protocol.version = context.protocol_version().as_ref().map(|v| v.as_str()),
            mcp.session.id = (parts.and_then(|p| p.headers.get("mcp-session-id")))
                .and_then(|v| v.to_str().ok())
                .filter(|v| v.len() <= 256),
            network.transport = if parts.is_some() { "tcp" } else { "pipe" },
            network.protocol.name = parts.map(|_| "http"),
            error.type = Empty,
            toolhost.identity.kind = Empty,
            toolhost.identity.name = Empty,
        )
    })
}

/// `work`, the answer to a request of `context` other than `tools/call` ([`call_tool`] has
/// its own, for `isError`), in its server span, with its error's code as `error.type`; and
/// measured (`mcp.server.operation.duration`, by method).
///
/// [`call_tool`]: crate::calls::call_tool
pub(crate) async fn served<T>(
    method: &'static str,
    target: Target<'_>,
    context: &RequestContext<RoleServer>,
    work: impl std::future::Future<Output = Result<T, rmcp::ErrorData>>,
) -> Result<T, rmcp::ErrorData> {
    use tracing::Instrument;
    let started = std::time::Instant::now();
    let span = server_span(method, target, context);
    let answer = work.instrument(span.clone()).await;
    finished(&span, started, method, None, || {
        answer.as_ref().err().map(|e| e.code.0.to_string())
    });
    answer
}

/// Notes on the current span who called: the identity's kind and name, no more.
pub(crate) fn caller(session: &Session) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    if let Some(caller) = session.caller() {
        let kind = serde_json::to_value(caller.identity.kind).unwrap_or_default();
        span.record("toolhost.identity.kind", kind.as_str().unwrap_or_default());
        span.record("toolhost.identity.name", caller.identity.name.as_str());
    }
}

/// Notes how the request ended: `tool_error` for a result with `isError`, the JSON-RPC
/// error's code for an error; and measures it (`mcp.server.operation.duration`, the tool
/// named only when `known`).
pub(crate) fn ended(
    span: &tracing::Span,
    answer: &Result<CallToolResponse, rmcp::ErrorData>,
    started: std::time::Instant,
    tool: Option<&str>,
) {
    finished(span, started, "tools/call", tool, || match answer {
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            Some("tool_error".to_string())
        }
        Ok(_) => None,
        Err(error) => Some(error.code.0.to_string()),
    });
}

/// Notes on `span` how a request of `method` ended (`error`: its `error.type`, asked only
/// when it is traced or measured) and measures it (`mcp.server.operation.duration`, by
/// `tool` when one of the catalog's).
fn finished(
    span: &tracing::Span,
    started: std::time::Instant,
    method: &'static str,
    tool: Option<&str>,
    error: impl FnOnce() -> Option<String>,
) {
    let measuring = toolhost_core::trace::METRICS_ON.load(std::sync::atomic::Ordering::Relaxed);
    if span.is_disabled() && !measuring {
        return;
    }
    let error = error();
    if let Some(error) = &error {
        span.record("error.type", error.as_str());
        span.record("otel.status_code", "ERROR");
    }
    let seconds = started.elapsed().as_secs_f64();
    toolhost_core::trace::measured(true, seconds, method, tool, error.as_deref());
}
