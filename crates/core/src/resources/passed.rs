//! passed: resources an ensemble passes on from what it is made of: the MCP server it
//! imports, or its `toolhost:plugin@0.3.0` component. The set answers for the URIs its source
//! listed last and those its templates match (a URI a client makes up is asked of no server
//! and runs no component). A server's are listed, read and subscribed to on the server,
//! within the bounds of the client of imported servers (`toolhost-import`); a component's were listed when it
//! loaded (they are fixed until a reload) and each read runs it, bounded as a call
//! ([`crate::backend::component::ComponentOffers`]).

use super::owners::matches_template;
use super::{Body, Contents, Listed, ResourceError};
use crate::backend::VersionHash;
use crate::backend::component::ComponentOffers;
use crate::import::ImportedServer;
use base64::Engine;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::broadcast;
use toolhost_config::Span;

/// An imported server's or a component's resources.
#[derive(Debug)]
pub struct PassedResources {
    name: String,
    ensemble: Arc<str>,
    source: Source,
    definition: Span,
    version: VersionHash,
    known: Mutex<Known>,
    /// When a failure to list was last logged: a client that lists again and again while
    /// the server is down costs one log line every [`WARN_INTERVAL`], not one per request.
    warned: Mutex<Option<std::time::Instant>>,
}

/// Where a set's resources come from.
#[derive(Debug)]
enum Source {
    Server(Arc<dyn ImportedServer>),
    /// A component's, and the sender of its updates: none ever come (its resources are fixed
    /// until a reload, which says so itself), but a subscriber listens all the same.
    Component(Arc<ComponentOffers>, broadcast::Sender<Option<String>>),
}

/// How often a server that fails to list its resources is logged, at most.
const WARN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// What the server listed last: the URIs, the templates, and whether it has listed at all.
#[derive(Debug, Default, Clone)]
pub(crate) struct Known {
    listed: bool,
    uris: HashSet<String>,
    templates: Vec<String>,
}

impl Known {
    /// What a server listed when its ensemble was bound (for the URIs it claims from the
    /// start, which `check` compares with everyone else's).
    pub(crate) fn listed(uris: HashSet<String>, templates: Vec<String>) -> Self {
        Known {
            listed: true,
            uris,
            templates,
        }
    }
}

impl PassedResources {
    /// The resources of `server`, named `name` (the ensemble's name: what access rules
    /// match), defined where the ensemble names the server, with what it listed when it was
    /// bound (`None`: not listed yet).
    pub(crate) fn new(
        ensemble: &Arc<str>,
        name: String,
        server: &Arc<dyn ImportedServer>,
        definition: Span,
        known: Option<Known>,
    ) -> Self {
        let hash = crate::backend::Backend::source_hash(server.as_ref());
        let set = Self::of(
            ensemble,
            name,
            Source::Server(Arc::clone(server)),
            hash.0,
            definition,
        );
        if let Some(known) = known {
            *set.known.lock().unwrap_or_else(PoisonError::into_inner) = known;
        }
        set
    }

    /// The resources `offers` lists, named `name` (the ensemble's name), defined where the
    /// ensemble names its component. Its URIs and templates are known from the start.
    pub(crate) fn component(
        ensemble: &Arc<str>,
        name: String,
        offers: &Arc<ComponentOffers>,
        definition: Span,
    ) -> Self {
        let hash = offers.source_hash().0;
        let (updates, _) = broadcast::channel(1);
        let source = Source::Component(Arc::clone(offers), updates);
        let set = Self::of(ensemble, name, source, hash, definition);
        let listed = offers.listed();
        *set.known.lock().unwrap_or_else(PoisonError::into_inner) = Known {
            listed: true,
            uris: listed.resources.iter().map(|r| r.uri.clone()).collect(),
            templates: (listed.templates.iter())
                .map(|t| t.uri_template.clone())
                .collect(),
        };
        set
    }

