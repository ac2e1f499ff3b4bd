//! reload: watch -> debounce -> rebuild -> diff -> swap, in one place, and the policy for
//! ensembles that fail: the last good version keeps serving.
//!
//! [`Reloader::reload`] rebuilds the catalog from the ensembles directory with its
//! [`Resolver`]: components whose bytes did not change are reused (the runtime shares them by
//! blake3), schemas that did not change are not compiled again, changed components compile
//! off the async runtime. An ensemble whose new version fails keeps its last good version
//! ([`keep_last_good`]). The new catalog replaces the old one atomically through
//! [`LiveCatalog::replace`], which tells its subscribers what changed; calls in flight finish
//! on the snapshot they started with.
//!
//! [`Reloader::watch`] drives reloads from the file system: the ensembles directory
//! (recursively, so invoker files and Kubernetes' `..data` symlink swaps are seen), the
//! directory of every component file an ensemble names (loaded, refused or compiling),
//! wherever it is, the components that finish compiling in the background, and the
//! tool-list changes of imported MCP servers. [`Reloader::follow_compiles`] is the part of it
//! without the file system (`serve --no-watch`): components compiled in the background still
//! join the catalog.

mod status;
mod targets;

pub use status::{EnsembleStatus, LoadingEnsemble, ReloadStatus};

use crate::catalog::{Catalog, CatalogChange, LiveCatalog, Pending, RefusedEnsemble};
use crate::resolve::{CatalogBuilder, Compiles, Outcome, Refused, Resolved, Resolver};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use targets::WatchTargets;
use tokio::sync::{broadcast, mpsc};
use toolhost_contract::SourceHash;
use toolhost_runtime::Runtime;

/// How long the watcher waits for the file system to go quiet before it reloads.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
/// Imported servers' tool-list changes reload the catalog at most this often.
const SERVER_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Reloads in a row while each makes the watch take in a new directory (a new directory is
/// rare; a tree whose directories keep appearing must not keep the reloader busy).
const MAX_RELOADS_FOR_NEW_WATCHES: usize = 3;

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}: {source}")]
pub struct WatchError {
    pub path: PathBuf,
    pub source: notify::Error,
}

/// Rebuilds and swaps the live catalog of one ensembles directory.
pub struct Reloader {
    resolver: Resolver,
    dir: PathBuf,
    catalog: Arc<LiveCatalog>,
    /// Whether a reload waits for compiles, or leaves them to finish in the background.
    compiles: Compiles,
    /// Serializes reloads.
    reloading: tokio::sync::Mutex<()>,
    status: Mutex<ReloadStatus>,
    /// Every component file the ensembles named at the last reload that could read them.
    named: Mutex<Vec<PathBuf>>,
    /// Subscribed before the first resolve, so that a compile it started that ends before
    /// anyone follows the compiles is not missed; taken by the first follower.
    compiled: Mutex<Option<broadcast::Receiver<SourceHash>>>,
    /// Since when each ensemble file that does not serve yet has waited.
    waiting_since: Mutex<HashMap<PathBuf, Instant>>,
}

/// How a [`Reloader`] starts: [`Reloader::builder`], then [`ReloaderBuilder::start`].
pub struct ReloaderBuilder {
    resolver: Resolver,
    compiles: Compiles,
}

impl ReloaderBuilder {
    /// Waits for no compile, at the first load or later: what is loaded or in the cache serves
    /// at once, and each ensemble whose component must be compiled joins the catalog when its
    /// compile ends (a reload of its own); until then a changed ensemble's previous version
    /// serves. For `serve`, so that a slow or hostile compile delays nothing already loaded.
    pub fn serving(self) -> Self {
        self.compiles(Compiles::InBackground)
    }

    /// Whether loads wait for compiles.
    pub fn compiles(mut self, compiles: Compiles) -> Self {
        self.compiles = compiles;
        self
    }

