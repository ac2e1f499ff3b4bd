//! Binding: a draft meets its backend. The only step of resolving that touches the runtime
//! (reading, pinning and loading components) or MCP servers (starting one and listing its
//! tools). Each component file is read and loaded once per resolve, whatever number of
//! invokers name it, and failures are typed ([`BindError`]) up to the diagnostic.

use crate::backend::component::ComponentBackend;
use crate::backend::{Backend, ToolOffer};
use crate::catalog::Schema;
use crate::import::{Background, Importer, McpError, McpSpec};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use toolhost_config::draft::{ComponentRef, McpDraft};
use toolhost_config::schema::{SchemaCache, SchemaError};
use toolhost_config::{Diagnostic, Span};
use toolhost_contract::SourceHash;
use toolhost_registry::{Pulled, RegistryError};
use toolhost_runtime::{LoadError, Runtime};

/// A backend and the tools it offers.
pub(super) struct Bound {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) offers: Offers,
    /// `component <path>` or ``MCP server `<command>` ``, for messages.
    pub(super) origin: String,
    /// Where the component or server is named, for messages about its schemas.
    pub(super) at: Span,
    /// An imported server's or a component's prompts and resources, passed on.
    pub(super) passed: Option<Passed>,
}

/// What a backend offers besides tools, passed on by its ensemble.
pub(super) enum Passed {
    /// An imported server's prompts (listed when it was bound), and whether it offers
    /// resources, with the URIs and templates it listed then (`None` when it could not
    /// list them: they are asked for on first use).
    Server {
        server: Arc<dyn crate::import::ImportedServer>,
        prompts: Vec<rmcp::model::Prompt>,
        resources: Option<Option<crate::resources::passed::Known>>,
    },
    /// A `toolhost:plugin@0.3.0` component that lists prompts or resources, and the runtime
    /// that runs them.
    Component {
        runtime: Arc<Runtime>,
        component: Arc<toolhost_runtime::LoadedComponent>,
    },
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
        let mut by_name: HashMap<String, usize> = list
            .iter()
            .enumerate()
            .map(|(i, offer)| (offer.name.clone(), i))
            .collect();
        // An alias never hides a name.
        for (i, offer) in list.iter().enumerate() {
            if let Some(alias) = &offer.alias {
                by_name.entry(alias.clone()).or_insert(i);
            }
        }
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
        actual: SourceHash,
        pinned: String,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("refusing {reference}: it must be signed by a trusted key, and {reason}")]
    Unsigned { reference: String, reason: String },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Server(#[from] McpError),
}

/// Whether binding waits for components that must be compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiles {
    /// Wait for them (`check`, `list`, `call`, tests).
    Wait,
    /// Start them in the background and leave their ensembles out until they are ready
    /// (`serve`: nothing already loaded waits for a compile).
    InBackground,
}

/// An invoker that could not be bound (yet).
pub(super) enum Unbound {
    Error(Diagnostic),
    /// Its component is compiling in the background.
    Compiling(PathBuf),
    /// Its MCP server is starting in the background (named by its command line or URL).
    Starting(String),
}

/// A component file's hash and bytes, as read once per resolve.
type ComponentFile = (SourceHash, Arc<[u8]>);

/// What became of a component file in this resolve.
#[derive(Clone)]
enum Loaded {
    Ready(Arc<Bound>),
    Failed(BindError),
    Compiling,
}

/// Binds the drafts of one resolve.
pub(super) struct Binder<'r> {
    runtime: &'r Arc<Runtime>,
    importer: Option<&'r dyn Importer>,
    compiles: Compiles,
    files: HashMap<PathBuf, Result<ComponentFile, BindError>>,
    components: HashMap<PathBuf, Loaded>,
    /// For a registry reference (by the key its `ComponentRef` has as path): how it is
    /// shown, `oci://...@sha256:...` with the digest it resolved to.
    shown: HashMap<PathBuf, PathBuf>,
    /// For a registry reference: the key that signed it or why none did (`None` without
    /// trusted keys).
    signatures: HashMap<PathBuf, Option<Result<String, String>>>,
    /// `[trust] require-signatures`: every registry component must be signed.
    require_signatures: bool,
    /// The imported servers this resolve named (by [`McpSpec::key`]).
    imported: std::collections::HashSet<[u8; 32]>,
}

impl<'r> Binder<'r> {
    pub(super) fn new(
        runtime: &'r Arc<Runtime>,
        importer: Option<&'r dyn Importer>,
        compiles: Compiles,
    ) -> Self {
        Binder {
            runtime,
            importer,
            compiles,
            files: HashMap::new(),
            components: HashMap::new(),
            shown: HashMap::new(),
            signatures: HashMap::new(),
            require_signatures: false,
            imported: std::collections::HashSet::new(),
        }
    }

    /// The imported servers this resolve named.
    pub(super) fn imported(&self) -> &std::collections::HashSet<[u8; 32]> {
        &self.imported
    }

