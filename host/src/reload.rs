//! reload: watch -> debounce -> rebuild -> diff -> swap, in one place.
//!
//! [`Reloader::reload`] rebuilds the catalog from the ensembles directory. Components whose
//! bytes did not change are reused (the runtime shares them by blake3), changed ones compile
//! off the async runtime. An ensemble whose new version fails keeps its last good version
//! (see [`resolve::resolve_dir_keeping`]). The new catalog replaces the old one atomically:
//! calls in flight finish on the snapshot they started with. Each swap is announced to
//! subscribers as a [`CatalogChange`].
//!
//! [`Reloader::watch`] drives reloads from the file system: the ensembles directory
//! (recursively, so invoker files and Kubernetes' `..data` symlink swaps are seen) and the
//! directory of every component file the catalog uses, wherever it is.

use crate::audit;
use crate::catalog::{Catalog, LiveCatalog};
use crate::resolve::{self, Refused};
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

/// What one reload changed, for subscribers (the MCP server sends `tools/list_changed`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CatalogChange {
    /// Counts reloads since the host started; the initial load is 0.
    pub generation: u64,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Tools whose version (component or descriptor) changed.
    pub changed: Vec<String>,
    /// Ensemble files that failed this time, each with its errors.
    pub refused: Vec<RefusedEnsemble>,
}

impl CatalogChange {
    /// True when the set of tools, or any tool, changed.
    pub fn tools_changed(&self) -> bool {
        !(self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty())
    }
}

/// An ensemble file that failed to load, as reported to subscribers and `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RefusedEnsemble {
    pub file: PathBuf,
    /// True when its previous version goes on serving.
    pub kept_previous: bool,
    /// The errors, rendered (each starts with `error:` and names file:line:col).
    pub errors: Vec<String>,
}

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

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}: {source}")]
pub struct WatchError {
    pub path: PathBuf,
    pub source: notify::Error,
}

/// Rebuilds and swaps the live catalog of one ensembles directory.
pub struct Reloader {
    runtime: Arc<Runtime>,
    dir: PathBuf,
    catalog: Arc<LiveCatalog>,
    /// Serializes reloads; holds the generation.
    generation: tokio::sync::Mutex<u64>,
    changes: broadcast::Sender<Arc<CatalogChange>>,
    status: Mutex<ReloadStatus>,
}

impl Reloader {
    /// Loads `dir` for the first time. The result's refusals are in the status, too.
    pub async fn start(runtime: Arc<Runtime>, dir: PathBuf) -> Arc<Self> {
        let resolved = resolve::resolve_dir(&runtime, &dir).await;
        let (changes, _) = broadcast::channel(64);
        let status = ReloadStatus::default();
        let reloader = Reloader {
            runtime,
            dir,
            catalog: Arc::new(LiveCatalog::default()),
            generation: tokio::sync::Mutex::new(0),
            changes,
            status: Mutex::new(status),
        };
        let refused: Vec<RefusedEnsemble> =
            resolved.refused.iter().map(RefusedEnsemble::from).collect();
        report(&resolved.refused);
        reloader.update_status(0, &resolved.catalog, refused);
        reloader.catalog.replace(resolved.catalog);
        Arc::new(reloader)
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
        self.changes.subscribe()
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
        let mut generation = self.generation.lock().await;
        *generation += 1;
        let previous = self.catalog.snapshot();
        let resolved =
            resolve::resolve_dir_keeping(&self.runtime, &self.dir, Some(&previous)).await;
        report(&resolved.refused);
        let refused: Vec<RefusedEnsemble> =
            resolved.refused.iter().map(RefusedEnsemble::from).collect();
        let mut change = diff(&previous, &resolved.catalog);
        change.generation = *generation;
        change.refused = refused.clone();
        self.update_status(*generation, &resolved.catalog, refused);
        self.catalog.replace(resolved.catalog);
        let change = Arc::new(change);
        if change.tools_changed() {
            tracing::info!(
                generation = change.generation,
                "catalog reloaded: {} added, {} removed, {} changed",
                change.added.len(),
                change.removed.len(),
                change.changed.len()
            );
        }
        // No subscriber is fine.
        let _ = self.changes.send(change.clone());
        change
    }

    fn update_status(&self, generation: u64, catalog: &Catalog, refused: Vec<RefusedEnsemble>) {
        let now = audit::now_rfc3339();
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        let previous: BTreeMap<(PathBuf, Vec<String>), String> = status
            .ensembles
            .iter()
            .map(|e| ((e.file.clone(), e.tools.clone()), e.loaded_at.clone()))
            .collect();
        let ensembles = catalog
            .ensembles()
            .iter()
            .map(|info| {
                let tools: Vec<_> = catalog
                    .all_tools()
                    .iter()
                    .filter(|t| t.ensemble_file == info.file)
                    .collect();
                let versions: Vec<String> = tools
                    .iter()
                    .map(|t| format!("{}={}", t.name, t.version))
                    .collect();
                let components: BTreeSet<String> = tools
                    .iter()
                    .map(|t| t.component_hash().to_string())
                    .collect();
                let loaded_at = previous
                    .get(&(info.file.clone(), versions.clone()))
                    .cloned()
                    .unwrap_or_else(|| now.clone());
                EnsembleStatus {
                    name: info.name.clone(),
                    file: info.file.clone(),
                    enabled: info.enabled,
                    loaded_at,
                    components: components.into_iter().collect(),
                    tools: versions,
                }
            })
            .collect();
        *status = ReloadStatus {
            generation,
            reloaded_at: now,
            ensembles,
            refused,
        };
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
        let mut servers = crate::mcp::client::changes();
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
        self.components = catalog
            .all_tools()
            .iter()
            .filter_map(|t| t.component_file().map(absolute))
            .collect();
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

/// What differs between two catalogs, by enabled tool name and version.
fn diff(old: &Catalog, new: &Catalog) -> CatalogChange {
    let mut change = CatalogChange::default();
    for tool in new.tools() {
        match old.get(&tool.name) {
            None => change.added.push(tool.name.clone()),
            Some(before) if before.version != tool.version => {
                change.changed.push(tool.name.clone())
            }
            Some(_) => {}
        }
    }
    change.removed = old
        .tools()
        .filter(|t| new.get(&t.name).is_none())
        .map(|t| t.name.clone())
        .collect();
    change
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