    /// Loads `dir` for the first time; the result's refusals are in the status.
    pub async fn start(self, dir: PathBuf) -> Arc<Reloader> {
        Reloader::begin(self.resolver, dir, self.compiles).await
    }
}

impl Reloader {
    /// Loads `dir` for the first time through the runtime's own resolver (no registry),
    /// waiting for every compile; later reloads wait too. The result's refusals are in the
    /// status. [`Reloader::builder`] starts one any other way.
    pub async fn start(runtime: Arc<Runtime>, dir: PathBuf) -> Arc<Self> {
        Self::builder(Resolver::new(runtime)).start(dir).await
    }

    /// A reloader that resolves through `resolver` (its registry) and, unless told
    /// otherwise, waits for compiles.
    pub fn builder(resolver: Resolver) -> ReloaderBuilder {
        ReloaderBuilder {
            resolver,
            compiles: Compiles::Wait,
        }
    }

    /// Loads `dir` for the first time through `resolver`, waiting for compiles or not as
    /// `compiles` says.
    async fn begin(resolver: Resolver, dir: PathBuf, compiles: Compiles) -> Arc<Self> {
        let compiled = resolver.runtime().loads_finished();
        let (mut resolved, loading, named) = match resolver.ensembles(&dir, compiles).await {
            Ok(outcomes) => {
                let named = named_components(&outcomes);
                let (resolved, loading) = keep_last_good(outcomes, &Catalog::default());
                (resolved, loading, named)
            }
            Err(diagnostic) => (
                Resolved::unreadable(&dir, diagnostic),
                Vec::new(),
                Vec::new(),
            ),
        };
        let refused: Vec<RefusedEnsemble> =
            resolved.refused.iter().map(RefusedEnsemble::from).collect();
        report(&resolved.refused, &refused, &[]);
        let mut waiting_since = HashMap::new();
        resolved.catalog = std::mem::take(&mut resolved.catalog)
            .with_pending(pending(&loading, &mut waiting_since));
        let status = ReloadStatus::default().next(0, &resolved.catalog, refused, loading);
        let reloader = Arc::new(Reloader {
            resolver,
            dir,
            catalog: Arc::new(LiveCatalog::new(resolved.catalog)),
            compiles,
            reloading: tokio::sync::Mutex::new(()),
            status: Mutex::new(status),
            named: Mutex::new(named),
            compiled: Mutex::new(Some(compiled)),
            waiting_since: Mutex::new(waiting_since),
        });
        // Prepared instances are made once the catalog serves, in the background.
        reloader.catalog.snapshot().fill_stocks();
        reloader
    }

    /// Told the hash of every component whose background load ended: the receiver made before
    /// the first resolve the first time, a new one after.
    fn compiles_finished(&self) -> broadcast::Receiver<SourceHash> {
        let kept = self
            .compiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        kept.unwrap_or_else(|| self.resolver.runtime().loads_finished())
    }

    /// The component files to watch: those the ensembles name, and those the catalog still
    /// runs (a kept previous version may use a file its ensemble no longer names).
    fn watched_components(&self) -> Vec<PathBuf> {
        let named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        let serving = self.catalog.snapshot();
        let mut files: Vec<PathBuf> = named.clone();
        files.extend(
            serving
                .all_tools()
                .filter_map(|t| t.backend.watched_file())
                .map(Path::to_path_buf),
        );
        files
    }

    /// The components the ensembles name now, and those the catalog still runs (a kept
    /// previous version's): what the compile cache must keep.
    pub fn components_in_use(&self) -> HashSet<SourceHash> {
        self.resolver.components_in_use(&self.catalog.snapshot())
    }