    fn of(
        ensemble: &Arc<str>,
        name: String,
        source: Source,
        hash: [u8; 32],
        definition: Span,
    ) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&hash);
        hasher.update(name.as_bytes());
        PassedResources {
            name,
            ensemble: Arc::clone(ensemble),
            source,
            definition,
            version: VersionHash(*hasher.finalize().as_bytes()),
            known: Mutex::default(),
            warned: Mutex::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ensemble(&self) -> &str {
        &self.ensemble
    }

    pub fn definition(&self) -> &Span {
        &self.definition
    }

    pub fn version(&self) -> VersionHash {
        self.version
    }

    /// Whether what it answers for is fixed until a reload (a component's), rather than up
    /// to a server that may list other URIs at any time.
    pub fn is_fixed(&self) -> bool {
        matches!(self.source, Source::Component(..))
    }

    /// What offers them, for messages: `component` or `imported server`.
    pub fn source_kind(&self) -> &'static str {
        match self.source {
            Source::Server(_) => "imported server",
            Source::Component(..) => "component",
        }
    }

    /// What it answers for as far as it is known now: the URIs listed last and the templates.
    pub(crate) fn claimed(&self) -> Vec<super::owners::Claim> {
        use super::owners::Claim;
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let uris = known.uris.iter().map(|uri| Claim::Uri(uri.clone()));
        let templates = known.templates.iter().map(|t| Claim::template(t));
        let mut claims: Vec<Claim> = uris.chain(templates).collect();
        // In a fixed order, so that a collision is reported the same way every time.
        claims.sort();
        claims
    }

    /// The resources, and whether there were more than were taken. A server that cannot be
    /// reached lists nothing (and says why in the log).
    pub async fn list(&self) -> (Vec<Listed>, bool) {
        let server = match &self.source {
            Source::Server(server) => server,
            Source::Component(offers, _) => {
                let listed = (offers.listed().resources.iter())
                    .map(|r| Listed {
                        uri: r.uri.clone(),
                        path: r.name.clone(),
                        mime: r.mime_type.clone().unwrap_or_default(),
                        size: None,
                        title: r.title.clone(),
                        description: r.description.clone(),
                    })
                    .collect();
                return (listed, false);
            }
        };
        match server.resources().await {
            Ok((resources, cut)) => {
                let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
                known.listed = true;
                known.uris = resources.iter().map(|r| r.uri.clone()).collect();
                drop(known);
                let listed = resources
                    .into_iter()
                    .map(|r| Listed {
                        path: r.name.clone(),
                        mime: r.mime_type.clone().unwrap_or_default(),
                        size: r.size,
                        title: r.title.clone(),
                        description: r.description.clone(),
                        uri: r.uri.clone(),
                    })
                    .collect();
                (listed, cut)
            }
            Err(e) => {
                self.warn(&format!("resources of `{}`: {e}", self.name));
                (Vec::new(), false)
            }
        }
    }

    /// The resource templates.
    pub async fn templates(&self) -> Vec<rmcp::model::ResourceTemplate> {
        let server = match &self.source {
            Source::Server(server) => server,
            Source::Component(offers, _) => {
                return (offers.listed().templates.iter())
                    .map(|t| {
                        let mut template = rmcp::model::ResourceTemplate::new(
                            t.uri_template.clone(),
                            t.name.clone(),
                        );
                        if let Some(title) = &t.title {
                            template = template.with_title(title.clone());
                        }
                        if let Some(description) = &t.description {
                            template = template.with_description(description.clone());
                        }
                        if let Some(mime) = &t.mime_type {
                            template = template.with_mime_type(mime.clone());
                        }
                        template
                    })
                    .collect();
            }
        };
        match server.resource_templates().await {
            Ok(templates) => {
                let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
                known.templates = templates.iter().map(|t| t.uri_template.clone()).collect();
                templates
            }
            Err(e) => {
                self.warn(&format!("resource templates of `{}`: {e}", self.name));
                Vec::new()
            }
        }
    }

    /// Whether `uri` is one of this server's: listed last, or matched by a template. A set
    /// that has not listed yet lists first.
    pub async fn claims(&self, uri: &str) -> bool {
        let listed = self
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .listed;
        if !listed {
            self.list().await;
            self.templates().await;
        }
        self.claims_listed(uri)
    }

    /// Logs `message` unless a failure was logged within [`WARN_INTERVAL`] (then at debug).
    fn warn(&self, message: &str) {
        let now = std::time::Instant::now();
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.is_none_or(|at| now.duration_since(at) >= WARN_INTERVAL) {
            *warned = Some(now);
            tracing::warn!("{message} (said at most once a minute)");
        } else {
            tracing::debug!("{message}");
        }
    }

    /// Whether `uri` is one of this server's as far as it is known now (no listing asked).
    pub fn claims_listed(&self, uri: &str) -> bool {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.uris.contains(uri) || known.templates.iter().any(|t| matches_template(t, uri))
    }

    /// Reads `uri` on the server, or runs the component's `read-resource` for `session`:
    /// each item it answers, text or bytes.
    pub async fn read(&self, session: &str, uri: &str) -> Result<Vec<Contents>, ResourceError> {
        let server = match &self.source {
            Source::Server(server) => server,
            Source::Component(offers, _) => return self.read_component(offers, session, uri).await,
        };
        let result =
            server
                .read_resource(uri)
                .await
                .map_err(|reason| ResourceError::Unreadable {
                    uri: toolhost_audit::cut_text(uri),
                    reason,
                })?;
        let mut contents = Vec::with_capacity(result.contents.len());
        for item in result.contents {
            contents.push(match item {
                rmcp::model::ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Contents {
                    uri,
                    mime: mime_type.unwrap_or_else(|| "text/plain".into()),
                    body: Body::Text(text),
                },
                rmcp::model::ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Contents {
                    body: Body::Blob(
                        base64::engine::general_purpose::STANDARD
                            .decode(&blob)
                            .map_err(|e| ResourceError::Unreadable {
                                uri: toolhost_audit::cut_text(&uri),
                                reason: format!("the server's blob is not base64: {e}"),
                            })?,
                    ),
                    uri,
                    mime: mime_type.unwrap_or_else(|| "application/octet-stream".into()),
                },
                _ => continue,
            });
        }
        // An item under a URI the server never named (nor the one asked for) is left out: a
        // server cannot pass its text off as another resource's.
        contents.retain(|item| item.uri == uri || self.claims_listed(&item.uri));
        if contents.is_empty() {
            return Err(ResourceError::NotFound {
                uri: toolhost_audit::cut_text(uri),
            });
        }
        Ok(contents)
    }

    /// Runs the component's `read-resource` of `uri`. Its items under URIs it never named
    /// are left out, as a server's are; `not-found` is the same answer as any unknown URI.
    async fn read_component(
        &self,
        offers: &ComponentOffers,
        session: &str,
        uri: &str,
    ) -> Result<Vec<Contents>, ResourceError> {
        let not_found = || ResourceError::NotFound {
            uri: toolhost_audit::cut_text(uri),
        };
        let offered = offers
            .run(session, toolhost_runtime::OfferRequest::Resource { uri })
            .await
            .map_err(|error| ResourceError::Unreadable {
                uri: toolhost_audit::cut_text(uri),
                reason: error.to_string(),
            })?;
        let items = match offered {
            toolhost_runtime::Offered::Resource(items) => items,
            _ => return Err(not_found()),
        };
        let contents: Vec<Contents> = items
            .into_iter()
            .filter(|item| item.uri == uri || self.claims_listed(&item.uri))
            .map(|item| {
                let (mime, body) = match item.contents {
                    toolhost_contract::ResourceContents::Text(text) => {
                        ("text/plain", Body::Text(text))
                    }
                    toolhost_contract::ResourceContents::Blob(blob) => {
                        ("application/octet-stream", Body::Blob(blob))
                    }
                };
                Contents {
                    uri: item.uri,
                    mime: item.mime_type.unwrap_or_else(|| mime.into()),
                    body,
                }
            })
            .collect();
        if contents.is_empty() {
            return Err(not_found());
        }
        Ok(contents)
    }

    /// Asks the server to report `uri`'s updates; `false` when it does not take that (a
    /// component never does: its resources change only with a reload).
    pub async fn subscribe(&self, uri: &str) -> bool {
        match &self.source {
            Source::Server(server) => server.subscribe(uri).await,
            Source::Component(..) => false,
        }
    }

    /// The updates: a URI, or `None` when the list changed.
    pub fn updates(&self) -> broadcast::Receiver<Option<String>> {
        match &self.source {
            Source::Server(server) => server.resource_updates(),
            Source::Component(_, updates) => updates.subscribe(),
        }
    }
}
