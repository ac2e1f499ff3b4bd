//! notify: what a session is told without asking. After each catalog swap, the list
//! changes it calls for (tools, prompts, resources); after each change on disk, the update of
//! every resource the session subscribed to, and the resource list's change when files come
//! or go. A session's peer gets them (the handshake revisions) and so does a
//! `subscriptions/listen` stream (2026-07-28), each through [`Notify`].

use crate::{Listening, McpServer, caller};
use rmcp::service::{Peer, SubscriptionContext};
use rmcp::{ErrorData, RoleServer};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::broadcast;
use tokio::task::AbortHandle;
use toolhost_core::catalog::{Catalog, CatalogChange, ResourceOwner};
use toolhost_core::invoke::watch::ResourceEvent;
use toolhost_core::invoke::{Host, Session};

/// A `subscriptions/listen` stream: list changes and the accepted resources' updates (those
/// the caller may read), until the client cancels it or the host shuts down (then the stream
/// ends with its final result). Ended with an error past the cap of open streams.
pub(crate) async fn listen(
    server: &McpServer,
    context: SubscriptionContext,
) -> Result<(), ErrorData> {
    // Over HTTP, one of the host's long-lived streams (counted here, whatever headers the
    // request came with).
    let _slot = match &server.shared.streams {
        None => None,
        Some(streams) => match streams.try_take() {
            Some(slot) => Some(slot),
            None => return Err(ErrorData::invalid_request(streams.refusal(), None)),
        },
    };
    let listeners = &server.shared.listeners;
    let _counted = Listening(listeners);
    if listeners.fetch_add(1, Ordering::SeqCst) >= server.shared.max_listeners {
        // Acknowledged already (rmcp does that first); the error ends the stream.
        return Err(ErrorData::invalid_request(
            format!(
                "{} subscriptions/listen streams are open, the most this host keeps; \
                 close one or try again later",
                server.shared.max_listeners
            ),
            None,
        ));
    }
    let mut changes = server.host.catalog().subscribe();
    let mut updates = server.host.resource_events();
    let session = server.own_session(caller(context.request_context()));
    let wanted: BTreeSet<String> = context
        .accepted()
        .resource_subscriptions
        .iter()
        .flatten()
        .cloned()
        .collect();
    // An imported server's resources are subscribed to on the server too (a component's
    // take no subscription: they change only with a reload).
    let catalog = server.host.catalog().snapshot();
    for uri in &wanted {
        if let Some(ResourceOwner::Passed(set)) = catalog.resource_owner(uri).await
            && session.permits_offer(set.ensemble(), set.name())
        {
            set.subscribe(uri).await;
        }
    }
    drop(catalog);
    let stopping = server.host.stopping();
    tokio::pin!(stopping);
    let sink = context.sink();
    loop {
        let sent = tokio::select! {
            _ = context.cancelled() => return Ok(()),
            _ = &mut stopping => return Ok(()),
            change = changes.recv() => match change {
                Ok(change) => notify_changes(sink, &change).await,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    notify_changes(sink, &CatalogChange::everything()).await
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            update = updates.recv() => match update {
                Ok(update) => {
                    let catalog = server.host.catalog().snapshot();
                    let uris = readable(&catalog, &session, &wanted, &update);
                    notify_updates(sink, &update, uris).await
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let catalog = server.host.catalog().snapshot();
                    let missed = ResourceEvent::missed();
                    let uris = readable(&catalog, &session, &wanted, &missed);
                    notify_updates(sink, &missed, uris).await
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
        };
        if sent.is_err() {
            return Ok(()); // The stream is gone.
        }
    }
}

/// Sends the list changes of each catalog swap to `peer`, until the session ends.
pub(crate) fn relay_changes(host: &Host, peer: Peer<RoleServer>) -> AbortHandle {
    let mut changes = host.catalog().subscribe();
    let relay = tokio::spawn(async move {
        loop {
            let sent = match changes.recv().await {
                Ok(change) => notify_changes(&peer, &change).await,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    notify_changes(&peer, &CatalogChange::everything()).await
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if sent.is_err() {
                return; // The session is gone.
            }
        }
    });
    relay.abort_handle()
}

/// Sends `notifications/resources/updated` for each resource the session subscribed to that
/// changes (and `list_changed` when files come or go), until the session ends.
pub(crate) fn relay_updates(server: &McpServer, peer: Peer<RoleServer>) -> AbortHandle {
    let mut updates = server.host.resource_events();
    let subscriptions = Arc::clone(&server.subscriptions);
    let relay = tokio::spawn(async move {
        loop {
            let update = match updates.recv().await {
                Ok(update) => update,
                // Events were missed: each subscribed resource may have changed.
                Err(broadcast::error::RecvError::Lagged(_)) => Arc::new(ResourceEvent::missed()),
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let uris = subscriptions.among(&update.updated, update.everything);
            if notify_updates(&peer, &update, uris).await.is_err() {
                return; // The session is gone.
            }
        }
    });
    relay.abort_handle()
}

/// The subscribed URIs among an update's that `session` may read.
fn readable(
    catalog: &Catalog,
    session: &Session,
    wanted: &BTreeSet<String>,
    update: &ResourceEvent,
) -> Vec<String> {
    wanted
        .iter()
        .filter(|uri| update.everything || update.updated.contains(*uri))
        .filter(|uri| {
            (catalog.resource_owner_known(uri))
                .is_some_and(|owner| session.permits_offer(owner.ensemble(), owner.name()))
        })
        .cloned()
        .collect()
}

/// Where list changes and resource updates go: a session's peer, or a listen stream's sink.
trait Notify {
    async fn tools_changed(&self) -> Result<(), ()>;
    async fn prompts_changed(&self) -> Result<(), ()>;
    async fn resources_changed(&self) -> Result<(), ()>;
    async fn updated(&self, uri: String) -> Result<(), ()>;
}

impl Notify for Peer<RoleServer> {
    async fn tools_changed(&self) -> Result<(), ()> {
        self.notify_tool_list_changed().await.map_err(drop)
    }
    async fn prompts_changed(&self) -> Result<(), ()> {
        self.notify_prompt_list_changed().await.map_err(drop)
    }
    async fn resources_changed(&self) -> Result<(), ()> {
        self.notify_resource_list_changed().await.map_err(drop)
    }
    async fn updated(&self, uri: String) -> Result<(), ()> {
        let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
        self.notify_resource_updated(param).await.map_err(drop)
    }
}

impl Notify for rmcp::service::SubscriptionSink {
    async fn tools_changed(&self) -> Result<(), ()> {
        self.notify_tool_list_changed().await.map_err(drop)
    }
    async fn prompts_changed(&self) -> Result<(), ()> {
        self.notify_prompt_list_changed().await.map_err(drop)
    }
    async fn resources_changed(&self) -> Result<(), ()> {
        self.notify_resource_list_changed().await.map_err(drop)
    }
    async fn updated(&self, uri: String) -> Result<(), ()> {
        self.notify_resource_updated(uri).await.map_err(drop)
    }
}

/// The list-changed notifications one catalog swap calls for.
async fn notify_changes(to: &impl Notify, change: &CatalogChange) -> Result<(), ()> {
    if change.tools_changed() {
        to.tools_changed().await?;
    }
    if change.prompts_changed {
        to.prompts_changed().await?;
    }
    if change.resources_changed {
        to.resources_changed().await?;
    }
    Ok(())
}

/// The notifications of one resource event: each of `uris` updated, and the list changed if
/// files came or went.
async fn notify_updates(
    to: &impl Notify,
    update: &ResourceEvent,
    uris: Vec<String>,
) -> Result<(), ()> {
    for uri in uris {
        to.updated(uri).await?;
    }
    if update.listing {
        to.resources_changed().await?;
    }
    Ok(())
}
