//! Compiling in tiers, as a JIT tiers its code. A component new to the cache is compiled by
//! Winch, wasmtime's baseline compiler, first (about a third of Cranelift's time; its code is
//! larger and slower) and answers its calls on that code while Cranelift compiles it in the
//! background. When Cranelift's code is ready the component swaps to it (`crate::promote`)
//! the way a reload swaps a component: calls running keep their instance, new calls (and
//! instances prepared from then on) take the new code, nothing fails or waits. Each tier's
//! code is cached under its own engine's hash: a restart before the swap serves Winch's and
//! compiles Cranelift's again; once Cranelift's is written, Winch's entry is removed, and a
//! restart serves Cranelift's code at once.
//!
//! Each tier has an engine of its own (Winch's code uses a calling convention an engine of
//! Cranelift does not load), the linker of the host's imports on it and its own entries in the
//! cache: a [`Compiler`]. What a loaded component runs now is its [`Code`]: one tier's adapter
//! and the engine its stores are made in. docs/decisions.md, "Compiling in tiers", says why
//! and what was measured.

use crate::bindings::since_v0_1_0::Plugin;
use crate::bindings::{since_v0_1_0, since_v0_2_0, since_v0_3_0};
use crate::cache::{Cached, ComponentCache};
use crate::engine::{PoolShare, Tier, tier_config};
use crate::state::CallState;
use crate::world::{Adapter, typed::Typed, v1::V1, v2::V2, v3::V3};
use crate::{LoadError, LoadedComponent, Runtime, RuntimeError, SourceHash, typed};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

/// Whether and how components are compiled in tiers (`[host] tiered-compile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiering {
    /// Cranelift alone, as before tiers.
    Off,
    /// Winch first, then Cranelift in the background, and the component swaps to its code.
    On,
    /// Winch alone where Cranelift's code is not in the cache: for the commands that end once
    /// they answer (`check`, `call`, `describe`...), which only need a component to compile,
    /// link and describe itself.
    FirstOnly,
}

impl Tiering {
    /// `On` where this machine has Winch, else `Off`; `Off` when `enabled` is false.
    pub fn where_available(enabled: bool) -> Self {
        if enabled && Tier::winch_available() {
            Tiering::On
        } else {
            Tiering::Off
        }
    }
}

/// One compiler's engine, the linker of the host's imports on it, and its cache entries.
pub(crate) struct Compiler {
    pub(crate) tier: Tier,
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    pub(crate) cache: Option<ComponentCache>,
}

impl Compiler {
    /// The engine of `tier` with the pooling allocator sized as the settings say, its linker,
    /// and its view of the cache in `cache_dir`.
    pub(crate) fn new(
        tier: Tier,
        max_instances: u32,
        keep_resident: usize,
        share: PoolShare,
        cache_dir: Option<&Path>,
    ) -> Result<Self, RuntimeError> {
        let engine_error = |e: wasmtime::Error| RuntimeError::Engine(format!("{tier}: {e}"));
        let config = tier_config(tier, max_instances, keep_resident, share);
        let engine = Engine::new(&config).map_err(engine_error)?;
        let linker = linker(&engine).map_err(engine_error)?;
        let cache = match cache_dir {
            Some(dir) => Some(ComponentCache::open(dir, &engine)?),
            None => None,
        };
        Ok(Compiler {
            tier,
            engine,
            linker,
            cache,
        })
    }

    /// `artifact`, which this compiler just made of the component `hash` (in this process or
    /// in its worker), put in the cache and loaded into the engine, on the blocking pool. Kept
    /// even when the engine refuses it (only the pool's per-component limits can, which
    /// compiling does not check): a host started with a larger share loads it from the cache
    /// instead of compiling it again.
    pub(crate) async fn fresh(
        self: &Arc<Self>,
        hash: SourceHash,
        artifact: Vec<u8>,
    ) -> Result<wasmtime::Result<Component>, tokio::task::JoinError> {
        let compiler = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            // SAFETY: `deserialize` trusts its bytes to be native code this wasmtime made for
            // this engine's settings. They are what this host's compiler of the engine's tier
            // just produced (in this process, or in its compile worker: the same binary with
            // the same code generation settings, fed nothing but the component's bytes),
            // taken straight from memory or the worker's pipe, never from a file.
            let component = unsafe { Component::deserialize(&compiler.engine, &artifact) };
            if let Some(cache) = &compiler.cache {
                cache.put(&hash, &artifact);
            }
            component
        })
        .await
    }

    /// What the cache holds of `hash` for this compiler (`Missing` without a cache).
    pub(crate) fn cached(&self, hash: &SourceHash) -> Cached {
        match &self.cache {
            Some(cache) => cache.get(&self.engine, hash),
            None => Cached::Missing,
        }
    }
}

/// The code a loaded component runs now: one tier's adapter, and the engine of that tier
/// (its stores are made in it).
pub(crate) struct Code {
    pub(crate) world: Box<dyn Adapter>,
    pub(crate) engine: Engine,
    pub(crate) tier: Tier,
}

