//! config: TOML text -> raw descriptor types, with errors that carry file:line:col, and
//! those types -> [`draft`]s: everything about an ensemble that can be checked without an
//! engine (limits, grants into a [`sandbox`] spec, [`schema`]s of arguments, names).
//!
//! Every file starts with `schema-version`. [`parse`] first probes that one field, then
//! deserializes with that version's types (today only [`v1`]); a later version adds a module
//! and an upgrade step here, and the rest of the host keeps seeing one set of types.
//! [`SourceFile::parse_all`] reads on past each value serde refuses (module `recover`), so
//! that `check` says every error of a file in one run, in file order ([`in_file_order`]).

// First: its macros (`bounded!`) serve the modules after it.
#[macro_use]
mod names;
pub mod access;
mod chat;
mod diagnostic;
pub mod draft;
pub mod file_schemas;
mod files;
pub mod fleet;
mod glob;
mod recover;
pub mod sandbox;
pub mod schema;
mod shape;
pub mod telemetry;
pub mod template;
pub mod v1;

pub use chat::{ProviderKind, ToolChoice};
pub use diagnostic::{Diagnostic, Location, MAX_ERRORS_PER_FILE, Note, in_file_order};
pub use files::{PrivateDirError, Pruned, private_dir, read_limited, write_new};
pub use glob::glob;
pub use recover::{Refused, Segment};

use diagnostic::LineIndex;
pub use names::{
    Access, Blake3Hex, ChatMib, DedupMode, EnsembleName, EnvVarName, GuestPath, MaxConcurrency,
    MaxOutputBytes, MaxPrepared, MaxPreparedMib, MaxQueue, MaxResponseBytes, MaxTools, MemoryMib,
    Prepared, Setting, TimeoutMs, ToolName, UriPrefix, written_or,
};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

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
    /// The JSON Schema of its files, whose words explain what serde refuses.
    fn schema(self) -> file_schemas::Kind {
        match self {
            FileKind::Ensemble => file_schemas::Kind::Ensemble,
            FileKind::Invoker => file_schemas::Kind::Invoker,
            FileKind::Host => file_schemas::Kind::Host,
        }
    }

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

/// A configuration file's path and text, kept so that later checks can point into it. Its
/// lines are indexed the first time a place in it is asked for, so that naming the place of
/// an error costs log time, and nothing at all while there is no error.
#[derive(Debug)]
pub struct SourceFile {
    pub path: PathBuf,
    pub text: String,
    lines: OnceLock<LineIndex>,
}

impl SourceFile {
    /// A file's text as it was read.
    pub fn new(path: PathBuf, text: String) -> Self {
        SourceFile {
            path,
            text,
            lines: OnceLock::new(),
        }
    }

    /// Reads `path`: a regular file of at most [`MAX_DESCRIPTOR_BYTES`] of UTF-8.
    pub fn read(path: &Path, kind: FileKind) -> Result<Self, Diagnostic> {
        let error = |e: String| {
            Diagnostic::new(
                Location::file(path),
                format!("cannot read {}: {e}", kind.describe()),
            )
        };
        let bytes = read_limited(path, MAX_DESCRIPTOR_BYTES).map_err(error)?;
        let text = String::from_utf8(bytes).map_err(|e| error(format!("it is not UTF-8: {e}")))?;
        Ok(SourceFile::new(path.to_path_buf(), text))
    }

    /// Parses the text as `T` after checking its `schema-version`.
    pub fn parse<T: DeserializeOwned>(&self, kind: FileKind) -> Result<T, Diagnostic> {
        parse(&self.path, &self.text, kind)
    }

    /// [`SourceFile::parse`], reading on past what serde refuses: every value it refuses is
    /// an error at its place, left out, and the rest read again ([`recover`]). A syntax
    /// error stops the reading (what follows it may be read wrongly): each is reported, one
    /// per line, and nothing else. The errors come in file order.
    pub fn parse_all<T: DeserializeOwned>(&self, kind: FileKind) -> Parsed<T> {
        let (document, syntax) = toml::de::DeTable::parse_recoverable(&self.text);
        if !syntax.is_empty() {
            return Parsed::refused(self.syntax_errors(&syntax));
        }
        if let Err(diagnostic) = check_version(&self.path, &self.text, kind) {
            return Parsed::refused(vec![diagnostic]);
        }
        let found = recover::deserialize::<T>(&self.text, document);
        let mut errors = self.in_users_words(&found.errors, kind);
        if !found.complete {
            errors.push(Diagnostic::new(
                Location::file(&self.path),
                "toolhost stopped looking for errors in this file: it has too many to look for \
                 them all (more may follow those said); fix these first",
            ));
        }
        Parsed {
            value: found.value,
            errors,
            refused: found.refused,
        }
    }

    /// The syntax errors toml found, one per line. An unclosed array or inline table runs on
    /// over the lines after it, whose errors are then its own: only the first is said.
    fn syntax_errors(&self, errors: &[toml::de::Error]) -> Vec<Diagnostic> {
        let mut all: Vec<Diagnostic> = (errors.iter())
            .map(|e| {
                let message = e.message().trim_end().to_string();
                match e.span() {
                    Some(span) => Diagnostic::new(self.at(span), message),
                    None => Diagnostic::new(Location::file(&self.path), message),
                }
            })
            .collect();
        all.sort_by_key(|d| (d.location.line, d.location.column));
        all.dedup_by_key(|d| d.location.line);
        if errors.iter().any(|e| e.message().starts_with("unclosed")) {
            all.truncate(1);
        }
        all
    }

