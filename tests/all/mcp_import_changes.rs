//! An imported server's tool list, followed as it changes: `notifications/tools/list_changed`
//! from another `toolhost serve`, and servers of either revision (the handshake's notification,
//! or the `subscriptions/listen` stream of 2026-07-28) imported, called and followed the same
//! way.

use crate::mcp_import::{
    DEADLINE, announces_tool_changes, import_ensemble, inner_fixture, serve_over_http,
};
use crate::support::{Fixture, ensemble, ok, session};
use rmcp::model::ProtocolVersion;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use toolhost::catalog::CatalogChange;
use toolhost::invoke::Host;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_list_changed_refreshes_the_catalog() {
    let inner = inner_fixture();
    let outer = Fixture::new();
    outer.write("inner.toml", &import_ensemble(&inner, ""));
    let reloader = crate::support::reloader_with_imports(outer.ensembles()).await;
    assert!(
        reloader.status().refused.is_empty(),
        "{:?}",
        reloader.status().refused
    );
    let mut changes = reloader.subscribe();
    let _watch = reloader.watch(Duration::from_millis(50)).expect("watch");
    assert!(reloader.catalog().snapshot().get("in_echo").is_some());
    assert!(reloader.catalog().snapshot().get("in_fail2").is_none());

    // The inner host reloads and tells its clients; the outer one re-lists and swaps.
    inner.write(
        "more.toml",
        &ensemble(
            "more",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"fail2\", tool = \"fail\" }\n",
        ),
    );
    let wait = async {
        loop {
            match changes.recv().await {
                Ok(change) if change.added.iter().any(|n| n == "in_fail2") => return change,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("the reloader went away"),
            }
        }
    };
    let change: Arc<CatalogChange> = tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the catalog picked up the server's new tool");
    assert!(change.removed.is_empty());
    assert!(reloader.catalog().snapshot().get("in_fail2").is_some());
}

/// An MCP server that speaks only `versions`, lists the tools `t0` .. `t<n-1>` (n starts at
/// 1), answers a call with the tool's name, and announces each change of n the way its
/// revision does: `notifications/tools/list_changed` to its sessions, or on the
/// `subscriptions/listen` streams of 2026-07-28 clients.
#[derive(Clone)]
struct Changer {
    versions: &'static [ProtocolVersion],
    tools: tokio::sync::watch::Sender<usize>,
}

impl Changer {
    fn new(versions: &'static [ProtocolVersion]) -> Self {
        Changer {
            versions,
            tools: tokio::sync::watch::channel(1).0,
        }
    }
}

impl rmcp::ServerHandler for Changer {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(self.versions)
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        announces_tool_changes()
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = Arc::new(serde_json::Map::from_iter([(
            "type".to_string(),
            json!("object"),
        )]));
        let n = *self.tools.borrow();
        let tools = (0..n)
            .map(|i| rmcp::model::Tool::new(format!("t{i}"), "A tool.", schema.clone()))
            .collect();
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let text = rmcp::model::ContentBlock::text(format!("ran {}", request.name));
        Ok(rmcp::model::CallToolResult::success(vec![text]).into())
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<rmcp::RoleServer>) {
        let mut tools = self.tools.subscribe();
        tokio::spawn(async move {
            while tools.changed().await.is_ok() {
                if context.peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(
        &self,
        context: rmcp::service::SubscriptionContext,
    ) -> Result<(), rmcp::ErrorData> {
        let mut tools = self.tools.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = tools.changed() => {
                    if changed.is_err() || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_at_either_revision_are_imported_called_and_followed_the_same_way() {
    const MODERN: &[ProtocolVersion] = &[ProtocolVersion::V_2026_07_28];
    const LEGACY: &[ProtocolVersion] = &[ProtocolVersion::V_2025_11_25];
    for versions in [MODERN, LEGACY] {
        let changer = Changer::new(versions);
        let tools = changer.tools.clone();
        let (port, server) = serve_over_http(changer).await;
        let outer = Fixture::new();
        outer.write_mcp_import("changer", &format!("url = \"http://127.0.0.1:{port}/mcp\""));
        let reloader = crate::support::reloader_with_imports(outer.ensembles()).await;
        let status = reloader.status();
        assert!(
            status.refused.is_empty(),
            "{versions:?}: {:?}",
            status.refused
        );
        let mut changes = reloader.subscribe();
        let _watch = reloader.watch(Duration::from_millis(50)).expect("watch");
        let host = Host::new(reloader.catalog().clone(), None);
        assert_eq!(
            ok(&host.invoke(&session(), "t0", json!({})).await),
            "ran t0"
        );

        // The change is announced again every half second: the host may not hold its
        // subscription (2026-07-28) yet when it is first made, and nothing else makes it
        // list the server's tools again.
        let announce = tokio::spawn(async move {
            loop {
                tools.send_replace(2);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let wait = async {
            loop {
                match changes.recv().await {
                    Ok(change) if change.added.iter().any(|n| n == "t1") => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => panic!("the reloader went away"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("{versions:?}: the new tool was not picked up"));
        announce.abort();
        assert_eq!(
            ok(&host.invoke(&session(), "t1", json!({})).await),
            "ran t1"
        );
        server.abort();
    }
}
