//! Loading a component: from memory when it is already loaded, else from the authenticated
//! disk cache, else compiled (cheap checks first, then in the bounded compile worker, at most
//! `max-parallel-compiles` at once); then linked and described under a short deadline. What
//! was compiled is cached even when the pool's share refuses it, so that raising the share
//! does not compile it again.
//!
//! A component that fails (invalid, over a bound, does not link, `describe()` fails or runs
//! past its deadline) is remembered by its hash and refused at once on every later load, so a
//! reload does not pay for it again; it is tried again when its bytes change. Loads of the
//! same bytes wait for each other instead of compiling twice.

use super::bindings::{since_v0_1_0, since_v0_2_0, since_v0_3_0};
use super::cache::Cached;
use super::compile::{self, CompileError, CompileSettings};
use super::instance::within_deadline;
use super::outcome::not_a_component;
use super::world::{Adapter, Described, typed::Typed, v1::V1, v2::V2, v3::V3};
use super::{
    CallLimits, DESCRIBE_FUEL, LoadError, LoadedComponent, Runtime, RuntimeSettings, SourceHash,
    typed,
};
use crate::sandbox::SandboxSpec;
use crate::tools::{MAX_DESCRIBED_BYTES, MAX_DESCRIBED_TOOLS};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use wasmtime::component::Component;

/// Remembered failures, at most; past it the oldest half is forgotten (they are tried again).
const MAX_REMEMBERED_FAILURES: usize = 1024;
/// Components loaded in the background and not yet bound by a reload, at most.
const MAX_READY: usize = 64;

/// A compile in progress, for `status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompileProgress {
    pub path: PathBuf,
    /// Seconds since it started.
    pub seconds: f64,
}

/// The load side of the runtime: settings, compile slots, failures, compiles in progress.
pub(super) struct Loads {
    /// Told the hash of each component whose load in the background ended.
    finished: tokio::sync::broadcast::Sender<SourceHash>,
    /// Loaded in the background, held until a reload binds them, each with its number in
    /// the order they became ready ([`Runtime::release_ready`]).
    ready: Mutex<Vec<(u64, Arc<LoadedComponent>)>>,
    next_ready: std::sync::atomic::AtomicU64,
    /// The components loading in the background now: a reload while one compiles does not
    /// start another task (and another copy of its bytes) for it.
    background: Mutex<std::collections::HashSet<SourceHash>>,
    compile: CompileSettings,
    describe_timeout: Duration,
    /// One call's share of the pool (to say what a refused component exceeds).
    share: super::engine::PoolShare,
    compile_slots: Semaphore,
    /// Each failure with when it happened, newest last.
    failed: Mutex<Vec<(SourceHash, LoadError, Instant)>>,
    turns: Mutex<HashMap<SourceHash, Weak<tokio::sync::Mutex<()>>>>,
    compiling: Mutex<Vec<(u64, PathBuf, Instant)>>,
    next_compile: std::sync::atomic::AtomicU64,
}

impl Loads {
    pub(super) fn new(settings: &RuntimeSettings) -> Self {
        Loads {
            finished: tokio::sync::broadcast::channel(64).0,
            ready: Mutex::default(),
            next_ready: Default::default(),
            background: Mutex::default(),
            compile: settings.compile.clone(),
            describe_timeout: settings.describe_timeout,
            share: settings.share,
            compile_slots: Semaphore::new(settings.compile.parallel.max(1)),
            failed: Mutex::default(),
            turns: Mutex::default(),
            compiling: Mutex::default(),
            next_compile: Default::default(),
        }
    }

    pub(super) fn max_component_bytes(&self) -> u64 {
        self.compile.max_component_bytes
    }

    /// The lock that one load of `hash` at a time holds.
    fn turn(&self, hash: SourceHash) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(turn) = turns.get(&hash).and_then(Weak::upgrade) {
            return turn;
        }
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        turns.insert(hash, Arc::downgrade(&turn));
        prune_dead(&mut turns);
        turn
    }

    fn failure(&self, hash: &SourceHash) -> Option<LoadError> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed
            .iter()
            .rev()
            .find(|(h, _, _)| h == hash)
            .filter(|(_, error, at)| still_holds(error, at.elapsed()))
            .map(|(_, error, _)| error.clone())
    }

    fn remember(&self, hash: SourceHash, error: LoadError) {
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        // A failure tried again replaces its earlier entry rather than crowd others out.
        failed.retain(|(h, _, _)| *h != hash);
        if failed.len() >= MAX_REMEMBERED_FAILURES {
            failed.drain(..MAX_REMEMBERED_FAILURES / 2);
        }
        failed.push((hash, error, Instant::now()));
    }
}

