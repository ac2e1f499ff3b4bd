//! The audit file: one JSON line per call, each written with its own `write(2)` as the call
//! ends (before its result reaches the caller), so a crash of the host loses no record it
//! wrote. `fsync` is the caller's: `serve` syncs once a second when something was written,
//! on reopen and at shutdown, so a power loss can lose about the last second.
//!
//! A record that cannot be written (a full disk, a file gone read-only) is held in memory, up
//! to [`MAX_HELD_BYTES`], and written first as soon as the file takes writes again; past that
//! bound records are counted as lost. What the host does meanwhile is the operator's policy,
//! [`OnAuditError`]: refuse calls (the default) or go on serving. [`AuditLog::reopen`] opens
//! the path anew after `logrotate` moved the file.
//!
//! The first open takes the path as the operator configured it (a link to a device or to
//! `/dev/stdout` included). A reopen happens later, after others (logrotate, anyone who can
//! write the directory) changed it, so it trusts nothing there: it never follows a link and
//! never waits (`O_NOFOLLOW | O_NONBLOCK`: a FIFO planted at the path fails at once instead
//! of blocking the open), takes only a regular file (checked on the opened descriptor), and
//! narrows the mode through that descriptor alone. A reopen that fails keeps the old file in
//! use and is counted in [`AuditHealth`] (`status`, `/metrics`).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Records held in memory while the file refuses writes, at most (in bytes of JSON lines).
pub const MAX_HELD_BYTES: usize = 4 << 20;

/// What the host does while its audit log cannot be written (`[host] on-audit-error`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum OnAuditError {
    /// Calls are refused (`unavailable`) until the log takes writes again; nothing runs
    /// that the log does not record.
    #[default]
    Refuse,
    /// Calls go on; records that cannot be held are counted as lost (in `status`).
    Continue,
}

