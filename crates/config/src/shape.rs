//! shape: the mistakes in the shape of a file that serde refused, each at its place, in the
//! user's words: an unknown key (with the nearest valid one), a value of the wrong type (said
//! as the user wrote it), a number out of its range, a value not among those allowed, a key
//! that is missing. Found by the file's JSON Schema ([`crate::file_schemas`], generated from
//! the types serde reads it into), placed by the spans of the TOML parse; serde finds the
//! errors ([`crate::recover`]), and these words replace its own where they say more.

use crate::SourceFile;
use crate::diagnostic::Diagnostic;
use crate::file_schemas::Kind;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, paths::LocationSegment};
use serde_json::Value;
use std::ops::Range;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The schema's errors explained for one file at most: four times the errors reported for
/// it ([`crate::MAX_ERRORS_PER_FILE`]), as the schema does not find them in file order.
pub const MAX_SHAPE_ERRORS: usize = 4 * crate::MAX_ERRORS_PER_FILE;

/// Every shape error of `source` (the text of `file`, a file of `kind`), in file order; empty
/// when the TOML does not parse (its syntax error is the one to fix first) or the schema
/// finds nothing (the refusal was one of the host's own checks).
pub(crate) fn errors(file: &SourceFile, kind: Kind) -> Vec<Diagnostic> {
    let source = file.text.as_str();
    let Ok(document) = DeTable::parse(source) else {
        return Vec::new();
    };
    let Some(instance) = toml::from_str::<toml::Value>(source)
        .ok()
        .and_then(|value| serde_json::to_value(value).ok())
    else {
        return Vec::new();
    };
    let schema = kind.schema();
    let Ok(validator) = jsonschema::draft7::new(&schema) else {
        return Vec::new();
    };
    let place = Place {
        document: &document,
        schema: &schema,
    };
    let mut found: Vec<(Range<usize>, String)> = Vec::new();
    for error in validator.iter_errors(&instance).take(MAX_SHAPE_ERRORS) {
        place.explain(&error, &mut found);
    }
    found.sort_by_key(|(span, _)| (span.start, span.end));
    found.dedup();
    found.truncate(MAX_SHAPE_ERRORS);
    (found.into_iter())
        .map(|(span, message)| Diagnostic::new(file.at(span), message))
        .collect()
}

/// Where things are: the parsed file (spans) and its schema (what each place takes).
struct Place<'a, 'i> {
    document: &'a Spanned<DeTable<'i>>,
    schema: &'a Value,
}

