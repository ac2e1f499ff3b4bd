//! The load side of the runtime, shared with the tasks that load in the background and
//! promote components to Cranelift's code: its settings, the compile slots and the compile
//! itself ([`Loads::compile`]), what failed, what is being compiled, what is being promoted.

use crate::compile::{self, CompileError, CompileSettings};
use crate::tier::Compiler;
use crate::{Counters, LoadError, LoadedComponent, RuntimeSettings, SourceHash};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Remembered failures, at most; past it the oldest half is forgotten (they are tried again).
const MAX_REMEMBERED_FAILURES: usize = 1024;
/// Components loaded in the background and not yet bound by a reload, at most.
pub(crate) const MAX_READY: usize = 64;

/// A compile in progress, for `status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompileProgress {
    pub path: PathBuf,
    /// The compiler (absent from a status file an older host wrote: Cranelift).
    #[serde(default = "cranelift")]
    pub tier: crate::Tier,
    /// Seconds since it started.
    pub seconds: f64,
}

fn cranelift() -> crate::Tier {
    crate::Tier::Cranelift
}

/// The load side of the runtime: settings, compile slots, failures, compiles in progress.
pub(crate) struct Loads {
    /// Told the hash of each component whose load in the background ended.
    pub(crate) finished: tokio::sync::broadcast::Sender<SourceHash>,
    /// Loaded in the background, held until a reload binds them, each with its number in
    /// the order they became ready ([`Runtime::release_ready`]).
    pub(crate) ready: Mutex<Vec<(u64, Arc<LoadedComponent>)>>,
    pub(crate) next_ready: std::sync::atomic::AtomicU64,
    /// The components loading in the background now: a reload while one compiles does not
    /// start another task (and another copy of its bytes) for it.
    pub(crate) background: Mutex<std::collections::HashSet<SourceHash>>,
    pub(crate) compile: CompileSettings,
    pub(crate) describe_timeout: Duration,
    /// One call's share of the pool (to say what a refused component exceeds).
    pub(crate) share: super::engine::PoolShare,
    pub(crate) compile_slots: Semaphore,
    /// Each failure with when it happened, newest last.
    pub(crate) failed: Mutex<Vec<(SourceHash, LoadError, Instant)>>,
    pub(crate) turns: Mutex<HashMap<SourceHash, Weak<tokio::sync::Mutex<()>>>>,
    /// Each compile running now: its number, the component, the compiler, when it began.
    pub(crate) compiling: Mutex<Vec<(u64, PathBuf, crate::Tier, Instant)>>,
    /// Components Cranelift compiles in the background now, to replace Winch's code.
    pub(crate) promoting: Mutex<HashSet<SourceHash>>,
    /// Told the hash of each component whose promotion ended (swapped, or not).
    pub(crate) promoted: tokio::sync::broadcast::Sender<SourceHash>,
    pub(crate) next_compile: std::sync::atomic::AtomicU64,
}

impl Loads {
    pub(crate) fn new(settings: &RuntimeSettings) -> Self {
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
            promoting: Mutex::default(),
            promoted: tokio::sync::broadcast::channel(64).0,
            next_compile: Default::default(),
        }
    }

    pub(crate) fn max_component_bytes(&self) -> u64 {
        self.compile.max_component_bytes
    }

    /// The lock that one load of `hash` at a time holds.
    pub(crate) fn turn(&self, hash: SourceHash) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(turn) = turns.get(&hash).and_then(Weak::upgrade) {
            return turn;
        }
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        turns.insert(hash, Arc::downgrade(&turn));
        prune_dead(&mut turns);
        turn
    }

    pub(crate) fn failure(&self, hash: &SourceHash) -> Option<LoadError> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed
            .iter()
            .rev()
            .find(|(h, _, _)| h == hash)
            .filter(|(_, error, at)| still_holds(error, at.elapsed()))
            .map(|(_, error, _)| error.clone())
    }

    pub(crate) fn remember(&self, hash: SourceHash, error: LoadError) {
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
pub(crate) struct Compiling<'a> {
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
        compiling.retain(|(id, _, _, _)| *id != self.id);
    }
}

impl Loads {
    /// The hashes of the components Cranelift compiles in the background now.
    pub(crate) fn promoting(&self) -> MutexGuard<'_, HashSet<SourceHash>> {
        self.promoting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells `promoted`'s subscribers that the promotion of `hash` ended.
    pub(crate) fn tell_promoted(&self, hash: SourceHash) {
        let _ = self.promoted.send(hash);
    }

    /// Compiles `bytes` with `compiler`, waiting for one of the compile slots, and shows the
    /// compile in `compiles()`; counts it in `counters`.
    pub(crate) async fn compile(
        &self,
        compiler: &Compiler,
        counters: &Counters,
        path: &Path,
        bytes: Arc<[u8]>,
    ) -> Result<Vec<u8>, CompileError> {
        let slot = self.compile_slot().await;
        self.compile_in(slot, compiler, counters, path, bytes, true)
            .await
    }

    /// One of the compile slots, once one is free (`None` never happens: the semaphore is
    /// never closed).
    pub(crate) async fn compile_slot(&self) -> Option<SemaphorePermit<'_>> {
        self.compile_slots.acquire().await.ok()
    }

    /// [`Loads::compile`] in `slot`, a compile slot already taken. A compile something waits
    /// for (`waited`: a load) is said in the log at info; one in the background (Cranelift's,
    /// in tiers) at debug.
    pub(crate) async fn compile_in(
        &self,
        slot: Option<SemaphorePermit<'_>>,
        compiler: &Compiler,
        counters: &Counters,
        path: &Path,
        bytes: Arc<[u8]>,
        waited: bool,
    ) -> Result<Vec<u8>, CompileError> {
        let _slot = slot;
        let id = self.next_compile.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let tier = compiler.tier;
        (self
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .push((id, path.to_path_buf(), tier, started));
        let _compiling = Compiling { loads: self, id };
        let line = format!(
            "compiling {} with {tier} (once; later starts use the cache)",
            path.display()
        );
        match waited {
            true => tracing::info!(component = %path.display(), tier = tier.name(), "{line}"),
            false => {
                tracing::debug!(component = %path.display(), tier = tier.name(), "{line} in the background")
            }
        }
        let compiled = compile::compile(&compiler.engine, tier, bytes, &self.compile).await;
        let took = started.elapsed();
        match &compiled {
            Ok(_) => {
                counters.compiled.fetch_add(1, Ordering::Relaxed);
                counters.tier_compiled(tier, took);
                tracing::debug!(
                    component = %path.display(),
                    tier = tier.name(),
                    compile_seconds = took.as_secs_f64(),
                    "compiled {} with {tier} in {:.2} s",
                    path.display(),
                    took.as_secs_f64()
                );
            }
            Err(_) => {
                counters.compile_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        compiled
    }
}

/// A failure that was the host's (its compile worker could not run) is answered from memory
/// this long, then tried again: not at once, or the reload that a failed background load
/// starts would start the load again, and so on without end.
const RETRY_UNAVAILABLE: Duration = Duration::from_secs(30);

/// Whether a failure of this age still answers for the same bytes: one of the component's
/// own always does, one of the host's for [`RETRY_UNAVAILABLE`].
fn still_holds(error: &LoadError, age: Duration) -> bool {
    error.is_lasting() || age < RETRY_UNAVAILABLE
}

/// Drops the entries whose value is gone, when the map has just grown to a power of two:
/// each insert pays a constant share, however many components come and go.
pub(crate) fn prune_dead<T>(map: &mut HashMap<SourceHash, Weak<T>>) {
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
