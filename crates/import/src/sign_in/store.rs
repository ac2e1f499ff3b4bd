//! store: where a sign-in's tokens are kept ([`FileStore`], rmcp's credential store: one
//! file per server URL, readable by this host's user alone), and the files beside it: the
//! authorization server pinned, the scopes a step-up asks for, and the lock that lets one
//! process at a time renew the tokens.

use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest credentials file read: a token response with a refresh token and an ID token
/// is a few KiB.
const MAX_STORED_BYTES: u64 = 64 << 10;

/// How long a renewal waits for another process's (a `serve` and a `toolhost call` of the
/// same host renewing at once): longer than a renewal's own requests may take.
const RENEWAL_WAIT: Duration = Duration::from_secs(30);

/// Where the tokens for the server at `url` are kept in `dir`: one file per server URL.
pub fn store_path(dir: &Path, url: &str) -> PathBuf {
    let hash = blake3::hash(url.as_bytes()).to_hex();
    dir.join(format!("{}.json", &hash[..32]))
}

/// The tokens of one server, in a file readable by this host's user alone (mode 0600, in a
/// folder of mode 0700), replaced whole at each save. rmcp loads them for every request it
/// sends; they are read again only when the file changed (a `stat` per request), as when
/// `toolhost login` wrote new ones.
pub struct FileStore {
    path: PathBuf,
    read: std::sync::Mutex<Option<(FileStamp, StoredCredentials)>>,
}

/// What tells one version of the file from the next.
type FileStamp = (std::time::SystemTime, u64);

impl FileStore {
    pub fn new(path: PathBuf) -> Self {
        FileStore {
            path,
            read: std::sync::Mutex::default(),
        }
    }

    fn stamp(&self) -> std::io::Result<FileStamp> {
        let metadata = std::fs::metadata(&self.path)?;
        Ok((metadata.modified()?, metadata.len()))
    }

    fn remember(&self, stamp: Option<FileStamp>, credentials: &StoredCredentials) {
        let mut read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *read = stamp.map(|stamp| (stamp, credentials.clone()));
    }

    fn remembered(&self, stamp: FileStamp) -> Option<StoredCredentials> {
        let read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        read.as_ref()
            .filter(|(seen, _)| *seen == stamp)
            .map(|(_, credentials)| credentials.clone())
    }
}

fn store_error(what: &str, path: &Path, error: impl std::fmt::Display) -> AuthError {
    AuthError::InternalError(format!("cannot {what} {}: {error}", path.display()))
}

impl FileStore {
    /// The credentials in the file, read again only when it changed.
    pub(super) fn read(&self) -> Result<Option<StoredCredentials>, AuthError> {
        use std::io::Read;
        let stamp = match self.stamp() {
            Ok(stamp) => stamp,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error("read", &self.path, e)),
        };
        if let Some(credentials) = self.remembered(stamp) {
            return Ok(Some(credentials));
        }
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error("read", &self.path, e)),
        };
        let mut text = String::new();
        file.take(MAX_STORED_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| store_error("read", &self.path, e))?;
        if text.len() as u64 > MAX_STORED_BYTES {
            return Err(store_error("read", &self.path, "larger than 64 KiB"));
        }
        let credentials: StoredCredentials =
            serde_json::from_str(&text).map_err(|e| store_error("read", &self.path, e))?;
        self.remember(Some(stamp), &credentials);
        Ok(Some(credentials))
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.read()
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let text = serde_json::to_vec_pretty(&credentials)
            .map_err(|e| store_error("write", &self.path, e))?;
        write_private(&self.path, &text).map_err(|e| store_error("write", &self.path, e))?;
        self.remember(self.stamp().ok(), &credentials);
        Ok(())
    }

    /// One renewal at a time across every process of this user: an exclusive lock on a file
    /// beside the tokens, held by rmcp from its reading of the refresh token to its saving of
    /// the new one. A second process renewing at the same moment waits, then reads the tokens
    /// the first saved and renews with the new refresh token; without the lock both would
    /// spend the same one, and a provider that rotates refresh tokens takes a second use for
    /// a stolen token and revokes the grant.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let lock = locked(&self.path.with_extension("lock"), RENEWAL_WAIT).await?;
        Ok(Some(CredentialRefreshGuard::new(lock)))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remember(
            None,
            &StoredCredentials::new(String::new(), None, Vec::new(), None),
        );
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(store_error("remove", &self.path, e)),
        }
    }
}