    /// Requires every registry component to be signed by a trusted key.
    pub(super) fn require_signatures(&mut self, required: bool) {
        self.require_signatures = required;
    }

    /// What the registry reference `key` came to: its component's bytes (checked against
    /// their digest by the store), read as a file would be.
    pub(super) fn pulled(&mut self, key: PathBuf, pulled: Result<Pulled, RegistryError>) {
        let file = pulled.map_err(BindError::from).and_then(|pulled| {
            let limit = self.runtime.max_component_bytes();
            if pulled.bytes.len() as u64 > limit {
                return Err(BindError::Read {
                    path: key.clone(),
                    reason: format!(
                        "{} bytes, more than the {limit} allowed",
                        pulled.bytes.len()
                    ),
                });
            }
            let shown = pulled.reference.at(&pulled.digest).to_string();
            self.shown.insert(key.clone(), PathBuf::from(shown));
            self.signatures
                .insert(key.clone(), pulled.signature.clone());
            Ok((SourceHash::of(&pulled.bytes), pulled.bytes))
        });
        self.files.insert(key, file);
    }

    /// Reads every component file `references` name and loads them all at once (each
    /// compile in its own task, bounded by the runtime's compile slots), so that one slow
    /// component does not make the others wait their turn.
    pub(super) async fn preload<'a>(&mut self, references: impl Iterator<Item = &'a ComponentRef>) {
        let mut loading = tokio::task::JoinSet::new();
        for reference in references {
            let path = &reference.path;
            if self.components.contains_key(path) {
                continue;
            }
            let Ok((hash, bytes)) = self.read(path) else {
                continue;
            };
            if self.compiles == Compiles::InBackground && self.runtime.needs_compile(&hash) {
                self.runtime.load_in_background(path, hash, bytes);
                self.components.insert(path.clone(), Loaded::Compiling);
                continue;
            }
            let runtime = Arc::clone(self.runtime);
            let path = path.clone();
            let at = reference.at.clone();
            // A placeholder, so a second reference to the same file starts nothing.
            self.components.insert(path.clone(), Loaded::Compiling);
            loading.spawn(async move {
                let loaded = runtime.load_hashed(&path, hash, bytes).await;
                (path, at, loaded)
            });
        }
        while let Some(done) = loading.join_next().await {
            let Ok((path, at, loaded)) = done else {
                continue;
            };
            let loaded = self.bound(path.clone(), at, loaded);
            self.components.insert(path, loaded);
        }
    }

    fn bound(
        &self,
        path: PathBuf,
        at: Span,
        loaded: Result<Arc<toolhost_runtime::LoadedComponent>, LoadError>,
    ) -> Loaded {
        match loaded {
            Ok(component) => {
                let shown = self.shown.get(&path).unwrap_or(&path);
                let passed = (!component.offers.is_empty()).then(|| Passed::Component {
                    runtime: Arc::clone(self.runtime),
                    component: Arc::clone(&component),
                });
                let (backend, offers) = ComponentBackend::new(self.runtime, component, shown);
                Loaded::Ready(Arc::new(Bound {
                    passed,
                    backend: Arc::new(backend),
                    offers: Offers::new(offers),
                    origin: format!("component {}", shown.display()),
                    at,
                }))
            }
            Err(error) => Loaded::Failed(error.into()),
        }
    }

    /// Reads a component file once per resolve: a regular file (following links, as
    /// Kubernetes volumes need) no larger than the runtime accepts, read no further than that.
    /// The hashes of every component file read so far.
    pub(super) fn hashes(&self) -> std::collections::HashSet<SourceHash> {
        self.files
            .values()
            .filter_map(|file| file.as_ref().ok().map(|(hash, _)| *hash))
            .collect()
    }

    fn read(&mut self, path: &Path) -> Result<ComponentFile, BindError> {
        let limit = self.runtime.max_component_bytes();
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                // The path it was looked for at: a relative one is the ensemble file's folder
                // joined with what is written, which is what a newcomer gets wrong.
                let error = |reason: String| BindError::Read {
                    path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
                    reason: if path.exists() {
                        reason
                    } else {
                        format!(
                            "{reason}; a component's path is relative to the folder of the file \
                             that names it"
                        )
                    },
                };
                let bytes = toolhost_config::read_limited(path, limit).map_err(error)?;
                Ok((SourceHash::of(&bytes), Arc::from(bytes)))
            })
            .clone()
    }

    /// The component `reference` names, pinned and loaded.
    pub(super) async fn component(
        &mut self,
        reference: &ComponentRef,
    ) -> Result<Arc<Bound>, Unbound> {
        let error = |error: BindError| {
            let diagnostic = Diagnostic::new(reference.at.location(), error.to_string());
            Unbound::Error(match (&error, &reference.pin) {
                (BindError::PinMismatch { .. }, Some((_, pin))) => {
                    diagnostic.with_note(Some(pin.location()), "pinned here")
                }
                _ => diagnostic,
            })
        };
        let path = &reference.path;
        let (hash, bytes) = self.read(path).map_err(error)?;
        if let Some((pin, _)) = &reference.pin
            && hash.to_string() != pin.as_str()
        {
            return Err(error(BindError::PinMismatch {
                path: path.clone(),
                actual: hash,
                pinned: pin.to_string(),
            }));
        }
        self.signed(reference).map_err(error)?;
        if !self.components.contains_key(path) {
            self.preload(std::iter::once(reference)).await;
        }
        match self.components.get(path) {
            Some(Loaded::Ready(bound)) => Ok(Arc::clone(bound)),
            Some(Loaded::Failed(e)) => Err(error(e.clone())),
            Some(Loaded::Compiling) => Err(Unbound::Compiling(path.clone())),
            // preload() records every file it can read, and this one was read.
            None => Err(error(BindError::Read {
                path: path.clone(),
                reason: format!("{} bytes, not loaded", bytes.len()),
            })),
        }
    }

    /// Whether `reference` may be used as far as signatures go: signed by a trusted key when
    /// its ensemble or the host requires it.
    fn signed(&self, reference: &ComponentRef) -> Result<(), BindError> {
        let shown = reference.path.display().to_string();
        if reference.oci.is_none() {
            return match reference.require_signature {
                true => Err(BindError::Unsigned {
                    reference: shown,
                    reason: "a file has no signature: name it by an oci:// reference, or drop \
                             `require-signature`"
                        .to_string(),
                }),
                false => Ok(()),
            };
        }
        if !(reference.require_signature || self.require_signatures) {
            return Ok(());
        }
        match self.signatures.get(&reference.path) {
            Some(Some(Ok(_))) => Ok(()),
            Some(Some(Err(reason))) => Err(BindError::Unsigned {
                reference: shown,
                reason: reason.clone(),
            }),
            _ => Err(BindError::Unsigned {
                reference: shown,
                reason: "no key is trusted: name cosign public keys in `[trust] keys` of \
                         toolhost.toml"
                    .to_string(),
            }),
        }
    }

    /// Starts (or reuses) the server of `[ensemble.mcp]` and lists its tools; when binding
    /// in the background (`serve`), a server that is not running yet is started in a task of
    /// its own and the ensemble waits for it, as it would for a compile.
    pub(super) async fn server(
        &mut self,
        spec: &McpSpec,
        draft: &McpDraft,
    ) -> Result<Arc<Bound>, Unbound> {
        let Some(importer) = self.importer else {
            return Err(Unbound::Error(Diagnostic::new(
                draft.at.location(),
                "this host imports no MCP servers (the client of imported servers was not \
                 wired in)"
                    .to_string(),
            )));
        };
        let server = importer.import(spec.clone());
        self.imported.insert(spec.key());
        if self.compiles == Compiles::InBackground {
            match importer.background(spec) {
                Background::Running => {}
                Background::Starting => return Err(Unbound::Starting(spec.describe())),
                Background::Failed(e) => {
                    return Err(Unbound::Error(Diagnostic::new(
                        draft.at.location(),
                        BindError::from(e).to_string(),
                    )));
                }
            }
        }
        match server.tools().await {
            Ok(offers) => {
                // Its prompts and resources are extras: a server that fails to list them
                // still serves its tools.
                let prompts = server.prompts().await.unwrap_or_else(|e| {
                    tracing::warn!("{e}; its prompts are not offered");
                    Vec::new()
                });
                let resources = match server.has_resources().await {
                    true => Some(listed_resources(server.as_ref()).await),
                    false => None,
                };
                let passed = Passed::Server {
                    server: Arc::clone(&server),
                    prompts,
                    resources,
                };
                Ok(Arc::new(Bound {
                    origin: format!("MCP server `{}`", spec.describe()),
                    backend: server,
                    offers: Offers::new(offers),
                    at: draft.at.clone(),
                    passed: Some(passed),
                }))
            }
            Err(e) => Err(Unbound::Error(Diagnostic::new(
                draft.at.location(),
                BindError::from(e).to_string(),
            ))),
        }
    }
}

/// The URIs and templates an imported server lists now, or `None` (and a warning) when it
/// cannot list them.
async fn listed_resources(
    server: &dyn crate::import::ImportedServer,
) -> Option<crate::resources::passed::Known> {
    let listed = async {
        let (resources, _) = server.resources().await?;
        let templates = server.resource_templates().await?;
        Ok::<_, McpError>(crate::resources::passed::Known::listed(
            resources.into_iter().map(|r| r.uri.clone()).collect(),
            templates
                .into_iter()
                .map(|t| t.uri_template.clone())
                .collect(),
        ))
    };
    listed
        .await
        .inspect_err(|e| tracing::warn!("{e}; its resources are listed when first asked for"))
        .ok()
}
