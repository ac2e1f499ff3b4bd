//! `[access]` kept in force while `serve` runs: read again on SIGHUP and, unless `--no-watch`,
//! when `toolhost.toml` changes; the next request follows the new rules and tokens. A file
//! that no longer checks keeps the ones in force, and the log says why (once per change).
//!
//! Bounds: one pending change at a time (the watcher's events are coalesced, never queued),
//! and the file read within the descriptor bound of every configuration file.

use super::service::AbortOnDrop;
use notify::{RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toolhost::access::Access;

/// How long after a change the file is read (an editor's write often comes in several steps).
const SETTLE: Duration = Duration::from_millis(200);

/// `[access]` of `path` read again and put in force; a file that no longer checks keeps the
/// rules in force. `why` says what asked for it, in the log.
pub(crate) fn reread(access: &Access, path: Option<&Path>, legacy: Option<&str>, why: &str) {
    let Some(path) = path else { return };
    match super::settings::reread_access(path) {
        Ok(settings) => match access.replace(settings, legacy) {
            Ok(()) => tracing::info!("{why}: [access] of {} is in force", path.display()),
            Err(e) => tracing::error!("{why}: [access] kept as it was: {e}"),
        },
        Err(e) => tracing::error!(
            "{why}: [access] of {} kept as it was: {e:#}",
            path.display()
        ),
    }
}

/// Watches `path` (its directory, for editors that replace the file) and reads `[access]`
/// again after each change. Stops when the handle is dropped.
pub(crate) fn watch(
    access: Arc<Access>,
    path: PathBuf,
    legacy: Option<String>,
) -> anyhow::Result<(notify::RecommendedWatcher, AbortOnDrop)> {
    let (changed, mut changes) = tokio::sync::mpsc::channel::<()>(1);
    let name = path.file_name().map(|n| n.to_os_string());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let ours = event.is_ok_and(|event| {
            // A change, not a read: hosts read the file at every reload, and two hosts of one
            // directory would wake each other by reading it, for good.
            let read = matches!(event.kind, notify::EventKind::Access(kind)
                if kind != notify::event::AccessKind::Close(notify::event::AccessMode::Write));
            !read && (event.paths.iter()).any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        });
        if ours {
            // One pending change is enough: a full channel already says "read it again".
            let _ = changed.try_send(());
        }
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    let task = tokio::spawn(async move {
        while changes.recv().await.is_some() {
            tokio::time::sleep(SETTLE).await;
            while changes.try_recv().is_ok() {}
            reread(
                &access,
                Some(&path),
                legacy.as_deref(),
                "toolhost.toml changed",
            );
        }
    });
    Ok((watcher, AbortOnDrop(task)))
}