impl Place<'_, '_> {
    /// `error` in the user's words, at its place (an error with alternatives, as an optional
    /// setting's, is explained by the alternative that is not "nothing").
    fn explain(&self, error: &ValidationError<'_>, found: &mut Vec<(Range<usize>, String)>) {
        let path: Vec<String> = (error.instance_path().iter())
            .map(|segment| match segment {
                LocationSegment::Property(name) => name.to_string(),
                LocationSegment::Index(index) => index.to_string(),
            })
            .collect();
        let key = name_of(&path);
        let value_span = self.span(&path, false).unwrap_or(0..0);
        let message = match error.kind() {
            ValidationErrorKind::AnyOf { context }
            | ValidationErrorKind::OneOfNotValid { context } => {
                // An enum with documented variants: one constant per branch.
                let constants: Option<Vec<String>> = (context.iter())
                    .filter(|branch| !is_null_branch(branch))
                    .map(|branch| match branch.as_slice() {
                        [one] => match one.kind() {
                            ValidationErrorKind::Constant { expected_value } => {
                                Some(expected_value.to_string())
                            }
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                if let Some(constants) = constants.filter(|c| !c.is_empty()) {
                    let message = format!(
                        "{key} is {}; it is one of {}",
                        error.instance(),
                        constants.join(", ")
                    );
                    found.push((value_span, message));
                    return;
                }
                let branch = context.iter().find(|branch| !is_null_branch(branch));
                if let Some(branch) = branch {
                    for inner in branch {
                        self.explain(inner, found);
                    }
                    return;
                }
                format!("{key}: {error}")
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let known = self.keys_at(&path);
                // Past the errors explained for a file, the rest are serde's words alone.
                for name in unexpected.iter().take(MAX_SHAPE_ERRORS) {
                    let mut at = path.clone();
                    at.push(name.clone());
                    let span = self.span(&at, true).unwrap_or(value_span.clone());
                    let hint = nearest(name, &known)
                        .map(|near| format!("; did you mean `{near}`?"))
                        .unwrap_or_else(|| listed(&known));
                    found.push((
                        span,
                        format!("unknown key `{name}` in {}{hint}", where_(&path)),
                    ));
                }
                return;
            }
            ValidationErrorKind::Type { kind } => {
                let wanted = match kind {
                    TypeKind::Single(one) => article(&one.to_string()),
                    TypeKind::Multiple(many) => (many.into_iter())
                        .map(|t| article(&t.to_string()))
                        .collect::<Vec<_>>()
                        .join(" or "),
                };
                let got = type_of(error.instance());
                let quoted = error.instance().is_string() && wanted.contains("number");
                let fix = if quoted {
                    " (write it without quotes)"
                } else {
                    ""
                };
                format!("{key} takes {wanted}, not {got}{fix}")
            }
            ValidationErrorKind::Minimum { limit } => {
                format!("{key} is {}; it must be at least {limit}", error.instance())
            }
            ValidationErrorKind::Maximum { limit } => {
                format!("{key} is {}; it must be at most {limit}", error.instance())
            }
            ValidationErrorKind::Enum { options } => {
                let options: Vec<String> = (options.as_array().into_iter().flatten())
                    .map(|o| o.to_string())
                    .collect();
                format!(
                    "{key} is {}; it is one of {}",
                    error.instance(),
                    options.join(", ")
                )
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                format!("{} needs `{name}`", where_(&path))
            }
            _ => format!("{key}: {error}"),
        };
        found.push((value_span, message));
    }

    /// The span of the value at `path` (of its key, with `key`), if the file has it.
    fn span(&self, path: &[String], key: bool) -> Option<Range<usize>> {
        let mut table: &DeTable = self.document.get_ref();
        let mut span = self.document.span();
        let mut value: Option<&DeValue> = None;
        for (n, segment) in path.iter().enumerate() {
            let last = n + 1 == path.len();
            let next = match value {
                None => lookup(table, segment, key && last),
                Some(DeValue::Table(inner)) => lookup(inner, segment, key && last),
                Some(DeValue::Array(items)) => {
                    let item = items.get(segment.parse::<usize>().ok()?)?;
                    Some((item.span(), item.get_ref()))
                }
                Some(_) => None,
            }?;
            span = next.0;
            if let DeValue::Table(inner) = next.1 {
                table = inner;
                value = None;
            } else {
                value = Some(next.1);
            }
        }
        Some(span)
    }

    /// The keys the schema knows at `path` (for "did you mean").
    fn keys_at(&self, path: &[String]) -> Vec<String> {
        let mut node = resolve(self.schema, self.schema);
        for segment in path {
            let next = (node.get("properties").and_then(|p| p.get(segment)))
                .or_else(|| node.get("items"))
                .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()));
            match next {
                Some(next) => node = resolve(self.schema, next),
                None => return Vec::new(),
            }
        }
        (node.get("properties").and_then(Value::as_object))
            .map(|properties| properties.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// `segment` of `table`: its value's span (or its key's, with `key`) and the value.
fn lookup<'a, 'i>(
    table: &'a DeTable<'i>,
    segment: &str,
    key: bool,
) -> Option<(Range<usize>, &'a DeValue<'i>)> {
    let (name, value) = table.get_key_value(segment)?;
    let span = if key { name.span() } else { value.span() };
    Some((span, value.get_ref()))
}

/// A schema node with `$ref`s followed and an optional value's "or nothing" set aside.
fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    for _ in 0..32 {
        if let Some(target) = node.get("$ref").and_then(Value::as_str) {
            match root.pointer(target.trim_start_matches('#')) {
                Some(target) => node = target,
                None => break,
            }
            continue;
        }
        let branches = ["anyOf", "oneOf", "allOf"]
            .iter()
            .find_map(|k| node.get(*k).and_then(Value::as_array));
        let branch =
            branches.and_then(|b| b.iter().find(|b| b.get("type") != Some(&"null".into())));
        match branch {
            Some(branch) => node = branch,
            None => break,
        }
    }
    node
}

/// Whether an alternative's errors say only "not nothing" (an optional setting's `null`).
fn is_null_branch(errors: &[ValidationError<'_>]) -> bool {
    errors.iter().all(|e| {
        matches!(e.kind(), ValidationErrorKind::Type { kind: TypeKind::Single(t) }
            if t.to_string() == "null")
    })
}

/// The key a path ends at, as the user wrote it: `timeout-ms`, `invokers[2]`.
fn name_of(path: &[String]) -> String {
    match path {
        [] => "the file".into(),
        [.., parent, last] if last.parse::<usize>().is_ok() => {
            format!(
                "`{parent}[{}]`",
                last.parse::<usize>().unwrap_or_default() + 1
            )
        }
        [.., last] => format!("`{last}`"),
    }
}

/// The table a path names, for messages: `[defaults]`, `[[invokers]] 2`, `the file`.
fn where_(path: &[String]) -> String {
    if path.is_empty() {
        return "the file".into();
    }
    let mut text = String::new();
    for segment in path {
        match segment.parse::<usize>() {
            Ok(index) => text.push_str(&format!("[{}]", index + 1)),
            Err(_) if text.is_empty() => text.push_str(segment),
            Err(_) => text.push_str(&format!(".{segment}")),
        }
    }
    format!("[{text}]")
}

fn article(kind: &str) -> String {
    match kind {
        "integer" => "a whole number".into(),
        "number" => "a number".into(),
        "string" => "a string (in quotes)".into(),
        "boolean" => "true or false".into(),
        "array" => "a list ([...])".into(),
        "object" => "a table".into(),
        other => other.into(),
    }
}

fn type_of(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {:?}", s.chars().take(40).collect::<String>()),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a table".into(),
    }
}

/// The valid keys, when none is near: `(keys here: a, b, c)`.
fn listed(known: &[String]) -> String {
    if known.is_empty() {
        return String::new();
    }
    let mut sorted = known.to_vec();
    sorted.sort();
    format!(" (keys here: {})", sorted.join(", "))
}

/// The valid key nearest `name`, if one is near enough to be what was meant.
fn nearest<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    let best = (known.iter())
        .map(|k| (edit_distance(name, k), k))
        .min_by_key(|(distance, _)| *distance)?;
    let near_enough = (name.chars().count() / 3).max(2);
    (best.0 <= near_enough).then_some(best.1.as_str())
}

/// Levenshtein's distance between `a` and `b`, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn messages(text: &str, kind: Kind) -> Vec<String> {
        let file = SourceFile::new(PathBuf::from("f.toml"), text.to_string());
        (errors(&file, kind).iter())
            .map(|d| {
                let (line, column) = (d.location.line, d.location.column);
                format!(
                    "{}:{} {}",
                    line.unwrap_or(0),
                    column.unwrap_or(0),
                    d.message
                )
            })
            .collect()
    }

