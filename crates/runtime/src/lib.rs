//! runtime: one wasmtime `Engine` per compiler tier, components compiled once per tier (and
//! cached on disk by blake3) in a bounded worker, first by Winch and then by Cranelift in the
//! background ([`tier`]), and every call in a fresh `Store` with its memory limit, epoch
//! deadline, sandbox and captured stdout/stderr. Each kind of component (the 0.1.0, 0.2.0 and
//! 0.3.0 `toolhost:plugin` worlds, typed components) is one adapter in [`world`]: how it
//! describes its tools and answers a call (and, from 0.3.0, its prompts and resources:
//! [`offers`]); the store around it is set up and bounded here ([`Runtime::run`]), and what
//! its end means is classified once ([`instance`]). A call returns a [`ToolResult`] of content items whichever kind ran it, and may talk
//! back to its caller through the [`CallerLink`] the caller passed in, within per-call bounds
//! ([`talk`]).
//!
//! The runtime knows nothing of TOML or tool names as the model sees them: it loads component
//! files and runs an export under a [`SandboxSpec`] and [`CallLimits`]. It also owns admission
//! to the instance pool it sized: every instance (a call, or a load's `describe()`) waits for
//! one of `max_instances` slots, so a full pool delays work instead of failing it.

mod bindings;
mod cache;
mod compile;
mod engine;
mod inspect;
mod instance;
mod load;
mod loads;
mod offers;
mod outcome;
mod prepared;
mod promote;
pub mod sandbox;
mod settings;
mod state;
pub mod talk;
mod tier;
mod tools;
pub mod trace;
mod typed;
mod world;

pub use cache::CacheError;
pub use compile::{
    CompileError, CompileSettings, DEFAULT_COMPILE_CPU_SECONDS, DEFAULT_COMPILE_MEMORY_MIB,
    DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_MAX_COMPONENT_MIB, worker_main,
};
pub use engine::{PoolShare, Tier, engine_config, engine_config_with};
pub use inspect::{Import, Inspection, World};
pub use loads::CompileProgress;
pub use offers::{
    MAX_OFFERED_BYTES, MAX_OFFERED_PROMPTS, MAX_OFFERED_RESOURCES, MAX_OFFERED_TEMPLATES,
    MAX_OFFERED_URI_BYTES, MAX_PROMPT_ARGUMENTS, OfferRequest, Offered, Offers, PromptArgument,
    PromptSpec, ResourceSpec, TemplateSpec,
};
pub use outcome::LoadError;
pub use prepared::{
    DROP_ABOVE, PREPARE_ABOVE, Preparation, PreparedLimits, PreparedUsage, Stock, StockState,
};
pub use tier::{CompileRecord, ComponentState, TierUsage, Tiering};
pub use tools::{MAX_DESCRIBED_BYTES, MAX_DESCRIBED_TOOLS};
pub use tools::{OutputSchema, OutputShape, ToolDescription};
pub use typed::with_package_docs;

use crate::sandbox::{Capture, NetworkGuard, SandboxSpec};
use arc_swap::ArcSwap;
use engine::EpochTicker;
use instance::{Sandboxed, within_deadline};
use state::{CallLimiter, CallState, LogBudget};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use talk::TalkBudget;
use tier::{Code, Compiler, LoadedMap};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolhost_contract::{CallLimits, CallerLink, RunError, SourceHash, ToolResult};
use wasmtime::{Engine, Store};
use world::Answer;

/// Captured stdout and stderr keep this many bytes each.
const STDIO_CAPTURE_BYTES: usize = 64 * 1024;
/// `describe()` may take this long when a component is loaded (`[host] describe-timeout-ms`).
pub const DEFAULT_DESCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Resources (files, streams, HTTP fields and bodies) one call may hold at once in the host.
pub(crate) const MAX_RESOURCES_PER_CALL: usize = 1024;
/// The most `describe()` may have wasmtime copy into the host: twice what the host keeps of a
/// component, and the records of as many tools as it may describe.
pub(crate) const DESCRIBE_FUEL: usize =
    2 * tools::MAX_DESCRIBED_BYTES + tools::MAX_DESCRIBED_TOOLS * TOOL_SPEC_RECORD_BYTES;
/// `tool-spec` in the guest's memory: three strings of a pointer and a length each.
const TOOL_SPEC_RECORD_BYTES: usize = 24;