/// Counts a compile in progress until dropped.
struct Compiling<'a> {
    loads: &'a Loads,
    id: u64,
}

impl Drop for Compiling<'_> {
    fn drop(&mut self) {
        let mut compiling = self
            .loads
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        compiling.retain(|(id, _, _)| *id != self.id);
    }
}

impl Runtime {
    /// Loads the component in `bytes` (the content of `path`): see the module docs.
    pub async fn load(
        &self,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        self.load_hashed(path, SourceHash::of(&bytes), Arc::from(bytes))
            .await
    }

    /// [`Runtime::load`] of bytes whose hash the caller already has (it read and hashed the
    /// file): neither hashed nor copied again, whether or not they must be compiled.
    pub async fn load_hashed(
        &self,
        path: &Path,
        hash: SourceHash,
        bytes: Arc<[u8]>,
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        if let Some(existing) = self.loaded_component(&hash) {
            self.loads
                .ready
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(_, ready)| ready.hash != hash);
            return Ok(existing);
        }
        let turn = self.loads.turn(hash);
        let _turn = turn.lock().await;
        if let Some(existing) = self.loaded_component(&hash) {
            return Ok(existing);
        }
        if let Some(failure) = self.loads.failure(&hash) {
            return Err(failure.at(path));
        }
        let loaded = self.load_new(path, bytes, hash).await;
        if let Err(error) = &loaded {
            self.loads.remember(hash, error.clone());
        }
        loaded
    }

    /// True when loading these bytes means compiling them: they are neither loaded, nor
    /// known to fail, nor in the disk cache.
    pub fn needs_compile(&self, hash: &SourceHash) -> bool {
        self.loaded_component(hash).is_none()
            && self.loads.failure(hash).is_none()
            && !self.cache.as_ref().is_some_and(|cache| cache.has(hash))
    }

    /// Loads the component in the background (a compile, most often); when it is loaded (or
    /// has failed), its hash goes to [`Runtime::loads_finished`]'s subscribers.
    /// A component already loading in the background is not started again.
    /// `hash` is the hash of `bytes`.
    pub fn load_in_background(self: &Arc<Self>, path: &Path, hash: SourceHash, bytes: Arc<[u8]>) {
        let started = self
            .loads
            .background
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(hash);
        if !started {
            return;
        }
        let runtime = Arc::clone(self);
        let path = path.to_path_buf();
        tokio::spawn(async move {
            if let Ok(loaded) = runtime.load_hashed(&path, hash, bytes).await {
                // Kept until the reload this message starts binds it.
                let mut ready = runtime
                    .loads
                    .ready
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let n = runtime.loads.next_ready.fetch_add(1, Ordering::Relaxed);
                if ready.len() >= MAX_READY {
                    ready.remove(0);
                }
                ready.push((n, loaded));
            }
            runtime
                .loads
                .background
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&hash);
            let _ = runtime.loads.finished.send(hash);
        });
    }

    /// The number the next component loaded in the background will have: a resolve that
    /// starts now sees every component numbered below it.
    pub fn ready_mark(&self) -> u64 {
        self.loads.next_ready.load(Ordering::Relaxed)
    }

    /// Lets go of the components loaded in the background before `mark` that no resolve
    /// since has bound: the ensemble that wanted them changed while they compiled.
    pub fn release_ready(&self, mark: u64) {
        self.loads
            .ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(n, _)| *n >= mark);
    }

    /// Receives the hash of every component whose background load ended.
    pub fn loads_finished(&self) -> tokio::sync::broadcast::Receiver<SourceHash> {
        self.loads.finished.subscribe()
    }

    /// The compiles running now.
    pub fn compiles(&self) -> Vec<CompileProgress> {
        let compiling = self
            .loads
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        compiling
            .iter()
            .map(|(_, path, started)| CompileProgress {
                path: path.clone(),
                seconds: started.elapsed().as_secs_f64(),
            })
            .collect()
    }

    async fn load_new(
        &self,
        path: &Path,
        bytes: Arc<[u8]>,
        hash: SourceHash,
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        let component = self.compiled(path, Arc::clone(&bytes), hash).await?;
        let (world, described) = self.linked(path, &component, &bytes).await?;
        let loaded = Arc::new(LoadedComponent {
            hash,
            path: path.to_path_buf(),
            tools: described.tools,
            offers: described.offers,
            world,
        });
        let mut components = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        components.insert(hash, Arc::downgrade(&loaded));
        prune_dead(&mut components);
        drop(components);
        Ok(loaded)
    }

    /// The compiled component of `bytes`: from the authenticated cache, else compiled (cheap
    /// checks first, then in the bounded worker) and put in the cache.
    pub(super) async fn compiled(
        &self,
        path: &Path,
        bytes: Arc<[u8]>,
        hash: SourceHash,
    ) -> Result<Component, LoadError> {
        let refused = |error: CompileError| match error {
            CompileError::Bound(reason) => LoadError::Refused {
                path: path.to_path_buf(),
                reason,
            },
            worker @ CompileError::Worker(_) => LoadError::Refused {
                path: path.to_path_buf(),
                reason: worker.to_string(),
            },
            CompileError::Invalid(reason) => LoadError::Compile {
                path: path.to_path_buf(),
                reason,
            },
            unavailable @ CompileError::Unavailable(_) => LoadError::Unavailable {
                path: path.to_path_buf(),
                reason: unavailable.to_string(),
            },
        };
        if let Some(reason) = not_a_component(&bytes) {
            return Err(LoadError::Compile {
                path: path.to_path_buf(),
                reason: reason.into(),
            });
        }
        // Scanning a large component and reading, authenticating and mapping its artifact
        // take long enough to hold up other tasks: they run on the blocking pool.
        let unavailable = |e: tokio::task::JoinError| LoadError::Unavailable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let (engine, cache, settings) = (
            self.engine.clone(),
            self.cache.clone(),
            self.loads.compile.clone(),
        );
        let scanned = Arc::clone(&bytes);
        let (checked, cached) = tokio::task::spawn_blocking(move || {
            let checked = compile::check_size(&scanned, &settings);
            let cached = match (&checked, &cache) {
                (Ok(()), Some(cache)) => cache.get(&engine, &hash),
                _ => Cached::Missing,
            };
            (checked, cached)
        })
        .await
        .map_err(unavailable)?;
        checked.map_err(refused)?;
        let component = match cached {
            Cached::Found(component) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                component
            }
            Cached::Refused(e) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Err(self.beyond_share(path, &e));
            }
            Cached::Missing => {
                let artifact = self
                    .compile(path, Arc::clone(&bytes))
                    .await
                    .map_err(refused)?;
                let (engine, cache) = (self.engine.clone(), self.cache.clone());
                let component = tokio::task::spawn_blocking(move || {
                    // SAFETY: `deserialize` trusts its bytes to be native code this wasmtime
                    // made for this engine's settings. They are what this host's compiler just
                    // produced (in this process, or in its compile worker: the same binary
                    // with the same code generation settings, fed nothing but the component's
                    // bytes), taken straight from memory or the worker's pipe, never from a
                    // file.
                    let component = unsafe { Component::deserialize(&engine, &artifact) };
                    // Kept even when this engine refuses it (see below): a host started with
                    // a larger share loads it from the cache, not by compiling it again.
                    if let Some(cache) = &cache {
                        cache.put(&hash, &artifact);
                    }
                    component
                })
                .await
                .map_err(unavailable)?;
                // A fresh artifact of our own compiler fails only against the pool's
                // per-component limits, which compiling does not check.
                component.map_err(|e| self.beyond_share(path, &e))?
            }
        };
        Ok(component)
    }

    /// The refusal of a component the engine would not load: it needs more of the instance
    /// pool than one call's share, and the settings that raise the share.
    fn beyond_share(&self, path: &Path, error: &wasmtime::Error) -> LoadError {
        let share = self.loads.share;
        LoadError::Refused {
            path: path.to_path_buf(),
            reason: format!(
                "it needs more of the instance pool than one call gets ({} core instances, {} \
                 memories, {} tables): {error:#}; raise [host] core-instances-per-call, \
                 memories-per-call or tables-per-call in toolhost.toml (read at start) to what \
                 it needs",
                share.core_instances, share.memories, share.tables,
            ),
        }
    }

    /// `component` linked with the host's imports as the world it is built for, and its
    /// tools as it describes them.
    pub(super) async fn linked(
        &self,
        path: &Path,
        component: &Component,
        bytes: &[u8],
    ) -> Result<(Box<dyn Adapter>, Described), LoadError> {
        let link_error = |e: wasmtime::Error| LoadError::Link {
            path: path.to_path_buf(),
            reason: explain_link(&e),
        };
        let kind = typed::kind(component, &self.engine).map_err(|reason| LoadError::Link {
            path: path.to_path_buf(),
            reason,
        })?;
        let instance_pre = self.linker.instantiate_pre(component).map_err(link_error)?;
        let world: Box<dyn Adapter> = match kind {
            typed::Kind::Plugin => Box::new(
                since_v0_1_0::PluginPre::new(instance_pre)
                    .and_then(V1::new)
                    .map_err(link_error)?,
            ),
            typed::Kind::Plugin2 => Box::new(
                since_v0_2_0::PluginPre::new(instance_pre)
                    .and_then(V2::new)
                    .map_err(link_error)?,
            ),
            typed::Kind::Plugin3 => Box::new(
                since_v0_3_0::PluginPre::new(instance_pre)
                    .and_then(V3::new)
                    .map_err(link_error)?,
            ),
            typed::Kind::Typed => {
                let (funcs, tools) =
                    typed::exports(component, &self.engine, bytes).map_err(|reason| {
                        LoadError::Typed {
                            path: path.to_path_buf(),
                            reason,
                        }
                    })?;
                Box::new(Typed::new(instance_pre, funcs, tools))
            }
        };
        let described = self.describe(path, &*world).await?;
        Ok((world, described))
    }

    /// Compiles, waiting for one of the compile slots, and shows the compile in `compiles()`.
    async fn compile(&self, path: &Path, bytes: Arc<[u8]>) -> Result<Vec<u8>, CompileError> {
        // The semaphore is never closed.
        let _slot = self.loads.compile_slots.acquire().await.ok();
        let id = self.loads.next_compile.fetch_add(1, Ordering::Relaxed);
        self.loads
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, path.to_path_buf(), Instant::now()));
        let _compiling = Compiling {
            loads: &self.loads,
            id,
        };
        tracing::info!(
            "compiling {} (once; later starts use the cache)",
            path.display()
        );
        let compiled = compile::compile(&self.engine, bytes, &self.loads.compile).await;
        let counter = match &compiled {
            Ok(_) => &self.counters.compiled,
            Err(_) => &self.counters.compile_failures,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        compiled
    }

    /// Runs `describe()` under the load limits and the describe deadline.
    async fn describe(&self, path: &Path, world: &dyn Adapter) -> Result<Described, LoadError> {
        let limits = CallLimits {
            timeout: self.loads.describe_timeout,
            memory_bytes: 256 << 20,
            max_output_bytes: 4 << 20,
            max_response_bytes: 0,
        };
        let describe_error = |reason: String| LoadError::Describe {
            path: path.to_path_buf(),
            reason,
        };
        self.counters.described.fetch_add(1, Ordering::Relaxed);
        let label = path.display().to_string();
        // A load runs for no session: nobody's log relay sees its lines.
        let nobody: Arc<dyn toolhost_contract::CallerLink> = Arc::new(toolhost_contract::Unlinked);
        let caller = super::Caller {
            invoker: &label,
            session: "",
            link: &nobody,
        };
        let described = async {
            let mut instance = self
                .sandboxed(caller, limits, &SandboxSpec::default())
                .await?;
            // wasmtime counts what it copies out of the guest against this "fuel": the list
            // of tools is refused past it, before its copy could outgrow what the host keeps
            // of a component (strings that all point at one huge string would otherwise be
            // copied once per pointer).
            instance.store.set_hostcall_fuel(DESCRIBE_FUEL);
            let outcome = within_deadline(limits, world.describe(&mut instance.store)).await;
            instance.conclude(caller, limits, outcome, |_| false)
        };
        let described = described.await.map_err(|e| describe_error(e.to_string()))?;
        described.offers.check().map_err(describe_error)?;
        let tools = &described.tools;
        if tools.len() > MAX_DESCRIBED_TOOLS {
            return Err(describe_error(format!(
                "it describes {} tools; a component may describe at most {MAX_DESCRIBED_TOOLS}",
                tools.len()
            )));
        }
        let bytes = tools.iter().fold(0usize, |sum, t| {
            let output = t.output.as_ref().map_or(0, |o| o.schema.len());
            sum.saturating_add(t.name.len() + t.description.len() + t.input_schema.len() + output)
        });
        if bytes > MAX_DESCRIBED_BYTES {
            return Err(describe_error(format!(
                "its names, descriptions and schemas take {bytes} bytes, more than the \
                 {MAX_DESCRIBED_BYTES} bytes ({} MiB) a component may describe",
                MAX_DESCRIBED_BYTES >> 20
            )));
        }
        for tool in tools {
            let Some(output) = &tool.output else { continue };
            match serde_json::from_str::<serde_json::Value>(&output.schema) {
                Ok(schema) if schema.is_object() => {}
                _ => {
                    return Err(describe_error(format!(
                        "the output schema of tool `{}` is not a JSON object",
                        tool.name
                    )));
                }
            }
        }
        Ok(described)
    }

    pub(super) fn loaded_component(&self, hash: &SourceHash) -> Option<Arc<LoadedComponent>> {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.get(hash).and_then(Weak::upgrade)
    }
}

