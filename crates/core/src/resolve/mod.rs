//! resolve: raw descriptors -> a [`Catalog`], in three steps split along their data.
//!
//! 1. [`draft`] (configuration's, in `toolhost_config`): read an ensemble file and its
//!    invoker files, and check everything that needs no engine: entry shapes, limits and
//!    defaults, names with their prefix, `[grants]` and each invoker's `[capabilities]`,
//!    `[arguments]` schemas, `[ensemble.mcp]` settings. `oci://` references are checked by
//!    the registry's parser, handed to it.
//! 2. [`bind`]: the only step that touches the runtime, MCP servers or registries: resolve
//!    and pull the `oci://` references the drafts name (through [`toolhost_registry`], all at
//!    once, before anything is loaded; a signature required is checked here), load the
//!    components (or start the server and list its tools) and look each invoker's tool up in
//!    what its backend offers; an ensemble without invokers gets one per tool offered.
//! 3. [`CatalogBuilder`]: claim tool names across ensembles and build the catalog.
//!
//! Errors never stop the walk: every file is read and every problem becomes a [`Diagnostic`]
//! (so `toolhost check` reports them all). An ensemble with any error is refused whole; the
//! others load. Keeping an ensemble's last good version in place of a refused one is the
//! reloader's policy, not this module's.

mod bind;
mod names;
mod offers;

pub use bind::Compiles;
pub use names::CatalogBuilder;
pub use toolhost_config::draft::{
    DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MCP_MAX_TOOLS, DEFAULT_MCP_STARTUP_TIMEOUT_MS,
    DEFAULT_MEMORY_MIB, DEFAULT_TIMEOUT_MS,
};
pub use toolhost_config::schema::{
    MAX_PATTERN_CHARS, MAX_PATTERNS, MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_SUBSCHEMAS,
};

use crate::backend::ToolOffer;
use crate::catalog::{Accepts, CallGate, Catalog, Ensemble, Policy, Schema, Tool, VersionHash};
use crate::import::Importer;
use bind::{Binder, Bound, Unbound};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use toolhost_config::Diagnostic;
use toolhost_config::draft::{self, EnsembleDraft, InvokerDraft, ensemble_files};
use toolhost_config::schema::{SchemaCache, SchemaError};
use toolhost_contract::SourceHash;
use toolhost_registry::{Digest, Fetch, Pulled, Reference, Registry, RegistryError};
use toolhost_runtime::Runtime;

/// Resolves ensembles directories for one host: the runtime that loads components, the MCP
/// servers that imported ensembles share across reloads, and the compiled schemas that
/// unchanged invokers reuse.
pub struct Resolver {
    runtime: Arc<Runtime>,
    /// The client of imported MCP servers, if the binary wired one in; without it an
    /// `[ensemble.mcp]` is refused.
    importer: Option<Arc<dyn Importer>>,
    /// What the reloader listens to for imports' changes when there is no importer: it
    /// never says anything.
    quiet: tokio::sync::broadcast::Sender<String>,
    schemas: SchemaCache,
    /// The call gate of each invoker (by ensemble file and name) that a catalog still uses:
    /// a reload keeps an invoker's gate while its bounds stay, so calls running on the old
    /// catalog still count against `max-concurrency` on the new one.
    /// (Each invoker's gates for every set of bounds a live catalog uses: a refused reload
    /// with new bounds must not lose the gate that the kept version still counts on.)
    gates: std::sync::Mutex<HashMap<InvokerKey, Vec<Weak<CallGate>>>>,
    /// The hashes of the component files the last resolve read.
    named_hashes: std::sync::Mutex<std::collections::HashSet<SourceHash>>,
    /// Where `oci://` references are resolved and kept, and how far a resolve may fetch.
    registry: Arc<Registry>,
    fetch: Fetch,
    /// What each reference the last resolve named came to.
    pulls: std::sync::Mutex<Vec<(Reference, Result<PullSummary, RegistryError>)>>,
}

