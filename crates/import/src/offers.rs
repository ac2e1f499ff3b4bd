//! An imported server's prompts and resources, passed through. Its prompts are listed when
//! the catalog is built (a `notifications/prompts/list_changed` reloads, as a tool list
//! change does) and got on the server; its resources are listed, read and subscribed to on
//! the server when a client asks. Each request waits at most the import's
//! `startup-timeout-ms`, and what comes back is bounded: [`MAX_PROMPTS`] prompts and
//! [`MAX_RESOURCES`] resources per listing, [`MAX_PASSED_BYTES`] per prompt or read.

use crate::McpImport;
use rmcp::model::{
    GetPromptRequestParams, GetPromptResult, PaginatedRequestParams, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate,
    SubscribeRequestParams,
};
use serde_json::{Map, Value};
use std::sync::PoisonError;
use tokio::sync::broadcast;
use toolhost_core::import::McpError;

/// Prompts taken from one server.
pub const MAX_PROMPTS: usize = 1000;
/// Resources (and, apart, templates) one listing takes from a server.
pub const MAX_RESOURCES: usize = 1000;
/// Bytes one prompt's messages or one read's contents may hold, as JSON.
pub const MAX_PASSED_BYTES: usize = 4 << 20;
/// URIs this host subscribes to on one server, at most, whoever asked.
pub const MAX_UPSTREAM_SUBSCRIPTIONS: usize = 256;

impl McpImport {
    /// Whether the server's session says it offers prompts (and resources).
    async fn offers(&self) -> Result<(bool, bool), McpError> {
        let service = self.session().await?;
        let info = service.peer().peer_info();
        let capabilities = info.as_ref().map(|info| &info.capabilities);
        Ok((
            capabilities.is_some_and(|c| c.prompts.is_some()),
            capabilities.is_some_and(|c| c.resources.is_some()),
        ))
    }

    /// Whether the server offers resources.
    pub async fn has_resources(&self) -> bool {
        self.offers().await.is_ok_and(|(_, resources)| resources)
    }

    /// The server's prompts (none when it offers none), page by page within the bounds.
    pub async fn prompts(&self) -> Result<Vec<Prompt>, McpError> {
        let _other = self.routes.other();
        if !self.offers().await?.0 {
            return Ok(Vec::new());
        }
        let service = self.session().await?;
        let list = async {
            let mut prompts = Vec::new();
            let mut cursor = None;
            loop {
                let page = service
                    .list_prompts(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                    .await
                    .map_err(|e| format!("could not list its prompts: {}", crate::said(&e)))?;
                prompts.extend(page.prompts);
                if prompts.len() > MAX_PROMPTS {
                    return Err(format!(
                        "offers more than {MAX_PROMPTS} prompts, the most the host takes of one \
                         server"
                    ));
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(prompts),
                }
            }
        };
        tokio::time::timeout(self.spec.startup_timeout, list)
            .await
            .map_err(|_| self.error("did not list its prompts in time"))?
            .map_err(|e| self.error(e))
    }

    /// The server's answer to `prompts/get`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<GetPromptResult, String> {
        let _other = self.routes.other();
        let service = self.session().await.map_err(|e| e.to_string())?;
        let params = GetPromptRequestParams::new(name).with_arguments(arguments.clone());
        let asked = service.peer().get_prompt(params);
        let answer = tokio::time::timeout(self.spec.startup_timeout, asked)
            .await
            .map_err(|_| format!("the server did not answer within {} ms", self.timeout_ms()))?
            .map_err(|e| format!("the server failed it: {}", crate::said(&e)))?;
        within(&answer.messages)?;
        Ok(answer)
    }

    /// The server's resources (page by page, at most [`MAX_RESOURCES`]), and whether there
    /// were more.
    pub async fn resources(&self) -> Result<(Vec<Resource>, bool), McpError> {
        let _other = self.routes.other();
        let service = self.session().await?;
        let list = async {
            let mut resources = Vec::new();
            let mut cursor = None;
            loop {
                let page: rmcp::model::ListResourcesResult = service
                    .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                    .await
                    .map_err(|e| format!("could not list its resources: {}", crate::said(&e)))?;
                resources.extend(page.resources);
                if resources.len() >= MAX_RESOURCES {
                    let cut = resources.len() > MAX_RESOURCES || page.next_cursor.is_some();
                    resources.truncate(MAX_RESOURCES);
                    return Ok((resources, cut));
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok::<_, String>((resources, false)),
                }
            }
        };
        tokio::time::timeout(self.spec.startup_timeout, list)
            .await
            .map_err(|_| self.error("did not list its resources in time"))?
            .map_err(|e| self.error(e))
    }

