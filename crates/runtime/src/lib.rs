//! runtime: one wasmtime `Engine` per process, components compiled once (and cached on disk by
//! blake3), an `InstancePre` per component, and every call in a fresh `Store` with its memory
//! limit, epoch deadline and captured stdout/stderr. A call returns a [`ToolResult`] of content
//! items ([`content`]) whichever kind of component ran it, and may talk back to its caller
//! through the [`CallerLink`] the caller passed in, within per-call bounds ([`talk`]).
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
mod load;
mod outcome;
pub mod sandbox;
mod state;
mod talk;
mod tools;
mod typed;

pub use cache::CacheError;
pub use compile::{
    CompileError, CompileSettings, DEFAULT_COMPILE_CPU_SECONDS, DEFAULT_COMPILE_MEMORY_MIB,
    DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_MAX_COMPONENT_MIB, worker_main,
};
pub use engine::engine_config;
pub use inspect::{Import, Inspection, World};
pub use load::{CompileProgress, MAX_DESCRIBED_BYTES, MAX_DESCRIBED_TOOLS};
pub use outcome::LoadError;
pub use tools::{OutputSchema, OutputShape, ToolDescription};

use crate::sandbox::{Capture, NetworkGuard, SandboxSpec};
use bindings::since_v0_1_0::{Plugin, PluginPre, ToolError};
use bindings::since_v0_2_0 as v2;
use cache::ComponentCache;
use engine::EpochTicker;
use outcome::classify;
use state::{CallLimiter, CallState, LogBudget};
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use talk::TalkBudget;
use tokio::sync::Semaphore;
use toolhost_contract::{
    CallLimits, CallerLink, Content, PROGRESS_PER_CALL, RunError, SourceHash, ToolFailure,
    ToolResult,
};
use wasmtime::component::{Linker, Val};
use wasmtime::{Engine, Store, UpdateDeadline};

/// Captured stdout and stderr keep this many bytes each.
const STDIO_CAPTURE_BYTES: usize = 64 * 1024;
/// `describe()` may take this long when a component is loaded (`[host] describe-timeout-ms`).
pub const DEFAULT_DESCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Resources (files, streams, HTTP fields and bodies) one call may hold at once in the host.
pub(crate) const MAX_RESOURCES_PER_CALL: usize = 1024;
/// The most `describe()` may have wasmtime copy into the host: twice what the host keeps of a
/// component, and the records of as many tools as it may describe.
const DESCRIBE_FUEL: usize =
    2 * load::MAX_DESCRIBED_BYTES + load::MAX_DESCRIBED_TOOLS * TOOL_SPEC_RECORD_BYTES;
/// The hostcall fuel of a typed call per byte of its `max-output-bytes`.
const TYPED_RESULT_FUEL_PER_BYTE: usize = 16;
/// `tool-spec` in the guest's memory: three strings of a pointer and a length each.
const TOOL_SPEC_RECORD_BYTES: usize = 24;

/// The size limit of one `wasi:http` fields resource (a set of headers) of a call, and of one
/// buffered chunk of an outgoing body: its memory limit spread over every resource it may
/// hold, so that what a guest makes the host keep in header fields and unsent bodies stays
/// within about twice the guest's own `memory-mib` (8 to 128 KiB each).
fn field_size_limit(memory_bytes: usize) -> usize {
    (memory_bytes / MAX_RESOURCES_PER_CALL).clamp(8 << 10, 128 << 10)
}

