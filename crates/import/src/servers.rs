//! The imported servers of one host, by their settings: shared by every catalog version that
//! names the same server, started in the background when `serve` asks (kept, with their
//! session or their failure's backoff, while the ensembles name them), and the broadcasts
//! that tell the reloader a server's tools changed or its start ended.

use crate::McpImport;
use crate::connection::Live;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;
use tokio::sync::broadcast;
use toolhost_core::import::NEEDS_SIGN_IN;
use toolhost_core::import::{Background, ImportedServer, Importer, McpSpec};

/// The MCP servers the catalogs of one host use, by their settings, so that a reload with
/// unchanged settings keeps the running server. Held by whoever builds catalogs (the
/// reloader, or a command that loads once); a server is stopped when no catalog uses it.
#[derive(Debug)]
pub struct ImportedServers {
    servers: Mutex<HashMap<[u8; 32], Weak<McpImport>>>,
    changes: broadcast::Sender<String>,
    started: broadcast::Sender<String>,
    /// Servers started in the background, kept (their session, or their failure and its
    /// backoff) while the ensembles name them, whether or not a catalog holds them yet.
    kept: Mutex<HashMap<[u8; 32], Arc<McpImport>>>,
    /// Where the tokens of the servers a person signs in to are kept (`toolhost login`).
    sign_in_dir: Option<std::path::PathBuf>,
}

impl Default for ImportedServers {
    fn default() -> Self {
        ImportedServers {
            servers: Mutex::default(),
            changes: broadcast::channel(64).0,
            started: broadcast::channel(64).0,
            kept: Mutex::default(),
            sign_in_dir: None,
        }
    }
}

impl ImportedServers {
    /// The servers a person signs in to find their tokens in `dir`.
    pub fn with_sign_in_dir(mut self, dir: std::path::PathBuf) -> Self {
        self.sign_in_dir = Some(dir);
        self
    }

    /// The server for `spec`: the one already in use, or a new one (not started yet).
    pub fn server(&self, spec: McpSpec) -> Arc<McpImport> {
        let hash = spec.hash();
        let key = spec.key();
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(server) = servers.get(&key).and_then(Weak::upgrade) {
            return server;
        }
        let server = Arc::new(McpImport {
            spec,
            hash,
            sign_in_dir: self.sign_in_dir.clone(),
            connection: tokio::sync::Mutex::default(),
            sign_in_seen: std::sync::Mutex::default(),
            up: std::sync::atomic::AtomicBool::new(false),
            changes: self.changes.clone(),
            starting: std::sync::atomic::AtomicBool::new(false),
            retry_scheduled: std::sync::atomic::AtomicBool::new(false),
            started: self.started.clone(),
            updates: tokio::sync::broadcast::channel(64).0,
            subscribed: std::sync::Mutex::default(),
            listening: std::sync::Mutex::default(),
            routes: Default::default(),
        });
        servers.insert(key, Arc::downgrade(&server));
        // Servers no catalog uses any more are forgotten when the map has doubled: each
        // import pays a constant share, however many come and go.
        if servers.len().is_power_of_two() {
            servers.retain(|_, server| server.strong_count() > 0);
        }
        server
    }

