//! `tools/call`: how one call runs for its request. At the handshake revisions it runs while
//! the request waits, and its link sends the client requests mid-call ([`crate::talk`]). For
//! a client that takes tasks it becomes a task past [`tasks::TASK_AFTER`]
//! ([`crate::tasks`]; at 2026-07-28 such a call cannot ask its client). Otherwise, at
//! 2026-07-28, it runs in rounds ([`crate::rounds`]): a tool that asks its caller answers
//! `input_required`, and the follow-up request goes on with it.

use crate::{McpServer, credentials, tasks};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolhost_contract::CallerLink;
use toolhost_core::content;
use toolhost_core::invoke::{Admitted, Call, Host, Session};

/// Runs the `tools/call` of `context` on `server`, in its server span (`tools/call <tool>`,
/// the MCP semantic conventions' attributes; its parent the trace context the request
/// carries, [`toolhost_core::trace`]).
pub(crate) async fn call_tool(
    server: &McpServer,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let started = std::time::Instant::now();
    let target = crate::traced::Target::Tool(&request.name);
    let span = crate::traced::server_span("tools/call", target, &context);
    // Measured by its tool only if the catalog has it: a made-up name is no label.
    let measuring = toolhost_core::trace::METRICS_ON.load(std::sync::atomic::Ordering::Relaxed);
    let known = (measuring && server.host.catalog().has_tool(&request.name))
        .then(|| request.name.to_string());
    let answer = span.carry(serve(server, request, context)).await;
    crate::traced::ended(&span, &answer, started, known.as_deref());
    answer
}

/// [`call_tool`], in its span.
async fn serve(
    server: &McpServer,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let session = server.session_for(&context)?;
    crate::traced::caller(&session);
    // The quota's admission the guard gave this request, if any (a request without a session).
    let admitted = (context.extensions.get::<http::request::Parts>())
        .and_then(|request| request.extensions.get::<Admitted>())
        .cloned();
    let wants_tasks = context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks());
    let stateless = context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    // A follow-up runs no call: it answers one that was admitted when it began (and holds
    // its share of `concurrent-calls` while it waits), so it needs no admission of its own.
    if request.request_state.is_some()
        && let Some(ahead) = &admitted
    {
        ahead.waive();
    }
    // A follow-up always goes to the call it names, whatever the client takes.
    if stateless && (!wants_tasks || request.request_state.is_some()) {
        let host = server.host.clone();
        let run = move |request, cancel, link| call(host, session, request, cancel, link, admitted);
        return (server.shared.rounds)
            .call(request, &context, credentials(&context), run)
            .await;
    }
    let cancel = CancellationToken::new();
    let link: Arc<dyn CallerLink> = Arc::new(crate::talk::McpLink::of(&context));
    if !wants_tasks {
        return Ok(call(
            server.host.clone(),
            session,
            request,
            cancel,
            link,
            admitted,
        )
        .await
        .into());
    }
    // For a client that takes tasks: the call runs on its own, and past TASK_AFTER it
    // becomes a task (unless MAX_TASKS are kept: then the request waits for it).
    let mut running = tokio::spawn(toolhost_core::trace::carried(call(
        server.host.clone(),
        session,
        request,
        cancel.clone(),
        link,
        admitted,
    )));
    if let Ok(result) = tokio::time::timeout(tasks::TASK_AFTER, &mut running).await {
        return joined(result).map(Into::into);
    }
    match server
        .shared
        .tasks
        .start(credentials(&context), running, cancel)
    {
        Ok(task) => Ok(CallToolResponse::Task(CreateTaskResult::new(task))),
        Err(running) => joined(running.await).map(Into::into),
    }
}

/// One `tools/call` through the host, as an MCP result: every failure is a tool result the
/// model can read and act on, never a protocol error. Ends as `cancelled` when `cancel` is.
async fn call(
    host: Arc<Host>,
    session: Arc<Session>,
    request: CallToolRequestParams,
    cancel: CancellationToken,
    link: Arc<dyn CallerLink>,
    admitted: Option<Admitted>,
) -> CallToolResult {
    let arguments = Value::Object(request.arguments.unwrap_or_default());
    let call = Call::new(&session, &request.name, arguments)
        .until(cancel.cancelled())
        .linked(&link)
        .admitted(admitted);
    let outcome = host.call(call).await;
    match outcome.result {
        Ok(result) => {
            let mut answer = CallToolResult::success(content::to_mcp(&result));
            // A tool with an output schema also as the object it describes.
            answer.structured_content = result.structured.clone();
            answer
        }
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
    }
}

/// A call's result once its task ended, or the error its task failed with.
fn joined(
    result: Result<CallToolResult, tokio::task::JoinError>,
) -> Result<CallToolResult, ErrorData> {
    result.map_err(|e| ErrorData::internal_error(format!("the call failed: {e}"), None))
}
