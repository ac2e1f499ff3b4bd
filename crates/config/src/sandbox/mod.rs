//! What a call's sandbox grants ([`SandboxSpec`]): the directories, environment, settings,
//! network patterns ([`network`]) and talk-back an invoker's `[capabilities]` come to once
//! checked against its ensemble's `[grants]`. The drafts build it; the runtime enforces it,
//! and opens nothing that is not listed here.

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

/// A setting a component reads through `wasi:config/store`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigVar {
    pub key: String,
    pub value: String,
    /// The host variable it was read from, if it was (its value is then never shown).
    pub env: Option<String>,
}

/// Serialized (into a tool's version, which a changed value must change) with a value from
/// the environment only as its hash: a secret is never written out.
impl serde::Serialize for ConfigVar {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = serializer.serialize_struct("ConfigVar", 3)?;
        out.serialize_field("key", &self.key)?;
        match &self.env {
            Some(var) => {
                out.serialize_field("env", var)?;
                let hash = blake3::hash(self.value.as_bytes()).to_hex().to_string();
                out.serialize_field("value_blake3", &hash)?;
            }
            None => {
                out.serialize_field("env", &None::<String>)?;
                out.serialize_field("value", &self.value)?;
            }
        }
        out.end()
    }
}

impl ConfigVar {
    /// The value as `list` and `describe` may show it: a literal as written, one from the
    /// environment by its variable's name.
    pub fn shown(&self) -> String {
        match &self.env {
            Some(var) => format!("${var}"),
            None => self.value.clone(),
        }
    }
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
    /// What `wasi:config/store` answers (nothing else is there).
    pub config: Vec<ConfigVar>,
}
