//! The on-disk cache of compiled components, authenticated: `<blake3 of the .wasm>-<engine
//! hash>.cwasm`, each file the compiled artifact preceded by a keyed blake3 MAC over the engine
//! hash, the component's hash and the artifact. The key (`key`, 32 random bytes) never leaves
//! the cache directory and the host; a file that does not carry the right MAC (another
//! component's artifact copied over an entry, a truncated or edited file) is never handed to
//! wasmtime as native code: it is removed and the component compiled again.
//!
//! The directory is the host user's alone: created 0700; an existing one owned by someone else
//! is refused, and one that others may write is made 0700 (with a warning). Files are written
//! under a fresh random name opened with `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600, then renamed
//! into place, so a link planted in the directory is never written through and a reader never
//! sees half a file.

use super::SourceHash;
use std::collections::HashSet;
use std::fs::OpenOptions;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use toolhost_config::{PrivateDirError, Pruned, private_dir, write_new};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The MAC's length, at the start of every entry.
const MAC_BYTES: usize = 32;

/// Why the cache directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Dir(#[from] PrivateDirError),
    #[error("cannot use the cache directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the cache key {path} is not a private file of this user (it must be a regular file, \
         mode 0600, of 32 bytes); remove it and the host will make a new one"
    )]
    BadKey { path: PathBuf },
}

/// What the cache holds for a component.
pub(crate) enum Cached {
    /// No entry, or none that may be used (it is removed): the component is compiled.
    Missing,
    Found(Component),
    /// An entry of this host's own compiler that the engine refuses to load: the component
    /// needs more of the instance pool than one call gets. Compiling it again would make the
    /// same artifact, refused the same way.
    Refused(wasmtime::Error),
}

pub(crate) struct ComponentCache {
    dir: PathBuf,
    /// Differs when the wasmtime version or any setting that affects code generation does.
    engine_hash: u64,
    key: [u8; 32],
}

impl ComponentCache {
    /// Opens (creating it if needed) the cache in `dir` for code of `engine`.
    pub(crate) fn open(dir: &Path, engine: &Engine) -> Result<Self, CacheError> {
        private_dir(dir)?;
        let key = key(&dir.join("key"))?;
        remove_stale_temporaries(dir);
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(ComponentCache {
            dir: dir.to_path_buf(),
            engine_hash: hasher.finish(),
            key,
        })
    }

    fn path(&self, hash: &SourceHash) -> PathBuf {
        self.dir.join(self.file_name(hash))
    }

    fn file_name(&self, hash: &SourceHash) -> String {
        format!("{hash}-{:016x}.cwasm", self.engine_hash)
    }

    /// True when there is an entry for `hash` (not yet checked).
    pub(crate) fn has(&self, hash: &SourceHash) -> bool {
        self.path(hash).is_file()
    }

    /// Removes the entry of `hash`, if there is one: Winch's code once Cranelift's is cached
    /// (every host of this build then loads Cranelift's).
    pub(crate) fn remove(&self, hash: &SourceHash) {
        let path = self.path(hash);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), "could not remove a cache entry: {e}");
        }
    }

    /// The MAC of an entry: it binds the artifact to this engine and this component.
    fn mac(&self, hash: &SourceHash, artifact: &[u8]) -> [u8; MAC_BYTES] {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(&self.engine_hash.to_le_bytes());
        hasher.update(&hash.0);
        hasher.update(artifact);
        *hasher.finalize().as_bytes()
    }

    /// The cached compilation of `hash`, if there is an entry with the right MAC.
    pub(crate) fn get(&self, engine: &Engine, hash: &SourceHash) -> Cached {
        let path = self.path(hash);
        let bytes = match read_private(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Cached::Missing,
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring an unreadable cache entry: {e}");
                let _ = std::fs::remove_file(&path);
                return Cached::Missing;
            }
        };
        let authentic = bytes.len() > MAC_BYTES && {
            let (mac, artifact) = bytes.split_at(MAC_BYTES);
            let mac: [u8; MAC_BYTES] = mac.try_into().unwrap_or([0; MAC_BYTES]);
            // blake3's Hash compares in constant time.
            blake3::Hash::from_bytes(self.mac(hash, artifact)) == blake3::Hash::from_bytes(mac)
        };
        if !authentic {
            tracing::warn!(
                path = %path.display(),
                "a cache entry does not carry this host's MAC for this component; it is removed and the component compiled again"
            );
            let _ = std::fs::remove_file(&path);
            return Cached::Missing;
        }
        // SAFETY: `deserialize` trusts its bytes to be native code that this wasmtime produced
        // for this engine's settings. They are: the MAC above was made with the host's key,
        // over these very bytes and this component's hash, by `put` below, which stores only
        // what this host compiled (in process or in its compile worker). A file that another
        // process wrote or changed does not pass. wasmtime also checks the header and refuses
        // an artifact of another version or configuration.
        match unsafe { Component::deserialize(engine, &bytes[MAC_BYTES..]) } {
            Ok(component) => {
                // Its time of last use, for pruning (the most recently used are kept).
                let _ = std::fs::File::open(&path)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Cached::Found(component)
            }
            // What this host compiled for this engine's code settings, refused by the engine
            // now: by the pool's per-component limits, which compiling does not check. The
            // entry is kept, so that a host started with a larger share loads it without
            // compiling it again.
            Err(e) => Cached::Refused(e),
        }
    }

    /// Stores `artifact`, the compilation of `hash` (whether or not this engine can load it:
    /// see [`Cached::Refused`]). Failure is logged, not fatal: the cache
    /// is an optimisation.
    pub(crate) fn put(&self, hash: &SourceHash, artifact: &[u8]) {
        let mac = self.mac(hash, artifact);
        let result = write_new(&self.dir, &format!("{hash}"), &[&mac, artifact]).and_then(|temp| {
            std::fs::rename(&temp, self.path(hash)).inspect_err(|_| {
                let _ = std::fs::remove_file(&temp);
            })
        });
        if let Err(e) = result {
            tracing::warn!(dir = %self.dir.display(), "could not write the component cache: {e}");
        }
    }
}

