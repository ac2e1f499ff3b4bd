//! catalog: the resolved tools ([`Catalog`]) and the live catalog behind an atomic pointer
//! ([`LiveCatalog`]). A call takes a snapshot when it starts and keeps it to the end, so a
//! swap never changes a call in flight. Every swap is announced to subscribers as a
//! [`CatalogChange`] (the MCP server turns it into `tools/list_changed`).
//!
//! A tool's calls run on its [`Backend`]; the catalog never asks which kind it is. Beside
//! the tools, the catalog holds what the ensembles offer MCP clients besides: their prompts
//! ([`crate::prompts`]) and resource sets ([`crate::resources`]).

use crate::backend::Backend;
pub use crate::backend::VersionHash;
pub use crate::backend::gate::{CallGate, GateFull};
use crate::prompts::Prompt;
use crate::resources::passed::PassedResources;
use crate::resources::{Contents, Reader, ResourceError, ResourceSet};
use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::broadcast;
pub use toolhost_config::schema::Schema;
use toolhost_config::{DedupMode, Span};
use toolhost_contract::CallLimits;
use toolhost_contract::SourceHash;
use toolhost_runtime::sandbox::SandboxSpec;

/// One tool as the model sees it: a resolved invoker. What it is (its name, ensemble,
/// description, version and where it is defined), what it accepts ([`Accepts`]), the policy
/// its calls run under ([`Policy`]) and what runs it (its backend, and the tool's name there).
/// Made by `resolve` alone; read through its methods.
pub struct Tool {
    /// The name the model calls (with the ensemble's prefix, if any).
    pub(crate) name: String,
    pub(crate) ensemble: Arc<str>,
    pub(crate) enabled: bool,
    /// What the tool does, for the model (shared with its backend's when not overridden).
    pub(crate) description: Arc<str>,
    pub(crate) version: VersionHash,
    /// Where the invoker's name is written, for messages that point at it.
    pub(crate) definition: Span,
    pub(crate) accepts: Accepts,
    pub(crate) policy: Policy,
    /// What runs a call (shared by the invokers of one component or server).
    pub(crate) backend: Arc<dyn Backend>,
    /// The tool's name inside the backend.
    pub(crate) backend_tool: String,
}

/// What a tool accepts and promises to return.
#[derive(Debug)]
pub struct Accepts {
    /// The arguments' schema (shared by invokers with the same one).
    pub schema: Arc<Schema>,
    /// The schema of its result, where the backend knows it (a typed component's export).
    pub output: Option<crate::backend::ToolOutput>,
    /// The compiled output schema a `toolhost:plugin@0.2.0` tool declared: every structured
    /// result it returns is checked against it before a caller sees it.
    pub output_check: Option<Arc<Schema>>,
}

/// The policy a tool's calls run under.
#[derive(Debug)]
pub struct Policy {
    pub limits: CallLimits,
    pub dedup: DedupMode,
    /// Needs a yes before it runs (the invoker's `destructive`, or its server's hint).
    pub destructive: bool,
    /// Its backend says it changes nothing (an imported server's `readOnlyHint`).
    pub read_only: bool,
    pub sandbox: SandboxSpec,
    /// Per-invoker admission: `max-concurrency` running, `max-queue` waiting.
    pub gate: Arc<CallGate>,
    /// Instances prepared ahead of its calls (shared by invokers that would make identical
    /// ones); `None` for a backend that makes no instances.
    pub stock: Option<toolhost_runtime::Stock>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("ensemble", &self.ensemble)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// The name the model calls (with the ensemble's prefix, if any).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ensemble it belongs to.
    pub fn ensemble(&self) -> &str {
        &self.ensemble
    }

    /// Whether it may be called (its invoker and its ensemble both enabled).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// What the tool does, for the model.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Its version: changes whenever anything a call depends on does.
    pub fn version(&self) -> VersionHash {
        self.version
    }

    /// Where the invoker's name is written.
    pub fn definition(&self) -> &Span {
        &self.definition
    }

    /// What it accepts and promises to return.
    pub fn accepts(&self) -> &Accepts {
        &self.accepts
    }

