//! `resources/list`, `resources/templates/list`, `resources/read`, `completion/complete`
//! and subscriptions: the catalog's resource sets, and the resources imported servers and
//! `toolhost:plugin@0.3.0` components pass on, in MCP form. A listing walks the sets'
//! directories (bounded by each set's `max-files`) and asks the imported servers (bounded per
//! server; a component's were listed at load), and answers in pages whose cursor is the last
//! URI sent; a read goes through [`toolhost_core::invoke::Host::read_resource`] (bounded,
//! audited); a session holds at most [`MAX_SUBSCRIPTIONS`] subscribed URIs, and a
//! subscription to an imported server's resource is passed on to it.

use rmcp::ErrorData;
use rmcp::model::{Resource, ResourceTemplate};
use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use toolhost_core::catalog::{Catalog, ResourceOwner};
use toolhost_core::invoke::Session;
use toolhost_core::resources::passed::PassedResources;
use toolhost_core::resources::{Listed, MAX_URI_BYTES, ResourceError, ResourceSet};

/// Resources per `resources/list` page, at most.
pub const PAGE_RESOURCES: usize = 1000;
/// URIs one session may be subscribed to at once.
pub const MAX_SUBSCRIPTIONS: usize = 64;

fn visible<'c>(
    catalog: &'c Catalog,
    session: &'c Session,
) -> impl Iterator<Item = &'c std::sync::Arc<ResourceSet>> {
    catalog
        .resource_sets()
        .filter(|set| session.permits_offer(set.ensemble(), set.name()))
}

/// The page of resources after `cursor` (a URI) that `session` may see, sorted by URI, and
/// the next page's cursor.
pub async fn page(
    catalog: &Catalog,
    session: &Session,
    cursor: Option<&str>,
) -> (Vec<Resource>, Option<String>) {
    let mut all = Vec::new();
    for set in visible(catalog, session) {
        let (listed, cut) = set.list().await;
        if cut {
            tracing::debug!(
                "resource set `{}` lists its first {} files only (max-files)",
                set.name(),
                listed.len()
            );
        }
        let description = set.description().map(str::to_string);
        all.extend(listed.into_iter().map(|l| Listed {
            description: description.clone(),
            ..l
        }));
    }
    for set in imported(catalog, session) {
        let (mut listed, _) = set.list().await;
        // A URI another answers for (a set, a component, a server before it) is not this
        // server's to list: a read of it goes to its owner.
        listed.retain(|l| (catalog.resource_owner_known(&l.uri)).is_some_and(|o| o.is(set)));
        all.extend(listed);
    }
    all.sort_by(|a, b| a.uri.cmp(&b.uri));
    all.dedup_by(|a, b| a.uri == b.uri);
    let start = cursor.map_or(0, |after| all.partition_point(|l| l.uri.as_str() <= after));
    let rest = &all[start..];
    let page: Vec<Resource> = rest
        .iter()
        .take(PAGE_RESOURCES)
        .map(|l| {
            let mut resource = Resource::new(l.uri.clone(), l.path.clone());
            if let Some(size) = l.size {
                resource = resource.with_size(size);
            }
            if !l.mime.is_empty() {
                resource = resource.with_mime_type(l.mime.clone());
            }
            if let Some(title) = &l.title {
                resource = resource.with_title(title.clone());
            }
            match &l.description {
                Some(description) => resource.with_description(description.clone()),
                None => resource,
            }
        })
        .collect();
    let next = (rest.len() > PAGE_RESOURCES)
        .then(|| page.last().map(|r| r.uri.clone()))
        .flatten();
    (page, next)
}

/// The passed-on resources (of imported servers and components) `session` may see.
fn imported<'c>(
    catalog: &'c Catalog,
    session: &'c Session,
) -> impl Iterator<Item = &'c std::sync::Arc<PassedResources>> {
    catalog
        .passed_resources()
        .filter(|set| session.permits_offer(set.ensemble(), set.name()))
}

