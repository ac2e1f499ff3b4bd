//! `Diagnostic`: one configuration error with the file, line and column it is about, shown
//! the way rustc shows errors, with the offending source line underlined.

use serde::Serialize;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A place in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    /// The file, as the host found it (relative paths stay relative, so messages stay short).
    pub file: PathBuf,
    /// 1-based line; `None` when the whole file is meant (it is missing, say).
    pub line: Option<usize>,
    /// 1-based column, in characters.
    pub column: Option<usize>,
    #[serde(skip)]
    excerpt: Option<Box<Excerpt>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Excerpt {
    text: String,
    /// Characters to underline from `column`.
    width: usize,
}

impl Location {
    /// The place of the byte range `span` of `source`, the text of `file`. Counts lines from
    /// the start of the text: for a single message; [`LineIndex`] answers many in log time.
    pub fn at(file: &Path, source: &str, span: Range<usize>) -> Self {
        Location::indexed(file, source, &LineIndex::new(source), span)
    }

    /// As [`Location::at`], with the lines of `source` already indexed.
    pub(crate) fn indexed(
        file: &Path,
        source: &str,
        lines: &LineIndex,
        span: Range<usize>,
    ) -> Self {
        let start = source.floor_char_boundary(span.start);
        let (line, line_start) = lines.line_of(start);
        let column = source[line_start..start].chars().count() + 1;
        let line_end = source[line_start..]
            .find('\n')
            .map_or(source.len(), |i| line_start + i);
        let text = source[line_start..line_end]
            .trim_end_matches('\r')
            .to_string();
        let end = source.floor_char_boundary(span.end.clamp(start, line_end));
        let width = source[start..end].chars().count().max(1);
        Location {
            file: file.to_path_buf(),
            line: Some(line),
            column: Some(column),
            excerpt: Some(Box::new(Excerpt { text, width })),
        }
    }

    /// The file as a whole.
    pub fn file(file: &Path) -> Self {
        Location {
            file: file.to_path_buf(),
            line: None,
            column: None,
            excerpt: None,
        }
    }

    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => {
                writeln!(f, "  --> {}:{line}:{column}", self.file.display())?
            }
            _ => writeln!(f, "  --> {}", self.file.display())?,
        }
        if let (Some(excerpt), Some(line), Some(column)) = (&self.excerpt, self.line, self.column) {
            let gutter = line.to_string().len();
            writeln!(f, "{:gutter$} |", "")?;
            writeln!(f, "{line} | {}", excerpt.text)?;
            writeln!(
                f,
                "{:gutter$} | {}{}",
                "",
                " ".repeat(column - 1),
                "^".repeat(excerpt.width)
            )?;
        }
        Ok(())
    }
}

/// Where each line of a text starts, so that the line of a byte offset is a binary search
/// instead of a count from the start (which made checking a large file quadratic).
#[derive(Debug, Clone, Default)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The 1-based line of `offset`, and the offset where that line starts.
    fn line_of(&self, offset: usize) -> (usize, usize) {
        let line = self.starts.partition_point(|&start| start <= offset);
        (line, self.starts[line.saturating_sub(1)])
    }
}

/// A second place that explains a diagnostic (the ensemble that grants, the first file to
/// claim a name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    pub message: String,
    pub location: Option<Location>,
}

/// One configuration error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub message: String,
    pub location: Location,
    pub notes: Vec<Note>,
}

impl Diagnostic {
    /// An error at `location`.
    pub fn new(location: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            message: message.into(),
            location,
            notes: Vec::new(),
        }
    }

    /// Adds a note that points at another place.
    pub fn with_note(mut self, location: Option<Location>, message: impl Into<String>) -> Self {
        self.notes.push(Note {
            message: message.into(),
            location,
        });
        self
    }

    /// `file:line:col` of the error, for one-line logs.
    pub fn position(&self) -> String {
        match (self.location.line, self.location.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}", self.location.file.display()),
            _ => self.location.file.display().to_string(),
        }
    }

    /// Converts a toml deserialization error of `file` into a diagnostic.
    pub(crate) fn from_toml(file: &Path, source: &str, error: &toml::de::Error) -> Self {
        let message = error.message().trim_end().to_string();
        match error.span() {
            Some(span) => Diagnostic::new(Location::at(file, source, span), message),
            None => Diagnostic::new(Location::file(file), message),
        }
    }
}

/// The most errors reported for one file; past them one more says how many were left out.
pub const MAX_ERRORS_PER_FILE: usize = 100;

/// `diagnostics` in file order: those of `first` (the file being checked) first, then each
/// other file's in the order they first come, each file's by line and column; past
/// [`MAX_ERRORS_PER_FILE`] for one file, one error says how many more it has. Those about a
/// whole file (no line) come after its others, and are all said.
pub fn in_file_order(diagnostics: Vec<Diagnostic>, first: &Path) -> Vec<Diagnostic> {
    let mut files: Vec<(PathBuf, Vec<Diagnostic>)> = vec![(first.to_path_buf(), Vec::new())];
    for diagnostic in diagnostics {
        match files
            .iter_mut()
            .find(|(file, _)| *file == diagnostic.location.file)
        {
            Some((_, these)) => these.push(diagnostic),
            None => files.push((diagnostic.location.file.clone(), vec![diagnostic])),
        }
    }
    let mut ordered = Vec::new();
    for (file, these) in files {
        let (mut placed, whole): (Vec<_>, Vec<_>) =
            these.into_iter().partition(|d| d.location.line.is_some());
        placed.sort_by_key(|d| (d.location.line, d.location.column));
        let more = placed.len().saturating_sub(MAX_ERRORS_PER_FILE);
        placed.truncate(MAX_ERRORS_PER_FILE);
        ordered.append(&mut placed);
        if more > 0 {
            ordered.push(Diagnostic::new(
                Location::file(&file),
                format!(
                    "and {more} more error{} in this file, not shown: fix these first",
                    if more == 1 { "" } else { "s" }
                ),
            ));
        }
        ordered.extend(whole);
    }
    ordered
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.message)?;
        self.location.render(f)?;
        for note in &self.notes {
            writeln!(f, "note: {}", note.message)?;
            if let Some(location) = &note.location {
                location.render(f)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_line_column_and_caret() {
        let source = "a = 1\nname = \"bad_id\"\n";
        let start = source.find("\"bad").unwrap();
        let d = Diagnostic::new(
            Location::at(Path::new("x.toml"), source, start..start + 8),
            "nope",
        );
        assert_eq!(
            d.to_string(),
            "error: nope\n  --> x.toml:2:8\n  |\n2 | name = \"bad_id\"\n  |        ^^^^^^^^\n"
        );
        assert_eq!(d.position(), "x.toml:2:8");
    }
}