/// The size limit of one `wasi:http` fields resource (a set of headers) of a call, and of one
/// buffered chunk of an outgoing body: its memory limit spread over every resource it may
/// hold, so that what a guest makes the host keep in header fields and unsent bodies stays
/// within about twice the guest's own `memory-mib` (8 to 128 KiB each).
fn field_size_limit(memory_bytes: usize) -> usize {
    (memory_bytes / MAX_RESOURCES_PER_CALL).clamp(8 << 10, 128 << 10)
}

/// Bytes of each linear memory a pool slot keeps resident between calls by default
/// (`[host] keep-resident-mib`): 1 MiB, with 256 KiB of its tables. Given back instead, every
/// call's pages are unmapped and faulted in again, and each unmapping flushes the other
/// cores' TLBs: under concurrent calls on 2 cores that was a fifth of the server's CPU
/// (BENCHMARKS.md, "Where an HTTP call's time goes"). An idle slot then holds at most what a
/// call touched within the bound, about 160 MiB for 128 slots at the very most.
pub const DEFAULT_KEEP_RESIDENT: usize = 1 << 20;

/// Process-wide runtime settings.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// Where compiled components are cached; `None` compiles on every start.
    pub cache_dir: Option<PathBuf>,
    /// Instances that may exist at once (the pooling allocator's size). Calls beyond it wait.
    pub max_instances: u32,
    /// How components are compiled, and the bounds of a compile.
    pub compile: CompileSettings,
    /// How long a component's `describe()` may take when it is loaded.
    pub describe_timeout: Duration,
    /// Bytes of each linear memory kept resident between calls (0: all given back;
    /// [`DEFAULT_KEEP_RESIDENT`] by default).
    pub keep_resident: usize,
    /// How many instances may be held prepared, in all.
    pub prepared: PreparedLimits,
    /// What one instance may take of the pool.
    pub share: engine::PoolShare,
    /// Whether components are compiled by Winch first (`[host] tiered-compile`).
    pub tiering: Tiering,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        RuntimeSettings {
            cache_dir: None,
            max_instances: 128,
            compile: CompileSettings::default(),
            describe_timeout: DEFAULT_DESCRIBE_TIMEOUT,
            keep_resident: DEFAULT_KEEP_RESIDENT,
            prepared: PreparedLimits::default(),
            share: engine::PoolShare::default(),
            tiering: Tiering::where_available(true),
        }
    }
}

/// Who a call is for: the invoker that tags its log lines, the session (an MCP session, a
/// conversation) that alone may see them, and the way back to whoever made the call (its
/// progress reports and questions). Loads run for nobody: `session` is empty.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    pub invoker: &'a str,
    pub session: &'a str,
    pub link: &'a Arc<dyn CallerLink>,
}

/// A compiled component, ready to instantiate, with what its `describe()` returned.
pub struct LoadedComponent {
    pub hash: SourceHash,
    /// Where these bytes were first loaded from; components are shared by hash, so callers
    /// that need the file a descriptor named keep that path themselves.
    pub path: PathBuf,
    pub tools: Vec<ToolDescription>,
    /// Its prompts and resources (0.3.0), as it listed them at load.
    pub offers: Offers,
    /// How a component of its world is described and called, on the code of the tier it
    /// runs now: swapped when Cranelift's code replaces Winch's.
    code: ArcSwap<Code>,
    /// How it got each tier's code, in order.
    compiles: Mutex<Vec<CompileRecord>>,
    /// Why it does not run the tiers' usual way: Winch could not compile it, or Cranelift
    /// could not replace Winch's code.
    note: Mutex<Option<String>>,
}

impl fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("hash", &self.hash)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Counters that tests, `/metrics` and `toolhost check` read.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    compiled: AtomicU64,
    cache_hits: AtomicU64,
    compile_failures: AtomicU64,
    described: AtomicU64,
    /// Calls and loads waiting for an instance slot.
    waiting: AtomicU64,
    /// Compiles by tier (Winch, Cranelift), and the microseconds they took.
    tier_compiles: [AtomicU64; 2],
    tier_micros: [AtomicU64; 2],
    /// Calls (and offers) run on each tier's code.
    tier_calls: [AtomicU64; 2],
}

impl Counters {
    /// Counts a compile of `tier` that took `took`.
    fn tier_compiled(&self, tier: Tier, took: Duration) {
        let i = tier as usize;
        self.tier_compiles[i].fetch_add(1, Ordering::Relaxed);
        (self.tier_micros[i]).fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }
}