/// A failure that was the host's (its compile worker could not run) is answered from memory
/// this long, then tried again: not at once, or the reload that a failed background load
/// starts would start the load again, and so on without end.
const RETRY_UNAVAILABLE: Duration = Duration::from_secs(30);

/// Whether a failure of this age still answers for the same bytes: one of the component's
/// own always does, one of the host's for [`RETRY_UNAVAILABLE`].
/// What the host links, for messages about what a component imports.
const PROVIDED: &str = "WASI 0.2 (wasi:cli, wasi:clocks, wasi:filesystem, wasi:io, wasi:random, \
     wasi:sockets, wasi:http/outgoing-handler, wasi:config/store @0.2.0-draft and -rc.1; each \
     denied unless granted) and \
     toolhost:plugin/host@0.1.0, @0.2.0 and @0.3.0";

/// A linker failure in plain words: which import the host lacks, and what it provides. The
/// import is the first name wasmtime quotes in its message, which follows.
fn explain_link(error: &wasmtime::Error) -> String {
    let raw = format!("{error:#}");
    let Some(import) = raw.split('`').nth(1) else {
        return raw;
    };
    let (name, version) = import.split_once('@').unwrap_or((import, ""));
    // `instance export `f` has the wrong type`: the interface is there, not that function.
    let member = raw
        .split_once("instance export `")
        .and_then(|(_, rest)| rest.split('`').next());
    let why = if let Some(member) = member.filter(|_| super::inspect::provided(import)) {
        format!(
            "it imports `{member}` from {import}, which this host's {import} does not have \
             (a newer release of the interface, or a function of its own)"
        )
    } else if let Some(rest) = name.strip_prefix("toolhost:plugin/") {
        format!(
            "it imports toolhost:plugin/{rest}@{version}, but this host speaks \
             toolhost:plugin@{}; rebuild it against the WIT in the host's `wit/` folder",
            typed::versions_spoken()
        )
    } else if name.starts_with("wasi:") && !version.is_empty() && !version.starts_with("0.2.") {
        format!(
            "it imports {import}, WASI {version}; this host links WASI 0.2 (0.2.0 and later \
             0.2 releases), so build it for wasm32-wasip2 / WASI 0.2"
        )
    } else {
        format!("it imports {import}, which toolhost does not provide; it provides {PROVIDED}")
    };
    format!("{why} (wasmtime: {raw})")
}

fn still_holds(error: &LoadError, age: Duration) -> bool {
    error.is_lasting() || age < RETRY_UNAVAILABLE
}

/// Drops the entries whose value is gone, when the map has just grown to a power of two:
/// each insert pays a constant share, however many components come and go.
fn prune_dead<T>(map: &mut HashMap<SourceHash, Weak<T>>) {
    if map.len().is_power_of_two() {
        map.retain(|_, weak| weak.strong_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_failures_are_tried_again_after_a_while_the_components_never() {
        let path = PathBuf::from("c.wasm");
        let unavailable = LoadError::Unavailable {
            path: path.clone(),
            reason: "no worker".into(),
        };
        let invalid = LoadError::Compile {
            path,
            reason: "not wasm".into(),
        };
        assert!(still_holds(&unavailable, Duration::from_secs(1)));
        assert!(!still_holds(&unavailable, RETRY_UNAVAILABLE));
        assert!(still_holds(&invalid, Duration::from_secs(1)));
        assert!(still_holds(&invalid, 1000 * RETRY_UNAVAILABLE));
    }
}
