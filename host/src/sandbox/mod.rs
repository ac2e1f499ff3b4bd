//! sandbox: capabilities -> a WASI context and `wasi:http` hooks. Default deny: no files, no
//! network, no sockets, no name lookups, no environment, no inherited stdio, no arguments.
//! Clocks and random stay. A plugin's stdout and stderr go to bounded in-memory [`Capture`]s.
//!
//! What a call may reach is exactly what its [`SandboxSpec`] lists; `resolve` builds that spec
//! from the invoker's `[capabilities]` after checking them against the ensemble's `[grants]`.
//! Network access is outgoing HTTP only, each request checked in the host (`http`) against
//! the granted patterns ([`network`]); raw sockets and name lookups stay closed.

mod capture;
mod http;
pub mod network;

pub(crate) use capture::Capture;
pub(crate) use http::NetworkGuard;
pub use network::NetPattern;

use std::path::PathBuf;
use std::sync::Arc;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

/// A host directory made visible to the guest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Preopen {
    /// Absolute, canonical host path.
    pub host: PathBuf,
    /// Where the guest sees it, e.g. `/data`.
    pub guest: String,
    /// Whether the guest may create, write, rename and delete.
    pub writable: bool,
}

/// Everything a call's sandbox grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct SandboxSpec {
    pub preopens: Vec<Preopen>,
    /// Variables with the values the host had when the catalog was built.
    pub env: Vec<(String, String)>,
    /// Where outgoing HTTP may go; shared with every call's checks, never copied per call.
    pub network: Arc<[NetPattern]>,
}

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
        builder
            .preopened_dir(&preopen.host, &preopen.guest, perms)
            .map_err(|e| SandboxError::Preopen {
                path: preopen.host.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(builder.build())
}
