//! What the reloader watches besides the ensembles directory: the directories of the
//! component files the ensembles name (files are replaced by rename, so a directory is what
//! can be watched reliably), and the nearest existing parent of one that does not exist yet.

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The component files outside the ensembles directory, and the directories watched for them.
#[derive(Default)]
pub(super) struct WatchTargets {
    components: HashSet<PathBuf>,
    dirs: HashSet<PathBuf>,
    /// Component directories that do not exist yet; their nearest existing parent is watched
    /// instead, and making one of them (or a directory on the way) starts a reload.
    missing: HashSet<PathBuf>,
}

impl WatchTargets {
    /// Watches the directory of every component in `files` (files are replaced by rename, so
    /// the directory, not the file, is what can be watched reliably). For a directory that
    /// does not exist yet, its nearest existing parent is watched until it does. Returns
    /// whether a directory is watched that was not before.
    pub(super) fn sync(
        &mut self,
        watcher: &Mutex<RecommendedWatcher>,
        ensembles: &Path,
        files: Vec<PathBuf>,
    ) -> bool {
        self.components = files.iter().map(|f| absolute(f)).collect();
        let ensembles = absolute(ensembles);
        let wanted: HashSet<PathBuf> = self
            .components
            .iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .filter(|d| !d.starts_with(&ensembles))
            .collect();
        self.missing.clear();
        let mut watched = HashSet::with_capacity(wanted.len());
        let mut watcher = watcher.lock().unwrap_or_else(PoisonError::into_inner);
        for dir in wanted {
            let target = if dir.is_dir() {
                dir
            } else {
                let parent = dir
                    .ancestors()
                    .skip(1)
                    .find(|a| a.is_dir())
                    .map(Path::to_path_buf);
                self.missing.insert(dir);
                match parent {
                    Some(parent) => parent,
                    None => continue,
                }
            };
            // The ensembles directory is watched whole already.
            if target.starts_with(&ensembles) || watched.contains(&target) {
                continue;
            }
            if !self.dirs.contains(&target)
                && let Err(e) = watcher.watch(&target, RecursiveMode::NonRecursive)
            {
                // Not tried again (nor reported again) until it is no longer wanted.
                tracing::warn!("cannot watch component directory {}: {e}", target.display());
            }
            watched.insert(target);
        }
        for dir in self.dirs.difference(&watched) {
            let _ = watcher.unwatch(dir);
        }
        let new = watched.iter().any(|dir| !self.dirs.contains(dir));
        self.dirs = watched;
        new
    }

    /// Events that may change the catalog: anything in the ensembles directory, and changes to
    /// the component files themselves. Opening and reading (the reload's own) are not.
    pub(super) fn is_relevant(&self, event: &notify::Event, ensembles: &Path) -> bool {
        if let EventKind::Access(kind) = event.kind
            && kind != AccessKind::Close(AccessMode::Write)
        {
            return false;
        }
        let ensembles = absolute(ensembles);
        event.paths.iter().any(|path| {
            let path = absolute(path);
            path.starts_with(&ensembles)
                || self.components.contains(&path)
                || self
                    .missing
                    .iter()
                    .any(|missing| missing.starts_with(&path))
        })
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