/// One compile of a component, or its artifact read from the cache: for `status`, `/metrics`
/// and the log.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompileRecord {
    pub tier: Tier,
    /// How long it took on the clock: the compile, or reading and loading the artifact.
    pub seconds: f64,
    /// Read from the cache, not compiled.
    pub cached: bool,
}

/// A component as `status` shows it: the tier whose code it runs, and how it got each tier's
/// code.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ComponentState {
    pub path: PathBuf,
    pub hash: String,
    pub tier: Tier,
    pub compiles: Vec<CompileRecord>,
    /// Why it does not run the tiers' usual way: Winch could not compile it (Cranelift alone
    /// did), or Cranelift could not replace Winch's code (it goes on running Winch's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Components loaded now, by hash (each held by the catalogs that bind it).
pub(crate) type LoadedMap = Arc<Mutex<HashMap<SourceHash, Weak<LoadedComponent>>>>;

impl LoadedComponent {
    /// The tier whose code new calls of this component run.
    pub fn tier(&self) -> Tier {
        self.code.load().tier
    }

    /// How it got each tier's code, in order.
    pub fn compile_records(&self) -> Vec<CompileRecord> {
        (self.compiles.lock().unwrap_or_else(PoisonError::into_inner)).clone()
    }

    /// The component as `status` shows it.
    pub fn state(&self) -> ComponentState {
        ComponentState {
            path: self.path.clone(),
            hash: self.hash.to_string(),
            tier: self.tier(),
            compiles: self.compile_records(),
            note: (self.note.lock().unwrap_or_else(PoisonError::into_inner)).clone(),
        }
    }
}

/// `component`, compiled by `compiler`, linked with the host's imports as the world it is
/// built for (nothing of it runs).
pub(crate) fn adapter(
    compiler: &Compiler,
    path: &Path,
    component: &Component,
    bytes: &[u8],
) -> Result<Box<dyn Adapter>, LoadError> {
    let link_error = |e: wasmtime::Error| LoadError::Link {
        path: path.to_path_buf(),
        reason: explain_link(&e),
    };
    let engine = &compiler.engine;
    let kind = typed::kind(component, engine).map_err(|reason| LoadError::Link {
        path: path.to_path_buf(),
        reason,
    })?;
    let instance_pre = compiler
        .linker
        .instantiate_pre(component)
        .map_err(link_error)?;
    Ok(match kind {
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
                typed::exports(component, engine, bytes).map_err(|reason| LoadError::Typed {
                    path: path.to_path_buf(),
                    reason,
                })?;
            Box::new(Typed::new(instance_pre, funcs, tools))
        }
    })
}

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
    let why = if let Some(member) = member.filter(|_| crate::inspect::provided(import)) {
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

/// The linker of the host's imports on `engine`: WASI 0.2, `wasi:http`, `wasi:config` and the
/// three `toolhost:plugin` worlds' host interfaces.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    wasmtime_wasi_config::add_to_linker(&mut linker, |state: &mut CallState| {
        wasmtime_wasi_config::WasiConfig::from(&state.config)
    })?;
    crate::settings::link(&mut linker)?;
    type Own = wasmtime::component::HasSelf<CallState>;
    Plugin::add_to_linker::<_, Own>(&mut linker, |state| state)?;
    since_v0_2_0::Plugin::add_to_linker::<_, Own>(&mut linker, |state| state)?;
    since_v0_3_0::Plugin::add_to_linker::<_, Own>(&mut linker, |state| state)?;
    Ok(linker)
}

/// Each tier's components and compiles, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TierUsage {
    pub tier: Tier,
    /// Components loaded now whose new calls run this tier's code.
    pub components: usize,
    /// Compiles of this tier since start (from the cache not counted), and their time.
    pub compiles: u64,
    pub compile_seconds: f64,
    /// Calls run on this tier's code since start.
    pub calls: u64,
}

impl Runtime {
    /// Whether components are compiled in tiers (off where this machine has no Winch).
    pub fn tiering(&self) -> Tiering {
        self.tiering
    }

    /// The components loaded now, each with the tier it runs and its compiles, by path.
    pub fn components(&self) -> Vec<ComponentState> {
        let mut components: Vec<ComponentState> =
            self.live_components().map(|c| c.state()).collect();
        components.sort_by(|a, b| a.path.cmp(&b.path));
        components
    }

    /// Each tier's components and compiles.
    pub fn tiers(&self) -> Vec<TierUsage> {
        let live: Vec<Tier> = self.live_components().map(|c| c.tier()).collect();
        [Tier::Winch, Tier::Cranelift]
            .into_iter()
            .map(|tier| TierUsage {
                tier,
                components: live.iter().filter(|t| **t == tier).count(),
                compiles: self.counters.tier_compiles[tier as usize].load(Ordering::Relaxed),
                compile_seconds: self.counters.tier_micros[tier as usize].load(Ordering::Relaxed)
                    as f64
                    / 1e6,
                calls: self.counters.tier_calls[tier as usize].load(Ordering::Relaxed),
            })
            .collect()
    }

    fn live_components(&self) -> impl Iterator<Item = Arc<LoadedComponent>> {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let live: Vec<_> = loaded
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        live.into_iter()
    }
}
