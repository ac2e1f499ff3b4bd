//! catalog: the resolved tools ([`Catalog`]) and the live catalog behind an atomic pointer
//! ([`LiveCatalog`]). A call takes a snapshot when it starts and keeps it to the end, so a
//! swap never changes a call in flight.

use crate::config::{Access, DedupMode, Location};
use crate::mcp::client::McpImport;
use crate::runtime::{CallLimits, ComponentHash, LoadedComponent};
use crate::sandbox::SandboxSpec;
use arc_swap::ArcSwap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Identifies one version of one invoker: blake3 over the component's hash and everything
/// the descriptor decides (tool, schema, limits, capabilities). Dedup keys include it, so a
/// reloaded tool never answers from its old version's results.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct VersionHash(pub [u8; 32]);

impl fmt::Display for VersionHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().take(8).try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for VersionHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VersionHash({self})")
    }
}

/// How many calls of one invoker may run at once, and how many may wait for a turn; a call
/// past both is refused as `busy` at once rather than queued without bound.
#[derive(Debug)]
pub struct CallGate {
    running: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
    pub max_running: usize,
    pub max_waiting: usize,
}

/// The gate refused a call: every slot is running and the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateFull;

impl CallGate {
    pub fn new(max_running: usize, max_waiting: usize) -> Self {
        CallGate {
            running: tokio::sync::Semaphore::new(max_running.max(1)),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            max_running: max_running.max(1),
            max_waiting,
        }
    }

    /// Waits for a turn, or refuses at once when the queue is full.
    pub(crate) async fn enter(&self) -> Result<tokio::sync::SemaphorePermit<'_>, GateFull> {
        use std::sync::atomic::Ordering;
        if let Ok(permit) = self.running.try_acquire() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(GateFull);
        }
        let permit = self.running.acquire().await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        // The semaphore is never closed.
        permit.map_err(|_| GateFull)
    }
}

/// One tool as the model sees it: a resolved invoker.
pub struct Tool {
    /// The name the model calls (with the ensemble's prefix, if any).
    pub name: String,
    pub ensemble: String,
    /// The ensemble file, and the file that describes this invoker (the same file when inline).
    pub ensemble_file: PathBuf,
    pub invoker_file: PathBuf,
    pub enabled: bool,
    /// What runs a call: a sandboxed component, or an imported MCP server.
    pub backend: Backend,
    /// The tool's name inside the component (or on the MCP server).
    pub component_tool: String,
    pub description: String,
    pub input_schema: Value,
    pub(crate) validator: Arc<jsonschema::Validator>,
    pub limits: CallLimits,
    pub dedup: DedupMode,
    pub destructive: bool,
    pub sandbox: SandboxSpec,
    /// Per-invoker admission: `max-concurrency` running, `max-queue` waiting.
    pub gate: Arc<CallGate>,
    pub version: VersionHash,
    /// Where the invoker's name is written, for messages that point at it.
    pub definition: Location,
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

/// Where a tool's calls run.
#[derive(Clone)]
pub enum Backend {
    /// A WebAssembly component, in a fresh sandboxed instance per call.
    Component {
        component: Arc<LoadedComponent>,
        /// The component file this invoker's descriptor names. (`component.path` is where
        /// those bytes were first loaded, which may be another ensemble's file.)
        path: PathBuf,
    },
    /// A tool of an MCP server imported as an ensemble.
    Mcp(Arc<McpImport>),
}

impl Tool {
    /// The component's hash, or for an imported MCP tool the hash of its server's settings.
    pub fn component_hash(&self) -> ComponentHash {
        match &self.backend {
            Backend::Component { component, .. } => component.hash,
            Backend::Mcp(server) => server.hash(),
        }
    }

    /// The component file, or the MCP server's command line or URL, for listings.
    pub fn source(&self) -> String {
        match &self.backend {
            Backend::Component { path, .. } => path.display().to_string(),
            Backend::Mcp(server) => format!("mcp: {}", server.spec().describe()),
        }
    }

    /// The component file to watch for changes (none for an MCP server).
    pub fn component_file(&self) -> Option<&std::path::Path> {
        match &self.backend {
            Backend::Component { path, .. } => Some(path),
            Backend::Mcp(_) => None,
        }
    }

    /// A one-line description of the granted directories, for listings.
    pub fn grants_summary(&self) -> String {
        let mut parts: Vec<String> = self
            .sandbox
            .preopens
            .iter()
            .map(|p| {
                format!(
                    "{}:{}",
                    p.guest,
                    if p.writable {
                        Access::ReadWrite
                    } else {
                        Access::Read
                    }
                )
            })
            .collect();
        parts.extend(self.sandbox.env.iter().map(|(k, _)| format!("env:{k}")));
        parts.extend(self.sandbox.network.iter().map(|p| format!("net:{p}")));
        parts.join(",")
    }
}

/// An ensemble as it was loaded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EnsembleInfo {
    pub name: String,
    pub file: PathBuf,
    pub enabled: bool,
    pub description: Option<String>,
    /// Names of its tools (enabled or not).
    pub tools: Vec<String>,
}

/// A consistent set of tools, built by `resolve` and never changed after.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Enabled tools by name.
    active: BTreeMap<String, Arc<Tool>>,
    /// Every tool of every accepted ensemble, enabled or not, in load order.
    all: Vec<Arc<Tool>>,
    ensembles: Vec<EnsembleInfo>,
}

impl Catalog {
    pub(crate) fn new(all: Vec<Arc<Tool>>, ensembles: Vec<EnsembleInfo>) -> Self {
        let active = all
            .iter()
            .filter(|t| t.enabled)
            .map(|t| (t.name.clone(), t.clone()))
            .collect();
        Catalog {
            active,
            all,
            ensembles,
        }
    }

    /// The enabled tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.active.get(name)
    }

    /// Enabled tools, by name.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.active.values()
    }

    /// All tools of the accepted ensembles, disabled ones included.
    pub fn all_tools(&self) -> &[Arc<Tool>] {
        &self.all
    }

    /// The accepted ensembles.
    pub fn ensembles(&self) -> &[EnsembleInfo] {
        &self.ensembles
    }

    /// The ensemble loaded from `file`, with all its tools.
    pub fn ensemble_of_file(
        &self,
        file: &std::path::Path,
    ) -> Option<(EnsembleInfo, Vec<Arc<Tool>>)> {
        let info = self.ensembles.iter().find(|e| e.file == file)?;
        let tools = self
            .all
            .iter()
            .filter(|t| t.ensemble_file == file)
            .cloned()
            .collect();
        Some((info.clone(), tools))
    }
}

/// The catalog that calls use now; replaced whole, atomically.
#[derive(Debug, Default)]
pub struct LiveCatalog {
    current: ArcSwap<Catalog>,
}

impl LiveCatalog {
    pub fn new(catalog: Catalog) -> Self {
        LiveCatalog {
            current: ArcSwap::from_pointee(catalog),
        }
    }

    /// The catalog as it is now; keep it for the whole of a call.
    pub fn snapshot(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Makes `catalog` the one new calls see. Calls in flight keep their snapshot.
    pub fn replace(&self, catalog: Catalog) {
        self.current.store(Arc::new(catalog));
    }
}
