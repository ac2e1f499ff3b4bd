//! Loading a component: from memory when it is already loaded, else from the authenticated
//! disk cache, else compiled (cheap checks first, then in the bounded compile worker, at most
//! `max-parallel-compiles` at once); then linked and described under a short deadline.
//!
//! A component that fails (invalid, over a bound, does not link, `describe()` fails or runs
//! past its deadline) is remembered by its hash and refused at once on every later load, so a
//! reload does not pay for it again; it is tried again when its bytes change. Loads of the
//! same bytes wait for each other instead of compiling twice.

use super::bindings::since_v0_1_0::PluginPre;
use super::compile::{self, CompileError, CompileSettings};
use super::outcome::not_a_component;
use super::{
    CallLimits, ComponentHash, Export, Exported, LoadError, LoadedComponent, Runtime,
    RuntimeSettings, ToolDescription,
};
use crate::sandbox::SandboxSpec;
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
    finished: tokio::sync::broadcast::Sender<ComponentHash>,
    /// Loaded in the background, held until a reload binds them.
    ready: Mutex<Vec<Arc<LoadedComponent>>>,
    compile: CompileSettings,
    describe_timeout: Duration,
    compile_slots: Semaphore,
    failed: Mutex<Vec<(ComponentHash, LoadError)>>,
    turns: Mutex<HashMap<ComponentHash, Weak<tokio::sync::Mutex<()>>>>,
    compiling: Mutex<Vec<(u64, PathBuf, Instant)>>,
    next_compile: std::sync::atomic::AtomicU64,
}

impl Loads {
    pub(super) fn new(settings: &RuntimeSettings) -> Self {
        Loads {
            finished: tokio::sync::broadcast::channel(64).0,
            ready: Mutex::default(),
            compile: settings.compile.clone(),
            describe_timeout: settings.describe_timeout,
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
    fn turn(&self, hash: ComponentHash) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(turn) = turns.get(&hash).and_then(Weak::upgrade) {
            return turn;
        }
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        turns.insert(hash, Arc::downgrade(&turn));
        prune_dead(&mut turns);
        turn
    }

    fn failure(&self, hash: &ComponentHash) -> Option<LoadError> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed
            .iter()
            .find(|(h, _)| h == hash)
            .map(|(_, e)| e.clone())
    }