    /// serde's refusals as diagnostics, in file order. serde's words stand where they are
    /// clear (the host's own words for its settings, and its own checks, which the schema
    /// does not have); where they are vague (`invalid type: string "3000", expected i64`
    /// names neither the key nor what it wants) or the schema knows the key that was meant,
    /// the schema's stand ([`shape`]).
    fn in_users_words(
        &self,
        refusals: &[(Option<Range<usize>>, String)],
        kind: FileKind,
    ) -> Vec<Diagnostic> {
        let shape = match refusals.is_empty() {
            true => Vec::new(),
            false => shape::errors(self, kind.schema()),
        };
        let mut all: Vec<Diagnostic> = (refusals.iter())
            .map(|(span, message)| {
                let serde = match span {
                    Some(span) => Diagnostic::new(self.at(span.clone()), message.clone()),
                    None => Diagnostic::new(Location::file(&self.path), message.clone()),
                };
                let vague = message.starts_with("invalid type:");
                let line = serde.location.line;
                let at = (serde.location.line, serde.location.column);
                let better = (shape.iter())
                    .filter(|d| vague || d.message.contains("did you mean"))
                    .filter(|d| d.location.line == line)
                    .min_by_key(|d| (d.location.line, d.location.column) != at);
                match better {
                    Some(better) => better.clone(),
                    None => serde,
                }
            })
            .collect();
        all.sort_by_key(|d| (d.location.line, d.location.column));
        all
    }

    /// A path written in this file, relative to the file, with `.` and `..` folded
    /// lexically (the path may not exist, and messages should show a clean path).
    pub fn relative(&self, path: &str) -> PathBuf {
        let joined = self.path.parent().unwrap_or(Path::new(".")).join(path);
        let mut clean = PathBuf::new();
        for part in joined.components() {
            match part {
                Component::CurDir => {}
                Component::ParentDir
                    if matches!(clean.components().next_back(), Some(Component::Normal(_))) =>
                {
                    clean.pop();
                }
                other => clean.push(other),
            }
        }
        if clean.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            clean
        }
    }

    /// The location of a byte range of this file.
    pub fn at(&self, span: Range<usize>) -> Location {
        let lines = self.lines.get_or_init(|| LineIndex::new(&self.text));
        Location::indexed(&self.path, &self.text, lines, span)
    }
}

/// A file read as far as it could be ([`SourceFile::parse_all`]): what was read, every error
/// found on the way, and what was left out.
#[derive(Debug)]
pub struct Parsed<T> {
    /// `None` when nothing could be read: a syntax error, no version, or an error that leaves
    /// the file without what it must have (`[ensemble]` with its name, say).
    pub value: Option<T>,
    /// In file order.
    pub errors: Vec<Diagnostic>,
    /// What serde refused and what needed it, left out of `value`: the checks after parsing
    /// pass over what depends on it.
    pub refused: Refused,
}

impl<T> Parsed<T> {
    fn refused(errors: Vec<Diagnostic>) -> Self {
        Parsed {
            value: None,
            errors,
            refused: Refused::default(),
        }
    }
}

/// The largest descriptor file read (a file of 100,000 inline invokers is about 6 MiB).
pub const MAX_DESCRIPTOR_BYTES: u64 = 16 << 20;

/// A byte range of a configuration file, kept as it is: its line and column are worked out
/// only when a message needs them ([`Span::location`]).
#[derive(Debug, Clone)]
pub struct Span {
    pub source: Arc<SourceFile>,
    pub range: Range<usize>,
}

impl Span {
    pub fn new(source: &Arc<SourceFile>, range: Range<usize>) -> Self {
        Span {
            source: Arc::clone(source),
            range,
        }
    }

    /// The file, line and column.
    pub fn location(&self) -> Location {
        self.source.at(self.range.clone())
    }
}

/// Reads `schema-version` from the top-level keys of `source`. TOML puts every top-level key
/// before the first table header, so the text up to that header is enough when it holds the
/// version, and a file of twenty thousand invokers is not parsed twice. Otherwise (no
/// version there, or a header-like line inside a multi-line string cut the text short) the
/// whole document is parsed for the probe, so its syntax errors come first, as they should.
fn probe_version(file: &Path, source: &str) -> Result<VersionProbe, Diagnostic> {
    let header = source
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&start| {
            source[start..]
                .trim_start_matches([' ', '\t'])
                .starts_with('[')
        });
    if let Some(end) = header
        && let Ok(probe) = toml::from_str::<VersionProbe>(&source[..end])
        && probe.schema_version.is_some()
    {
        return Ok(probe);
    }
    toml::from_str(source).map_err(|e| Diagnostic::from_toml(file, source, &e))
}

/// Parses `source` (the text of `file`) as `T` after checking its `schema-version`.
pub fn parse<T: DeserializeOwned>(
    file: &Path,
    source: &str,
    kind: FileKind,
) -> Result<T, Diagnostic> {
    check_version(file, source, kind)?;
    toml::from_str(source).map_err(|e| Diagnostic::from_toml(file, source, &e))
}

/// The file says `schema-version = 1` (or another version this host reads).
fn check_version(file: &Path, source: &str, kind: FileKind) -> Result<(), Diagnostic> {
    let probe = probe_version(file, source)?;
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
    Ok(())
}