    /// The resolver every reload goes through (its registry, what its references came to).
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Reloads when a component compiled in the background, or an imported MCP server
    /// started in the background, is ready (or failed), without watching the file system.
    /// Stops when the handle is dropped.
    pub fn follow_compiles(self: &Arc<Self>) -> WatchHandle {
        let mut compiled = self.compiles_finished();
        let [_, mut started] = self.resolver.import_events();
        let reloader = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let ended = tokio::select! {
                    ended = compiled.recv() => ended.map(|_| ()),
                    ended = started.recv() => ended.map(|_| ()),
                };
                match ended {
                    Err(broadcast::error::RecvError::Closed) => return,
                    // Every compile or start that ended meanwhile is answered by this reload.
                    Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        while compiled.try_recv().is_ok() {}
                        while started.try_recv().is_ok() {}
                        reloader.reload().await;
                    }
                }
            }
        });
        WatchHandle {
            _watcher: None,
            task,
        }
    }

    /// The live catalog this reloader swaps.
    pub fn catalog(&self) -> &Arc<LiveCatalog> {
        &self.catalog
    }

    /// The ensembles directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Receives a [`CatalogChange`] after every reload.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<CatalogChange>> {
        self.catalog.subscribe()
    }

    /// What serves now, and what failed.
    pub fn status(&self) -> ReloadStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Rebuilds the catalog, swaps it in and tells subscribers. Reloads never overlap. Traced
    /// (a trace of its own, `reload`): the generation it made, the tools added, removed and
    /// changed, and how many ensembles are refused.
    pub async fn reload(&self) -> Arc<CatalogChange> {
        let traced = crate::trace::entry(&crate::trace::Carrier::NONE, || {
            crate::trace::SpanBuilder::from_name("reload")
        });
        let change = traced.carry(self.reload_now()).await;
        if traced.is_traced() {
            // As i64: OpenTelemetry has no unsigned integers (a u64 would be a string).
            let count = |n: usize| n as i64;
            traced.set("toolhost.generation", change.generation as i64);
            traced.set("toolhost.tools.added", count(change.added.len()));
            traced.set("toolhost.tools.removed", count(change.removed.len()));
            traced.set("toolhost.tools.changed", count(change.changed.len()));
            traced.set("toolhost.ensembles.refused", count(change.refused.len()));
        }
        change
    }

    /// [`Reloader::reload`], in its span.
    async fn reload_now(&self) -> Arc<CatalogChange> {
        let _one_at_a_time = self.reloading.lock().await;
        let previous = self.catalog.snapshot();
        let (mut resolved, loading) = match self.resolver.ensembles(&self.dir, self.compiles).await
        {
            Ok(outcomes) => {
                *self.named.lock().unwrap_or_else(PoisonError::into_inner) =
                    named_components(&outcomes);
                keep_last_good(outcomes, &previous)
            }
            Err(diagnostic) => (
                everything_kept(&self.dir, diagnostic, &previous),
                Vec::new(),
            ),
        };
        let refused: Vec<RefusedEnsemble> =
            resolved.refused.iter().map(RefusedEnsemble::from).collect();
        let waiting = pending(
            &loading,
            &mut self
                .waiting_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        resolved.catalog = std::mem::take(&mut resolved.catalog).with_pending(waiting);
        // The status is locked across the swap: a subscriber told of the change and asking
        // for the status sees this reload's.
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        report(&resolved.refused, &refused, &status.refused);
        let change = self.catalog.replace(resolved.catalog, refused.clone());
        *status = status.next(
            change.generation,
            &self.catalog.snapshot(),
            refused,
            loading,
        );
        drop(status);
        self.catalog.snapshot().fill_stocks();
        if change.tools_changed() {
            tracing::info!(
                generation = change.generation,
                "catalog reloaded: {} added, {} removed, {} changed",
                change.added.len(),
                change.removed.len(),
                change.changed.len()
            );
        }
        change
    }

    /// Starts watching the file system; reloads run after `debounce` of quiet. Watching stops
    /// when the handle is dropped.
    pub fn watch(self: &Arc<Self>, debounce: Duration) -> Result<WatchHandle, WatchError> {
        let (events, mut notices) = mpsc::unbounded_channel::<notify::Event>();
        let mut watcher = notify::recommended_watcher(
            move |result: notify::Result<notify::Event>| match result {
                Ok(event) => {
                    let _ = events.send(event);
                }
                Err(e) => tracing::warn!("file watcher: {e}"),
            },
        )
        .map_err(|source| WatchError {
            path: self.dir.clone(),
            source,
        })?;
        watcher
            .watch(&self.dir, RecursiveMode::Recursive)
            .map_err(|source| WatchError {
                path: self.dir.clone(),
                source,
            })?;
        let watcher = Arc::new(Mutex::new(watcher));
        let mut targets = WatchTargets::default();
        // What changed between the first load and this watch is seen by a first reload.
        let mut unseen = targets.sync(&watcher, &self.dir, self.watched_components());
        let reloader = self.clone();
        let task_watcher = watcher.clone();
        let [mut servers, mut started] = self.resolver.import_events();
        let mut compiled = self.compiles_finished();
        let task = tokio::spawn(async move {
            // Reloads that imported servers ask for come at most once a second, however
            // often they announce a new tool list.
            let mut next_for_servers = tokio::time::Instant::now();
            loop {
                // Wait for a relevant event (a file, a compile that ended, or an imported MCP
                // server's new tool list), then for quiet.
                let mut for_servers = false;
                while !std::mem::take(&mut unseen) {
                    tokio::select! {
                        event = notices.recv() => {
                            let Some(event) = event else { return };
                            if targets.is_relevant(&event, &reloader.dir) {
                                break;
                            }
                        }
                        finished = compiled.recv() => {
                            if !matches!(finished, Err(broadcast::error::RecvError::Closed)) {
                                break;
                            }
                        }
                        finished = started.recv() => {
                            if !matches!(finished, Err(broadcast::error::RecvError::Closed)) {
                                break;
                            }
                        }
                        server = servers.recv() => {
                            if !matches!(server, Err(broadcast::error::RecvError::Closed)) {
                                for_servers = true;
                                break;
                            }
                        }
                    }
                }
                if for_servers {
                    tokio::time::sleep_until(next_for_servers).await;
                    // Every announcement made meanwhile is answered by this one reload.
                    while !matches!(
                        servers.try_recv(),
                        Err(broadcast::error::TryRecvError::Empty
                            | broadcast::error::TryRecvError::Closed)
                    ) {}
                    next_for_servers = tokio::time::Instant::now() + SERVER_RELOAD_INTERVAL;
                }
                // Then for `debounce` without a relevant event (reads of the files in a
                // watched directory, an audit log written beside the components, do not
                // count), but never longer than ten debounces: steady writes cannot put a
                // reload off for ever.
                let give_up = tokio::time::Instant::now() + debounce * 10;
                let mut quiet = tokio::time::Instant::now() + debounce;
                loop {
                    match tokio::time::timeout_at(quiet.min(give_up), notices.recv()).await {
                        Ok(Some(event)) => {
                            if targets.is_relevant(&event, &reloader.dir) {
                                quiet = tokio::time::Instant::now() + debounce;
                            }
                        }
                        Ok(None) => return,
                        Err(_quiet) => break,
                    }
                }
                // A directory watched only from this reload on may have changed between the
                // reload's look at it and the watch (a deploy that copies the component right
                // after its descriptor): one more reload sees what the watch could not.
                for _ in 0..MAX_RELOADS_FOR_NEW_WATCHES {
                    reloader.reload().await;
                    let components = reloader.watched_components();
                    if !targets.sync(&task_watcher, &reloader.dir, components) {
                        break;
                    }
                }
            }
        });
        Ok(WatchHandle {
            _watcher: Some(watcher),
            task,
        })
    }
}