    /// The policy its calls run under.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What runs a call.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The tool's name inside its backend.
    pub fn backend_tool(&self) -> &str {
        &self.backend_tool
    }

    /// The arguments' JSON Schema (an object).
    pub fn input_schema(&self) -> &Map<String, Value> {
        &self.accepts.schema.object
    }

    /// What its backend runs: the component's hash, or the MCP server's settings' hash.
    pub fn source_hash(&self) -> SourceHash {
        self.backend.source_hash()
    }

    /// The component file, or the MCP server's command line or URL, for listings.
    pub fn source(&self) -> String {
        self.backend.describe()
    }

    /// blake3 over what runs (the backend's source and tool) and everything the descriptor
    /// decides about it: a change to any of them is a new version (told to MCP clients as a
    /// changed tool list, and never answered from the old version's dedup memory).
    pub(crate) fn what_runs_version(&self) -> VersionHash {
        let tool = self;
        let mut hasher = blake3::Hasher::new();
        hasher.update(&tool.backend.source_hash().0);
        for text in [tool.backend_tool.as_str(), &tool.description] {
            hasher.update(&(text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        }
        hasher.update(tool.accepts.schema.hash());
        let limits = &tool.policy.limits;
        for number in [
            limits.timeout.as_millis() as u64,
            limits.memory_bytes as u64,
            limits.max_output_bytes as u64,
            limits.max_response_bytes,
        ] {
            hasher.update(&number.to_le_bytes());
        }
        // A sandbox is a few paths and patterns; serializing it cannot fail.
        let sandbox = serde_json::to_vec(&tool.policy.sandbox).unwrap_or_default();
        hasher.update(&sandbox);
        hasher.update(&[
            tool.policy.dedup as u8,
            u8::from(tool.policy.destructive),
            u8::from(tool.policy.read_only),
        ]);
        VersionHash(*hasher.finalize().as_bytes())
    }

    /// Whether a call may send its caller a request mid-call: sampling or elicitation
    /// granted, or an imported server's tool (its server may ask, relayed).
    pub fn may_ask_its_caller(&self) -> bool {
        let talk = &self.policy.sandbox.talk;
        talk.sampling || talk.elicitation || self.backend.is_up().is_some()
    }
}

/// An accepted ensemble and its tools, enabled or not.
#[derive(Debug)]
pub struct Ensemble {
    pub name: String,
    pub file: PathBuf,
    pub enabled: bool,
    pub description: Option<String>,
    pub tools: Vec<Arc<Tool>>,
    pub prompts: Vec<Arc<Prompt>>,
    pub resources: Vec<Arc<ResourceSet>>,
    /// The resources of the MCP server it imports, or of its 0.3.0 component, when it
    /// offers any.
    pub passed: Option<Arc<PassedResources>>,
    /// What `check` warns of without refusing it: grants no tool asks for.
    pub warnings: Vec<toolhost_config::Diagnostic>,
}

impl Serialize for Ensemble {
    /// `{name, file, enabled, description, tools: [names], prompts: [names], resources:
    /// [URI prefixes]}`, as `check --json` prints it.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("Ensemble", 7)?;
        s.serialize_field("name", &self.name)?;
        s.serialize_field("file", &self.file)?;
        s.serialize_field("enabled", &self.enabled)?;
        s.serialize_field("description", &self.description)?;
        let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        s.serialize_field("tools", &names)?;
        let prompts: Vec<&str> = self.prompts.iter().map(|p| p.name()).collect();
        s.serialize_field("prompts", &prompts)?;
        let resources: Vec<&str> = self.resources.iter().map(|r| r.uri_prefix()).collect();
        s.serialize_field("resources", &resources)?;
        s.end()
    }
}

/// What answers for one resource URI.
#[derive(Debug, Clone, Copy)]
pub enum ResourceOwner<'c> {
    /// Files under a directory (`[[resources]]`).
    Files(&'c Arc<ResourceSet>),
    /// What an imported server or a component passes on.
    Passed(&'c Arc<PassedResources>),
}

impl ResourceOwner<'_> {
    pub fn ensemble(&self) -> &str {
        match self {
            ResourceOwner::Files(set) => set.ensemble(),
            ResourceOwner::Passed(set) => set.ensemble(),
        }
    }

    /// The name access rules grant it by (a set's name, or its ensemble's).
    pub fn name(&self) -> &str {
        match self {
            ResourceOwner::Files(set) => set.name(),
            ResourceOwner::Passed(set) => set.name(),
        }
    }

    /// Whether it is `set`.
    pub fn is(&self, set: &PassedResources) -> bool {
        matches!(self, ResourceOwner::Passed(owner) if std::ptr::eq(owner.as_ref(), set))
    }
}

/// A consistent set of tools, built by `resolve` and never changed after.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Enabled tools by name.
    active: BTreeMap<String, Arc<Tool>>,
    /// The enabled ensembles' prompts by name, and their resource sets.
    prompts: BTreeMap<String, Arc<Prompt>>,
    resources: Vec<Arc<ResourceSet>>,
    passed: Vec<Arc<PassedResources>>,
    /// The accepted ensembles, in load order, and where each is by file.
    ensembles: Vec<Arc<Ensemble>>,
    by_file: HashMap<PathBuf, usize>,
    /// Ensemble files that do not serve yet, for the message of a call to a tool they will
    /// offer.
    pending: Vec<Pending>,
}

