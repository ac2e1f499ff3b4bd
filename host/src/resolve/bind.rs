//! Binding: a draft meets its backend. The only step of resolving that touches the runtime
//! (reading, pinning and loading components) or MCP servers (starting one and listing its
//! tools). Each component file is read and loaded once per resolve, whatever number of
//! invokers name it, and failures are typed ([`BindError`]) up to the diagnostic.

use super::draft::{ComponentRef, McpDraft};
use super::schema::{SchemaCache, SchemaError};
use crate::backend::component::ComponentBackend;
use crate::backend::mcp::{ImportedServers, McpError, McpSpec};
use crate::backend::{Backend, ToolOffer};
use crate::catalog::Schema;
use crate::config::{Diagnostic, Span};
use crate::runtime::{ComponentHash, LoadError, Runtime};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// A backend and the tools it offers.
pub(super) struct Bound {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) offers: Offers,
    /// `component <path>` or ``MCP server `<command>` ``, for messages.
    pub(super) origin: String,
    /// Where the component or server is named, for messages about its schemas.
    pub(super) at: Span,
}

/// The tools of a backend, in its order and by name, each with its schema compiled the
/// first time an invoker needs it (so a thousand invokers of one tool compile it once).
pub(super) struct Offers {
    pub(super) list: Vec<ToolOffer>,
    by_name: HashMap<String, usize>,
    schemas: Vec<OnceLock<Result<Arc<Schema>, SchemaError>>>,
}

impl Offers {
    fn new(list: Vec<ToolOffer>) -> Self {
        let by_name = list
            .iter()
            .enumerate()
            .map(|(i, offer)| (offer.name.clone(), i))
            .collect();
        let schemas = list.iter().map(|_| OnceLock::new()).collect();
        Offers {
            list,
            by_name,
            schemas,
        }
    }

    /// The tool called `name`, and its schema (compiled through `cache`).
    pub(super) fn get(
        &self,
        name: &str,
        cache: &SchemaCache,
    ) -> Option<(&ToolOffer, Result<Arc<Schema>, SchemaError>)> {
        let &i = self.by_name.get(name)?;
        let offer = &self.list[i];
        let schema = self.schemas[i].get_or_init(|| cache.of_text(&offer.input_schema));
        Some((offer, schema.clone()))
    }

    /// The offered names for a message: the first few, then how many more.
    pub(super) fn names(&self) -> String {
        const SHOWN: usize = 50;
        let mut names: Vec<&str> = self
            .list
            .iter()
            .take(SHOWN)
            .map(|o| o.name.as_str())
            .collect();
        let more = self.list.len().saturating_sub(SHOWN);
        let more = (more > 0).then(|| format!("and {more} more"));
        names.extend(more.as_deref());
        names.join(", ")
    }
}

/// Why a draft could not be bound.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum BindError {
    #[error("cannot read component {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error(
        "component {} has blake3 {actual}, but the pin requires {pinned}; refusing to load it",
        path.display()
    )]
    PinMismatch {
        path: PathBuf,
        actual: ComponentHash,
        pinned: String,
    },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Server(#[from] McpError),
}

/// A component file's hash and bytes, as read once per resolve.
type ComponentFile = (ComponentHash, Arc<[u8]>);

/// Binds the drafts of one resolve.
pub(super) struct Binder<'r> {
    runtime: &'r Arc<Runtime>,
    servers: &'r ImportedServers,
    files: HashMap<PathBuf, Result<ComponentFile, BindError>>,
    components: HashMap<PathBuf, Result<Arc<Bound>, BindError>>,
}

impl<'r> Binder<'r> {
    pub(super) fn new(runtime: &'r Arc<Runtime>, servers: &'r ImportedServers) -> Self {
        Binder {
            runtime,
            servers,
            files: HashMap::new(),
            components: HashMap::new(),
        }
    }

    /// The component `reference` names, pinned and loaded; an error points where the
    /// component is named (and where it is pinned).
    pub(super) async fn component(
        &mut self,
        reference: &ComponentRef,
    ) -> Result<Arc<Bound>, Diagnostic> {
        self.load_component(reference).await.map_err(|error| {
            let diagnostic = Diagnostic::new(reference.at.location(), error.to_string());
            match (&error, &reference.pin) {
                (BindError::PinMismatch { .. }, Some((_, pin))) => {
                    diagnostic.with_note(Some(pin.location()), "pinned here")
                }
                _ => diagnostic,
            }
        })
    }

    async fn load_component(&mut self, reference: &ComponentRef) -> Result<Arc<Bound>, BindError> {
        let path = &reference.path;
        let (hash, bytes) = self
            .files
            .entry(path.clone())
            .or_insert_with(|| {
                std::fs::read(path)
                    .map(|bytes| (ComponentHash::of(&bytes), Arc::from(bytes)))
                    .map_err(|e| BindError::Read {
                        path: path.clone(),
                        reason: e.to_string(),
                    })
            })
            .clone()?;
        if let Some((pin, _)) = &reference.pin
            && hash.to_string() != pin.as_str()
        {
            return Err(BindError::PinMismatch {
                path: path.clone(),
                actual: hash,
                pinned: pin.to_string(),
            });
        }
        if let Some(done) = self.components.get(path) {
            return done.clone();
        }
        let loaded = ComponentBackend::load(self.runtime, path, bytes.to_vec())
            .await
            .map(|(backend, offers)| {
                Arc::new(Bound {
                    backend: Arc::new(backend),
                    offers: Offers::new(offers),
                    origin: format!("component {}", path.display()),
                    at: reference.at.clone(),
                })
            })
            .map_err(BindError::from);
        self.components.insert(path.clone(), loaded.clone());
        loaded
    }

    /// Starts (or reuses) the server of `[ensemble.mcp]` and lists its tools.
    pub(super) async fn server(
        &mut self,
        spec: &McpSpec,
        draft: &McpDraft,
    ) -> Result<Arc<Bound>, Diagnostic> {
        let server = self.servers.import(spec.clone());
        match server.tools().await {
            Ok(offers) => Ok(Arc::new(Bound {
                origin: format!("MCP server `{}`", spec.describe()),
                backend: server,
                offers: Offers::new(offers),
                at: draft.at.clone(),
            })),
            Err(e) => Err(Diagnostic::new(
                draft.at.location(),
                BindError::from(e).to_string(),
            )),
        }
    }
}
