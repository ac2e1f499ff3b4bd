//! offers: an ensemble's `[[prompts]]` and `[[resources]]`, checked as far as they can be
//! without serving them. Every template compiles and reads only the prompt's own arguments;
//! every message is one of text, resource or image; a resource set's directory exists, its
//! URI prefix overlaps no other set's of the ensemble, and its MIME types are types.

use crate::template;
use crate::v1::{MessageRole, PromptEntry, ResourcesEntry};
use crate::{Diagnostic, Setting, SourceFile, Span, ToolName};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use toml::Spanned;

/// The largest file a resource set serves unless it says (`max-file-kib`).
pub const DEFAULT_MAX_FILE_BYTES: usize = 1 << 20;
/// The most files a resource set lists unless it says (`max-files`).
pub const DEFAULT_MAX_FILES: usize = 1000;

/// A prompt, checked: its templates compile and read only its arguments.
#[derive(Debug, Clone)]
pub struct PromptDraft {
    /// With the ensemble's prefix.
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub arguments: Vec<ArgumentDraft>,
    pub messages: Vec<MessageDraft>,
    /// Where its name is written.
    pub definition: Span,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArgumentDraft {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
    pub values: Vec<String>,
}

/// What a message is: text, a resource embedded by URI, or an image resource by URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    Text,
    Resource,
    Image,
}

/// One message of a prompt: who says it, what it is, and its template (the text, or the URI).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageDraft {
    pub role: Role,
    pub kind: MessageKind,
    pub template: String,
}

/// Who says a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    User,
    Assistant,
}

/// A resource set, checked: its directory exists.
#[derive(Debug, Clone)]
pub struct ResourcesDraft {
    /// With the ensemble's prefix.
    pub name: String,
    pub description: Option<String>,
    pub directory: PathBuf,
    pub uri_prefix: String,
    /// `(pattern, MIME type)`, as written.
    pub mime_types: Vec<(String, String)>,
    pub max_file_bytes: usize,
    pub max_files: usize,
    pub definition: Span,
}

/// The name an offer takes in the catalog: `prefix_name`, as a tool's.
fn full_name(
    source: &SourceFile,
    prefix: Option<&ToolName>,
    name: &Spanned<ToolName>,
    what: &str,
    errors: &mut Vec<Diagnostic>,
) -> String {
    let full = match prefix {
        Some(prefix) => format!("{prefix}_{}", name.get_ref()),
        None => name.get_ref().to_string(),
    };
    if full.len() > 64 {
        errors.push(Diagnostic::new(
            source.at(name.span()),
            format!(
                "with the ensemble's prefix the {what} name `{full}` is longer than 64 characters"
            ),
        ));
    }
    full
}

/// Checks each `[[prompts]]` entry; every error goes into `errors`.
pub(super) fn prompts(
    source: &Arc<SourceFile>,
    prefix: Option<&ToolName>,
    entries: Vec<Spanned<PromptEntry>>,
    errors: &mut Vec<Diagnostic>,
) -> Vec<PromptDraft> {
    let mut drafts: Vec<PromptDraft> = Vec::with_capacity(entries.len());
    for entry in entries {
        let at = entry.span();
        let entry = entry.into_inner();
        let name = full_name(source, prefix, &entry.name, "prompt", errors);
        let definition = Span::new(source, entry.name.span());
        if let Some(earlier) = drafts.iter().find(|p| p.name == name) {
            errors.push(
                Diagnostic::new(
                    definition.location(),
                    format!("the ensemble defines prompt `{name}` twice"),
                )
                .with_note(Some(earlier.definition.location()), "first defined here"),
            );
            continue;
        }
        let mut arguments: Vec<ArgumentDraft> = Vec::new();
        for argument in entry.arguments {
            let arg_name = argument.name.get_ref().to_string();
            if arguments.iter().any(|a| a.name == arg_name) {
                errors.push(Diagnostic::new(
                    source.at(argument.name.span()),
                    format!("prompt `{name}` has argument `{arg_name}` twice"),
                ));
                continue;
            }
            arguments.push(ArgumentDraft {
                name: arg_name,
                description: argument.description,
                required: argument.required,
                values: argument.values,
            });
        }
        if entry.messages.is_empty() {
            errors.push(Diagnostic::new(
                source.at(at.clone()),
                format!("prompt `{name}` has no messages: add [[prompts.messages]] with `text`"),
            ));
        }
        let declared: BTreeSet<&str> = arguments.iter().map(|a| a.name.as_str()).collect();
        let mut messages = Vec::with_capacity(entry.messages.len());
        for message in entry.messages {
            let message_at = message.span();
            let message = message.into_inner();
            let role = match message.role {
                MessageRole::User => Role::User,
                MessageRole::Assistant => Role::Assistant,
            };
            let written: Vec<(MessageKind, Spanned<String>)> = [
                (MessageKind::Text, message.text),
                (MessageKind::Resource, message.resource),
                (MessageKind::Image, message.image),
            ]
            .into_iter()
            .filter_map(|(kind, value)| value.map(|v| (kind, v)))
            .collect();
            let [(kind, template)] =
                <[_; 1]>::try_from(written).unwrap_or_else(|written| {
                    errors.push(Diagnostic::new(
                    source.at(message_at),
                    format!(
                        "a message of prompt `{name}` has {} of `text`, `resource` and `image`; \
                         write exactly one",
                        if written.is_empty() { "none" } else { "more than one" }
                    ),
                ));
                    [(MessageKind::Text, Spanned::new(0..0, String::new()))]
                });
            if template.span().is_empty() {
                continue;
            }
            match template::check(template.get_ref()) {
                Ok(reads) => {
                    for variable in reads.iter().filter(|v| !declared.contains(v.as_str())) {
                        errors.push(Diagnostic::new(
                            source.at(template.span()),
                            format!(
                                "the template reads `{variable}`, which is not an argument of \
                                 prompt `{name}` (its arguments: {})",
                                if declared.is_empty() {
                                    "none".to_string()
                                } else {
                                    declared.iter().copied().collect::<Vec<_>>().join(", ")
                                }
                            ),
                        ));
                    }
                }
                Err(error) => {
                    let at = template_line(source, template.span(), error.line);
                    errors.push(Diagnostic::new(
                        source.at(at),
                        format!("prompt `{name}`: the template is refused: {error}"),
                    ));
                }
            }
            messages.push(MessageDraft {
                role,
                kind,
                template: template.into_inner(),
            });
        }
        drafts.push(PromptDraft {
            name,
            title: entry.title,
            description: entry.description,
            arguments,
            messages,
            definition,
        });
    }
    drafts
}