/// A call stuck in a host function (a long sleep, say) is abandoned this long after its
/// timeout; CPU-bound guests are interrupted at the deadline itself by the epoch.
const WALL_CLOCK_GRACE: Duration = Duration::from_millis(50);

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
    /// Bytes of each linear memory kept resident between calls (0: all given back).
    pub keep_resident: usize,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        RuntimeSettings {
            cache_dir: None,
            max_instances: 128,
            compile: CompileSettings::default(),
            describe_timeout: DEFAULT_DESCRIBE_TIMEOUT,
            keep_resident: 0,
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

/// A compiled component linked with the host's imports, of either world.
enum Instantiable {
    /// The `toolhost:plugin@0.1.0` world: `describe()` and `call()`.
    Plugin(PluginPre<CallState>),
    /// The `toolhost:plugin@0.2.0` world: results of content items, a call that talks back.
    Plugin2(v2::PluginPre<CallState>),
    /// Any other component: each exported function is a tool, by its id.
    Typed {
        pre: wasmtime::component::InstancePre<CallState>,
        funcs: HashMap<String, typed::TypedFunc>,
    },
}

/// A compiled component, ready to instantiate, with what its `describe()` returned.
pub struct LoadedComponent {
    pub hash: SourceHash,
    /// Where these bytes were first loaded from; components are shared by hash, so callers
    /// that need the file a descriptor named keep that path themselves.
    pub path: PathBuf,
    pub tools: Vec<ToolDescription>,
    pre: Instantiable,
}

impl fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("hash", &self.hash)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Which kind of export a result came from, for what its output limit counts.
#[derive(Clone, Copy)]
enum ResultKind {
    /// Our own world: every item and the structured result the tool returned.
    Plugin,
    /// A typed export: its text (the structured result is that text parsed again).
    Typed,
}

/// Counters that tests and `toolhost check` read.
#[derive(Debug, Default)]
struct Counters {
    compiled: AtomicU64,
    cache_hits: AtomicU64,
    compile_failures: AtomicU64,
    described: AtomicU64,
    /// Calls and loads waiting for an instance slot.
    waiting: AtomicU64,
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
    /// `describe()` runs (one per component loaded, or refused when it failed).
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

/// The wasmtime engine, the linker with the host's imports, and the component cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    cache: Option<Arc<ComponentCache>>,
    counters: Counters,
    /// Components by hash, so that one file used by several ensembles, or unchanged across a
    /// reload, is compiled and described once.
    loaded: Mutex<HashMap<SourceHash, Weak<LoadedComponent>>>,
    /// How loading works and is bounded; what failed, what is being compiled.
    loads: load::Loads,
    /// One permit per instance the pool can hold: calls and loads wait here for a slot.
    slots: Semaphore,
    capacity: usize,
    _ticker: EpochTicker,
}

impl Runtime {
    /// Configures the engine (pooling allocator, epoch interruption) and the linker.
    pub fn new(settings: &RuntimeSettings) -> Result<Self, RuntimeError> {
        let engine_error = |e: wasmtime::Error| RuntimeError::Engine(e.to_string());
        let config = engine_config(settings.max_instances, settings.keep_resident);
        let engine = Engine::new(&config).map_err(engine_error)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_error)?;
        Plugin::add_to_linker::<_, wasmtime::component::HasSelf<CallState>>(&mut linker, |state| {
            state
        })
        .map_err(engine_error)?;
        v2::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<CallState>>(
            &mut linker,
            |state| state,
        )
        .map_err(engine_error)?;
        let cache = match &settings.cache_dir {
            Some(dir) => Some(Arc::new(ComponentCache::open(dir, &engine)?)),
            None => None,
        };
        let ticker = EpochTicker::start(engine.clone());
        Ok(Runtime {
            engine,
            linker,
            cache,
            counters: Counters::default(),
            loaded: Mutex::default(),
            loads: load::Loads::new(settings),
            slots: Semaphore::new(settings.max_instances.max(1) as usize),
            capacity: settings.max_instances.max(1) as usize,
            _ticker: ticker,
        })
    }

    /// Removes the compile cache's entries of components not in `in_use`, but the
    /// `keep_unused` most recently used of them (and every entry another wasmtime made).
    /// `None` without a cache. Reads the cache directory: call it off the async runtime.
    pub fn prune_cache(
        &self,
        in_use: &std::collections::HashSet<SourceHash>,
        keep_unused: usize,
    ) -> Option<toolhost_config::Pruned> {
        Some(self.cache.as_ref()?.prune(in_use, keep_unused))
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

    /// How full the instance pool is.
    pub fn pool(&self) -> PoolUsage {
        PoolUsage {
            capacity: self.capacity,
            in_use: self.capacity - self.slots.available_permits(),
            waiting: self.counters.waiting.load(Ordering::Relaxed),
        }
    }

    /// Waits for a slot of the instance pool; the permit frees it when dropped.
    async fn slot(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Some(permit);
        }
        /// Counts a waiter until it has its slot or gives up (its future dropped).
        struct Waiting<'a>(&'a AtomicU64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.counters.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.counters.waiting);
        // The semaphore is never closed, so waiting always ends with a permit.
        self.slots.acquire().await.ok()
    }

    /// Runs tool `tool` of `component` with `arguments` (JSON text) in a fresh instance, for
    /// `caller` (whose session alone sees the plugin's log lines, and whose link alone gets
    /// its progress and questions).
    pub async fn call(
        &self,
        component: &LoadedComponent,
        caller: Caller<'_>,
        tool: &str,
        arguments: &str,
        limits: CallLimits,
        sandbox: &SandboxSpec,
    ) -> Result<ToolResult, RunError> {
        let exported = match &component.pre {
            Instantiable::Plugin(_) | Instantiable::Plugin2(_) => {
                let export = Export::Call { tool, arguments };
                self.execute(&component.pre, caller, limits, sandbox, export)
                    .await?
            }
            Instantiable::Typed { funcs, .. } => {
                let Some(func) = funcs.get(tool) else {
                    return Err(RunError::Tool(ToolFailure::InvalidArguments(format!(
                        "the component has no function `{tool}`"
                    ))));
                };
                let params = serde_json::from_str(arguments)
                    .map_err(|e| e.to_string())
                    .and_then(|value| typed::parameters(func, &value).map_err(|e| e.to_string()))
                    .map_err(|e| RunError::Tool(ToolFailure::InvalidArguments(e)))?;
                let export = Export::Typed { func, params };
                self.execute(&component.pre, caller, limits, sandbox, export)
                    .await?
            }
        };
        let failed = |m| Err(RunError::Tool(ToolFailure::Failed(m)));
        let exported_kind = match exported {
            Exported::Typed(_) => ResultKind::Typed,
            _ => ResultKind::Plugin,
        };
        let result = match exported {
            Exported::Call(Ok(text)) => ToolResult::text_only(text),
            Exported::Call(Err(ToolError::InvalidArguments(m)))
            | Exported::Call2(Err(v2::ToolError::InvalidArguments(m))) => {
                return Err(RunError::Tool(ToolFailure::InvalidArguments(m)));
            }
            Exported::Call(Err(ToolError::Failed(m)))
            | Exported::Call2(Err(v2::ToolError::Failed(m))) => return failed(m),
            Exported::Call2(Ok(result)) => {
                // Before parsing: parsed JSON takes many times its text's memory.
                let structured = result.structured.as_ref().map_or(0, String::len);
                if structured > limits.max_output_bytes {
                    return Err(RunError::OutputLimit {
                        bytes: structured,
                        limit: limits.max_output_bytes,
                    });
                }
                let declared = component
                    .tools
                    .iter()
                    .any(|t| t.name == tool && t.output.is_some());
                match v2::result(result, declared) {
                    Ok(result) => result,
                    Err(message) => return failed(message),
                }
            }
            Exported::Typed(result) => match typed::outcome(result) {
                Ok(Ok(text)) => {
                    let shape = match &component.pre {
                        Instantiable::Typed { funcs, .. } => funcs.get(tool).and_then(|f| f.shape),
                        _ => None,
                    };
                    ToolResult {
                        structured: shape.and_then(|shape| shape.structured(&text)),
                        content: vec![Content::Text(text)],
                    }
                }
                Ok(Err(error)) => return failed(error),
                Err(e) => {
                    return failed(format!("the tool returned a value JSON cannot hold at {e}"));
                }
            },
            Exported::Specs(_) | Exported::Specs2(_) => {
                return Err(RunError::Crashed {
                    message: "unexpected result".into(),
                });
            }
        };
        // A typed tool's structured result is its text parsed again: the text is what counts.
        let bytes = match exported_kind {
            ResultKind::Typed => result.content.iter().map(Content::bytes).sum(),
            ResultKind::Plugin => result.bytes(),
        };
        if bytes > limits.max_output_bytes {
            return Err(RunError::OutputLimit {
                bytes,
                limit: limits.max_output_bytes,
            });
        }
        Ok(result)
    }

    /// Instantiates `pre` in a new store and runs one export under `limits` and `sandbox`.
    async fn execute(
        &self,
        pre: &Instantiable,
        caller: Caller<'_>,
        limits: CallLimits,
        sandbox: &SandboxSpec,
        export: Export<'_>,
    ) -> Result<Exported, RunError> {
        let _slot = self.slot().await;
        let stdout = Capture::new(STDIO_CAPTURE_BYTES);
        let stderr = Capture::new(STDIO_CAPTURE_BYTES);
        let wasi = sandbox::wasi_context(sandbox, stdout.clone(), stderr.clone()).map_err(|e| {
            RunError::SandboxUnavailable {
                message: e.to_string(),
            }
        })?;
        let mut table = wasmtime_wasi::ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES_PER_CALL);
        let per_resource = field_size_limit(limits.memory_bytes);
        let mut http = wasmtime_wasi_http::WasiHttpCtx::new();
        http.set_field_size_limit(per_resource);
        let state = CallState {
            wasi,
            table,
            limiter: CallLimiter::new(limits.memory_bytes),
            log: LogBudget::new(caller, sandbox.talk.log),
            talk: TalkBudget::new(sandbox.talk, Arc::clone(caller.link)),
            http,
            network: NetworkGuard::new(
                Arc::clone(&sandbox.network),
                limits.max_response_bytes,
                limits.timeout,
                caller.session,
                per_resource,
            ),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        let deadline = Instant::now() + limits.timeout;
        store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        store.set_epoch_deadline(1);

        match export {
            // wasmtime counts what it copies out of the guest against this "fuel": the list
            // of tools is refused past it, before its copy could outgrow what the host keeps
            // of a component (strings that all point at one huge string would otherwise be
            // copied once per pointer). Twice the bound leaves the post-check to say which
            // bound was passed, in every case but that one.
            Export::Describe => store.set_hostcall_fuel(DESCRIBE_FUEL),
            // A 0.2.0 result is bounded like a typed one: its items are lists of bytes that
            // wasmtime lifts before the host can count them.
            Export::Call { .. } if matches!(pre, Instantiable::Plugin2(_)) => store
                .set_hostcall_fuel(
                    limits
                        .max_output_bytes
                        .saturating_mul(TYPED_RESULT_FUEL_PER_BYTE)
                        .saturating_add(1 << 20),
                ),
            // A typed result is lifted into values of some 40 bytes each before it becomes
            // JSON: what the guest can make the host hold stays a fixed multiple of what the
            // call may return.
            Export::Typed { .. } => store.set_hostcall_fuel(
                limits
                    .max_output_bytes
                    .saturating_mul(TYPED_RESULT_FUEL_PER_BYTE)
                    .saturating_add(1 << 20),
            ),
            Export::Call { .. } => {}
        }
        let run = async {
            Ok::<_, wasmtime::Error>(match (pre, export) {
                (Instantiable::Plugin(pre), Export::Describe) => {
                    let plugin = pre.instantiate_async(&mut store).await?;
                    let tool = plugin.toolhost_plugin_tool();
                    Exported::Specs(tool.call_describe(&mut store).await?)
                }
                (Instantiable::Plugin(pre), Export::Call { tool, arguments }) => {
                    let plugin = pre.instantiate_async(&mut store).await?;
                    let call = plugin.toolhost_plugin_tool();
                    Exported::Call(call.call_call(&mut store, tool, arguments).await?)
                }
                (Instantiable::Plugin2(pre), Export::Describe) => {
                    let plugin = pre.instantiate_async(&mut store).await?;
                    let tool = plugin.toolhost_plugin_tool();
                    Exported::Specs2(tool.call_describe(&mut store).await?)
                }
                (Instantiable::Plugin2(pre), Export::Call { tool, arguments }) => {
                    let plugin = pre.instantiate_async(&mut store).await?;
                    let call = plugin.toolhost_plugin_tool();
                    Exported::Call2(call.call_call(&mut store, tool, arguments).await?)
                }
                (Instantiable::Typed { pre, .. }, Export::Typed { func, params }) => {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let function = instance
                        .get_func(&mut store, func.index)
                        .ok_or_else(|| wasmtime::Error::msg("the export is not a function"))?;
                    let mut results = vec![Val::Bool(false); usize::from(func.result.is_some())];
                    function
                        .call_async(&mut store, &params, &mut results)
                        .await?;
                    Exported::Typed(results.pop())
                }
                _ => return Err(wasmtime::Error::msg("no such export in this component")),
            })
        };
        let outcome = tokio::time::timeout(limits.timeout + WALL_CLOCK_GRACE, run).await;
        let (out, out_dropped) = stdout.take();
        let (err, err_dropped) = stderr.take();
        report_output(
            caller,
            &out,
            out_dropped,
            &err,
            err_dropped,
            store.data().log.dropped,
            store.data().talk.progress_dropped,
        );
        let refused = store.data().network.refused();
        match outcome {
            // A call that failed after a request was refused failed for want of the grant.
            Ok(Ok(
                Exported::Call(Err(_))
                | Exported::Call2(Err(_))
                | Exported::Typed(Some(Val::Result(Err(_)))),
            ))
            | Ok(Err(_))
                if !refused.is_empty() =>
            {
                Err(RunError::CapabilityDenied {
                    message: refused.join("; "),
                })
            }
            Err(_elapsed) => Err(RunError::Timeout {
                limit: limits.timeout,
            }),
            Ok(Ok(exported)) => Ok(exported),
            Ok(Err(error)) => Err(classify(
                &error,
                store.data().limiter.memory_refused,
                limits,
                &err,
            )),
        }
    }
}