impl ComponentCache {
    /// Removes the entries of components not in `in_use` (and every entry another wasmtime
    /// or code-generation setting made), but the `keep_unused` most recently used of them and
    /// those used within `spare` (an entry's modification time is its last use). The entries
    /// of `others` (the caches of this host's other tiers, in the same directory: Winch's) are
    /// kept for the components in use that have no entry here yet (a restart serves their
    /// code while this tier's is compiled again); once this tier's is here, they go.
    pub(crate) fn prune(
        &self,
        in_use: &HashSet<SourceHash>,
        keep_unused: usize,
        spare: Option<std::time::Duration>,
        others: &[&ComponentCache],
    ) -> Pruned {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Pruned::default();
        };
        let mut ours: HashSet<String> = in_use.iter().map(|hash| self.file_name(hash)).collect();
        for hash in in_use.iter().filter(|hash| !self.has(hash)) {
            ours.extend(others.iter().map(|other| other.file_name(hash)));
        }
        let mut pruned = Pruned::default();
        let mut unused = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| n.ends_with(".cwasm")) else {
                continue;
            };
            if ours.contains(name) {
                pruned.kept += 1;
                continue;
            }
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            let used = metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
            let lately = spare.is_some_and(|spare| used.elapsed().is_ok_and(|age| age < spare));
            if lately {
                pruned.kept += 1;
                continue;
            }
            unused.push((used, metadata.len(), entry.path()));
        }
        pruned.remove_all_but_recent(unused, keep_unused);
        pruned
    }
}

/// A temporary file older than this was left by a host that stopped while writing it.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes the temporary files (`.<name>-<random>.tmp`) that a host stopped in the middle of
/// a write left behind; a recent one may be another host's write in progress and is kept.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with('.') && name.ends_with(".tmp")) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > STALE_TEMPORARY);
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The cache's MAC key: read from `path`, or made (32 random bytes, 0600) if there is none.
/// A key that is not a private 32-byte file of this user is replaced (with a warning): every
/// entry made with the old one then fails its check and is compiled again.
fn key(path: &Path) -> Result<[u8; 32], CacheError> {
    match read_key(path) {
        Ok(Some(key)) => return Ok(key),
        Ok(None) => {}
        Err(()) => {
            tracing::warn!(
                "the cache key {} is not a private 32-byte file of this user; it is replaced and \
                 the cache's entries will be compiled again",
                path.display()
            );
            std::fs::remove_file(path).map_err(|_| CacheError::BadKey {
                path: path.to_path_buf(),
            })?;
        }
    }
    let io = |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| io(std::io::Error::other(e.to_string())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let temp = write_new(dir, "key", &[&key]).map_err(io)?;
    // A key made at the same moment by another host wins; both then use it.
    let linked = std::fs::hard_link(&temp, path);
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read_key(path) {
            Ok(Some(key)) => Ok(key),
            _ => Err(CacheError::BadKey {
                path: path.to_path_buf(),
            }),
        },
        Err(e) => Err(io(e)),
    }
}

/// The key at `path`: `None` when there is none, `Err` when it is not a private key of ours.
fn read_key(path: &Path) -> Result<Option<[u8; 32]>, ()> {
    let bytes = match read_private(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(()),
    };
    let metadata = std::fs::symlink_metadata(path).map_err(|_| ())?;
    if metadata.mode() & 0o077 != 0 || metadata.uid() != rustix::process::geteuid().as_raw() {
        return Err(());
    }
    bytes.try_into().map(Some).map_err(|_| ())
}

/// Reads a regular file without following a symbolic link at its name.
fn read_private(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_directory_others_may_write_is_made_private_and_a_new_key_is_0600() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("cache");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let first = key(&dir.join("key")).unwrap();
        assert_eq!(
            std::fs::metadata(dir.join("key")).unwrap().mode() & 0o777,
            0o600
        );
        assert_eq!(key(&dir.join("key")).unwrap(), first, "the key is kept");
        // A key others could read is replaced by a new private one.
        std::fs::set_permissions(dir.join("key"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_ne!(key(&dir.join("key")).unwrap(), first);
        assert_eq!(
            std::fs::metadata(dir.join("key")).unwrap().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn stale_temporaries_are_removed_and_recent_ones_kept() {
        let temp = tempfile::tempdir().unwrap();
        let old = write_new(temp.path(), "old", &[b"half"]).unwrap();
        let recent = write_new(temp.path(), "recent", &[b"in progress"]).unwrap();
        let entry = temp.path().join("entry.cwasm");
        std::fs::write(&entry, b"kept").unwrap();
        let long_ago = std::time::SystemTime::now() - 2 * STALE_TEMPORARY;
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        File::options()
            .write(true)
            .open(&entry)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        remove_stale_temporaries(temp.path());
        assert!(!old.exists());
        assert!(recent.exists());
        assert!(entry.exists());
    }

    #[test]
    fn a_planted_link_is_not_written_through() {
        let temp = tempfile::tempdir().unwrap();
        let victim = temp.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // A link at a name the writer might choose is refused (O_EXCL), never followed.
        let link = temp.path().join(".x-0000000000000000.tmp");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let open = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&link);
        assert!(open.is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let written = write_new(temp.path(), "x", &[b"data"]).unwrap();
        assert_eq!(std::fs::read(&written).unwrap(), b"data");
        assert!(
            read_private(&link).is_err(),
            "reads do not follow links either"
        );
    }
}