/// The instance pool as it is now: its size, the slots in use, and the work waiting for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolUsage {
    pub capacity: usize,
    pub in_use: usize,
    pub waiting: u64,
}

/// The compilation counters: components compiled, and components read from the disk cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CompileStats {
    pub compiled: u64,
    pub cache_hits: u64,
    /// Compiles that failed (invalid, or over a bound).
    pub failed: u64,
    /// Components described (one per component loaded, or refused when it failed; a typed
    /// component is described by its types, a plugin by running its `describe()`).
    pub described: u64,
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot configure wasmtime: {0}")]
    Engine(String),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// The wasmtime engines (one per tier), the linkers with the host's imports, and the component
/// cache.
pub struct Runtime {
    /// Cranelift's engine, linker and cache entries: the code components end up on.
    optimized: Arc<Compiler>,
    /// Winch's, when components are compiled in tiers.
    baseline: Option<Arc<Compiler>>,
    tiering: Tiering,
    counters: Arc<Counters>,
    /// Components by hash, so that one file used by several ensembles, or unchanged across a
    /// reload, is compiled and described once.
    loaded: LoadedMap,
    /// How loading works and is bounded; what failed, what is being compiled.
    loads: Arc<loads::Loads>,
    /// One permit per instance the pool can hold: calls and loads wait here for a slot.
    slots: Arc<Semaphore>,
    /// Instances made ahead of calls, and their bounds.
    prepared: prepared::Pool,
    capacity: usize,
    ticker: EpochTicker,
}

impl Runtime {
    /// Configures the engines (pooling allocator, epoch interruption) and the linkers: one of
    /// Cranelift, and one of Winch when components are compiled in tiers.
    pub fn new(settings: &RuntimeSettings) -> Result<Self, RuntimeError> {
        let compiler = |tier| {
            Compiler::new(
                tier,
                settings.max_instances,
                settings.keep_resident,
                settings.share,
                settings.cache_dir.as_deref(),
            )
            .map(Arc::new)
        };
        let optimized = compiler(Tier::Cranelift)?;
        let tiering = match settings.tiering {
            Tiering::On | Tiering::FirstOnly if !Tier::winch_available() => Tiering::Off,
            tiering => tiering,
        };
        let baseline = match tiering {
            Tiering::Off => None,
            Tiering::On | Tiering::FirstOnly => Some(compiler(Tier::Winch)?),
        };
        let engines = std::iter::once(&optimized)
            .chain(&baseline)
            .map(|compiler| compiler.engine.clone())
            .collect();
        let ticker = EpochTicker::start(engines);
        Ok(Runtime {
            optimized,
            baseline,
            tiering,
            counters: Arc::default(),
            loaded: Arc::default(),
            loads: Arc::new(loads::Loads::new(settings)),
            slots: Arc::new(Semaphore::new(settings.max_instances.max(1) as usize)),
            prepared: prepared::Pool::new(
                settings.prepared,
                settings.max_instances.max(1) as usize,
            ),
            capacity: settings.max_instances.max(1) as usize,
            ticker,
        })
    }

    /// Removes the compile cache's entries of components not in `in_use`, but the
    /// `keep_unused` most recently used of them and those used within `spare` (another host
    /// sharing the cache may be using them); every entry another wasmtime made goes too.
    /// `None` without a cache. Reads the cache directory: call it off the async runtime.
    pub fn prune_cache(
        &self,
        in_use: &std::collections::HashSet<SourceHash>,
        keep_unused: usize,
        spare: Option<std::time::Duration>,
    ) -> Option<toolhost_config::Pruned> {
        let cache = self.optimized.cache.as_ref()?;
        let others: Vec<&cache::ComponentCache> = (self.baseline.iter())
            .filter_map(|compiler| compiler.cache.as_ref())
            .collect();
        Some(cache.prune(in_use, keep_unused, spare, &others))
    }

    /// Compilations and cache hits since the runtime started.
    pub fn compile_stats(&self) -> CompileStats {
        CompileStats {
            compiled: self.counters.compiled.load(Ordering::Relaxed),
            cache_hits: self.counters.cache_hits.load(Ordering::Relaxed),
            failed: self.counters.compile_failures.load(Ordering::Relaxed),
            described: self.counters.described.load(Ordering::Relaxed),
        }
    }

    /// The largest component file this runtime accepts.
    pub fn max_component_bytes(&self) -> u64 {
        self.loads.max_component_bytes()
    }

