//! The local content store: what was pulled from registries, kept by digest under the cache
//! directory (`<cache>/oci/`), with the same rules as the compiled cache (a directory of this
//! user's alone, files 0600 written under a random name and renamed into place, never through
//! a link). Every blob is checked against its digest when it is written and again when it is
//! read: a blob that no longer matches is removed and counts as not pulled.
//!
//! ```text
//! oci/blobs/sha256/<hex>     manifests, indexes and components, by digest
//! oci/tags/<blake3>.json     the digest a tag last resolved to, and when
//! ```

use super::RegistryError;
use super::reference::{Digest, Reference};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use toolhost_config::{private_dir, write_new};

/// What a tag last resolved to.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TagRecord {
    /// The tagged reference, as written (without a digest).
    pub reference: String,
    pub digest: Digest,
    /// When it was resolved (RFC 3339).
    pub resolved_at: String,
}

/// The content store in one directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating them if needed) the store's directories under `dir`.
    pub fn open(dir: &Path) -> Result<Self, RegistryError> {
        let store = Store {
            dir: dir.to_path_buf(),
        };
        for dir in [
            dir.to_path_buf(),
            dir.join("blobs"),
            store.blobs(),
            store.tags(),
        ] {
            private_dir(&dir).map_err(|e| RegistryError::Store(e.to_string()))?;
        }
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn blobs(&self) -> PathBuf {
        self.dir.join("blobs").join("sha256")
    }

    fn tags(&self) -> PathBuf {
        self.dir.join("tags")
    }

    /// Where the blob `digest` is kept.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.blobs().join(digest.hex())
    }

    /// True when a blob is kept for `digest` (not yet checked).
    pub fn has(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// The blob `digest`, if it is kept and still matches its digest (one that does not is
    /// removed). Read no further than `limit` bytes.
    pub fn read(&self, digest: &Digest, limit: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(digest);
        if !path.is_file() {
            return None;
        }
        match toolhost_config::read_limited(&path, limit) {
            Ok(bytes) if Digest::of(&bytes) == *digest => Some(bytes),
            Ok(_) => {
                tracing::warn!(
                    "{} no longer matches its digest: removed; it will be pulled again",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                None
            }
            Err(e) => {
                tracing::warn!("cannot read {}: {e}", path.display());
                None
            }
        }
    }

    /// Keeps `bytes` as the blob `digest`, after checking that they are.
    pub fn write(&self, digest: &Digest, bytes: &[u8]) -> Result<PathBuf, RegistryError> {
        let actual = Digest::of(bytes);
        if actual != *digest {
            return Err(RegistryError::DigestMismatch {
                expected: digest.clone(),
                actual,
            });
        }
        let path = self.blob_path(digest);
        let io = |e: std::io::Error| RegistryError::Store(format!("{}: {e}", path.display()));
        let temp = write_new(&self.blobs(), digest.hex(), &[bytes]).map_err(io)?;
        std::fs::rename(&temp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            io(e)
        })?;
        Ok(path)
    }

    fn tag_path(&self, reference: &Reference) -> PathBuf {
        let key = blake3::hash(reference.to_string().as_bytes());
        self.tags().join(format!("{}.json", &key.to_hex()[..32]))
    }

    /// What the tag of `reference` last resolved to, if it ever did.
    pub fn tag(&self, reference: &Reference) -> Option<TagRecord> {
        let bytes = toolhost_config::read_limited(&self.tag_path(reference), 64 * 1024).ok()?;
        let record: TagRecord = serde_json::from_slice(&bytes).ok()?;
        (record.reference == reference.to_string()).then_some(record)
    }

    /// Records that the tag of `reference` resolved to `digest` now.
    pub fn set_tag(&self, reference: &Reference, digest: &Digest) -> Result<(), RegistryError> {
        let record = TagRecord {
            reference: reference.to_string(),
            digest: digest.clone(),
            resolved_at: toolhost_audit::now_rfc3339(),
        };
        let bytes =
            serde_json::to_vec_pretty(&record).map_err(|e| RegistryError::Store(e.to_string()))?;
        let path = self.tag_path(reference);
        let io = |e: std::io::Error| RegistryError::Store(format!("{}: {e}", path.display()));
        let temp = write_new(&self.tags(), "tag", &[&bytes]).map_err(io)?;
        std::fs::rename(&temp, &path).map_err(io)
    }

    /// Removes the blobs not in `in_use` but the `keep_unused` most recently written, and the
    /// tag records whose digest is gone.
    pub fn prune(&self, in_use: &HashSet<Digest>, keep_unused: usize) -> toolhost_config::Pruned {
        let mut pruned = toolhost_config::Pruned::default();
        let Ok(entries) = std::fs::read_dir(self.blobs()) else {
            return pruned;
        };
        let mut unused = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(digest) = name
                .to_str()
                .and_then(|hex| Digest::parse(&format!("sha256:{hex}")).ok())
            else {
                continue;
            };
            if in_use.contains(&digest) {
                pruned.kept += 1;
                continue;
            }
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            let written = metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
            unused.push((written, metadata.len(), entry.path()));
        }
        pruned.remove_all_but_recent(unused, keep_unused);
        for entry in std::fs::read_dir(self.tags())
            .into_iter()
            .flatten()
            .flatten()
        {
            let record = toolhost_config::read_limited(&entry.path(), 64 * 1024)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<TagRecord>(&bytes).ok());
            if record.is_none_or(|r| !self.has(&r.digest)) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        pruned
    }

    /// Every blob kept, for listings.
    pub fn blobs_kept(&self) -> HashSet<Digest> {
        std::fs::read_dir(self.blobs())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let hex = e.file_name().into_string().ok()?;
                Digest::parse(&format!("sha256:{hex}")).ok()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn blobs_are_checked_on_write_and_on_read_and_kept_private() {
        let temp = tempfile::tempdir().unwrap();
        let store = Store::open(&temp.path().join("oci")).unwrap();
        let digest = Digest::of(b"component");
        let wrong = Digest::of(b"another");
        assert!(matches!(
            store.write(&wrong, b"component"),
            Err(RegistryError::DigestMismatch { .. })
        ));
        assert!(!store.has(&wrong), "nothing half-written");
        let path = store.write(&digest, b"component").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(store.read(&digest, 1024).unwrap(), b"component");
        // Edited in place: no longer the blob, removed.
        std::fs::write(&path, b"tampered").unwrap();
        assert!(store.read(&digest, 1024).is_none());
        assert!(!store.has(&digest));
    }

    #[test]
    fn tags_remember_their_digest_and_prune_keeps_what_is_used() {
        let temp = tempfile::tempdir().unwrap();
        let store = Store::open(temp.path()).unwrap();
        let reference = Reference::parse("oci://localhost:5000/echo:1").unwrap();
        assert!(store.tag(&reference).is_none());
        let used = Digest::of(b"used");
        let old = Digest::of(b"old");
        store.write(&used, b"used").unwrap();
        store.write(&old, b"old").unwrap();
        store.set_tag(&reference, &old).unwrap();
        assert_eq!(store.tag(&reference).unwrap().digest, old);
        let pruned = store.prune(&HashSet::from([used.clone()]), 0);
        assert_eq!((pruned.removed, pruned.kept), (1, 1));
        assert!(store.has(&used) && !store.has(&old));
        assert!(store.tag(&reference).is_none(), "its digest is gone");
    }
}