/// An ensemble file that does not serve yet: its components compile, or its MCP server
/// starts, in the background.
#[derive(Debug, Clone)]
pub struct Pending {
    pub file: PathBuf,
    /// The component files it waits for.
    pub compiling: Vec<PathBuf>,
    /// The MCP servers it waits for (their command lines or URLs).
    pub starting: Vec<String>,
    /// Since when it has waited (the first reload that found it waiting).
    pub since: std::time::Instant,
}

impl Catalog {
    /// A catalog of `ensembles`, whose enabled tools' names must not collide (the resolver
    /// checked them).
    pub fn new(ensembles: Vec<Arc<Ensemble>>) -> Self {
        let active = ensembles
            .iter()
            .filter(|e| e.enabled)
            .flat_map(|e| e.tools.iter().filter(|t| t.enabled))
            .map(|t| (t.name.clone(), Arc::clone(t)))
            .collect();
        let enabled = || ensembles.iter().filter(|e| e.enabled);
        let prompts = enabled()
            .flat_map(|e| e.prompts.iter())
            .map(|p| (p.name.clone(), Arc::clone(p)))
            .collect();
        let resources = enabled()
            .flat_map(|e| e.resources.iter().cloned())
            .collect();
        let passed = enabled().filter_map(|e| e.passed.clone()).collect();
        let by_file = ensembles
            .iter()
            .enumerate()
            .map(|(i, e)| (e.file.clone(), i))
            .collect();
        Catalog {
            active,
            prompts,
            resources,
            passed,
            ensembles,
            by_file,
            pending: Vec::new(),
        }
    }

    /// The same catalog, told which ensemble files do not serve yet.
    pub fn with_pending(mut self, pending: Vec<Pending>) -> Self {
        self.pending = pending;
        self
    }

    /// The ensemble files that do not serve yet.
    pub fn pending(&self) -> &[Pending] {
        &self.pending
    }