    /// How full the instance pool is. Prepared instances hold slots too, but are not in use
    /// (see [`Runtime::prepared`]).
    pub fn pool(&self) -> PoolUsage {
        let taken = self.capacity - self.slots.available_permits();
        PoolUsage {
            capacity: self.capacity,
            in_use: taken.saturating_sub(self.prepared.held()),
            waiting: self.counters.waiting.load(Ordering::Relaxed),
        }
    }

    /// Waits for a slot of the instance pool; the permit frees it when dropped. A prepared
    /// instance gives up its slot rather than make a call (or a load) wait for one.
    async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Some(permit);
        }
        /// Counts a waiter until it has its slot or gives up (its future dropped).
        struct Waiting<'a>(&'a AtomicU64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // Counted before looking for a prepared instance to evict: a preparation that ends
        // after this look sees the count and gives its slot up instead of keeping it.
        self.counters.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.counters.waiting);
        while self.prepared.evict_one() {
            if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
                return Some(permit);
            }
        }
        // The semaphore is never closed, so waiting always ends with a permit.
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }

    /// Runs tool `tool` of `component` with `arguments` in a fresh instance, for `caller`
    /// (whose session alone sees the plugin's log lines, and whose link alone gets its
    /// progress and questions). The instance comes from `stock` when it has one prepared
    /// (and the stock then prepares its replacement), else it is instantiated now.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        component: &LoadedComponent,
        caller: Caller<'_>,
        tool: &str,
        arguments: &serde_json::Value,
        limits: CallLimits,
        sandbox: &SandboxSpec,
        stock: Option<&Stock>,
    ) -> Result<ToolResult, RunError> {
        let code = component.code.load_full();
        let world = &*code.world;
        let call = world::Call {
            tool,
            arguments,
            limits,
            declares_output: component
                .tools
                .iter()
                .any(|t| t.name == tool && t.output.is_some()),
        };
        let work = async |store: &mut Store<CallState>, made| world.call(store, made, call).await;
        let run = Run {
            code: &code,
            caller,
            limits,
            sandbox,
            stock,
        };
        match self.run(run, Answer::is_tool_error, work).await? {
            Answer::Returned { counted, .. } if counted > limits.max_output_bytes => {
                Err(RunError::OutputLimit {
                    bytes: counted,
                    limit: limits.max_output_bytes,
                })
            }
            Answer::Returned { result, .. } => Ok(result),
            Answer::ToolError(failure) => Err(RunError::Tool(failure)),
            Answer::Refused(error) => Err(error),
        }
    }

    /// Renders a prompt or reads a resource of a 0.3.0 `component` in a fresh instance, for
    /// `caller`, bounded as a call is: `limits` (what it returns counts against
    /// `max-output-bytes`) and `sandbox`.
    pub async fn offer(
        &self,
        component: &LoadedComponent,
        caller: Caller<'_>,
        request: OfferRequest<'_>,
        limits: CallLimits,
        sandbox: &SandboxSpec,
    ) -> Result<Offered, RunError> {
        let code = component.code.load_full();
        let world = &*code.world;
        let work =
            async |store: &mut Store<CallState>, made| world.offer(store, made, request).await;
        let run = Run {
            code: &code,
            caller,
            limits,
            sandbox,
            stock: None,
        };
        let offered = self.run(run, Result::is_err, work).await??;
        let bytes = offered.bytes();
        if bytes > limits.max_output_bytes {
            return Err(RunError::OutputLimit {
                bytes,
                limit: limits.max_output_bytes,
            });
        }
        Ok(offered)
    }

    /// Does `work` on a fresh instance of `run.code` (from its stock when it has one prepared
    /// from that code): the store, its limits and deadline, and what its end means, written once
    /// for calls and offers. `failed` says whether what `work` returned is a failure of its
    /// own (for which a refused network request is the better answer).
    async fn run<T>(
        &self,
        run: Run<'_>,
        failed: impl Fn(&T) -> bool,
        work: impl AsyncFnOnce(
            &mut Store<CallState>,
            wasmtime::component::Instance,
        ) -> wasmtime::Result<T>,
    ) -> Result<T, RunError> {
        let Run {
            code,
            caller,
            limits,
            sandbox,
            stock,
        } = run;
        let world = &*code.world;
        self.counters.tier_calls[code.tier as usize].fetch_add(1, Ordering::Relaxed);
        let (mut instance, prepared) = match stock.and_then(|stock| stock.take(code)) {
            Some(prepared) => {
                let (mut sandboxed, made) = prepared.into_parts();
                sandboxed.begin(&self.ticker, caller, limits, sandbox);
                (sandboxed, Some(made))
            }
            None => (
                self.sandboxed(&code.engine, caller, limits, sandbox)
                    .await?,
                None,
            ),
        };
        if let Some(fuel) = world.result_fuel(&limits) {
            instance.store.set_hostcall_fuel(fuel);
        }
        let store = &mut instance.store;
        let work = async {
            let made = match prepared {
                Some(made) => made,
                None => {
                    let started = Instant::now();
                    let made = world.instantiate(&mut *store).await?;
                    if let Some(stock) = stock {
                        stock.measured(started.elapsed());
                    }
                    made
                }
            };
            work(store, made).await
        };
        let outcome = within_deadline(limits, work).await;
        let answer = instance.conclude(caller, limits, outcome, failed);
        match stock {
            Some(stock) => stock.retire(instance),
            None => {
                drop(instance);
                self.prepared.after_call();
            }
        }
        answer
    }

    /// A fresh store of `engine` (the engine of the code it will run) for one instance under
    /// `limits` and `sandbox`, once the pool has a slot for it, begun for `caller`.
    async fn sandboxed(
        &self,
        engine: &Engine,
        caller: Caller<'_>,
        limits: CallLimits,
        sandbox: &SandboxSpec,
    ) -> Result<Sandboxed, RunError> {
        let slot = self.slot().await;
        self.sandboxed_in(engine, slot, caller, limits, sandbox)
    }

    /// A fresh store of `engine` in `slot`: its memory limit, WASI context and captured
    /// stdout/stderr, begun for `caller` (its deadline, log and talk budgets, network guard).
    fn sandboxed_in(
        &self,
        engine: &Engine,
        slot: Option<OwnedSemaphorePermit>,
        caller: Caller<'_>,
        limits: CallLimits,
        sandbox: &SandboxSpec,
    ) -> Result<Sandboxed, RunError> {
        let stdout = Capture::new(STDIO_CAPTURE_BYTES);
        let stderr = Capture::new(STDIO_CAPTURE_BYTES);
        let wasi = sandbox::wasi_context(sandbox, stdout.clone(), stderr.clone()).map_err(|e| {
            RunError::SandboxUnavailable {
                message: e.to_string(),
            }
        })?;
        let mut table = wasmtime_wasi::ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES_PER_CALL);
        let mut http = wasmtime_wasi_http::WasiHttpCtx::new();
        http.set_field_size_limit(field_size_limit(limits.memory_bytes));
        let state = CallState {
            wasi,
            table,
            limiter: CallLimiter::new(limits.memory_bytes),
            log: LogBudget::new(caller, sandbox.talk.log),
            talk: TalkBudget::new(sandbox.talk, Arc::clone(caller.link)),
            http,
            network: network_guard(caller, limits, sandbox),
            config: (sandbox.config.iter())
                .map(|c| (c.key.as_str(), c.value.as_str()))
                .collect(),
            settings: (sandbox.config.iter())
                .map(|c| (c.key.clone(), c.value.clone()))
                .collect(),
        };
        let mut store = Store::new(engine, state);
        store.limiter(|state| &mut state.limiter);
        let mut sandboxed = Sandboxed {
            store,
            stdout,
            stderr,
            _slot: slot,
            ticking: None,
        };
        sandboxed.start_clock(&self.ticker, limits);
        Ok(sandboxed)
    }
}

/// The guard of a call's outgoing HTTP requests for `caller`.
pub(crate) fn network_guard(
    caller: Caller<'_>,
    limits: CallLimits,
    sandbox: &SandboxSpec,
) -> NetworkGuard {
    NetworkGuard::new(
        Arc::clone(&sandbox.network),
        limits.max_response_bytes,
        limits.timeout,
        (caller.invoker, caller.session),
        field_size_limit(limits.memory_bytes),
    )
}

/// One run of [`Runtime::run`]: of what, for whom, and within what.
struct Run<'a> {
    /// The component's code as the call found it (calls that began before a swap keep theirs).
    code: &'a Arc<Code>,
    caller: Caller<'a>,
    limits: CallLimits,
    sandbox: &'a SandboxSpec,
    stock: Option<&'a Stock>,
}
