//! config: TOML text -> raw descriptor types, with errors that carry file:line:col.
//!
//! Every file starts with `schema-version`. [`parse`] first probes that one field, then
//! deserializes with that version's types (today only [`v1`]); a later version adds a module
//! and an upgrade step here, and the rest of the host keeps seeing one set of types.

mod diagnostic;
mod names;
pub mod v1;

pub use diagnostic::{Diagnostic, Location, Note};
pub use names::{
    Access, Blake3Hex, DedupMode, EnsembleName, EnvVarName, GuestPath, MaxConcurrency,
    MaxOutputBytes, MaxQueue, MaxResponseBytes, MemoryMib, TimeoutMs, ToolName,
};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// The versions of the descriptor formats this host reads.
pub const SUPPORTED_SCHEMA_VERSIONS: &[i64] = &[1];

/// What kind of file is being parsed, for messages.
#[derive(Debug, Clone, Copy)]
pub enum FileKind {
    Ensemble,
    Invoker,
    Host,
}

impl FileKind {
    fn describe(self) -> &'static str {
        match self {
            FileKind::Ensemble => "an ensemble file",
            FileKind::Invoker => "an invoker file",
            FileKind::Host => "toolhost.toml",
        }
    }
}

#[derive(Deserialize)]
struct VersionProbe {
    #[serde(rename = "schema-version")]
    schema_version: Option<toml::Spanned<i64>>,
}

/// A configuration file's path and text, kept so that later checks can point into it.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    pub text: String,
}

impl SourceFile {
    /// Reads `path`.
    pub fn read(path: &Path, kind: FileKind) -> Result<Self, Diagnostic> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Diagnostic::new(
                Location::file(path),
                format!("cannot read {}: {e}", kind.describe()),
            )
        })?;
        Ok(SourceFile {
            path: path.to_path_buf(),
            text,
        })
    }

    /// Parses the text as `T` after checking its `schema-version`.
    pub fn parse<T: DeserializeOwned>(&self, kind: FileKind) -> Result<T, Diagnostic> {
        parse(&self.path, &self.text, kind)
    }

    /// The location of a byte range of this file.
    pub fn at(&self, span: std::ops::Range<usize>) -> Location {
        Location::at(&self.path, &self.text, span)
    }
}

/// Parses `source` (the text of `file`) as `T` after checking its `schema-version`.
pub fn parse<T: DeserializeOwned>(
    file: &Path,
    source: &str,
    kind: FileKind,
) -> Result<T, Diagnostic> {
    let probe: VersionProbe =
        toml::from_str(source).map_err(|e| Diagnostic::from_toml(file, source, &e))?;
    let Some(version) = probe.schema_version else {
        return Err(Diagnostic::new(
            Location::at(file, source, 0..0),
            format!("{} must start with `schema-version = 1`", kind.describe()),
        ));
    };
    if !SUPPORTED_SCHEMA_VERSIONS.contains(version.get_ref()) {
        return Err(Diagnostic::new(
            Location::at(file, source, version.span()),
            format!(
                "schema-version {} is not one this toolhost reads (it reads {:?})",
                version.get_ref(),
                SUPPORTED_SCHEMA_VERSIONS
            ),
        ));
    }
    toml::from_str(source).map_err(|e| Diagnostic::from_toml(file, source, &e))
}
