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
//!
//! In tiers ([`crate::tier`]), the disk cache is asked for Cranelift's code first, then for
//! Winch's; a component in neither is compiled by Winch, loaded on that code, and promoted to
//! Cranelift's in the background ([`crate::promote`]). A component Winch cannot compile (a
//! feature it lacks: tail calls, exceptions, GC) is compiled by Cranelift alone, with a line
//! that says so; a bound Winch's compile hits refuses the component as it would without tiers.

use super::cache::Cached;
use super::compile::{self, CompileError};
use super::instance::within_deadline;
use super::outcome::not_a_component;
use super::world::{Adapter, Described};
use super::{CallLimits, DESCRIBE_FUEL, LoadError, LoadedComponent, Runtime, SourceHash};
use crate::loads::{MAX_READY, prune_dead};
use crate::promote::Promotion;
use crate::sandbox::SandboxSpec;
use crate::tier::{Code, CompileRecord, Compiler, Tiering, adapter};
use crate::tools::{MAX_DESCRIBED_BYTES, MAX_DESCRIBED_TOOLS};
use crate::{CompileProgress, Tier};
use arc_swap::ArcSwap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use wasmtime::component::Component;

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
    /// known to fail, nor in the disk cache (of either tier, when in tiers).
    pub fn needs_compile(&self, hash: &SourceHash) -> bool {
        let cached = |compiler: &Compiler| compiler.cache.as_ref().is_some_and(|c| c.has(hash));
        self.loaded_component(hash).is_none()
            && self.loads.failure(hash).is_none()
            && !cached(&self.optimized)
            && !self.baseline.as_deref().is_some_and(cached)
    }

    /// Receives the hash of every component whose promotion to Cranelift's code ended
    /// (swapped, or left on Winch's with the reason in its state).
    pub fn promotions(&self) -> tokio::sync::broadcast::Receiver<SourceHash> {
        self.loads.promoted.subscribe()
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
            .map(|(_, path, tier, started)| CompileProgress {
                path: path.clone(),
                tier: *tier,
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
        let (component, compiler, record, note) =
            self.compiled(path, Arc::clone(&bytes), hash).await?;
        let (world, described) = self.linked(&compiler, path, &component, &bytes).await?;
        let tier = compiler.tier;
        let loaded = Arc::new(LoadedComponent {
            hash,
            path: path.to_path_buf(),
            tools: described.tools,
            offers: described.offers,
            code: ArcSwap::from_pointee(Code {
                world,
                engine: compiler.engine.clone(),
                tier,
            }),
            compiles: Mutex::new(vec![record]),
            note: Mutex::new(note),
        });
        let mut components = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        components.insert(hash, Arc::downgrade(&loaded));
        prune_dead(&mut components);
        drop(components);
        if let (Tier::Winch, Tiering::On, Some(baseline)) = (tier, self.tiering, &self.baseline) {
            let promotion = Promotion {
                loads: Arc::clone(&self.loads),
                counters: Arc::clone(&self.counters),
                optimized: Arc::clone(&self.optimized),
                baseline: Arc::clone(baseline),
                loaded: Arc::clone(&self.loaded),
            };
            promotion.start(&loaded, bytes);
        }
        Ok(loaded)
    }

    /// The compiled component of `bytes`, the compiler whose code it is, and how it was had:
    /// Cranelift's from the authenticated cache; in tiers, else Winch's from the cache, else
    /// compiled by Winch; else compiled by Cranelift (cheap checks first, then in the bounded
    /// worker). What is compiled is put in the cache. With why Winch could not compile it,
    /// when Cranelift then did.
    pub(super) async fn compiled(
        &self,
        path: &Path,
        bytes: Arc<[u8]>,
        hash: SourceHash,
    ) -> Result<(Component, Arc<Compiler>, CompileRecord, Option<String>), LoadError> {
        if let Some(reason) = not_a_component(&bytes) {
            return Err(LoadError::Compile {
                path: path.to_path_buf(),
                reason: reason.into(),
            });
        }
        let started = Instant::now();
        // Scanning a large component and reading, authenticating and mapping its artifact
        // take long enough to hold up other tasks: they run on the blocking pool.
        let (optimized, baseline, settings) = (
            Arc::clone(&self.optimized),
            self.baseline.clone(),
            self.loads.compile.clone(),
        );
        let scanned = Arc::clone(&bytes);
        let (checked, cached) = tokio::task::spawn_blocking(move || {
            let checked = compile::check_size(&scanned, &settings);
            let mut cached = (Cached::Missing, optimized);
            if checked.is_ok() {
                cached.0 = cached.1.cached(&hash);
                if let (Cached::Missing, Some(baseline)) = (&cached.0, baseline) {
                    cached = (baseline.cached(&hash), baseline);
                }
            }
            (checked, cached)
        })
        .await
        .map_err(|e| unavailable(path, e))?;
        checked.map_err(|e| refused(path, e))?;
        let from_cache = |compiler: Arc<Compiler>| {
            let record = CompileRecord {
                tier: compiler.tier,
                seconds: started.elapsed().as_secs_f64(),
                cached: true,
            };
            (compiler, record)
        };
        match cached {
            (Cached::Found(component), compiler) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                let (compiler, record) = from_cache(compiler);
                return Ok((component, compiler, record, None));
            }
            (Cached::Refused(e), _) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Err(self.beyond_share(path, &e));
            }
            (Cached::Missing, _) => {}
        }
        let mut compiled = None;
        let mut winch_refused = None;
        if let Some(baseline) = &self.baseline {
            let started = Instant::now();
            match (self.loads)
                .compile(baseline, &self.counters, path, Arc::clone(&bytes))
                .await
            {
                Ok(artifact) => compiled = Some((baseline, artifact, started.elapsed())),
                // A feature Winch lacks, or an invalid component: Cranelift says which.
                Err(CompileError::Invalid(reason)) => winch_refused = Some(reason),
                Err(bound) => return Err(refused(path, bound)),
            }
        }
        let (compiler, artifact, took) = match compiled {
            Some(compiled) => compiled,
            None => {
                let started = Instant::now();
                let artifact = (self.loads)
                    .compile(&self.optimized, &self.counters, path, Arc::clone(&bytes))
                    .await
                    .map_err(|e| refused(path, e))?;
                (&self.optimized, artifact, started.elapsed())
            }
        };
        let component = (compiler.fresh(hash, artifact).await).map_err(|e| unavailable(path, e))?;
        // A fresh artifact of our own compiler fails only against the pool's per-component
        // limits, which compiling does not check.
        let component = component.map_err(|e| self.beyond_share(path, &e))?;
        let record = CompileRecord {
            tier: compiler.tier,
            seconds: took.as_secs_f64(),
            cached: false,
        };
        let note = winch_refused.map(|reason| {
            tracing::info!(
                component = %path.display(),
                tier = "cranelift",
                "Winch cannot compile {} ({reason}); Cranelift compiled it alone, as without \
                 tiers",
                path.display()
            );
            format!("Winch cannot compile it ({reason}): Cranelift alone")
        });
        Ok((component, Arc::clone(compiler), record, note))
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

    /// `component`, compiled by `compiler`, linked with the host's imports as the world it is
    /// built for, and its tools as it describes them (run on that compiler's code).
    pub(super) async fn linked(
        &self,
        compiler: &Compiler,
        path: &Path,
        component: &Component,
        bytes: &[u8],
    ) -> Result<(Box<dyn Adapter>, Described), LoadError> {
        let world = adapter(compiler, path, component, bytes)?;
        let described = self.describe(&compiler.engine, path, &*world).await?;
        Ok((world, described))
    }

    /// Runs `describe()` under the load limits and the describe deadline, in a store of
    /// `engine` (the engine of `world`'s code).
    async fn describe(
        &self,
        engine: &wasmtime::Engine,
        path: &Path,
        world: &dyn Adapter,
    ) -> Result<Described, LoadError> {
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
                .sandboxed(engine, caller, limits, &SandboxSpec::default())
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
        loaded.get(hash).and_then(std::sync::Weak::upgrade)
    }
}

/// A compile that produced no artifact, as a load error of `path`.
fn refused(path: &Path, error: CompileError) -> LoadError {
    let path = path.to_path_buf();
    match error {
        CompileError::Bound(reason) => LoadError::Refused { path, reason },
        worker @ CompileError::Worker(_) => LoadError::Refused {
            path,
            reason: worker.to_string(),
        },
        CompileError::Invalid(reason) => LoadError::Compile { path, reason },
        unavailable @ CompileError::Unavailable(_) => LoadError::Unavailable {
            path,
            reason: unavailable.to_string(),
        },
    }
}

/// A blocking task of a load that did not end (the runtime shutting down), as a load error.
fn unavailable(path: &Path, error: tokio::task::JoinError) -> LoadError {
    LoadError::Unavailable {
        path: path.to_path_buf(),
        reason: error.to_string(),
    }
}