/// One template per set (its prefix, then the path), and the passed-on templates.
pub async fn templates(catalog: &Catalog, session: &Session) -> Vec<ResourceTemplate> {
    let mut templates: Vec<ResourceTemplate> = visible(catalog, session)
        .map(|set| {
            let template = ResourceTemplate::new(set.template(), set.name().to_string());
            match set.description() {
                Some(description) => template.with_description(description),
                None => template,
            }
        })
        .collect();
    for set in imported(catalog, session) {
        templates.extend(set.templates().await);
    }
    templates
}

/// The error of a refused read: not found for a URI that names nothing this session may
/// read (rmcp turns it into invalid params at 2026-07-28, as the revision asks).
pub fn refusal(error: ResourceError) -> ErrorData {
    match error {
        ResourceError::NotFound { .. } => ErrorData::resource_not_found(error.to_string(), None),
        _ => ErrorData::internal_error(error.to_string(), None),
    }
}

/// The paths of the set whose template is `template` that start with `typed`.
pub async fn complete(
    catalog: &Catalog,
    session: &Session,
    template: &str,
    typed: &str,
) -> Vec<String> {
    let set = visible(catalog, session).find(|set| set.template() == template);
    match set {
        Some(set) => {
            set.complete(typed, rmcp::model::CompletionInfo::MAX_VALUES)
                .await
        }
        None => Vec::new(),
    }
}

/// The URIs one session is subscribed to.
#[derive(Default)]
pub struct Subscriptions(Mutex<BTreeSet<String>>);

impl Subscriptions {
    /// Subscribes to `uri`, which must be one a set of the catalog could serve to `session`
    /// (the file need not exist yet), or one an imported server claims (then the server is
    /// asked to report its updates too).
    pub async fn subscribe(
        &self,
        catalog: &Catalog,
        session: &Session,
        uri: &str,
    ) -> Result<(), ErrorData> {
        if no_room(&self.0.lock().unwrap_or_else(PoisonError::into_inner), uri) {
            return Err(full());
        }
        let owner = match uri.len() <= MAX_URI_BYTES {
            true => catalog.resource_owner(uri).await,
            false => None,
        };
        let servable = match owner {
            Some(owner) if !session.permits_offer(owner.ensemble(), owner.name()) => false,
            Some(ResourceOwner::Files(set)) => set.path_of(uri).is_some(),
            Some(ResourceOwner::Passed(set)) => {
                // A server that takes no subscriptions still has its URI subscribed here:
                // its list changes and our own reloads are reported.
                set.subscribe(uri).await;
                true
            }
            None => false,
        };
        if !servable {
            return Err(refusal(ResourceError::NotFound {
                uri: toolhost_audit::cut_text(uri),
            }));
        }
        // Looked at again: another subscription may have taken the last place meanwhile.
        let mut subscribed = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if no_room(&subscribed, uri) {
            return Err(full());
        }
        subscribed.insert(uri.to_string());
        Ok(())
    }

    pub fn unsubscribe(&self, uri: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uri);
    }

    /// The subscribed URIs among `updated` (all of them when `everything` changed).
    pub fn among(&self, updated: &BTreeSet<String>, everything: bool) -> Vec<String> {
        let subscribed = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        subscribed
            .iter()
            .filter(|uri| everything || updated.contains(*uri))
            .cloned()
            .collect()
    }
}

/// Whether `subscribed` is full for `uri` (one it holds already takes no new place).
fn no_room(subscribed: &BTreeSet<String>, uri: &str) -> bool {
    subscribed.len() >= MAX_SUBSCRIPTIONS && !subscribed.contains(uri)
}

/// The refusal of a subscription past [`MAX_SUBSCRIPTIONS`].
fn full() -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "this session is subscribed to {MAX_SUBSCRIPTIONS} resources, the most it may be; \
             unsubscribe from one first"
        ),
        None,
    )
}