/// Keeps the file system watch (if any) and the reload task alive.
pub struct WatchHandle {
    _watcher: Option<Arc<Mutex<RecommendedWatcher>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every component file the outcomes name, once each.
fn named_components(outcomes: &[Outcome]) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    outcomes
        .iter()
        .flat_map(|o| o.components.iter())
        .filter(|path| seen.insert(path.as_path()))
        .cloned()
        .collect()
}

/// The ensembles of `loading` as a catalog tells callers, each waiting since the first reload
/// that found it waiting (kept in `since`, which forgets those that wait no more).
fn pending(loading: &[LoadingEnsemble], since: &mut HashMap<PathBuf, Instant>) -> Vec<Pending> {
    let now = Instant::now();
    since.retain(|file, _| loading.iter().any(|l| &l.file == file));
    loading
        .iter()
        .map(|ensemble| Pending {
            file: ensemble.file.clone(),
            compiling: ensemble.components.clone(),
            starting: ensemble.servers.clone(),
            since: *since.entry(ensemble.file.clone()).or_insert(now),
        })
        .collect()
}

/// The reloader's policy for failures: an ensemble file that fails now (or whose names now
/// collide, or whose components are still compiling) keeps the version it had in `previous`,
/// if it had one, put back in its place in file order, so a kept version can still refuse a
/// newcomer's colliding name. A failure is still reported, marked as kept; an ensemble that
/// only waits for a compile is reported as loading. A deleted file's tools are gone.
fn keep_last_good(outcomes: Vec<Outcome>, previous: &Catalog) -> (Resolved, Vec<LoadingEnsemble>) {
    let mut builder = CatalogBuilder::default();
    let mut refused = Vec::new();
    let mut loading = Vec::new();
    for Outcome {
        file,
        result,
        compiling,
        starting,
        ..
    } in outcomes
    {
        let Err(diagnostics) = result.and_then(|e| builder.add(e).map_err(|d| vec![d])) else {
            continue;
        };
        let kept_previous = previous
            .ensemble_of_file(&file)
            .is_some_and(|old| builder.add(Arc::clone(old)).is_ok());
        if !compiling.is_empty() || !starting.is_empty() {
            loading.push(LoadingEnsemble {
                file: file.clone(),
                components: compiling,
                servers: starting,
            });
        }
        if !diagnostics.is_empty() {
            refused.push(Refused {
                file,
                diagnostics,
                kept_previous,
            });
        }
    }
    let resolved = Resolved {
        catalog: builder.build(),
        refused,
    };
    (resolved, loading)
}

