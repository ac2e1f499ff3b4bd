//! watch: which resources changed, for `notifications/resources/updated` and
//! `notifications/resources/list_changed`. One file system watch per host covers the
//! directories of the live catalog's resource sets (moved along at each swap that changes
//! them), and the updates the imported servers report are followed beside it; what it sees
//! in [`SETTLE`] is sent to subscribers as one [`ResourceEvent`].

use crate::catalog::LiveCatalog;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How long the watch gathers events before it tells subscribers: a file written in many
/// pieces is one update.
pub const SETTLE: Duration = Duration::from_millis(100);
/// URIs one event names, at most; past it the event says `everything` instead.
pub const MAX_URIS_PER_EVENT: usize = 1000;

/// What changed in [`SETTLE`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceEvent {
    /// The resources whose content changed (or that appeared or went away).
    pub updated: BTreeSet<String>,
    /// More changed than an event names: every subscribed resource may have.
    pub everything: bool,
    /// Files appeared or went away: `resources/list` answers differently.
    pub listing: bool,
}

impl ResourceEvent {
    /// What a subscriber that fell behind is told: everything may have changed.
    pub fn missed() -> Self {
        ResourceEvent {
            updated: BTreeSet::new(),
            everything: true,
            listing: true,
        }
    }
}

/// The host's watch of its resource directories. Dropping it stops it.
pub struct ResourceWatch {
    events: broadcast::Sender<Arc<ResourceEvent>>,
    task: tokio::task::AbortHandle,
}

impl Drop for ResourceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ResourceWatch {
    /// Watches the resource directories of `catalog`'s live version, and of each version
    /// after it. The directories of the live version are watched when this returns. Needs a
    /// tokio runtime.
    pub fn start(catalog: &Arc<LiveCatalog>) -> Self {
        let (events, _) = broadcast::channel(64);
        let sender = events.clone();
        let changes = catalog.subscribe();
        let (notices, seen) = mpsc::unbounded_channel::<Seen>();
        let passed = notices.clone();
        // Links are not followed: a link to `/` in a resource directory must not make the
        // watch walk (and watch) the whole file system.
        let config = notify::Config::default().with_follow_symlinks(false);
        let watcher = RecommendedWatcher::new(
            move |result: notify::Result<notify::Event>| {
                if let Ok(event) = result {
                    let _ = notices.send(Seen::Disk(event));
                }
            },
            config,
        );
        let task = match watcher {
            Ok(mut watcher) => {
                let catalog = Arc::downgrade(catalog);
                let watched = retarget(&mut watcher, &catalog, &[]);
                let following = follow_servers(&catalog, &passed);
                let sources = Sources {
                    watcher,
                    watched,
                    passed,
                    _following: following,
                };
                tokio::spawn(run(catalog, changes, seen, sources, sender))
            }
            Err(e) => {
                tracing::warn!(
                    "resources: no file watch ({e}); subscribers are not told of changes, \
                     on disk or on imported servers"
                );
                tokio::spawn(async {})
            }
        };
        ResourceWatch {
            events,
            task: task.abort_handle(),
        }
    }

    /// Receives an event after each change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<ResourceEvent>> {
        self.events.subscribe()
    }
}

type Watched = Vec<(PathBuf, Arc<crate::resources::ResourceSet>)>;

/// What the watch has seen: a file system event, or an imported server's update (a URI, or
/// `None`: its list changed).
enum Seen {
    Disk(notify::Event),
    Passed(Option<String>),
}

/// Where changes come from: the directories watched, and the servers followed.
struct Sources {
    watcher: RecommendedWatcher,
    watched: Watched,
    passed: mpsc::UnboundedSender<Seen>,
    _following: Vec<Following>,
}

/// A task that passes one imported server's updates on, stopped when dropped.
struct Following(tokio::task::AbortHandle);

