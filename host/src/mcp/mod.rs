//! mcp: the catalog served to MCP clients over stdio or streamable HTTP (the official `rmcp`
//! SDK). `tools/list` reads the live catalog, in pages ([`tools`]); `tools/call` goes through
//! [`Host::invoke`], so validation, dedup (scoped to the MCP session), limits and audit hold
//! as for every caller. After each swap of the live catalog that changes the tools, every
//! connected session is sent `notifications/tools/list_changed`, and the host's own log
//! messages as `notifications/message` (see [`log`]).
//!
//! The other direction, external MCP servers whose tools join the catalog, is a backend:
//! [`crate::backend::mcp`].

// MCP logging is deprecated from the 2026-07-28 revision on (SEP-2577), but it is part of
// the revisions this server speaks (up to 2025-11-25), and clients rely on it there.
#![allow(deprecated)]

pub mod log;
pub mod tools;

use crate::invoke::{Host, Session};
use log::{LogRecord, LogRelay};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;
use tools::ToolList;

/// One MCP session's view of the host. Each session (the stdio connection, or each HTTP
/// session) gets its own, and so its own dedup memory and audit session id.
pub struct McpServer {
    host: Arc<Host>,
    /// The tool listing, shared by the sessions of the host.
    tools: Arc<ToolList>,
    logs: Option<LogRelay>,
    session: Arc<Session>,
    /// The least severe level this session wants relayed (`logging/setLevel`).
    log_level: Arc<AtomicU8>,
    /// The session's relay tasks (tool list changes, log lines), stopped when it ends: a task
    /// that only noticed at its next send would outlive a quiet session for good.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(PoisonError::into_inner);
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl McpServer {
    /// A server for one MCP session, named `id` in audit records.
    pub fn new(host: Arc<Host>, id: String) -> Self {
        McpServer::with_tools(host, Arc::default(), id)
    }

    fn with_tools(host: Arc<Host>, tools: Arc<ToolList>, id: String) -> Self {
        McpServer {
            session: Arc::new(host.session(id, Default::default())),
            host,
            tools,
            logs: None,
            log_level: Arc::new(AtomicU8::new(log::severity(LoggingLevel::Warning))),
            tasks: Mutex::default(),
        }
    }

    /// Relays the host's log messages from `logs` to this session.
    pub fn with_logs(mut self, logs: LogRelay) -> Self {
        self.logs = Some(logs);
        self
    }

    /// A factory of servers with numbered session ids (`<prefix>-1`, `<prefix>-2`, ...).
    pub fn factory(
        host: Arc<Host>,
        logs: Option<LogRelay>,
        prefix: &str,
    ) -> impl Fn() -> McpServer + Send + Sync + Clone + 'static {
        let counter = Arc::new(AtomicU64::new(0));
        let prefix = format!("{prefix}-{}", std::process::id());
        let tools = Arc::new(ToolList::default());
        move || {
            let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let id = format!("{prefix}-{n}");
            let server = McpServer::with_tools(host.clone(), tools.clone(), id);
            match &logs {
                Some(logs) => server.with_logs(logs.clone()),
                None => server,
            }
        }
    }
}

impl ServerHandler for McpServer {
    /// Up to the last revision with an `initialize` handshake: this server announces tool list
    /// changes to initialized sessions, which the later, session-less revision replaces with
    /// subscriptions that toolhost does not implement yet. Newer clients negotiate down.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let mut config = ServerConfig::new(capabilities);
        config.server_info = Implementation::new("toolhost", env!("CARGO_PKG_VERSION"));
        config.instructions = Some(
            "Tools run in a sandbox. A failed call returns isError with `<kind>: <message>`; \
             for invalid-arguments the message lists each problem with its JSON pointer."
                .into(),
        );
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.host.catalog().snapshot();
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (tools, next) = self.tools.page(&catalog, &self.session.policy, cursor);
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let output = (self.host.catalog().snapshot().get(&request.name))
            .and_then(|tool| tool.output.clone());
        let outcome = self
            .host
            .invoke(&self.session, &request.name, arguments)
            .await;
        // Every failure is a tool result the model can read and act on, never a protocol error.
        let result = match outcome.result {
            Ok(text) => {
                let mut result =
                    CallToolResult::success(vec![ContentBlock::text(text.to_string())]);
                // A typed tool's result also as the object its output schema describes.
                result.structured_content = output.and_then(|o| o.structured(&text));
                result
            }
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
        };
        Ok(result.into())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level
            .store(log::severity(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(logs) = &self.logs {
            tasks.push(relay_logs(
                logs.subscribe(),
                context.peer.clone(),
                self.log_level.clone(),
                self.session.id.clone(),
            ));
        }
        let mut changes = self.host.catalog().subscribe();
        let peer = context.peer.clone();
        let relay_changes = tokio::spawn(async move {
            loop {
                match changes.recv().await {
                    Ok(change) if change.tools_changed() => {
                        if peer.notify_tool_list_changed().await.is_err() {
                            return; // The session is gone.
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        tasks.push(relay_changes.abort_handle());
    }
}

/// Sends each relayed log message this session may see (the host's, and its own calls'
/// plugin lines) at or above the session's level, until the session ends or the task is
/// aborted.
fn relay_logs(
    mut records: broadcast::Receiver<LogRecord>,
    peer: Peer<RoleServer>,
    level: Arc<AtomicU8>,
    session: String,
) -> AbortHandle {
    let relay = tokio::spawn(async move {
        loop {
            let record = match records.recv().await {
                Ok(record) => record,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if log::severity(record.level) < level.load(Ordering::Relaxed)
                || !record.visible_to(&session)
            {
                continue;
            }
            let param =
                LoggingMessageNotificationParam::new(record.level, Value::String(record.message))
                    .with_logger(record.target);
            let sent = peer.notify_logging_message(param).await;
            if sent.is_err() {
                return; // The session is gone.
            }
        }
    });
    relay.abort_handle()
}
