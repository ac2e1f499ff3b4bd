//! sandbox: capabilities -> a WASI context and `wasi:http` hooks. Default deny: no files, no
//! network, no sockets, no name lookups, no environment, no inherited stdio, no arguments.
//! Clocks and random stay. A plugin's stdout and stderr go to bounded in-memory [`Capture`]s.
//!
//! What a call may reach is exactly what its [`SandboxSpec`] lists (configuration's type:
//! `toolhost_config::draft` builds it from the invoker's `[capabilities]` after checking them
//! against the ensemble's `[grants]`).
//! Network access is outgoing HTTP only, each request checked in the host (`http`) against
//! the granted patterns ([`network`]); raw sockets and name lookups stay closed.

mod capture;
mod http;

pub(crate) use capture::Capture;
pub(crate) use http::NetworkGuard;
pub use http::{DNS_LOOKUPS, REMEMBERED_REFUSALS, REQUESTS_PER_CALL};
pub use toolhost_config::sandbox::{NetPattern, Preopen, SandboxSpec, network};

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

/// Why a sandbox could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot open granted directory {path}: {reason}")]
    Preopen { path: PathBuf, reason: String },
}

/// Builds the WASI context of one call; stdout and stderr go to the given captures.
pub(crate) fn wasi_context(
    spec: &SandboxSpec,
    stdout: Capture,
    stderr: Capture,
) -> Result<WasiCtx, SandboxError> {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(stdout)
        .stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    for (key, value) in &spec.env {
        builder.env(key, value);
    }
    for preopen in &spec.preopens {
        let perms = if preopen.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        let error = |reason: String| SandboxError::Preopen {
            path: preopen.host.clone(),
            reason,
        };
        let dir = open_without_links(&preopen.host).map_err(error)?;
        // wasmtime-wasi opens preopens by path; this one names the directory just opened.
        let by_fd = format!("/proc/self/fd/{}", dir.as_raw_fd());
        builder
            .preopened_dir(&by_fd, &preopen.guest, perms)
            .map_err(|e| error(e.to_string()))?;
    }
    Ok(builder.build())
}

/// Which directories the preopens of `spec` are now, as (device, inode), opened as a call's
/// context opens them; `None` when one no longer opens that way (a link has appeared in it,
/// or it is gone). A prepared instance opened its directories when it was made: the call that
/// takes it compares them with what the grants name at that moment, and an instance whose
/// directories have changed is not used (its call instantiates, and gets the refusal).
pub(crate) fn granted_directories(spec: &SandboxSpec) -> Option<Vec<(u64, u64)>> {
    spec.preopens
        .iter()
        .map(|preopen| {
            let dir = open_without_links(&preopen.host).ok()?;
            let stat = rustix::fs::fstat(&dir).ok()?;
            Some((stat.st_dev as u64, stat.st_ino as u64))
        })
        .collect()
}

/// Opens a granted directory, refusing a path with a symbolic link anywhere in it. Granted
/// paths are canonical when the catalog is built, so a link there now is one somebody made
/// since: perhaps a tool with a `read-write` grant that replaced a directory below it (which
/// another invoker is granted) with a link to `/`.
fn open_without_links(path: &std::path::Path) -> Result<std::os::fd::OwnedFd, String> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::openat2(CWD, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Ok(dir) => Ok(dir),
        Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::XDEV) => Err(
            "a symbolic link has appeared in it since the catalog was built; it is not followed"
                .into(),
        ),
        // No openat2 (a kernel before 5.6, or a seccomp filter): compare the path with where
        // it leads, then open it. A link made between the two is the one case this misses.
        Err(rustix::io::Errno::NOSYS) | Err(rustix::io::Errno::PERM) => {
            if std::fs::canonicalize(path).map_err(|e| e.to_string())? != path {
                return Err(
                    "a symbolic link has appeared in it since the catalog was built; it is \
                     not followed"
                        .into(),
                );
            }
            rustix::fs::open(path, flags, Mode::empty()).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}