/// Where line `line` (1-based) of a template written at `span` is in the file: exact for
/// multi-line strings, the string's start otherwise.
fn template_line(
    source: &SourceFile,
    span: std::ops::Range<usize>,
    line: Option<usize>,
) -> std::ops::Range<usize> {
    let text = &source.text;
    let written = &text[span.clone()];
    let (Some(line), true) = (
        line,
        written.starts_with("\"\"\"") || written.starts_with("'''"),
    ) else {
        return span;
    };
    let mut at = span.start + 3;
    if text[at..].starts_with("\r\n") {
        at += 2;
    } else if text[at..].starts_with('\n') {
        at += 1;
    }
    for _ in 1..line {
        match text[at..span.end].find('\n') {
            Some(newline) => at += newline + 1,
            None => break,
        }
    }
    let end = text[at..span.end].find('\n').map_or(span.end, |n| at + n);
    at..end.max(at + 1).min(span.end)
}

/// Checks each `[[resources]]` entry; every error goes into `errors`.
pub(super) fn resources(
    source: &Arc<SourceFile>,
    prefix: Option<&ToolName>,
    entries: Vec<Spanned<ResourcesEntry>>,
    errors: &mut Vec<Diagnostic>,
) -> Vec<ResourcesDraft> {
    let mut drafts: Vec<ResourcesDraft> = Vec::with_capacity(entries.len());
    let mut names: HashMap<String, Span> = HashMap::new();
    for entry in entries {
        let entry = entry.into_inner();
        let name = full_name(source, prefix, &entry.name, "resource set", errors);
        let definition = Span::new(source, entry.name.span());
        if let Some(earlier) = names.get(&name) {
            errors.push(
                Diagnostic::new(
                    definition.location(),
                    format!("the ensemble defines resource set `{name}` twice"),
                )
                .with_note(Some(earlier.location()), "first defined here"),
            );
            continue;
        }
        names.insert(name.clone(), definition.clone());
        let directory = source.relative(entry.directory.get_ref());
        if !directory.is_dir() {
            errors.push(Diagnostic::new(
                source.at(entry.directory.span()),
                format!(
                    "resource set `{name}`: `{}` is not a directory ({})",
                    entry.directory.get_ref(),
                    directory.display()
                ),
            ));
        }
        let uri_prefix = entry.uri_prefix.get_ref().as_str().to_string();
        if let Some(other) = drafts.iter().find(|d| overlaps(&d.uri_prefix, &uri_prefix)) {
            errors.push(
                Diagnostic::new(
                    source.at(entry.uri_prefix.span()),
                    format!(
                        "resource set `{name}`: URI prefix `{uri_prefix}` overlaps `{}` of set \
                         `{}`; a URI must name one file",
                        other.uri_prefix, other.name
                    ),
                )
                .with_note(Some(other.definition.location()), "that set"),
            );
        }
        let mut mime_types = Vec::with_capacity(entry.mime_types.len());
        for (pattern, mime) in entry.mime_types {
            if !is_mime_type(mime.get_ref()) {
                errors.push(Diagnostic::new(
                    source.at(mime.span()),
                    format!(
                        "`{}` is not a MIME type (`type/subtype`, as `text/markdown`)",
                        mime.get_ref()
                    ),
                ));
            }
            mime_types.push((pattern, mime.into_inner()));
        }
        drafts.push(ResourcesDraft {
            name,
            description: entry.description,
            directory,
            uri_prefix,
            mime_types,
            max_file_bytes: entry
                .max_file_kib
                .map_or(DEFAULT_MAX_FILE_BYTES, Setting::value),
            max_files: entry.max_files.map_or(DEFAULT_MAX_FILES, Setting::value),
            definition,
        });
    }
    drafts
}

/// Whether one URI prefix starts with the other: then a URI could name a file of both.
pub fn overlaps(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn is_mime_type(text: &str) -> bool {
    let token = |t: &str| {
        !t.is_empty()
            && t.len() <= 127
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
    };
    text.split_once('/')
        .is_some_and(|(t, s)| token(t) && token(s))
}
