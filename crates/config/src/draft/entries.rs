//! The `[[invokers]]` entries of an ensemble file, in the three ways one can be written: a
//! `source` file, an inline `invoker = { ... }` table, or flat (the keys of `[invoker]` in the
//! entry itself), each turned into the same [`InvokerTables`].

use crate::v1::{Capabilities, InvokerEntry, InvokerFile, InvokerSection, Limits};
use crate::{Diagnostic, FileKind, Parsed, Refused, SourceFile};
use std::sync::Arc;
use toml::Spanned;

/// The tables of one invoker, from its own file or inline.
pub(super) struct InvokerTables {
    pub source: Arc<SourceFile>,
    pub section: InvokerSection,
    pub limits: Limits,
    pub capabilities: Capabilities,
    pub arguments: Option<Spanned<toml::Value>>,
    /// Drafted for a tool the component or server offers, with `[defaults] capabilities`:
    /// what it is refused is said of those tools, once, not of each.
    pub offered: bool,
    /// Its own `component` was refused while its file was read.
    pub component_refused: bool,
}

/// The keys of an entry that decide how it is written (with `source`, inline or flat): when
/// one of them was refused, what the entry seems to lack is that refusal, said already.
const FORM_KEYS: [&str; 10] = [
    "source",
    "invoker",
    "name",
    "tool",
    "enabled",
    "description",
    "destructive",
    "dedup",
    "component",
    "blake3",
];

/// The `[invoker]` keys of an entry written flat, taken out of it: `None` when it has none,
/// the span of one of them when `name` is missing.
fn flat_section(
    entry: &mut InvokerEntry,
) -> Option<Result<InvokerSection, std::ops::Range<usize>>> {
    let any = [
        entry.tool.as_ref().map(Spanned::span),
        entry.enabled.as_ref().map(Spanned::span),
        entry.description.as_ref().map(Spanned::span),
        entry.destructive.as_ref().map(Spanned::span),
        entry.dedup.as_ref().map(Spanned::span),
        entry.component.as_ref().map(Spanned::span),
        entry.blake3.as_ref().map(Spanned::span),
    ]
    .into_iter()
    .flatten()
    .next();
    let Some(name) = entry.name.take() else {
        return any.map(Err);
    };
    Some(Ok(InvokerSection {
        name,
        tool: entry.tool.take(),
        enabled: entry.enabled.take().is_none_or(Spanned::into_inner),
        description: entry.description.take().map(Spanned::into_inner),
        destructive: entry.destructive.take().is_some_and(Spanned::into_inner),
        dedup: entry.dedup.take().map(Spanned::into_inner),
        component: entry.component.take(),
        blake3: entry.blake3.take(),
    }))
}

/// The tables of one `[[invokers]]` entry: its file's, or its own inline (nested or flat).
/// `refused`: what serde refused in the ensemble file; an entry that lost a key deciding its
/// form is not told how it is written wrong (the refusal is its error).
pub fn entry_tables(
    source: &Arc<SourceFile>,
    entry: Spanned<InvokerEntry>,
    refused: &Refused,
    errors: &mut Vec<Diagnostic>,
) -> Option<InvokerTables> {
    let span = entry.span();
    let lost = refused.keys_under(&span);
    let form_lost = lost.iter().any(|key| FORM_KEYS.contains(key));
    let component_refused = refused.touches_under(&span, &["component"])
        || refused.touches_under(&span, &["invoker", "component"]);
    let mut errors = Errors {
        errors,
        quiet: form_lost,
    };
    let errors = &mut errors;
    let mut entry = entry.into_inner();
    let flat = flat_section(&mut entry);
    let flat = match (flat, &entry.source, &entry.invoker) {
        (None, ..) => None,
        (Some(Ok(section)), None, None) => Some(section),
        (Some(Ok(_) | Err(_)), Some(_), _) | (Some(Ok(_) | Err(_)), _, Some(_)) => {
            errors.say(Diagnostic::new(
                source.at(span),
                "an invoker entry is written one way: `source = \"<file>.toml\"`, an inline \
                 `invoker = { ... }` table, or flat with `name = ...` and the other keys of \
                 [invoker] in the entry itself; this one mixes them",
            ));
            return None;
        }
        (Some(Err(at)), None, None) => {
            errors.say(Diagnostic::new(
                source.at(at),
                "an invoker written flat needs `name = \"<tool name>\"` in its entry",
            ));
            return None;
        }
    };
    match (entry.source, entry.invoker.or(flat)) {
        (Some(path), None) => {
            if entry.limits.is_some() || entry.capabilities.is_some() || entry.arguments.is_some() {
                errors.say(Diagnostic::new(
                    source.at(span),
                    "an invoker entry with `source` takes its limits, capabilities and arguments from that file; \
                     remove the other keys here",
                ));
                return None;
            }
            let invoker_path = source.relative(path.get_ref());
            let Ok(invoker_source) = SourceFile::read(&invoker_path, FileKind::Invoker) else {
                errors.errors.push(Diagnostic::new(
                    source.at(path.span()),
                    format!(
                        "invoker file {} does not exist or cannot be read",
                        invoker_path.display()
                    ),
                ));
                return None;
            };
            let Parsed {
                value,
                errors: mut found,
                refused,
            } = invoker_source.parse_all::<InvokerFile>(FileKind::Invoker);
            errors.errors.append(&mut found);
            let parsed = value?;
            Some(InvokerTables {
                offered: false,
                component_refused: refused.touches(&["invoker", "component"]),
                source: Arc::new(invoker_source),
                section: parsed.invoker,
                limits: parsed.limits,
                capabilities: parsed.capabilities,
                arguments: parsed.arguments,
            })
        }
        (None, Some(section)) => Some(InvokerTables {
            offered: false,
            component_refused,
            source: Arc::clone(source),
            section,
            limits: entry.limits.unwrap_or_default(),
            capabilities: entry.capabilities.unwrap_or_default(),
            arguments: entry.arguments,
        }),
        (Some(_), Some(_)) => {
            errors.say(Diagnostic::new(
                source.at(span),
                "an invoker entry has either `source` or an inline `invoker` table, not both",
            ));
            None
        }
        (None, None) => {
            errors.say(Diagnostic::new(
                source.at(span),
                "an invoker entry needs `source = \"<file>.toml\"`, an inline `invoker` table, \
                 or `name = \"<tool name>\"` (the keys of [invoker] written flat)",
            ));
            None
        }
    }
}

/// The errors of an entry's form, said unless a key deciding it was refused.
struct Errors<'a> {
    errors: &'a mut Vec<Diagnostic>,
    quiet: bool,
}

impl Errors<'_> {
    fn say(&mut self, diagnostic: Diagnostic) {
        if !self.quiet {
            self.errors.push(diagnostic);
        }
    }
}
