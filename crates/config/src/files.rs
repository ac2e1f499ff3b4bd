//! The files the host reads and writes for itself, safely: what operators and strangers hand
//! it is read no further than a bound and only from a regular file ([`read_limited`]); what it
//! keeps (compiled components, pulled blobs, its status) lives in directories of its own user
//! that nobody else may write ([`private_dir`]), in new files written whole under a random
//! name and renamed into place ([`write_new`]), and what is no longer used is pruned but the
//! most recent few ([`Pruned`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a directory of the host's own cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error("cannot use the cache directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the cache directory {path} belongs to user {owner}, not to this user ({me}): compiled \
         code from it would run in this host; choose a directory of your own (--cache-dir)"
    )]
    NotOurs { path: PathBuf, owner: u32, me: u32 },
    #[error("{path} is not a directory")]
    NotADirectory { path: PathBuf },
}

/// Reads the file at `path`, which must be a regular file (links are followed, as Kubernetes
/// volumes need) of at most `limit` bytes; no more than that is ever read, so a device, a FIFO
/// or a file that grows while it is read cannot hold or fill the host.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // A device or a FIFO is refused from its metadata, without being opened (opening one
    // can have effects of its own). The file is then opened without blocking and without
    // becoming a terminal's controlling process, and checked again through the open file: a
    // path swapped for a FIFO in between would otherwise hold the reload for ever.
    let not_regular = || "it is not a regular file".to_string();
    if !std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .is_file()
    {
        return Err(not_regular());
    }
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(|e| e.to_string())?;
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    if !metadata.is_file() {
        return Err(not_regular());
    }
    if metadata.len() > limit {
        return Err(format!(
            "it is {} bytes, more than the {limit} bytes allowed",
            metadata.len()
        ));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "it grew past the {limit} bytes allowed while it was read"
        ));
    }
    Ok(bytes)
}

/// Makes sure `dir` is a directory of this user's that nobody else can write: created 0700,
/// refused when another user owns it, narrowed to 0700 when others may write it.
pub fn private_dir(dir: &Path) -> Result<(), PrivateDirError> {
    let io = |source| PrivateDirError::Io {
        path: dir.to_path_buf(),
        source,
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let metadata = std::fs::metadata(dir).map_err(io)?;
    if !metadata.is_dir() {
        return Err(PrivateDirError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let me = rustix::process::geteuid().as_raw();
    if metadata.uid() != me {
        return Err(PrivateDirError::NotOurs {
            path: dir.to_path_buf(),
            owner: metadata.uid(),
            me,
        });
    }
    let mode = metadata.mode() & 0o777;
    if mode & 0o022 != 0 {
        tracing::warn!(
            "the directory {} could be written by others (mode {mode:04o}); it is now 0700",
            dir.display()
        );
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

/// Writes `parts` to a new file in `dir` with a random name (`.<stem>-<random>.tmp`), created
/// exclusively, never through a link, mode 0600. Returns its path. (Also how `serve` writes
/// its status file: a fixed temporary name in a shared directory could be a planted link.)
pub fn write_new(dir: &Path, stem: &str, parts: &[&[u8]]) -> std::io::Result<PathBuf> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let path = dir.join(format!(".{stem}-{:016x}.tmp", u64::from_le_bytes(random)));
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)?;
    let written = parts.iter().try_for_each(|part| file.write_all(part));
    if let Err(e) = written.and_then(|()| file.sync_data()) {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// What pruning the cache did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    /// Entries removed, and the bytes they took.
    pub removed: usize,
    pub freed_bytes: u64,
    /// Entries kept: those in use, and the most recently used of the others.
    pub kept: usize,
}

impl Pruned {
    /// Removes the files of `unused` (when each was last used, its size, its path) but the
    /// `keep` most recently used, and counts what it removed and kept.
    pub fn remove_all_but_recent(
        &mut self,
        mut unused: Vec<(std::time::SystemTime, u64, PathBuf)>,
        keep: usize,
    ) {
        unused.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        for (i, (_, bytes, path)) in unused.into_iter().enumerate() {
            if i < keep {
                self.kept += 1;
            } else if std::fs::remove_file(&path).is_ok() {
                self.removed += 1;
                self.freed_bytes += bytes;
            }
        }
    }
}
