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
use toolhost_core::trace::{Carrier, KeyValue, SpanBuilder, SpanKind, Traced, entry};

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
) -> Traced {
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
        let name = match tool.or(prompt) {
            Some(target) => format!("{method} {target}"),
            None => method.to_string(),
        };
        let mut attributes = Vec::with_capacity(10);
        attributes.push(KeyValue::new("mcp.method.name", method));
        if let Some(tool) = tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some(prompt) = prompt {
            attributes.push(KeyValue::new("gen_ai.prompt.name", prompt.to_string()));
        }
        if let Some(uri) = uri {
            attributes.push(KeyValue::new("mcp.resource.uri", uri.to_string()));
        }
        attributes.push(KeyValue::new("jsonrpc.request.id", context.id.to_string()));
        if let Some(version) = context.protocol_version() {
            attributes.push(KeyValue::new(
                "mcp.protocol.version",
                version.as_str().to_string(),
            ));
        }
        let session = (parts.and_then(|p| p.headers.get("mcp-session-id")))
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.len() <= 256);
        if let Some(session) = session {
            attributes.push(KeyValue::new("mcp.session.id", session.to_string()));
        }
        match parts {
            Some(_) => {
                attributes.push(KeyValue::new("network.transport", "tcp"));
                attributes.push(KeyValue::new("network.protocol.name", "http"));
            }
            None => attributes.push(KeyValue::new("network.transport", "pipe")),
        }
        SpanBuilder::from_name(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
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
    let started = std::time::Instant::now();
    let span = server_span(method, target, context);
    let answer = span.carry(work).await;
    finished(&span, started, method, None, || {
        answer.as_ref().err().map(|e| e.code.0.to_string())
    });
    answer
}

/// Notes on the current span who called: the identity's kind and name, no more.
pub(crate) fn caller(session: &Session) {
    let span = Traced::current();
    if !span.is_traced() {
        return;
    }
    if let Some(caller) = session.caller() {
        let kind = serde_json::to_value(caller.identity.kind).unwrap_or_default();
        let kind = kind.as_str().unwrap_or_default().to_string();
        span.set("toolhost.identity.kind", kind);
        span.set("toolhost.identity.name", caller.identity.name.clone());
    }
}

/// Notes how the request ended: `tool_error` for a result with `isError`, the JSON-RPC
/// error's code for an error; and measures it (`mcp.server.operation.duration`, the tool
/// named only when `known`).
pub(crate) fn ended(
    span: &Traced,
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
    span: &Traced,
    started: std::time::Instant,
    method: &'static str,
    tool: Option<&str>,
    error: impl FnOnce() -> Option<String>,
) {
    let measuring = toolhost_core::trace::METRICS_ON.load(std::sync::atomic::Ordering::Relaxed);
    if !span.is_traced() && !measuring {
        return;
    }
    let error = error();
    if let Some(error) = &error {
        span.failed(error.clone());
    }
    let seconds = started.elapsed().as_secs_f64();
    toolhost_core::trace::measured(true, seconds, method, tool, error.as_deref());
}