    /// The enabled tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.active.get(name)
    }

    /// Enabled tools, by name.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &Arc<Tool>> {
        self.active.values()
    }

    /// Has every enabled tool's stock of prepared instances filled, in the background. A
    /// stock that is full already (carried over from the previous catalog) costs nothing.
    pub fn fill_stocks(&self) {
        for stock in self.tools().filter_map(|tool| tool.policy.stock.as_ref()) {
            stock.fill();
        }
    }

    /// Enabled tools whose names come after `name`, by name.
    pub fn tools_after(&self, name: &str) -> impl Iterator<Item = &Arc<Tool>> {
        use std::ops::Bound;
        self.active
            .range::<str, _>((Bound::Excluded(name), Bound::Unbounded))
            .map(|(_, tool)| tool)
    }

    /// All tools of the accepted ensembles, disabled ones included, in load order.
    pub fn all_tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.ensembles.iter().flat_map(|e| e.tools.iter())
    }

    /// The enabled ensembles' prompts, by name.
    pub fn prompts(&self) -> impl ExactSizeIterator<Item = &Arc<Prompt>> {
        self.prompts.values()
    }

    /// The prompt called `name`.
    pub fn prompt(&self, name: &str) -> Option<&Arc<Prompt>> {
        self.prompts.get(name)
    }

    /// The enabled ensembles' resource sets.
    pub fn resource_sets(&self) -> impl ExactSizeIterator<Item = &Arc<ResourceSet>> {
        self.resources.iter()
    }

    /// The resource set that `uri` would be in (URI prefixes never overlap).
    pub fn resource_set_for(&self, uri: &str) -> Option<&Arc<ResourceSet>> {
        self.resources
            .iter()
            .find(|set| uri.starts_with(set.uri_prefix()))
    }

    /// The resources imported servers and 0.3.0 components pass on.
    pub fn passed_resources(&self) -> impl ExactSizeIterator<Item = &Arc<PassedResources>> {
        self.passed.iter()
    }

    /// Who answers for `uri` as far as is known without asking a server: the resource set
    /// under whose prefix it is; else the component that lists it or has a template that
    /// matches it; else the first imported server (in ensemble order) that listed it or has
    /// such a template. A server never answers for a URI a set or a component claims, and
    /// the owner is never chosen by who asks ([`Catalog::read_resource`] checks the caller
    /// on the owner alone).
    pub fn resource_owner_known(&self, uri: &str) -> Option<ResourceOwner<'_>> {
        if let Some(set) = self.resource_set_for(uri) {
            return Some(ResourceOwner::Files(set));
        }
        let fixed = self.passed.iter().filter(|p| p.is_fixed());
        let servers = self.passed.iter().filter(|p| !p.is_fixed());
        (fixed.chain(servers))
            .find(|set| set.claims_listed(uri))
            .map(ResourceOwner::Passed)
    }

    /// [`Catalog::resource_owner_known`], where a server that has not listed its resources
    /// yet lists them first.
    pub async fn resource_owner(&self, uri: &str) -> Option<ResourceOwner<'_>> {
        if let Some(owner) = self.resource_owner_known(uri) {
            return Some(owner);
        }
        for set in self.passed.iter().filter(|p| !p.is_fixed()) {
            if set.claims(uri).await {
                return self.resource_owner_known(uri);
            }
        }
        None
    }

    /// Reads the resource at `uri`, if `reader` may read its owner's resources: one it may
    /// not is not found.
    pub async fn read_resource(
        &self,
        reader: &dyn Reader,
        uri: &str,
    ) -> Result<Vec<Contents>, ResourceError> {
        let not_found = || ResourceError::NotFound {
            uri: toolhost_audit::cut_text(uri),
        };
        if uri.len() > crate::resources::MAX_URI_BYTES {
            return Err(not_found());
        }
        match self.resource_owner(uri).await {
            Some(owner) if !reader.may_see(owner.ensemble(), owner.name()) => Err(not_found()),
            Some(ResourceOwner::Files(set)) => set.read(uri).await.map(|contents| vec![contents]),
            Some(ResourceOwner::Passed(set)) => set.read(reader.id(), uri).await,
            None => Err(not_found()),
        }
    }

    /// The accepted ensembles.
    pub fn ensembles(&self) -> &[Arc<Ensemble>] {
        &self.ensembles
    }

    /// The ensemble loaded from `file`.
    pub fn ensemble_of_file(&self, file: &Path) -> Option<&Arc<Ensemble>> {
        self.by_file.get(file).map(|&i| &self.ensembles[i])
    }
}

/// An ensemble file that failed to load, as reported to subscribers and `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RefusedEnsemble {
    pub file: PathBuf,
    /// True when its previous version goes on serving.
    pub kept_previous: bool,
    /// The errors, rendered (each starts with `error:` and names file:line:col).
    pub errors: Vec<String>,
}

