//! A text toolkit: counts, case conversion, regex search with capture groups, slugs.

wit_bindgen::generate!({
    path: "../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

/// Patterns bigger than this (compiled) are refused: a model should not be able to make the
/// regex engine allocate without bound.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

struct Text;

fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: schema.to_string(),
    }
}

fn parse<T: for<'de> Deserialize<'de>>(arguments: &str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

impl Guest for Text {
    fn describe() -> Vec<ToolSpec> {
        let text_only = json!({
            "type": "object", "required": ["text"], "additionalProperties": false,
            "properties": { "text": { "type": "string" } }
        });
        vec![
            spec(
                "text_stats",
                "Count the words, characters (Unicode scalar values), bytes, lines and sentences of a text.",
                text_only.clone(),
            ),
            spec(
                "text_case",
                "Convert a text to another case: upper, lower, title, snake, kebab or camel.",
                json!({
                    "type": "object", "required": ["text", "to"], "additionalProperties": false,
                    "properties": {
                        "text": { "type": "string" },
                        "to": { "enum": ["upper", "lower", "title", "snake", "kebab", "camel"] }
                    }
                }),
            ),
            spec(
                "regex_find",
                "Find the matches of a regular expression (Rust regex syntax) in a text. Returns each \
                 match with its byte offsets and its capture groups, numbered and named.",
                json!({
                    "type": "object", "required": ["pattern", "text"], "additionalProperties": false,
                    "properties": {
                        "pattern": { "type": "string", "minLength": 1 },
                        "text": { "type": "string" },
                        "case_insensitive": { "type": "boolean", "default": false },
                        "max_matches": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 100 }
                    }
                }),
            ),
            spec(
                "slugify",
                "Turn a text into a URL slug: lowercase ASCII letters and digits joined by hyphens.",
                text_only,
            ),
        ]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        match name.as_str() {
            "text_stats" => {
                let TextArg { text } = parse(&arguments)?;
                Ok(stats(&text).to_string())
            }
            "text_case" => {
                let CaseArgs { text, to } = parse(&arguments)?;
                Ok(convert_case(&text, &to)?)
            }
            "regex_find" => Ok(regex_find(parse(&arguments)?)?.to_string()),
            "slugify" => {
                let TextArg { text } = parse(&arguments)?;
                Ok(slugify(&text))
            }
            other => Err(ToolError::Failed(format!(
                "this component has no tool named {other:?}"
            ))),
        }
    }
}

#[derive(Deserialize)]
struct TextArg {
    text: String,
}

#[derive(Deserialize)]
struct CaseArgs {
    text: String,
    to: String,
}

#[derive(Deserialize)]
struct FindArgs {
    pattern: String,
    text: String,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default = "default_max_matches")]
    max_matches: usize,
}

fn default_max_matches() -> usize {
    100
}

fn stats(text: &str) -> Value {
    let sentences = text
        .split(['.', '!', '?'])
        .filter(|s| s.chars().any(char::is_alphanumeric))
        .count();
    json!({
        "words": text.split_whitespace().count(),
        "characters": text.chars().count(),
        "bytes": text.len(),
        "lines": if text.is_empty() { 0 } else { text.lines().count() },
        "sentences": sentences,
    })
}

/// Splits a text into words at whitespace and punctuation, at lower-to-upper case changes
/// (`parseJson` -> parse, Json) and at the end of an acronym (`HTTPResponse` -> HTTP, Response).
fn words(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        if c.is_uppercase() && !current.is_empty() {
            let previous = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let previous_lower = previous.is_lowercase() || previous.is_numeric();
            if previous_lower || (previous.is_uppercase() && next_lower) {
                words.push(std::mem::take(&mut current));
            }
        }
        current.push(c);
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

fn convert_case(text: &str, to: &str) -> Result<String, ToolError> {
    let lower = |w: &String| w.to_lowercase();
    Ok(match to {
        "upper" => text.to_uppercase(),
        "lower" => text.to_lowercase(),
        "title" => words(text)
            .iter()
            .map(|w| capitalize(w))
            .collect::<Vec<_>>()
            .join(" "),
        "snake" => words(text).iter().map(lower).collect::<Vec<_>>().join("_"),
        "kebab" => words(text).iter().map(lower).collect::<Vec<_>>().join("-"),
        "camel" => words(text)
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if i == 0 {
                    w.to_lowercase()
                } else {
                    capitalize(w)
                }
            })
            .collect(),
        other => {
            return Err(ToolError::InvalidArguments(format!(
                "unknown case {other:?}; use upper, lower, title, snake, kebab or camel"
            )));
        }
    })
}

fn regex_find(args: FindArgs) -> Result<Value, ToolError> {
    let regex = regex::RegexBuilder::new(&args.pattern)
        .case_insensitive(args.case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ToolError::InvalidArguments(format!("bad pattern: {e}")))?;
    let names: Vec<Option<&str>> = regex.capture_names().collect();
    let mut matches = Vec::new();
    let mut truncated = false;
    for captures in regex.captures_iter(&args.text) {
        if matches.len() == args.max_matches {
            truncated = true;
            break;
        }
        let Some(whole) = captures.get(0) else {
            continue;
        };
        let groups: Vec<Value> = (1..captures.len())
            .map(|i| {
                let text = captures.get(i).map(|m| m.as_str());
                match names[i] {
                    Some(name) => json!({ "index": i, "name": name, "text": text }),
                    None => json!({ "index": i, "text": text }),
                }
            })
            .collect();
        matches.push(json!({
            "text": whole.as_str(),
            "start": whole.start(),
            "end": whole.end(),
            "groups": groups,
        }));
    }
    Ok(json!({ "count": matches.len(), "truncated": truncated, "matches": matches }))
}

fn slugify(text: &str) -> String {
    let mut slug = String::new();
    for c in text.chars() {
        let c = fold_accent(c);
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    slug
}

/// Maps the common Latin accented letters to their base letter, so "Crème brûlée" slugs to
/// "creme-brulee" rather than "cr-me-br-l-e".
fn fold_accent(c: char) -> char {
    match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' => 'a',
        'ç' | 'Ç' => 'c',
        'è' | 'é' | 'ê' | 'ë' | 'È' | 'É' | 'Ê' | 'Ë' => 'e',
        'ì' | 'í' | 'î' | 'ï' | 'Ì' | 'Í' | 'Î' | 'Ï' => 'i',
        'ñ' | 'Ñ' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' | 'Ø' => 'o',
        'ù' | 'ú' | 'û' | 'ü' | 'Ù' | 'Ú' | 'Û' | 'Ü' => 'u',
        'ý' | 'ÿ' | 'Ý' => 'y',
        _ => c,
    }
}

export!(Text);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        assert_eq!(
            convert_case("helloWorld foo-bar", "snake").unwrap(),
            "hello_world_foo_bar"
        );
        assert_eq!(convert_case("hello world", "camel").unwrap(), "helloWorld");
        assert_eq!(convert_case("hello WORLD", "title").unwrap(), "Hello World");
        assert_eq!(
            convert_case("parseHTTPResponse now", "snake").unwrap(),
            "parse_http_response_now"
        );
        assert_eq!(slugify("  Crème Brûlée: 2 ways! "), "creme-brulee-2-ways");
    }
}
