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
//! directory of every component file the catalog uses, wherever it is, and the tool-list
//! changes of imported MCP servers.

use crate::audit;
use crate::catalog::{Catalog, CatalogChange, LiveCatalog, RefusedEnsemble};
use crate::resolve::{CatalogBuilder, Outcome, Refused, Resolved, Resolver};
use crate::runtime::Runtime;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How long the watcher waits for the file system to go quiet before it reloads.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);

impl From<&Refused> for RefusedEnsemble {
    fn from(refused: &Refused) -> Self {
        RefusedEnsemble {
            file: refused.file.clone(),
            kept_previous: refused.kept_previous,
            errors: refused
                .diagnostics
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}

/// An ensemble as it serves now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnsembleStatus {
    pub name: String,
    pub file: PathBuf,
    pub enabled: bool,
    /// When this version was loaded (RFC 3339).
    pub loaded_at: String,
    /// blake3 of each component it uses.
    pub components: Vec<String>,
    /// Its tools as `name=version` (the version hash changes with the component or descriptor).
    pub tools: Vec<String>,
}

/// What the host serves, and what failed, as of the last reload.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReloadStatus {
    pub generation: u64,
    pub reloaded_at: String,
    pub ensembles: Vec<EnsembleStatus>,
    pub refused: Vec<RefusedEnsemble>,
}

impl ReloadStatus {
    /// The status after a swap to `catalog`: an ensemble whose tools' versions did not
    /// change keeps the time it was loaded.
    fn next(&self, generation: u64, catalog: &Catalog, refused: Vec<RefusedEnsemble>) -> Self {
        let now = audit::now_rfc3339();
        let previous: BTreeMap<(&Path, &[String]), &str> = self
            .ensembles
            .iter()
            .map(|e| ((e.file.as_path(), e.tools.as_slice()), e.loaded_at.as_str()))
            .collect();
        let ensembles = catalog
            .ensembles()
            .iter()
            .map(|ensemble| {
                let versions: Vec<String> = ensemble
                    .tools
                    .iter()
                    .map(|t| format!("{}={}", t.name, t.version))
                    .collect();
                let components: BTreeSet<String> = ensemble
                    .tools
                    .iter()
                    .map(|t| t.source_hash().to_string())
                    .collect();
                let loaded_at = previous
                    .get(&(ensemble.file.as_path(), versions.as_slice()))
                    .map_or_else(|| now.clone(), |at| at.to_string());
                EnsembleStatus {
                    name: ensemble.name.clone(),
                    file: ensemble.file.clone(),
                    enabled: ensemble.enabled,
                    loaded_at,
                    components: components.into_iter().collect(),
                    tools: versions,
                }
            })
            .collect();
        ReloadStatus {
            generation,
            reloaded_at: now,
            ensembles,
            refused,
        }
    }
}

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
    /// Serializes reloads.
    reloading: tokio::sync::Mutex<()>,
    status: Mutex<ReloadStatus>,
}