    fn remember(&self, hash: ComponentHash, error: LoadError) {
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        if failed.len() >= MAX_REMEMBERED_FAILURES {
            failed.drain(..MAX_REMEMBERED_FAILURES / 2);
        }
        failed.push((hash, error));
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
        let hash = ComponentHash::of(&bytes);
        if let Some(existing) = self.loaded_component(&hash) {
            self.loads
                .ready
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|ready| ready.hash != hash);
            return Ok(existing);
        }
        let turn = self.loads.turn(hash);
        let _turn = turn.lock().await;
        if let Some(existing) = self.loaded_component(&hash) {
            return Ok(existing);
        }
        if let Some(failure) = self.loads.failure(&hash) {
            return Err(failure);
        }
        let loaded = self.load_new(path, bytes, hash).await;
        if let Err(error) = &loaded {
            self.loads.remember(hash, error.clone());
        }
        loaded
    }

    /// True when loading these bytes means compiling them: they are neither loaded, nor
    /// known to fail, nor in the disk cache.
    pub fn needs_compile(&self, hash: &ComponentHash) -> bool {
        self.loaded_component(hash).is_none()
            && self.loads.failure(hash).is_none()
            && !self.cache.as_ref().is_some_and(|cache| cache.has(hash))
    }

    /// Loads the component in the background (a compile, most often); when it is loaded (or
    /// has failed), its hash goes to [`Runtime::loads_finished`]'s subscribers.
    pub fn load_in_background(self: &Arc<Self>, path: &Path, bytes: Vec<u8>) {
        let runtime = Arc::clone(self);
        let path = path.to_path_buf();
        tokio::spawn(async move {
            let hash = ComponentHash::of(&bytes);
            if let Ok(loaded) = runtime.load(&path, bytes).await {
                // Kept until the reload this message starts binds it.
                let mut ready = runtime
                    .loads
                    .ready
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if ready.len() >= MAX_READY {
                    ready.remove(0);
                }
                ready.push(loaded);
            }
            let _ = runtime.loads.finished.send(hash);
        });
    }

    /// Receives the hash of every component whose background load ended.
    pub fn loads_finished(&self) -> tokio::sync::broadcast::Receiver<ComponentHash> {
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
        bytes: Vec<u8>,
        hash: ComponentHash,
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        let refused = |error: CompileError| match error {
            CompileError::Bound(reason) => LoadError::Refused {
                path: path.to_path_buf(),
                reason,
            },
            other => LoadError::Compile {
                path: path.to_path_buf(),
                reason: other.to_string(),
            },
        };
        if let Some(reason) = not_a_component(&bytes) {
            return Err(LoadError::Compile {
                path: path.to_path_buf(),
                reason: reason.into(),
            });
        }
        compile::check_size(&bytes, &self.loads.compile).map_err(refused)?;
        let component = match self.cache.as_ref().and_then(|c| c.get(&self.engine, &hash)) {
            Some(component) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                component
            }
            None => {
                let artifact = self.compile(path, bytes).await.map_err(refused)?;
                // SAFETY: `deserialize` trusts its bytes to be native code this wasmtime made
                // for this engine's settings. They are what this host's compiler just produced
                // (in this process, or in its compile worker: the same binary with the same
                // code generation settings, fed nothing but the component's bytes), taken
                // straight from memory or the worker's pipe, never from a file.
                let component = unsafe { Component::deserialize(&self.engine, &artifact) }
                    // A fresh artifact of our own compiler fails only against the pool's
                    // per-component limits, which compiling does not check.
                    .map_err(|e| LoadError::Refused {
                        path: path.to_path_buf(),
                        reason: format!(
                            "it needs more of the instance pool than one call gets ({} core \
                             instances, {} memories, {} tables): {e:#}",
                            super::engine::CORE_INSTANCES_PER_COMPONENT,
                            super::engine::MEMORIES_PER_COMPONENT,
                            super::engine::TABLES_PER_COMPONENT,
                        ),
                    })?;
                if let Some(cache) = &self.cache {
                    cache.put(&hash, &artifact);
                }
                component
            }
        };
        let link_error = |e: wasmtime::Error| LoadError::Link {
            path: path.to_path_buf(),
            reason: format!("{e:#}"),
        };
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(link_error)?;
        let pre = PluginPre::new(instance_pre).map_err(link_error)?;
        let tools = self.describe(path, &pre).await?;
        let loaded = Arc::new(LoadedComponent {
            hash,
            path: path.to_path_buf(),
            tools,
            pre,
        });
        let mut components = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        components.insert(hash, Arc::downgrade(&loaded));
        prune_dead(&mut components);
        drop(components);
        Ok(loaded)
    }

    /// Compiles, waiting for one of the compile slots, and shows the compile in `compiles()`.
    async fn compile(&self, path: &Path, bytes: Vec<u8>) -> Result<Vec<u8>, CompileError> {
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
    async fn describe(
        &self,
        path: &Path,
        pre: &PluginPre<super::state::CallState>,
    ) -> Result<Vec<ToolDescription>, LoadError> {
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
        let caller = super::Caller {
            invoker: &label,
            session: "",
        };
        let specs = match self
            .execute(
                pre,
                caller,
                limits,
                &SandboxSpec::default(),
                Export::Describe,
            )
            .await
        {
            Ok(Exported::Specs(specs)) => specs,
            Ok(Exported::Call(_)) => return Err(describe_error("unexpected result".into())),
            Err(e) => return Err(describe_error(e.to_string())),
        };
        Ok(specs
            .into_iter()
            .map(|s| ToolDescription {
                name: s.name,
                description: s.description,
                input_schema: s.input_schema,
            })
            .collect())
    }

    pub(super) fn loaded_component(&self, hash: &ComponentHash) -> Option<Arc<LoadedComponent>> {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.get(hash).and_then(Weak::upgrade)
    }
}

/// Drops the entries whose value is gone, when the map has just grown to a power of two:
/// each insert pays a constant share, however many components come and go.
fn prune_dead<T>(map: &mut HashMap<ComponentHash, Weak<T>>) {
    if map.len().is_power_of_two() {
        map.retain(|_, weak| weak.strong_count() > 0);
    }
}