/// What a reference resolved to, for `check`, `pull` and `status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PullSummary {
    /// The reference pinned to the digest it resolved to.
    pub resolved: String,
    /// The component's own digest, and its size.
    pub component: Digest,
    pub bytes: usize,
    /// True when this resolve pulled it.
    pub fetched: bool,
    /// Set when the registry was out of reach and a tag's last digest was used.
    pub warning: Option<String>,
    /// Every digest it keeps in the store.
    #[serde(skip)]
    pub digests: Vec<Digest>,
    /// With trusted keys: the key that signed it, or why none did.
    pub signature: Option<Result<String, String>>,
}

impl From<&Pulled> for PullSummary {
    fn from(pulled: &Pulled) -> Self {
        PullSummary {
            resolved: pulled.reference.at(&pulled.digest).to_string(),
            component: pulled.component.clone(),
            bytes: pulled.bytes.len(),
            fetched: pulled.fetched,
            warning: pulled.warning.clone(),
            digests: pulled.digests.clone(),
            signature: pulled.signature.clone(),
        }
    }
}

/// An invoker across reloads: its ensemble file and its name.
type InvokerKey = (PathBuf, String);

/// The result of resolving an ensembles directory: what loaded, and every error found.
#[derive(Debug, Default)]
pub struct Resolved {
    pub catalog: Catalog,
    /// Ensemble files that were refused, each with its errors (which may point into its
    /// invoker files). The directory itself appears here when it cannot be read.
    pub refused: Vec<Refused>,
}

/// An ensemble file that did not load, and why.
#[derive(Debug, Clone)]
pub struct Refused {
    pub file: PathBuf,
    pub diagnostics: Vec<Diagnostic>,
    /// True when the ensemble's previous version goes on serving in its place.
    pub kept_previous: bool,
}

impl Resolved {
    /// Every error, in file order.
    pub fn diagnostics(&self) -> impl Iterator<Item = &Diagnostic> {
        self.refused.iter().flat_map(|r| r.diagnostics.iter())
    }
}

/// One ensemble file's result: the ensemble with its tools, or every error found in it (none
/// when all it waits for is a compile).
#[derive(Debug)]
pub struct Outcome {
    pub file: PathBuf,
    pub result: Result<Arc<Ensemble>, Vec<Diagnostic>>,
    /// The components it waits for, compiling in the background.
    pub compiling: Vec<PathBuf>,
    /// The MCP server it waits for, starting in the background (its command line or URL).
    pub starting: Vec<String>,
    /// Every component file its invokers name, loaded or not, and an import's sign-in token
    /// file: what a reloader watches, so that a missing or broken component put right, or a
    /// person's new sign-in, is seen.
    pub components: Vec<PathBuf>,
}