    /// The server's resource templates (at most [`MAX_RESOURCES`]).
    pub async fn resource_templates(&self) -> Result<Vec<ResourceTemplate>, McpError> {
        let _other = self.routes.other();
        let service = self.session().await?;
        let asked = service.list_resource_templates(Some(PaginatedRequestParams::default()));
        let mut templates = tokio::time::timeout(self.spec.startup_timeout, asked)
            .await
            .map_err(|_| self.error("did not list its resource templates in time"))?
            .map_err(|e| self.error(format!("could not list its resource templates: {e}")))?
            .resource_templates;
        templates.truncate(MAX_RESOURCES);
        Ok(templates)
    }

    /// The server's answer to `resources/read`.
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, String> {
        let _other = self.routes.other();
        let service = self.session().await.map_err(|e| e.to_string())?;
        let asked = service
            .peer()
            .read_resource(ReadResourceRequestParams::new(uri));
        let answer = tokio::time::timeout(self.spec.startup_timeout, asked)
            .await
            .map_err(|_| format!("the server did not answer within {} ms", self.timeout_ms()))?
            .map_err(|e| format!("the server failed it: {}", crate::said(&e)))?;
        within(&answer.contents)?;
        Ok(answer)
    }

    /// Asks the server to report updates of `uri` (once per URI, at most
    /// [`MAX_UPSTREAM_SUBSCRIPTIONS`], kept until its connection ends); `false` when it could
    /// not (it does not take subscriptions, or the bound is reached).
    pub async fn subscribe(&self, uri: &str) -> bool {
        let _other = self.routes.other();
        let Ok(service) = self.session().await else {
            return false;
        };
        let info = service.peer().peer_info();
        let takes = (info.as_ref())
            .and_then(|info| info.capabilities.resources.as_ref())
            .is_some_and(|r| r.subscribe == Some(true));
        {
            let mut subscribed = self
                .subscribed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if subscribed.contains(uri) {
                return true;
            }
            if !takes || subscribed.len() >= MAX_UPSTREAM_SUBSCRIPTIONS {
                return false;
            }
            subscribed.insert(uri.to_string());
        }
        let handshake = info
            .as_ref()
            .is_some_and(|i| i.protocol_version.has_initialize());
        if !handshake {
            // 2026-07-28: one `subscriptions/listen` stream names every URI subscribed, opened
            // again with the new list.
            self.listen_to_resources(&service);
            return true;
        }
        #[allow(deprecated)] // resources/subscribe: the handshake revisions' way
        let asked = service.peer().subscribe(SubscribeRequestParams::new(uri));
        let done = tokio::time::timeout(self.spec.startup_timeout, asked).await;
        if !matches!(done, Ok(Ok(()))) {
            (self
                .subscribed
                .lock()
                .unwrap_or_else(PoisonError::into_inner))
            .remove(uri);
            return false;
        }
        true
    }

    /// Holds one `subscriptions/listen` stream to a 2026-07-28 server for the URIs subscribed
    /// and its resource list, passing what it reports to [`McpImport::resource_updates`];
    /// the stream before it is closed.
    fn listen_to_resources(
        &self,
        service: &rmcp::service::RunningService<rmcp::RoleClient, crate::Watcher>,
    ) {
        // Under the stream's lock: two subscriptions at once leave the stream of the later
        // set, which holds both.
        let mut listening = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let uris: Vec<String> = (self
            .subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .iter()
        .cloned()
        .collect();
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resources_list_changed()
            .resource_subscriptions(uris)
            .build();
        let peer = service.peer().clone();
        let updates = self.updates.clone();
        let task = tokio::spawn(async move {
            let Ok(mut subscription) = peer.listen(filter).await else {
                return;
            };
            while let Ok(Some(notification)) = subscription.next().await {
                let update = match notification {
                    rmcp::model::ServerNotification::ResourceUpdatedNotification(n) => {
                        Some(n.params.uri)
                    }
                    rmcp::model::ServerNotification::ResourceListChangedNotification(_) => None,
                    _ => continue,
                };
                if update
                    .as_ref()
                    .is_some_and(|u| u.len() > toolhost_core::backend::MAX_URI_BYTES)
                {
                    continue;
                }
                let _ = updates.send(update);
            }
        });
        *listening = Some(crate::AbortOnDrop(task.abort_handle()));
    }

    /// The updates its session reports: a resource's URI, or `None` when its list changed.
    pub fn resource_updates(&self) -> broadcast::Receiver<Option<String>> {
        self.updates.subscribe()
    }

    fn timeout_ms(&self) -> u128 {
        self.spec.startup_timeout.as_millis()
    }
}

/// Refuses what is larger than [`MAX_PASSED_BYTES`] as JSON.
fn within<T: serde::Serialize>(value: &T) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
    if bytes > MAX_PASSED_BYTES {
        return Err(format!(
            "the server's answer is {bytes} bytes; at most {MAX_PASSED_BYTES} are passed on"
        ));
    }
    Ok(())
}