impl Drop for Following {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follows the updates of the live catalog's imported servers.
fn follow_servers(catalog: &Weak<LiveCatalog>, to: &mpsc::UnboundedSender<Seen>) -> Vec<Following> {
    let Some(catalog) = catalog.upgrade() else {
        return Vec::new();
    };
    let snapshot = catalog.snapshot();
    snapshot
        .passed_resources()
        .map(|set| {
            let mut updates = set.updates();
            let to = to.clone();
            let task = tokio::spawn(async move {
                loop {
                    match updates.recv().await {
                        Ok(update) => {
                            if to.send(Seen::Passed(update)).is_err() {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            let _ = to.send(Seen::Passed(None));
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
            Following(task.abort_handle())
        })
        .collect()
}

/// Moves the watch from the directories of `before` to those of the live catalog.
fn retarget(
    watcher: &mut RecommendedWatcher,
    catalog: &Weak<LiveCatalog>,
    before: &[(PathBuf, Arc<crate::resources::ResourceSet>)],
) -> Watched {
    for (dir, _) in before {
        let _ = watcher.unwatch(dir);
    }
    let watched = targets(catalog);
    for (dir, set) in &watched {
        if let Err(e) = watcher.watch(dir, RecursiveMode::Recursive) {
            tracing::warn!(
                "resources: cannot watch {} of set `{}`: {e}",
                dir.display(),
                set.name()
            );
        }
    }
    watched
}

/// The directories to watch, with the prefix of their URIs (canonical paths: the events name
/// those).
fn targets(catalog: &Weak<LiveCatalog>) -> Watched {
    let Some(catalog) = catalog.upgrade() else {
        return Vec::new();
    };
    let snapshot = catalog.snapshot();
    snapshot
        .resource_sets()
        .filter_map(|set| Some((set.directory().canonicalize().ok()?, Arc::clone(set))))
        .collect()
}

async fn run(
    catalog: Weak<LiveCatalog>,
    mut changes: broadcast::Receiver<Arc<crate::catalog::CatalogChange>>,
    mut seen: mpsc::UnboundedReceiver<Seen>,
    mut sources: Sources,
    events: broadcast::Sender<Arc<ResourceEvent>>,
) {
    let mut moved = false;
    loop {
        if std::mem::take(&mut moved) {
            sources.watched = retarget(&mut sources.watcher, &catalog, &sources.watched);
            sources._following = follow_servers(&catalog, &sources.passed);
        }
        let watched = &sources.watched;
        let first = tokio::select! {
            change = changes.recv() => {
                match change {
                    Ok(change) if change.resources_changed => moved = true,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => moved = true,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                continue;
            }
            event = seen.recv() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let mut event = ResourceEvent::default();
        note(watched, &first, &mut event);
        let settled = tokio::time::sleep(SETTLE);
        tokio::pin!(settled);
        loop {
            tokio::select! {
                _ = &mut settled => break,
                more = seen.recv() => match more {
                    Some(more) => note(watched, &more, &mut event),
                    None => return,
                },
            }
        }
        if event.everything || event.listing || !event.updated.is_empty() {
            // No subscriber is fine.
            let _ = events.send(Arc::new(event));
        }
    }
}

/// Adds what one file system event or server update says to `event`.
fn note(watched: &Watched, seen: &Seen, event: &mut ResourceEvent) {
    let seen = match seen {
        Seen::Disk(seen) => seen,
        Seen::Passed(None) => {
            event.listing = true;
            return;
        }
        Seen::Passed(Some(uri)) => {
            if event.updated.len() >= MAX_URIS_PER_EVENT {
                event.everything = true;
            } else {
                event.updated.insert(uri.clone());
            }
            return;
        }
    };
    let listing = match seen.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => false,
        EventKind::Access(_) => return,
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Name(_)) => true,
        _ => false,
    };
    for path in &seen.paths {
        for (dir, set) in watched {
            let Ok(relative) = path.strip_prefix(dir) else {
                continue;
            };
            let Some(relative) = relative.to_str() else {
                continue;
            };
            if relative.is_empty() || relative.split('/').any(|part| part.starts_with('.')) {
                continue;
            }
            event.listing |= listing;
            if event.updated.len() >= MAX_URIS_PER_EVENT {
                event.everything = true;
            } else {
                event.updated.insert(set.uri_of(relative));
            }
        }
    }
}