impl Resolver {
    /// A resolver with no MCP server started yet.
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Resolver {
            runtime,
            importer: None,
            quiet: tokio::sync::broadcast::channel(1).0,
            schemas: SchemaCache::default(),
            gates: std::sync::Mutex::default(),
            named_hashes: std::sync::Mutex::default(),
            registry: Arc::new(Registry::new(Default::default())),
            fetch: Fetch::Missing,
            pulls: std::sync::Mutex::default(),
        }
    }

    /// The same resolver, resolving `oci://` references through `registry`, fetching as far
    /// as `fetch` allows.
    pub fn with_registry(mut self, registry: Arc<Registry>, fetch: Fetch) -> Self {
        self.registry = registry;
        self.fetch = fetch;
        self
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// What each `oci://` reference the last resolve named came to, in the order named.
    pub fn pulls(&self) -> Vec<(Reference, Result<PullSummary, RegistryError>)> {
        self.pulls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The store's blobs the last resolve's references use (what `cache prune` keeps).
    pub fn digests_in_use(&self) -> std::collections::HashSet<Digest> {
        self.pulls()
            .into_iter()
            .filter_map(|(_, pulled)| pulled.ok())
            .flat_map(|pulled| pulled.digests)
            .collect()
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The same resolver, importing `[ensemble.mcp]` servers through `importer` (set before
    /// the first resolve).
    pub fn with_importer(mut self, importer: Arc<dyn Importer>) -> Self {
        self.importer = Some(importer);
        self
    }

    /// What the reloader listens to, by server: the imported servers whose tools changed,
    /// and those whose start in the background ended (no word without an importer).
    pub fn import_events(&self) -> [tokio::sync::broadcast::Receiver<String>; 2] {
        match &self.importer {
            Some(importer) => [importer.changes(), importer.started()],
            None => [self.quiet.subscribe(), self.quiet.subscribe()],
        }
    }

    /// Resolves every `*.toml` in `dir` and builds the catalog of those that load.
    /// Waits for every compile.
    pub async fn resolve_dir(&self, dir: &Path) -> Resolved {
        let outcomes = match self.ensembles(dir, Compiles::Wait).await {
            Ok(outcomes) => outcomes,
            Err(diagnostic) => return Resolved::unreadable(dir, diagnostic),
        };
        let mut builder = CatalogBuilder::default();
        let mut refused = Vec::new();
        for Outcome { file, result, .. } in outcomes {
            if let Err(diagnostics) = result.and_then(|e| builder.add(e).map_err(|d| vec![d])) {
                refused.push(Refused {
                    file,
                    diagnostics,
                    kept_previous: false,
                });
            }
        }
        Resolved {
            catalog: builder.build(),
            refused,
        }
    }

    /// Resolves every `*.toml` in `dir` (not recursively: invoker files live in
    /// subdirectories and are reached through `source`), in file-name order. Every file is
    /// drafted first, then every component they name is loaded at once, then each ensemble
    /// is bound. With [`Compiles::InBackground`], an ensemble whose component must first be
    /// compiled comes back with its `compiling` set and no tools; the compile goes on. Fails
    /// only when the directory cannot be read.
    pub async fn ensembles(
        &self,
        dir: &Path,
        compiles: Compiles,
    ) -> Result<Vec<Outcome>, Diagnostic> {
        let files = ensemble_files(dir)?;
        self.schemas.prune();
        // Components that finished loading in the background before this resolve are bound
        // by it or not wanted any more.
        let ready_mark = self.runtime.ready_mark();
        let drafts: Vec<(PathBuf, Result<EnsembleDraft, Vec<Diagnostic>>)> = files
            .into_iter()
            .map(|file| {
                let draft = draft::read(&file, &self.schemas, check_reference);
                (file, draft)
            })
            .collect();
        let mut binder = Binder::new(&self.runtime, self.importer.as_deref(), compiles);
        let mut components = Vec::new();
        for draft in drafts.iter().filter_map(|(_, draft)| draft.as_ref().ok()) {
            components.extend(draft.component());
            components.extend(draft.invokers.iter().filter_map(|i| i.component.as_ref()));
        }
        binder.require_signatures(self.registry.settings().require_signatures);
        self.pull(&mut binder, &components).await;
        binder.preload(components.into_iter()).await;
        let mut outcomes = Vec::with_capacity(drafts.len());
        for (file, draft) in drafts {
            let outcome = match draft {
                Ok(draft) => self.ensemble(&mut binder, &file, draft).await,
                Err(diagnostics) => Outcome {
                    file: file.clone(),
                    result: Err(diagnostics),
                    compiling: Vec::new(),
                    starting: Vec::new(),
                    components: Vec::new(),
                },
            };
            outcomes.push(outcome);
        }
        self.runtime.release_ready(ready_mark);
        if let Some(importer) = &self.importer {
            importer.keep_only(binder.imported());
        }
        *self
            .named_hashes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = binder.hashes();
        Ok(outcomes)
    }

    /// Resolves the `oci://` references among `components` (each once, all at once) and
    /// hands the binder what they came to.
    async fn pull(&self, binder: &mut Binder<'_>, components: &[&draft::ComponentRef]) {
        let mut seen = std::collections::HashSet::new();
        let references: Vec<(PathBuf, Reference)> = components
            .iter()
            // A reference that does not parse was refused when drafted.
            .filter_map(|c| Some((c.path.clone(), Reference::parse(c.oci.as_deref()?).ok()?)))
            .filter(|(path, _)| seen.insert(path.clone()))
            .collect();
        let (keys, references): (Vec<PathBuf>, Vec<Reference>) = references.into_iter().unzip();
        let pulled = self.registry.pull_all(references, self.fetch).await;
        let mut pulls = Vec::with_capacity(pulled.len());
        for (key, (reference, result)) in keys.into_iter().zip(pulled) {
            pulls.push((
                reference,
                result.as_ref().map(PullSummary::from).map_err(Clone::clone),
            ));
            binder.pulled(key, result);
        }
        *self
            .pulls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = pulls;
    }

    /// What the compile cache must keep: the component files the last resolve read (what
    /// the ensembles name now), and the components `serving` still runs (a kept previous
    /// version may run a file its ensemble no longer names).
    pub fn components_in_use(&self, serving: &Catalog) -> std::collections::HashSet<SourceHash> {
        let mut in_use = self
            .named_hashes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        in_use.extend(serving.all_tools().map(|t| SourceHash(t.source_hash().0)));
        in_use
    }

    async fn ensemble(
        &self,
        binder: &mut Binder<'_>,
        file: &Path,
        mut draft: EnsembleDraft,
    ) -> Outcome {
        let server = match &draft.mcp {
            Some(mcp) => match &mcp.spec {
                Some(spec) => Some(binder.server(spec, mcp).await),
                None => None,
            },
            None => None,
        };
        if let Some(Ok(server)) = &server
            && draft.imports_every_tool()
        {
            draft.draft_offers(offered_names(&server.offers.list), &self.schemas);
        }
        // A component ensemble without invokers offers every tool of its component.
        let mut waiting = None;
        if draft.mcp.is_none()
            && draft.imports_every_tool()
            && let Some(component) = draft.component().cloned()
        {
            match binder.component(&component).await {
                Ok(bound) => draft.draft_offers(offered_names(&bound.offers.list), &self.schemas),
                Err(Unbound::Error(diagnostic)) => draft.errors.push(diagnostic),
                Err(Unbound::Compiling(path)) => waiting = Some(path),
                Err(Unbound::Starting(_)) => {}
            }
        }
        let mut diagnostics = std::mem::take(&mut draft.errors);
        let mut starting = Vec::new();
        match &server {
            Some(Err(Unbound::Error(diagnostic))) => diagnostics.push(diagnostic.clone()),
            Some(Err(Unbound::Starting(server))) => starting.push(server.clone()),
            Some(Err(Unbound::Compiling(_))) | Some(Ok(_)) | None => {}
        }
        let shared = Shared {
            name: Arc::from(draft.name.as_str()),
            file: Arc::from(file),
        };
        let mut tools = Vec::with_capacity(draft.invokers.len());
        let mut compiling: Vec<PathBuf> = waiting.into_iter().collect();
        let mut components: Vec<PathBuf> = Vec::new();
        let mut named = std::collections::HashSet::new();
        let own = draft.component().into_iter();
        for component in own.chain(draft.invokers.iter().filter_map(|i| i.component.as_ref())) {
            // A registry reference is no file to watch: its tag is resolved at each reload.
            if component.oci.is_none() && named.insert(&component.path) {
                components.push(component.path.clone());
            }
        }
        // An import a person signs in to: its token file, so that a sign-in is taken at once.
        if let Some(spec) = draft.mcp.as_ref().and_then(|mcp| mcp.spec.as_ref()) {
            let importer = self.importer.as_ref();
            components.extend(importer.and_then(|importer| importer.sign_in_file(spec)));
        }
        for invoker in &draft.invokers {
            let bound = match (&server, &invoker.component) {
                (Some(Ok(server)), _) => Ok(Some(Arc::clone(server))),
                (None, Some(component)) => binder.component(component).await.map(Some),
                // A server that did not start is reported once, above; an invoker without a
                // component has that error in its draft.
                _ => Ok(None),
            };
            let mut errors = Vec::new();
            let tool = match bound {
                Ok(Some(bound)) => self
                    .tool(&draft, &shared, invoker, &bound)
                    .map_err(|e| errors = e)
                    .ok(),
                Ok(None) => None,
                Err(Unbound::Error(diagnostic)) => {
                    errors.push(diagnostic);
                    None
                }
                Err(Unbound::Compiling(path)) => {
                    if !compiling.contains(&path) {
                        compiling.push(path);
                    }
                    None
                }
                Err(Unbound::Starting(_)) => None,
            };
            errors.extend(invoker.errors.iter().cloned());
            match tool {
                Some(tool) if errors.is_empty() => tools.push(Arc::new(tool)),
                _ => {
                    // What the tools offered without invokers share (an error in `[defaults]
                    // capabilities`) is said once, not once per tool.
                    errors.retain(|error| !diagnostics.contains(error));
                    diagnostics.append(&mut errors);
                }
            }
        }
        diagnostics.extend(draft.duplicates());
        let result = if diagnostics.is_empty() && compiling.is_empty() && starting.is_empty() {
            // The ensemble's own component, bound above when its invokers run on it (binding
            // again is a lookup), passes on its prompts and resources.
            let own = match (&server, draft.component().cloned()) {
                (None, Some(component)) => binder.component(&component).await.ok(),
                _ => None,
            };
            let passed = match &server {
                Some(Ok(bound)) => bound.passed.as_ref(),
                _ => own.as_ref().and_then(|bound| bound.passed.as_ref()),
            };
            let (prompts, resources, passed) = offers::offers(&mut draft, &shared.name, passed);
            let warnings = draft.warnings();
            Ok(Arc::new(Ensemble {
                warnings,
                name: draft.name,
                file: file.to_path_buf(),
                enabled: draft.enabled,
                description: draft.description,
                tools,
                prompts,
                resources,
                passed,
            }))
        } else {
            // Each file's errors in the order they stand in it (its own file's first).
            Err(toolhost_config::in_file_order(diagnostics, file))
        };
        Outcome {
            file: file.to_path_buf(),
            result,
            compiling,
            starting,
            components,
        }
    }

    /// The tool an invoker draft makes on its backend, or why there is none.
    fn tool(
        &self,
        ensemble: &EnsembleDraft,
        shared: &Shared,
        invoker: &InvokerDraft,
        bound: &Bound,
    ) -> Result<Tool, Vec<Diagnostic>> {
        let (tool_name, tool_span) = invoker.backend_tool();
        let Some((offer, offered_schema)) = bound.offers.get(tool_name, &self.schemas) else {
            let hint = if invoker.section.tool.is_none() {
                " (set `tool` to map this invoker to one of them)"
            } else {
                ""
            };
            return Err(vec![Diagnostic::new(
                invoker.source.at(tool_span),
                format!(
                    "{} has no tool `{tool_name}`; it offers: {}{hint}",
                    bound.origin,
                    bound.offers.names()
                ),
            )]);
        };
        // The descriptor's [arguments] (checked in the draft), else the backend's own.
        let schema = match &invoker.arguments {
            Some(schema) => Arc::clone(schema),
            None => offered_schema.map_err(|e| {
                let message = match e {
                    SchemaError::NotJson(e) => format!(
                        "describe() gives tool `{tool_name}` an input schema that is not JSON: {e}"
                    ),
                    SchemaError::Unusable(reason) => format!(
                        "the component's schema of tool `{tool_name}` is not a usable JSON Schema: {reason}"
                    ),
                };
                vec![Diagnostic::new(bound.at.location(), message)]
            })?,
        };
        let output_check = match &offer.output {
            Some(output) if output.shape == toolhost_runtime::OutputShape::Declared => Some(
                self.schemas
                    .of_value(serde_json::Value::Object((*output.schema).clone()))
                    .map_err(|e| {
                        let reason = match e {
                            SchemaError::NotJson(reason) | SchemaError::Unusable(reason) => reason,
                        };
                        vec![Diagnostic::new(
                            bound.at.location(),
                            format!(
                                "the output schema the component declares for tool `{tool_name}` \
                                 is not a usable JSON Schema: {reason}"
                            ),
                        )]
                    })?,
            ),
            _ => None,
        };
        let sandbox = invoker.sandbox.clone().ok_or_else(Vec::new)?;
        let settings = invoker.settings;
        let description = match &invoker.section.description {
            Some(own) => Arc::from(own.as_str()),
            None => Arc::clone(&offer.description),
        };
        let destructive = invoker.section.destructive || offer.hints.destructive;
        let want = match settings.prepared {
            Some(n) => toolhost_runtime::Preparation::Keep(n),
            None => toolhost_runtime::Preparation::Measured,
        };
        let stock = bound.backend.stock(settings.limits, &sandbox, want);
        let mut tool = Tool {
            name: invoker.name.clone(),
            ensemble: Arc::clone(&shared.name),
            enabled: ensemble.enabled && invoker.section.enabled,
            backend: Arc::clone(&bound.backend),
            backend_tool: offer.name.clone(),
            description,
            accepts: Accepts {
                schema,
                output: offer.output.clone(),
                output_check,
            },
            policy: Policy {
                limits: settings.limits,
                dedup: settings.dedup,
                destructive,
                read_only: offer.hints.read_only && !destructive,
                sandbox,
                gate: self.gate(
                    &shared.file,
                    &invoker.name,
                    settings.max_running,
                    settings.max_waiting,
                ),
                stock,
            },
            version: VersionHash::default(),
            definition: invoker.definition(),
        };
        tool.version = tool.what_runs_version();
        Ok(tool)
    }
}

impl Resolver {
    /// The gate of the invoker `name` of the ensemble in `file`: the one its previous version
    /// used when the bounds are the same, else a new one.
    fn gate(&self, file: &Path, name: &str, running: usize, waiting: usize) -> Arc<CallGate> {
        let mut gates = self
            .gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (file.to_path_buf(), name.to_string());
        let new_key = !gates.contains_key(&key);
        let known = gates.entry(key).or_default();
        known.retain(|gate| gate.strong_count() > 0);
        let same = known
            .iter()
            .filter_map(Weak::upgrade)
            .find(|gate| gate.max_running == running.max(1) && gate.max_waiting == waiting);
        if let Some(gate) = same {
            return gate;
        }
        let gate = Arc::new(CallGate::new(running, waiting));
        known.push(Arc::downgrade(&gate));
        // Invokers no catalog holds are forgotten when the map has doubled: a constant share
        // per insert, however many invokers come and go.
        if new_key && gates.len().is_power_of_two() {
            gates.retain(|_, known| known.iter().any(|gate| gate.strong_count() > 0));
        }
        gate
    }
}

/// Checks and compiles an arguments schema under the host's bounds, as a descriptor's
/// `[arguments]` or a component's schema is (for tools that check arguments the host's way).
pub fn compile_schema(schema: serde_json::Value) -> Result<Arc<Schema>, String> {
    SchemaCache::default()
        .of_value(schema)
        .map_err(|e| match e {
            SchemaError::NotJson(reason) | SchemaError::Unusable(reason) => reason,
        })
}

/// What the tools of one ensemble share.
struct Shared {
    name: Arc<str>,
    file: Arc<Path>,
}

impl Resolved {
    /// Nothing loaded: the directory itself could not be read.
    pub fn unreadable(dir: &Path, diagnostic: Diagnostic) -> Self {
        Resolved {
            catalog: Catalog::default(),
            refused: vec![Refused {
                file: dir.to_path_buf(),
                diagnostics: vec![diagnostic],
                kept_previous: false,
            }],
        }
    }
}

/// The registry's check of an `oci://` reference, for the drafts.
fn check_reference(text: &str) -> Result<(), String> {
    Reference::parse(text).map(drop)
}

/// The names a backend offers its tools under (an alias where it has one).
fn offered_names(offers: &[ToolOffer]) -> impl Iterator<Item = &str> {
    offers
        .iter()
        .map(|offer| offer.alias.as_deref().unwrap_or(&offer.name))
}