    /// Where `server` stands, started in the background (its session and a first tool list)
    /// unless it runs, is starting, or waits out a failed start's backoff. A server that never
    /// answers thus delays nothing that is already loaded; [`Importer::started`] says when a
    /// start ended. The server is kept until [`Importer::keep_only`] lets it go.
    fn background_of(&self, server: &Arc<McpImport>) -> Background {
        use std::sync::atomic::Ordering;
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(server.spec.key(), Arc::clone(server));
        if server.starting.load(Ordering::SeqCst) {
            return Background::Starting;
        }
        // A connection in use (a call starting the server inline): wait for that, then say
        // the start ended, as a start of our own would.
        let Ok(mut connection) = server.connection.try_lock() else {
            if !server.starting.swap(true, Ordering::SeqCst) {
                let waited = Arc::clone(server);
                tokio::spawn(async move {
                    drop(waited.connection.lock().await);
                    waited.starting.store(false, Ordering::SeqCst);
                    let _ = waited.started.send(waited.spec.describe());
                });
            }
            return Background::Starting;
        };
        // Running as signed in; or ended now by a sign-out (said at once, with the tokens
        // gone), or by another client's sign-in (started again below).
        match server.live(&mut connection) {
            Live::Running(_) => return Background::Running,
            Live::SignedOut(why) => return Background::Failed(why),
            Live::None => {}
        }
        // A sign-in since the failure (`toolhost login` wrote new tokens) ends its backoff.
        if let Some(at) = connection.retry_at
            && Instant::now() < at
            && !server.signed_in_since_failure(&connection)
        {
            // Tried again when the backoff is over, by a reload of its own.
            if !server.retry_scheduled.swap(true, Ordering::SeqCst) {
                let waited = Arc::clone(server);
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    waited.retry_scheduled.store(false, Ordering::SeqCst);
                    let _ = waited.started.send(waited.spec.describe());
                });
            }
            let why = (connection.last_error.as_deref()).unwrap_or("failed to start");
            // A sign-in's refusal says what to do, not when to try: trying will not help.
            return Background::Failed(server.error(match why.starts_with(NEEDS_SIGN_IN) {
                true => why.to_string(),
                false => format!(
                    "{why}; the next try is in {} s",
                    at.saturating_duration_since(Instant::now()).as_secs().max(1)
                ),
            }));
        }
        drop(connection);
        if server.starting.swap(true, Ordering::SeqCst) {
            return Background::Starting;
        }
        let started = Arc::clone(server);
        tokio::spawn(async move {
            if let Err(e) = started.tools().await {
                tracing::warn!("{e}");
            }
            started.starting.store(false, Ordering::SeqCst);
            let _ = started.started.send(started.spec.describe());
        });
        Background::Starting
    }
}

impl Importer for ImportedServers {
    fn import(&self, spec: McpSpec) -> Arc<dyn ImportedServer> {
        self.server(spec)
    }

    fn background(&self, spec: &McpSpec) -> Background {
        let server = (self.servers.lock().unwrap_or_else(PoisonError::into_inner))
            .get(&spec.key())
            .and_then(Weak::upgrade);
        self.background_of(&server.unwrap_or_else(|| self.server(spec.clone())))
    }

    /// The servers' `tools/list_changed` notifications, by server (its command line or URL).
    fn changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    fn started(&self) -> broadcast::Receiver<String> {
        self.started.subscribe()
    }

    fn keep_only(&self, named: &std::collections::HashSet<[u8; 32]>) {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| named.contains(key));
    }

    /// The file of tokens a person's sign-in keeps for the import `spec` describes: what a
    /// reloader watches, so that `toolhost login`'s new tokens (or a logout) are taken at once.
    fn sign_in_file(&self, spec: &McpSpec) -> Option<std::path::PathBuf> {
        sign_in_file(spec, self.sign_in_dir.as_deref())
    }
}

/// The token file of the import `spec` describes, kept in `dir`, if a person signs in to it.
fn sign_in_file(spec: &McpSpec, dir: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    crate::sign_in_target(spec, dir).map(|(url, dir)| crate::sign_in::store_path(dir, url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_config::draft::{McpCredential, McpOauth, McpTarget};

    #[tokio::test]
    async fn a_sign_in_written_after_a_failed_start_ends_its_backoff() {
        let dir = tempfile::tempdir().expect("dir");
        let servers = ImportedServers::default().with_sign_in_dir(dir.path().to_path_buf());
        // Nothing listens there: its start fails, and waits out a backoff.
        let url = "http://127.0.0.1:9/mcp".to_string();
        let spec = McpSpec {
            target: McpTarget::Url(url.clone()),
            oauth: Some(McpOauth {
                client_id: None,
                credential: McpCredential::SignIn {
                    client_secret: None,
                    metadata_url: None,
                },
                scopes: Vec::new(),
            }),
            startup_timeout: std::time::Duration::from_secs(5),
            max_tools: 10,
            talk: Default::default(),
        };
        let file = servers.sign_in_file(&spec).expect("a sign-in's file");
        assert_eq!(file, crate::sign_in::store_path(dir.path(), &url));
        let server = servers.import(spec.clone());
        assert!(server.tools().await.is_err());
        assert!(matches!(servers.background(&spec), Background::Failed(_)));
        // `toolhost login` writes the tokens (seconds later in life: here past the kernel's
        // coarse file clock, a few ms behind the real one): the next reload starts it at once.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        std::fs::write(&file, "{}").expect("tokens");
        assert!(matches!(servers.background(&spec), Background::Starting));
    }
}