impl Reloader {
    /// Loads `dir` for the first time. The result's refusals are in the status, too.
    pub async fn start(runtime: Arc<Runtime>, dir: PathBuf) -> Arc<Self> {
        let resolver = Resolver::new(runtime);
        let resolved = resolver.resolve_dir(&dir).await;
        report(&resolved.refused);
        let refused: Vec<RefusedEnsemble> =
            resolved.refused.iter().map(RefusedEnsemble::from).collect();
        let status = ReloadStatus::default().next(0, &resolved.catalog, refused);
        Arc::new(Reloader {
            resolver,
            dir,
            catalog: Arc::new(LiveCatalog::new(resolved.catalog)),
            reloading: tokio::sync::Mutex::new(()),
            status: Mutex::new(status),
        })
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

    /// Rebuilds the catalog, swaps it in and tells subscribers. Reloads never overlap.
    pub async fn reload(&self) -> Arc<CatalogChange> {
        let _one_at_a_time = self.reloading.lock().await;
        let previous = self.catalog.snapshot();
        let resolved = match self.resolver.ensembles(&self.dir).await {
            Ok(outcomes) => keep_last_good(outcomes, &previous),
            Err(diagnostic) => everything_kept(&self.dir, diagnostic, &previous),
        };
        report(&resolved.refused);
        let refused: Vec<RefusedEnsemble> =
            resolved.refused.iter().map(RefusedEnsemble::from).collect();
        // The status is locked across the swap: a subscriber told of the change and asking
        // for the status sees this reload's.
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        let change = self.catalog.replace(resolved.catalog, refused.clone());
        *status = status.next(change.generation, &self.catalog.snapshot(), refused);
        drop(status);
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
        targets.sync(&watcher, &self.dir, &self.catalog.snapshot());
        let reloader = self.clone();
        let task_watcher = watcher.clone();
        let mut servers = self.resolver.servers().changes();
        let task = tokio::spawn(async move {
            loop {
                // Wait for a relevant event (a file, or an imported MCP server's new tool
                // list), then for quiet.
                loop {
                    tokio::select! {
                        event = notices.recv() => {
                            let Some(event) = event else { return };
                            if targets.is_relevant(&event, &reloader.dir) {
                                break;
                            }
                        }
                        server = servers.recv() => {
                            if let Ok(server) = &server {
                                tracing::info!("reloading: MCP server `{server}` changed its tools");
                            }
                            if !matches!(server, Err(broadcast::error::RecvError::Closed)) {
                                break;
                            }
                        }
                    }
                }
                loop {
                    match tokio::time::timeout(debounce, notices.recv()).await {
                        Ok(Some(_)) => continue,
                        Ok(None) => return,
                        Err(_quiet) => break,
                    }
                }
                reloader.reload().await;
                targets.sync(&task_watcher, &reloader.dir, &reloader.catalog.snapshot());
            }
        });
        Ok(WatchHandle {
            _watcher: watcher,
            task,
        })
    }
}

/// Keeps the file system watch and the reload task alive.
pub struct WatchHandle {
    _watcher: Arc<Mutex<RecommendedWatcher>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The component files outside the ensembles directory, and the directories watched for them.
#[derive(Default)]
struct WatchTargets {
    components: HashSet<PathBuf>,
    dirs: HashSet<PathBuf>,
}

impl WatchTargets {
    /// Watches the directory of every component the catalog uses (files are replaced by
    /// rename, so the directory, not the file, is what can be watched reliably).
    fn sync(&mut self, watcher: &Mutex<RecommendedWatcher>, ensembles: &Path, catalog: &Catalog) {
        let files: HashSet<&Path> = catalog
            .all_tools()
            .filter_map(|t| t.backend.watched_file())
            .collect();
        self.components = files.into_iter().map(absolute).collect();
        let ensembles = absolute(ensembles);
        let wanted: HashSet<PathBuf> = self
            .components
            .iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .filter(|d| !d.starts_with(&ensembles))
            .collect();
        let mut watcher = watcher.lock().unwrap_or_else(PoisonError::into_inner);
        for dir in wanted.difference(&self.dirs) {
            if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                tracing::warn!("cannot watch component directory {}: {e}", dir.display());
            }
        }
        for dir in self.dirs.difference(&wanted) {
            let _ = watcher.unwatch(dir);
        }
        self.dirs = wanted;
    }

    /// Events that may change the catalog: anything in the ensembles directory, and changes to
    /// the component files themselves. Opening and reading (the reload's own) are not.
    fn is_relevant(&self, event: &notify::Event, ensembles: &Path) -> bool {
        if let EventKind::Access(kind) = event.kind
            && kind != AccessKind::Close(AccessMode::Write)
        {
            return false;
        }
        let ensembles = absolute(ensembles);
        event.paths.iter().any(|path| {
            let path = absolute(path);
            path.starts_with(&ensembles) || self.components.contains(&path)
        })
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The reloader's policy for failures: an ensemble file that fails now (or whose names now
/// collide) keeps the version it had in `previous`, if it had one, put back in its place in
/// file order, so a kept version can still refuse a newcomer's colliding name. The failure is
/// still reported, marked as kept. A deleted file's tools are gone.
fn keep_last_good(outcomes: Vec<Outcome>, previous: &Catalog) -> Resolved {
    let mut builder = CatalogBuilder::default();
    let mut refused = Vec::new();
    for Outcome { file, result } in outcomes {
        let Err(diagnostics) = result.and_then(|e| builder.add(e).map_err(|d| vec![d])) else {
            continue;
        };
        let kept_previous = previous
            .ensemble_of_file(&file)
            .is_some_and(|old| builder.add(Arc::clone(old)).is_ok());
        refused.push(Refused {
            file,
            diagnostics,
            kept_previous,
        });
    }
    Resolved {
        catalog: builder.build(),
        refused,
    }
}

/// The directory itself cannot be read: everything that served goes on serving.
fn everything_kept(
    dir: &Path,
    diagnostic: crate::config::Diagnostic,
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

fn report(refused: &[Refused]) {
    for refused in refused {
        let what = if refused.kept_previous {
            "its previous version keeps serving"
        } else {
            "it is not loaded"
        };
        for diagnostic in &refused.diagnostics {
            tracing::error!("{}: {} ({what})", diagnostic.position(), diagnostic.message);
        }
    }
}