pub(crate) enum Export<'a> {
    Describe,
    Call {
        tool: &'a str,
        arguments: &'a str,
    },
    Typed {
        func: &'a typed::TypedFunc,
        params: Vec<Val>,
    },
}

pub(crate) enum Exported {
    Specs(Vec<bindings::since_v0_1_0::ToolSpec>),
    Specs2(Vec<v2::ToolSpec>),
    Call(Result<String, ToolError>),
    Call2(Result<v2::ToolResult, v2::ToolError>),
    Typed(Option<Val>),
}

fn report_output(
    caller: Caller<'_>,
    out: &str,
    out_dropped: u64,
    err: &str,
    err_dropped: u64,
    logs_dropped: u32,
    progress_dropped: u32,
) {
    if !out.is_empty() {
        tracing::debug!(target: "plugin", invoker = caller.invoker, session = caller.session, stream = "stdout", dropped = out_dropped, "{out}");
    }
    if !err.is_empty() {
        tracing::debug!(target: "plugin", invoker = caller.invoker, session = caller.session, stream = "stderr", dropped = err_dropped, "{err}");
    }
    if logs_dropped > 0 {
        tracing::warn!(target: "plugin", invoker = caller.invoker, session = caller.session, "dropped {logs_dropped} log messages over the per-call limit");
    }
    if progress_dropped > 0 {
        tracing::debug!(target: "plugin", invoker = caller.invoker, session = caller.session, "dropped {progress_dropped} progress reports (not granted, or over the per-call limit of {PROGRESS_PER_CALL})");
    }
}