/// Why the audit log could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("audit log {path}: {source}")]
pub struct AuditError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The state of the audit log, for `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHealth {
    /// Records held in memory, waiting for the file to take writes.
    pub held: usize,
    /// Records lost because the file refused writes and the memory bound was reached.
    pub lost: u64,
    /// The last write error, while the file refuses writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Reopens that failed since the host started (the old file stayed in use).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reopen_failures: u64,
    /// Why the last reopen failed, until one succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopen_error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An append-only JSONL file.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    policy: OnAuditError,
    /// The directory the file was first opened in (its links followed then, as the operator
    /// configured it), kept open: a reopen opens the file name in it, so a link planted later
    /// in a directory above cannot redirect the records.
    dir: Option<std::os::fd::OwnedFd>,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    held: VecDeque<Vec<u8>>,
    held_bytes: usize,
    lost: u64,
    error: Option<String>,
    /// A failed write left part of a line in the file: the next write starts a new line.
    torn: bool,
    /// Written since the last fsync.
    unsynced: bool,
    /// A regular file: only those are synced (a FIFO or a device cannot be).
    regular: bool,
    reopen_failures: u64,
    reopen_error: Option<String>,
}

impl AuditLog {
    /// Opens (creating it and its directory if needed) the file at `path` for appending.
    pub fn open(path: &Path, policy: OnAuditError) -> Result<Self, AuditError> {
        let (file, regular) = open_file(path).map_err(|source| AuditError {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = rustix::fs::open(
            parent_of(path),
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok();
        Ok(AuditLog {
            path: path.to_path_buf(),
            policy,
            dir,
            inner: Mutex::new(Inner {
                file,
                held: VecDeque::new(),
                held_bytes: 0,
                lost: 0,
                error: None,
                torn: false,
                unsynced: false,
                regular,
                reopen_failures: 0,
                reopen_error: None,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn policy(&self) -> OnAuditError {
        self.policy
    }

    /// Appends one record as one line.
    pub fn append(&self, record: &super::AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(record).map_err(|e| AuditError {
            path: self.path.clone(),
            source: e.into(),
        })?;
        line.push(b'\n');
        self.append_line(line)
    }

    /// Appends one line, after any held ones. When the file refuses it, the line is held (or
    /// counted as lost past [`MAX_HELD_BYTES`]) and the error returned; the first failure and
    /// the recovery are logged once each, not once per record.
    pub(crate) fn append_line(&self, line: Vec<u8>) -> Result<(), AuditError> {
        let mut inner = self.lock();
        let written = inner.write_held().and_then(|()| inner.write_line(&line));
        match written {
            Ok(()) => {
                self.recovered(&mut inner);
                Ok(())
            }
            Err(source) => {
                inner.hold(line);
                Err(self.failed(&mut inner, source))
            }
        }
    }

    /// Ok when the file takes writes: held records are written first. Under
    /// [`OnAuditError::Refuse`] a call runs only after this said Ok.
    pub fn writable(&self) -> Result<(), AuditError> {
        let mut inner = self.lock();
        if inner.held.is_empty() {
            return Ok(());
        }
        self.write_held(&mut inner)
    }

    /// Opens the path anew (after `logrotate` moved the file) and writes the held records
    /// there: a regular file only, never through a link, never waiting (see the module
    /// docs). On failure the old file stays in use, and the failure is counted. A file that
    /// is not a regular one (a device, `/dev/stdout`) and that the path still names is kept
    /// as it is: nothing rotates it.
    pub fn reopen(&self) -> Result<(), AuditError> {
        let error = |source| AuditError {
            path: self.path.clone(),
            source,
        };
        if self.names_the_open_device() {
            return Ok(());
        }
        let file = match reopen_file(self.dir.as_ref(), &self.path) {
            Ok(file) => file,
            Err(source) => {
                let mut inner = self.lock();
                inner.reopen_failures += 1;
                inner.reopen_error = Some(source.to_string());
                return Err(error(source));
            }
        };
        let (old, unsynced) = {
            let mut inner = self.lock();
            inner.reopen_error = None;
            let old = std::mem::replace(&mut inner.file, file);
            let unsynced = std::mem::replace(&mut inner.unsynced, false) && inner.regular;
            inner.regular = true;
            inner.torn = false;
            if !inner.held.is_empty() {
                self.write_held(&mut inner)?;
            }
            (old, unsynced)
        };
        // The moved file keeps what was written to it: durable before it is let go, outside
        // the lock so that calls go on meanwhile.
        if unsynced {
            let _ = old.sync_data();
        }
        Ok(())
    }

    /// True when the open file is not a regular one and the path (links followed, as at the
    /// first open) still names it.
    fn names_the_open_device(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let inner = self.lock();
        if inner.regular {
            return false;
        }
        let (Ok(open), Ok(named)) = (inner.file.metadata(), std::fs::metadata(&self.path)) else {
            return false;
        };
        open.dev() == named.dev() && open.ino() == named.ino()
    }

    /// Makes what was written durable (`fdatasync`), if anything was written since the last
    /// time. The lock is not held across the sync: calls go on meanwhile.
    pub fn sync(&self) -> Result<(), AuditError> {
        let file = {
            let mut inner = self.lock();
            if !inner.unsynced || !inner.regular {
                return Ok(());
            }
            inner.unsynced = false;
            inner.file.try_clone()
        };
        file.and_then(|f| f.sync_data())
            .map_err(|source| AuditError {
                path: self.path.clone(),
                source,
            })
    }

    /// Records held and lost, and the last error while writes fail.
    pub fn health(&self) -> AuditHealth {
        let inner = self.lock();
        AuditHealth {
            held: inner.held.len(),
            lost: inner.lost,
            error: inner.error.clone(),
            reopen_failures: inner.reopen_failures,
            reopen_error: inner.reopen_error.clone(),
        }
    }

    /// At shutdown: writes the held records if the file takes them, syncs, and hands back
    /// the lines that still could not be written (the caller prints them to stderr, the
    /// last place they can go).
    pub fn close(&self) -> Vec<Vec<u8>> {
        let _ = self.writable();
        if let Err(e) = self.sync() {
            tracing::error!("{e}");
        }
        let mut inner = self.lock();
        inner.held_bytes = 0;
        inner.held.drain(..).collect()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the held records, saying once that writes work again or fail.
    fn write_held(&self, inner: &mut Inner) -> Result<(), AuditError> {
        match inner.write_held() {
            Ok(()) => {
                self.recovered(inner);
                Ok(())
            }
            Err(source) => Err(self.failed(inner, source)),
        }
    }

    fn failed(&self, inner: &mut Inner, source: std::io::Error) -> AuditError {
        if inner.error.is_none() {
            tracing::error!(
                "the audit log {} cannot be written: {source}; records are held in memory \
                 (up to {} MiB) and {}",
                self.path.display(),
                MAX_HELD_BYTES >> 20,
                match self.policy {
                    OnAuditError::Refuse =>
                        "calls are refused until it can (on-audit-error = \"refuse\")",
                    OnAuditError::Continue => "calls go on (on-audit-error = \"continue\")",
                }
            );
        }
        inner.error = Some(source.to_string());
        AuditError {
            path: self.path.clone(),
            source,
        }
    }

    fn recovered(&self, inner: &mut Inner) {
        if inner.error.take().is_some() {
            tracing::warn!(
                "the audit log {} takes writes again; held records were written ({} lost in all)",
                self.path.display(),
                inner.lost
            );
        }
    }
}

impl Inner {
    /// Writes the held lines, oldest first, stopping at the first failure.
    fn write_held(&mut self) -> std::io::Result<()> {
        while let Some(line) = self.held.pop_front() {
            if let Err(e) = self.write_line(&line) {
                self.held.push_front(line);
                return Err(e);
            }
            self.held_bytes -= line.len();
        }
        Ok(())
    }

    /// One line in as few writes as the kernel allows; a failure part-way marks the line torn.
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.torn {
            write_counted(&mut self.file, b"\n").map_err(|(_, e)| e)?;
            self.torn = false;
        }
        self.unsynced = true;
        write_counted(&mut self.file, line).map_err(|(written, e)| {
            self.torn = written > 0;
            e
        })
    }

    fn hold(&mut self, line: Vec<u8>) {
        if self.held_bytes + line.len() > MAX_HELD_BYTES {
            self.lost += 1;
            return;
        }
        self.held_bytes += line.len();
        self.held.push_back(line);
    }
}

/// Writes all of `bytes`, or says how many were written before the error.
fn write_counted(file: &mut File, bytes: &[u8]) -> Result<(), (usize, std::io::Error)> {
    let mut written = 0;
    while written < bytes.len() {
        match file.write(&bytes[written..]) {
            Ok(0) => return Err((written, std::io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((written, e)),
        }
    }
    Ok(())
}

/// Opens `path` for appending, creating it (0600) and its directory, and says whether it is a
/// regular file. An existing regular file that others can read or write is made private: it
/// holds who called what.
fn open_file(path: &Path) -> std::io::Result<(File, bool)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let metadata = file.metadata()?;
    let mode = metadata.permissions().mode() & 0o777;
    if metadata.is_file() && mode & 0o077 != 0 {
        tracing::warn!(
            "the audit log {} could be read or written by others (mode {mode:04o}); it is now 0600",
            path.display()
        );
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok((file, metadata.is_file()))
}

/// The directory a path's file is in (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Opens the audit file again for appending, by its name in `dir` (the directory opened at
/// start; by its path when that could not be kept): never through a link (`O_NOFOLLOW`),
/// never waiting for a FIFO's reader (`O_NONBLOCK`), and only a regular file of this user's
/// with no other name (a hard link would send the records to another file too), checked on
/// the opened descriptor; created 0600, and an existing one narrowed to 0600 through that
/// descriptor (`fchmod`).
fn reopen_file(dir: Option<&std::os::fd::OwnedFd>, path: &Path) -> std::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    use std::os::unix::fs::MetadataExt;
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(0o600);
    let opened = match (dir, path.file_name()) {
        (Some(dir), Some(name)) => rustix::fs::openat(dir, name, flags, mode),
        _ => rustix::fs::open(path, flags, mode),
    };
    let file = File::from(opened.map_err(|e| match e {
        Errno::LOOP => std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path is a symbolic link now, which a reopen never follows",
        ),
        Errno::NXIO => std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path is a FIFO now, which a reopen never takes",
        ),
        other => std::io::Error::from(other),
    })?);
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "the path is not a regular file now ({}), which a reopen never takes",
                kind_of(&metadata)
            ),
        ));
    }
    if metadata.uid() != rustix::process::geteuid().as_raw() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the file at the path belongs to user {}, not to this host's, which a reopen \
                 never writes to",
                metadata.uid()
            ),
        ));
    }
    if metadata.nlink() != 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "the file at the path has {} names (hard links), which a reopen never writes to",
                metadata.nlink()
            ),
        ));
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

fn kind_of(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .expect("read")
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_full_device_holds_records_and_a_reopen_writes_them_in_order() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink("/dev/full", &path).expect("link");
        let log = AuditLog::open(&path, OnAuditError::Refuse).expect("open");
        assert!(log.append_line(b"{\"n\":1}\n".to_vec()).is_err());
        assert!(log.append_line(b"{\"n\":2}\n".to_vec()).is_err());
        assert!(log.writable().is_err());
        let health = log.health();
        assert_eq!((health.held, health.lost), (2, 0));
        assert!(health.error.is_some_and(|e| e.contains("No space")));
        // Space comes back: the path now names a real file.
        std::fs::remove_file(&path).expect("unlink");
        log.reopen().expect("reopen");
        log.writable().expect("writable");
        log.append_line(b"{\"n\":3}\n".to_vec()).expect("append");
        assert_eq!(lines(&path), ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"]);
        assert_eq!(log.health(), AuditHealth::default());
        log.sync().expect("sync");
    }

    #[test]
    fn records_past_the_memory_bound_are_counted_lost() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink("/dev/full", &path).expect("link");
        let log = AuditLog::open(&path, OnAuditError::Continue).expect("open");
        let line = vec![b'x'; 1 << 20];
        for _ in 0..6 {
            let _ = log.append_line(line.clone());
        }
        // A device is not synced: no error once a second from the periodic sync.
        log.sync().expect("nothing to sync on a device");
        let health = log.health();
        assert_eq!((health.held, health.lost), (4, 2));
        assert_eq!(log.close().len(), 4);
    }

    #[test]
    fn a_device_that_is_not_a_regular_file_keeps_its_mode() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink("/dev/null", &path).expect("link");
        let before = std::fs::metadata("/dev/null").expect("meta").permissions();
        AuditLog::open(&path, OnAuditError::Refuse).expect("open");
        assert_eq!(
            std::fs::metadata("/dev/null").expect("meta").permissions(),
            before
        );
    }

    #[test]
    fn a_reopen_never_follows_a_link_never_waits_on_a_fifo_and_keeps_the_old_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, OnAuditError::Refuse).expect("open");
        log.append_line(b"first\n".to_vec()).expect("first");
        let first = std::fs::metadata(&path).expect("meta").ino();

        // A link to another file: refused; the target is neither written nor narrowed.
        let target = dir.path().join("target");
        std::fs::write(&target, "").expect("target");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).expect("mode");
        std::fs::rename(&path, dir.path().join("audit.jsonl.1")).expect("rotate");
        std::os::unix::fs::symlink(&target, &path).expect("link");
        let refused = log.reopen().expect_err("a link").to_string();
        assert!(refused.contains("symbolic link"), "{refused}");
        log.append_line(b"second\n".to_vec())
            .expect("to the old file");
        let target_meta = std::fs::metadata(&target).expect("target");
        assert_eq!(target_meta.len(), 0);
        assert_eq!(target_meta.permissions().mode() & 0o777, 0o644);

        // A FIFO: refused at once (a blocking open would wait for a reader for ever).
        std::fs::remove_file(&path).expect("unlink");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        let refused = log.reopen().expect_err("a FIFO").to_string();
        assert!(refused.contains("FIFO"), "{refused}");

        // A directory: refused, named.
        std::fs::remove_file(&path).expect("unlink");
        std::fs::create_dir(&path).expect("dir");
        let refused = log.reopen().expect_err("a directory").to_string();
        assert!(
            refused.contains("Is a directory") || refused.contains("directory"),
            "{refused}"
        );
        // A second name of another file (a hard link): refused, nothing written to it.
        std::fs::remove_dir(&path).expect("rmdir");
        let other = dir.path().join("other.log");
        std::fs::write(&other, "").expect("other");
        std::fs::hard_link(&other, &path).expect("hard link");
        let refused = log.reopen().expect_err("a hard link").to_string();
        assert!(refused.contains("hard links"), "{refused}");
        assert_eq!(std::fs::metadata(&other).expect("other").len(), 0);
        std::fs::remove_file(&path).expect("unlink");
        std::fs::create_dir(&path).expect("dir again");
        let health = log.health();
        assert_eq!(health.reopen_failures, 4);
        assert!(health.reopen_error.is_some());

        // A regular file again: taken, and the failures stop showing as the current error.
        std::fs::remove_dir(&path).expect("rmdir");
        log.reopen().expect("a regular file");
        log.append_line(b"third\n".to_vec()).expect("third");
        assert_eq!(lines(&path), ["third"]);
        assert_eq!(
            lines(&dir.path().join("audit.jsonl.1")),
            ["first", "second"]
        );
        assert_ne!(std::fs::metadata(&path).expect("meta").ino(), first);
        let health = log.health();
        assert_eq!((health.reopen_failures, health.reopen_error), (4, None));
    }
}
