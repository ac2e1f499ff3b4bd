//! status: what a host serves and what failed, as of its last reload ([`ReloadStatus`]), as
//! `toolhost status` and the status file show it.

use crate::catalog::{Catalog, RefusedEnsemble};
use crate::resolve::Refused;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use toolhost_audit as audit;

impl From<&Refused> for RefusedEnsemble {
    fn from(refused: &Refused) -> Self {
        RefusedEnsemble {
            file: refused.file.clone(),
            kept_previous: refused.kept_previous,
            errors: refused
                .diagnostics
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}

/// An ensemble as it serves now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnsembleStatus {
    pub name: String,
    pub file: PathBuf,
    pub enabled: bool,
    /// When this version was loaded (RFC 3339).
    pub loaded_at: String,
    /// blake3 of each component it uses.
    pub components: Vec<String>,
    /// Where they come from: files, and `oci://` references with the digest each resolved
    /// to (the MCP server's command line or URL for an imported server).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Its tools as `name=version` (the version hash changes with the component or descriptor).
    pub tools: Vec<String>,
}

/// An ensemble waiting for its components to compile, or its MCP server to start (its
/// previous version, if it had one, serves meanwhile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadingEnsemble {
    pub file: PathBuf,
    pub components: Vec<PathBuf>,
    /// The imported MCP server it waits for (its command line or URL).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
}

/// What the host serves, and what failed, as of the last reload.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReloadStatus {
    pub generation: u64,
    pub reloaded_at: String,
    pub ensembles: Vec<EnsembleStatus>,
    pub refused: Vec<RefusedEnsemble>,
    /// Ensembles whose components are compiling.
    #[serde(default)]
    pub loading: Vec<LoadingEnsemble>,
}

impl ReloadStatus {
    /// The status after a swap to `catalog`: an ensemble whose tools' versions did not
    /// change keeps the time it was loaded.
    pub(super) fn next(
        &self,
        generation: u64,
        catalog: &Catalog,
        refused: Vec<RefusedEnsemble>,
        loading: Vec<LoadingEnsemble>,
    ) -> Self {
        let now = audit::now_rfc3339();
        let previous: BTreeMap<(&Path, &[String]), &str> = self
            .ensembles
            .iter()
            .map(|e| ((e.file.as_path(), e.tools.as_slice()), e.loaded_at.as_str()))
            .collect();
        let ensembles = catalog
            .ensembles()
            .iter()
            .map(|ensemble| {
                let versions: Vec<String> = ensemble
                    .tools
                    .iter()
                    .map(|t| format!("{}={}", t.name, t.version))
                    .collect();
                let components: BTreeSet<String> = ensemble
                    .tools
                    .iter()
                    .map(|t| t.source_hash().to_string())
                    .collect();
                let sources: BTreeSet<String> = ensemble.tools.iter().map(|t| t.source()).collect();
                let loaded_at = previous
                    .get(&(ensemble.file.as_path(), versions.as_slice()))
                    .map_or_else(|| now.clone(), |at| at.to_string());
                EnsembleStatus {
                    name: ensemble.name.clone(),
                    file: ensemble.file.clone(),
                    enabled: ensemble.enabled,
                    loaded_at,
                    components: components.into_iter().collect(),
                    sources: sources.into_iter().collect(),
                    tools: versions,
                }
            })
            .collect();
        ReloadStatus {
            generation,
            reloaded_at: now,
            ensembles,
            refused,
            loading,
        }
    }
}