impl RefusedEnsemble {
    /// Whether it is refused for want of a person's sign-in (`toolhost login`).
    pub fn needs_sign_in(&self) -> bool {
        let marker = crate::import::NEEDS_SIGN_IN;
        self.errors.iter().any(|error| error.contains(marker))
    }
}

/// What one swap changed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CatalogChange {
    /// Counts swaps since the live catalog was made; the first catalog is 0.
    pub generation: u64,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Tools whose version (component or descriptor) changed.
    pub changed: Vec<String>,
    /// Whether any prompt came, went or changed.
    pub prompts_changed: bool,
    /// Whether any resource set came, went or changed (not its files: see
    /// [`crate::invoke::watch`]).
    pub resources_changed: bool,
    /// Ensemble files that failed this time, each with its errors.
    pub refused: Vec<RefusedEnsemble>,
}

impl CatalogChange {
    /// A change that says everything may have changed (for a subscriber that fell behind).
    pub fn everything() -> Self {
        CatalogChange {
            changed: vec![String::new()],
            prompts_changed: true,
            resources_changed: true,
            ..CatalogChange::default()
        }
    }

    /// True when the set of tools, or any tool, changed.
    pub fn tools_changed(&self) -> bool {
        !(self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty())
    }

    /// What differs between two catalogs, by enabled tool name and version.
    fn between(old: &Catalog, new: &Catalog) -> Self {
        let mut change = CatalogChange::default();
        for tool in new.tools() {
            match old.get(&tool.name) {
                None => change.added.push(tool.name.clone()),
                Some(before) if before.version != tool.version => {
                    change.changed.push(tool.name.clone())
                }
                Some(_) => {}
            }
        }
        change.removed = old
            .tools()
            .filter(|t| new.get(&t.name).is_none())
            .map(|t| t.name.clone())
            .collect();
        let prompts = |c: &Catalog| {
            c.prompts()
                .map(|p| (p.name.clone(), p.version))
                .collect::<Vec<_>>()
        };
        change.prompts_changed = prompts(old) != prompts(new);
        let sets = |c: &Catalog| {
            let files = c.resource_sets().map(|r| r.version);
            files
                .chain(c.passed_resources().map(|r| r.version()))
                .collect::<Vec<_>>()
        };
        change.resources_changed = sets(old) != sets(new);
        change
    }
}

/// The catalog that calls use now; replaced whole, atomically, and watched by subscribers.
#[derive(Debug)]
pub struct LiveCatalog {
    current: ArcSwap<Catalog>,
    /// Held while a swap is made and announced, so generations go out in order.
    generation: Mutex<u64>,
    changes: broadcast::Sender<Arc<CatalogChange>>,
}

impl Default for LiveCatalog {
    fn default() -> Self {
        LiveCatalog::new(Catalog::default())
    }
}

impl LiveCatalog {
    pub fn new(catalog: Catalog) -> Self {
        LiveCatalog {
            current: ArcSwap::from_pointee(catalog),
            generation: Mutex::new(0),
            changes: broadcast::channel(64).0,
        }
    }

    /// The catalog as it is now; keep it for the whole of a call.
    pub fn snapshot(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Whether the catalog serving now has a tool named `name`: without taking a reference to
    /// the catalog (what [`snapshot`](Self::snapshot) takes is counted on a count every call
    /// shares).
    pub fn has_tool(&self, name: &str) -> bool {
        self.current.load().get(name).is_some()
    }

    /// Receives a [`CatalogChange`] after every swap from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<CatalogChange>> {
        self.changes.subscribe()
    }

    /// Makes `catalog` the one new calls see, and tells subscribers what changed (with the
    /// ensembles that were `refused` while it was built). Calls in flight keep their snapshot.
    pub fn replace(&self, catalog: Catalog, refused: Vec<RefusedEnsemble>) -> Arc<CatalogChange> {
        let mut generation = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *generation += 1;
        let mut change = CatalogChange::between(&self.current.load(), &catalog);
        change.generation = *generation;
        change.refused = refused;
        self.current.store(Arc::new(catalog));
        let change = Arc::new(change);
        // No subscriber is fine.
        let _ = self.changes.send(Arc::clone(&change));
        change
    }
}