/// The directory itself cannot be read: everything that served goes on serving.
fn everything_kept(
    dir: &Path,
    diagnostic: toolhost_config::Diagnostic,
    previous: &Catalog,
) -> Resolved {
    Resolved {
        catalog: Catalog::new(previous.ensembles().to_vec()),
        refused: vec![Refused {
            file: dir.to_path_buf(),
            diagnostics: vec![diagnostic],
            kept_previous: true,
        }],
    }
}

/// A logged diagnostic is cut to this many bytes (it may quote what a file holds).
const LOGGED_DIAGNOSTIC_BYTES: usize = 2048;

/// Logs the refusals that are new since the last reload: an ensemble that stays broken while
/// others change is logged once, not at every reload (`status` always shows it).
/// `rendered` is `refused` as the status shows it, `before` the last reload's.
fn report(refused: &[Refused], rendered: &[RefusedEnsemble], before: &[RefusedEnsemble]) {
    for (refused, now) in refused.iter().zip(rendered) {
        let known = before.iter().any(|b| {
            b.file == now.file && b.kept_previous == now.kept_previous && b.errors == now.errors
        });
        if known {
            continue;
        }
        let what = if refused.kept_previous {
            "its previous version keeps serving"
        } else {
            "it is not loaded"
        };
        for diagnostic in &refused.diagnostics {
            let message = &diagnostic.message;
            let cut = &message[..message.floor_char_boundary(LOGGED_DIAGNOSTIC_BYTES)];
            let more = if cut.len() < message.len() {
                " [cut]"
            } else {
                ""
            };
            tracing::error!("{}: {cut}{more} ({what})", diagnostic.position());
        }
    }
}