    #[test]
    fn every_mistake_of_a_file_is_found_in_file_order_in_the_users_words() {
        let text = "schema-version = 1\n\
                    [ensemble]\n\
                    name = \"web\"\n\
                    colour = 1\n\
                    [defaults]\n\
                    timeout-ms = \"3000\"\n\
                    max-output-byte = 10\n\
                    dedup = \"fuzzy\"\n";
        let found = messages(text, Kind::Ensemble);
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(
            found[0].starts_with("4:1 unknown key `colour` in [ensemble]"),
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("6:14 `timeout-ms` takes a whole number, not the string \"3000\" (write it without quotes)"),
            "{found:#?}"
        );
        assert!(
            found[2].contains(
                "unknown key `max-output-byte` in [defaults]; did you mean `max-output-bytes`?"
            ),
            "{found:#?}"
        );
        assert!(
            found[3].starts_with("8:9 `dedup` is \"fuzzy\"; it is one of"),
            "{found:#?}"
        );
    }

    #[test]
    fn near_keys_are_suggested_and_far_ones_are_not() {
        let known = vec!["timeout-ms".to_string(), "memory-mib".to_string()];
        assert_eq!(nearest("timout-ms", &known), Some("timeout-ms"));
        assert_eq!(nearest("colour", &known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