/// The file at `path` (made readable by this user alone, in a folder of mode 0700), locked
/// exclusively: the lock is released when the file is closed. Waits `wait` at most for
/// another holder, looking again every 20 ms (a blocking `flock` would hold a worker thread).
async fn locked(path: &Path, wait: Duration) -> Result<std::fs::File, AuthError> {
    use std::os::unix::fs::OpenOptionsExt;
    let error = |e: &dyn std::fmt::Display| store_error("lock", path, e);
    private_folder_of(path).map_err(|e| error(&e))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| error(&e))?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(error(&e)),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(error(&format!(
                "another process has been renewing these tokens for more than {} s",
                wait.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where the scopes a server asked for beyond the sign-in's are kept until the next
/// `toolhost login` asks for them.
pub(super) fn wanted_path(dir: &Path, url: &str) -> PathBuf {
    store_path(dir, url).with_extension("wanted")
}

/// The authorization server a sign-in was made at, kept beside its tokens: the tokens go to
/// no other. A server that later names another authorization server (or none, so that rmcp
/// would fall back to endpoints on the server itself) would otherwise have the refresh token
/// sent to where it chose.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pinned {
    pub issuer: Option<String>,
    pub token_endpoint: String,
}

fn pinned_path(dir: &Path, url: &str) -> PathBuf {
    store_path(dir, url).with_extension("server")
}

/// Keeps `pinned` as the authorization server of the sign-in to the server at `url`.
pub(super) fn pin(dir: &Path, url: &str, pinned: &Pinned) -> std::io::Result<()> {
    let text = serde_json::to_vec(pinned).map_err(std::io::Error::other)?;
    write_private(&pinned_path(dir, url), &text)
}

/// Puts back the pin of the server at `url` as it was (`previous`), after a sign-in that
/// kept no tokens.
pub(super) fn unpin(dir: &Path, url: &str, previous: Option<&Pinned>) {
    let _ = match previous {
        Some(previous) => pin(dir, url, previous),
        None => std::fs::remove_file(pinned_path(dir, url)),
    };
}

/// The authorization server the sign-in to the server at `url` was made at, if one was kept
/// (read to 4 KiB).
pub(super) fn pinned(dir: &Path, url: &str) -> Option<Pinned> {
    use std::io::Read;
    let mut text = String::new();
    let file = std::fs::File::open(pinned_path(dir, url)).ok()?;
    file.take(4 << 10).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// The client a sign-in registered itself as (RFC 7591) at the authorization server pinned
/// beside it, and the redirect URI it registered: kept for the next `toolhost login`, which
/// signs in with it again (from the same loopback port) while the authorization server still
/// knows it, instead of registering a client at every sign-in. A sign-out keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Registered {
    pub client_id: String,
    pub redirect_uri: String,
    pub server: Pinned,
}

fn registered_path(dir: &Path, url: &str) -> PathBuf {
    store_path(dir, url).with_extension("client")
}

/// The client the last sign-in to the server at `url` registered, if one was kept (read to
/// 4 KiB).
pub fn registered(dir: &Path, url: &str) -> Option<Registered> {
    use std::io::Read;
    let mut text = String::new();
    let file = std::fs::File::open(registered_path(dir, url)).ok()?;
    file.take(4 << 10).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Keeps `client` as the one registered for sign-ins to the server at `url`.
pub(super) fn keep_registered(dir: &Path, url: &str, client: &Registered) -> std::io::Result<()> {
    let text = serde_json::to_vec(client).map_err(std::io::Error::other)?;
    write_private(&registered_path(dir, url), &text)
}

/// Makes the folder of `path` (and those above it) where missing, with mode 0700.
fn private_folder_of(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match path.parent() {
        Some(dir) => (std::fs::DirBuilder::new().recursive(true).mode(0o700)).create(dir),
        None => Ok(()),
    }
}

/// Writes `bytes` to `path` readable by this user alone: a new file of mode 0600 beside it,
/// renamed over it, in a folder made with mode 0700.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    private_folder_of(path)?;
    let partial = path.with_extension(format!("partial.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

/// Forgets the tokens kept for the server at `url` (`toolhost logout`), and what is kept
/// beside them but the client registered (a sign-out ends the sign-in, not the client):
/// whether there were any.
pub fn forget(dir: &Path, url: &str) -> std::io::Result<bool> {
    let _ = std::fs::remove_file(wanted_path(dir, url));
    let _ = std::fs::remove_file(store_path(dir, url).with_extension("lock"));
    let _ = std::fs::remove_file(pinned_path(dir, url));
    match std::fs::remove_file(store_path(dir, url)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn tokens_are_kept_for_this_user_alone_and_a_huge_file_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = store_path(&dir.path().join("sign-in"), "https://example.com/mcp");
        let store = FileStore::new(path.clone());
        assert!(store.load().await.expect("load").is_none());
        let credentials = StoredCredentials::new("client".into(), None, vec!["a".into()], Some(1));
        store.save(credentials).await.expect("save");
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let folder = std::fs::metadata(path.parent().expect("parent")).expect("dir");
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
        let loaded = store.load().await.expect("load").expect("kept");
        assert_eq!(loaded.client_id, "client");
        // Written by another process (`toolhost login`): read again.
        let other = FileStore::new(path.clone());
        let newer = StoredCredentials::new("newer client".into(), None, Vec::new(), Some(2));
        other.save(newer).await.expect("save");
        let loaded = store.load().await.expect("load").expect("kept");
        assert_eq!(loaded.client_id, "newer client");
        std::fs::write(&path, vec![b' '; 70 << 10]).expect("huge");
        assert!(store.load().await.is_err());
        store.clear().await.expect("clear");
        assert!(store.load().await.expect("load").is_none());
        assert!(!forget(path.parent().expect("dir"), "https://example.com/mcp").expect("forget"));
    }

    #[tokio::test]
    async fn one_renewal_at_a_time_and_a_wait_that_ends_says_why() {
        let dir = tempfile::tempdir().expect("dir");
        let path = store_path(&dir.path().join("sign-in"), "https://example.com/mcp");
        // Two stores of one file, as a `serve` and a `toolhost call` have: their own opens,
        // so the lock holds between them as between two processes.
        let (serving, calling) = (FileStore::new(path.clone()), FileStore::new(path.clone()));
        let held = serving.acquire_refresh_guard().await.expect("lock");
        let lock = path.with_extension("lock");
        let mode = std::fs::metadata(&lock)
            .expect("lock file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let waiting = tokio::spawn(async move { calling.acquire_refresh_guard().await.is_ok() });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "the second renewal waits for the first"
        );
        drop(held);
        assert!(waiting.await.expect("joined"), "then takes its turn");
        // A holder that never lets go: the wait ends at its bound, with the reason.
        let _held = serving.acquire_refresh_guard().await.expect("lock");
        let said = match locked(&lock, Duration::from_millis(100)).await {
            Ok(_) => panic!("locked twice"),
            Err(e) => e.to_string(),
        };
        assert!(said.contains("another process has been renewing"), "{said}");
    }
}
