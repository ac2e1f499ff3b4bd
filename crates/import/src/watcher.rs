//! watcher: what toolhost is as a client of an imported server: its name and capabilities,
//! and where the server's notifications and requests go (tool and prompt list changes to a
//! reload, resource updates to their subscribers, progress, log lines and questions back to
//! the caller of the call they belong to, through [`super::talk`]); over 2026-07-28, the
//! `subscriptions/listen` stream that brings tool list changes ([`listen_for_changes`]).

use crate::talk;
use rmcp::model::{ClientConfig, ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::NotificationContext;
use rmcp::service::RunningService;
use rmcp::{ClientHandler, RoleClient};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// A server's repeated notices are logged at most this often.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Receives a server's notifications.
#[derive(Clone)]
pub(super) struct Watcher {
    pub(super) server: String,
    pub(super) changes: broadcast::Sender<String>,
    /// Where its resources' updates go (a URI, or `None`: the list changed).
    pub(super) updates: broadcast::Sender<Option<String>>,
    /// The calls running, each with its way back to its caller.
    pub(super) routes: Arc<talk::Routes>,
    /// What it may ask of the callers (declared as the client's capabilities).
    pub(super) asks: toolhost_contract::TalkGrants,
    /// When a tool-list change was last logged.
    pub(super) logged: Arc<Mutex<Option<Instant>>>,
}

impl ClientHandler for Watcher {
    /// toolhost by name, and for an `initialize` handshake the latest revision that has one
    /// (`server/discover` names its revisions itself).
    fn get_info(&self) -> ClientConfig {
        let toolhost = rmcp::model::Implementation::new("toolhost", env!("CARGO_PKG_VERSION"));
        let mut capabilities = rmcp::model::ClientCapabilities::default();
        if self.asks.sampling {
            capabilities.sampling = Some(Default::default());
        }
        if self.asks.elicitation {
            capabilities.elicitation = Some(Default::default());
        }
        ClientConfig::new(capabilities, toolhost)
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.routes.progress(params).await;
    }

    #[allow(deprecated)] // MCP logging: part of the revisions servers speak
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.routes.log(&self.server, params);
    }

    #[allow(deprecated)] // sampling: part of the revisions servers speak
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.routes.sample(params).await
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.routes.elicit(request).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed();
    }

    /// Its prompts are taken when the catalog is built: a reload takes the new list.
    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if params.uri.len() <= toolhost_core::backend::MAX_URI_BYTES {
            let _ = self.updates.send(Some(params.uri));
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.updates.send(None);
    }
}

impl Watcher {
    /// The server said its tools changed (a session's notification, or a subscription's).
    pub(super) fn tools_changed(&self) {
        // A server that floods notifications is logged once per interval, not per message.
        let now = Instant::now();
        let mut last = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|at| now.duration_since(at) >= LOG_INTERVAL) {
            tracing::info!("MCP server `{}` changed its tools", self.server);
            *last = Some(now);
        }
        drop(last);
        // Nobody listening (`check`, `call`) is fine; a lagging listener reloads once.
        let _ = self.changes.send(self.server.clone());
    }
}

/// For a server at 2026-07-28 (no session, so no `notifications/tools/list_changed` outside a
/// subscription): a task holding a `subscriptions/listen` stream for tool list changes, which
/// it reports through `watcher`, until the connection ends. `None` for a server
/// that did the handshake (its notifications reach the watcher) or that does not announce
/// changes.
pub(super) fn listen_for_changes(
    service: &RunningService<RoleClient, Watcher>,
    watcher: Watcher,
) -> Option<crate::AbortOnDrop> {
    let info = service.peer().peer_info()?;
    let announces = (info.capabilities.tools.as_ref())
        .is_some_and(|t| t.list_changed == Some(true))
        || (info.capabilities.prompts.as_ref()).is_some_and(|p| p.list_changed == Some(true));
    if info.protocol_version.has_initialize() || !announces {
        return None;
    }
    let peer = service.peer().clone();
    let task = tokio::spawn(async move {
        let filter = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .build();
        // A stream the server ends (its own restart or shutdown) is opened again, at most
        // once a second, while the connection lasts.
        while !peer.is_transport_closed() {
            match peer.listen(filter.clone()).await {
                Ok(mut subscription) => {
                    while let Ok(Some(notification)) = subscription.next().await {
                        if matches!(
                            notification,
                            ServerNotification::ToolListChangedNotification(_)
                                | ServerNotification::PromptListChangedNotification(_)
                        ) {
                            watcher.tools_changed();
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "MCP server `{}` refused a subscription to tool list changes ({e}); \
                         its changes are seen at the next reload",
                        watcher.server
                    );
                    return;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    Some(crate::AbortOnDrop(task.abort_handle()))
}
