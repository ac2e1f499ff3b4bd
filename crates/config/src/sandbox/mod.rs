//! What a call's sandbox grants ([`SandboxSpec`]): the directories, environment, network
//! patterns ([`network`]) and talk-back an invoker's `[capabilities]` come to once checked
//! against its ensemble's `[grants]`. The drafts build it; the runtime enforces it, and
//! opens nothing that is not listed here.

pub mod network;

pub use network::NetPattern;

use std::path::PathBuf;
use std::sync::Arc;
use toolhost_contract::TalkGrants;

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
    /// What the call may ask of its caller (`toolhost:plugin@0.2.0`'s `host` functions).
    pub talk: TalkGrants,
}
