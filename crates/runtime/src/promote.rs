//! Tier two: Cranelift compiles a component that runs on Winch's code in the background (in
//! the compile worker, in one of the compile slots, bounded as every compile), and the
//! component swaps to the new code when it is ready ([`crate::tier`] says why and how). A
//! Cranelift compile that fails (a bound Winch's compile stayed within) leaves the component
//! on Winch's code, said once in the log and in `status`.

use crate::cache::Cached;
use crate::loads::Loads;
use crate::tier::{Code, CompileRecord, Compiler, LoadedMap};
use crate::{Counters, LoadedComponent, SourceHash, Tier};
use std::path::Path;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Instant;

/// What a promotion needs of the runtime, shared with its task.
pub(crate) struct Promotion {
    pub(crate) loads: Arc<Loads>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) optimized: Arc<Compiler>,
    /// Winch's compiler: its cache entry of the component goes once Cranelift's is there.
    pub(crate) baseline: Arc<Compiler>,
    pub(crate) loaded: LoadedMap,
}

impl Promotion {
    /// Starts compiling `component` (loaded on Winch's code) with Cranelift in the background,
    /// unless a promotion of its bytes runs already: that one swaps whichever component of
    /// these bytes is loaded when it ends.
    pub(crate) fn start(self, component: &LoadedComponent, bytes: Arc<[u8]>) {
        let hash = component.hash;
        {
            let mut promoting = self.loads.promoting();
            if !promoting.insert(hash) {
                return;
            }
        }
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            self.loads.promoting().remove(&hash);
            return;
        };
        let path = component.path.clone();
        tokio.spawn(async move {
            let promoted = self.optimize(&path, hash, &bytes).await;
            // The lookup and the end of the promotion under the lock a load that finds it
            // running takes: that load's component is in the map by then, and swapped here.
            let mut promoting = self.loads.promoting();
            let target = self
                .loaded(&hash)
                .filter(|target| target.tier() == Tier::Winch);
            match (target, promoted) {
                (Some(target), Ok((code, record))) => target.promote(code, record),
                (Some(target), Err(Some(reason))) => target.not_promoted(reason),
                // Nothing of these bytes is loaded any more (a reload replaced it).
                _ => {}
            }
            promoting.remove(&hash);
            drop(promoting);
            self.loads.tell_promoted(hash);
        });
    }

    /// The component of `hash` loaded now, if any.
    fn loaded(&self, hash: &SourceHash) -> Option<Arc<LoadedComponent>> {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.get(hash).and_then(Weak::upgrade)
    }

    /// Cranelift's code of `bytes`: from the cache, else compiled (in the worker, in one of
    /// the compile slots) and cached; linked as the component's world. Why not, in words;
    /// `None` when nothing of these bytes was loaded any more once a compile slot was free
    /// (compiled then, its code would be for nobody).
    async fn optimize(
        &self,
        path: &Path,
        hash: SourceHash,
        bytes: &Arc<[u8]>,
    ) -> Result<(Code, CompileRecord), Option<String>> {
        let mut started = Instant::now();
        let optimized = Arc::clone(&self.optimized);
        let cached = tokio::task::spawn_blocking(move || optimized.cached(&hash))
            .await
            .map_err(|e| e.to_string())?;
        let (component, cached) = match cached {
            Cached::Found(component) => (component, true),
            Cached::Refused(e) => return Err(Some(format!("{e:#}"))),
            Cached::Missing => {
                let slot = self.loads.compile_slot().await;
                if self.loaded(&hash).is_none() {
                    return Err(None);
                }
                // The compile's own time, not its wait for a slot.
                started = Instant::now();
                let artifact = (self.loads)
                    .compile_in(
                        slot,
                        &self.optimized,
                        &self.counters,
                        path,
                        Arc::clone(bytes),
                        false,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let component =
                    (self.optimized.fresh(hash, artifact).await).map_err(|e| e.to_string())?;
                // Every host of this build now loads Cranelift's code: Winch's is not needed.
                if component.is_ok()
                    && let Some(cache) = &self.baseline.cache
                {
                    cache.remove(&hash);
                }
                (component.map_err(|e| format!("{e:#}"))?, false)
            }
        };
        let world = crate::tier::adapter(&self.optimized, path, &component, bytes)
            .map_err(|e| e.to_string())?;
        let code = Code {
            world,
            engine: self.optimized.engine.clone(),
            tier: Tier::Cranelift,
        };
        let record = CompileRecord {
            tier: Tier::Cranelift,
            seconds: started.elapsed().as_secs_f64(),
            cached,
        };
        Ok((code, record))
    }
}

impl LoadedComponent {
    /// New calls run `code` from now on; calls running keep the instances they have.
    fn promote(&self, code: Code, record: CompileRecord) {
        let how = if record.cached {
            "read from the cache"
        } else {
            "compiled"
        };
        // Debug: a swap is the tiers' ordinary course (`status` and `/metrics` show it too).
        tracing::debug!(
            component = %self.path.display(),
            tier = "cranelift",
            compile_seconds = record.seconds,
            "{} now runs Cranelift's code ({how} in {:.2} s in the background; calls that \
             were running finish on Winch's)",
            self.path.display(),
            record.seconds
        );
        self.compiles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
        self.code.store(Arc::new(code));
    }

    /// Cranelift's code could not be had: it goes on running Winch's, and says why.
    fn not_promoted(&self, reason: String) {
        tracing::warn!(
            component = %self.path.display(),
            tier = "winch",
            "{} goes on running Winch's code: Cranelift could not compile it: {reason}",
            self.path.display()
        );
        *self.note.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!(
            "runs Winch's code: Cranelift could not compile it: {reason}"
        ));
    }
}
