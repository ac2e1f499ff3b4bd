//! A JSON tool: query a document with a JSON pointer, pretty-print it, check that it is well formed.

wit_bindgen::generate!({
    path: "../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

struct Json;

#[derive(Deserialize)]
struct QueryArgs {
    document: String,
    pointer: String,
}

#[derive(Deserialize)]
struct PrettyArgs {
    document: String,
    #[serde(default = "default_indent")]
    indent: usize,
    #[serde(default)]
    sort_keys: bool,
}

#[derive(Deserialize)]
struct ValidateArgs {
    document: String,
}

fn default_indent() -> usize {
    2
}

fn parse<T: for<'de> Deserialize<'de>>(arguments: &str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// Parses the `document` argument; the error names the line and column in the document.
fn document(text: &str) -> Result<Value, ToolError> {
    serde_json::from_str(text)
        .map_err(|e| ToolError::InvalidArguments(format!("`document` is not valid JSON: {e}")))
}

impl Guest for Json {
    fn describe() -> Vec<ToolSpec> {
        let document = json!({ "type": "string", "description": "The JSON document, as text" });
        vec![
            ToolSpec {
                name: "json_query".into(),
                description: "Return the value at a JSON pointer (RFC 6901, e.g. \"/items/0/name\") \
                    inside a JSON document. The empty pointer \"\" is the whole document."
                    .into(),
                input_schema: json!({
                    "type": "object", "required": ["document", "pointer"], "additionalProperties": false,
                    "properties": { "document": document, "pointer": { "type": "string", "pattern": "^(/.*)?$" } }
                })
                .to_string(),
            },
            ToolSpec {
                name: "json_pretty".into(),
                description: "Pretty-print a JSON document with the given indent, optionally with object keys sorted.".into(),
                input_schema: json!({
                    "type": "object", "required": ["document"], "additionalProperties": false,
                    "properties": {
                        "document": document,
                        "indent": { "type": "integer", "minimum": 0, "maximum": 8, "default": 2 },
                        "sort_keys": { "type": "boolean", "default": false }
                    }
                })
                .to_string(),
            },
            ToolSpec {
                name: "json_validate".into(),
                description: "Check that a text is well-formed JSON. Returns its top-level type and size, \
                    or the line and column of the first error."
                    .into(),
                input_schema: json!({
                    "type": "object", "required": ["document"], "additionalProperties": false,
                    "properties": { "document": document }
                })
                .to_string(),
            },
        ]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        match name.as_str() {
            "json_query" => {
                let args: QueryArgs = parse(&arguments)?;
                let doc = document(&args.document)?;
                match doc.pointer(&args.pointer) {
                    Some(value) => Ok(value.to_string()),
                    None => Err(ToolError::InvalidArguments(format!(
                        "nothing at pointer {:?}; {}",
                        args.pointer,
                        nearest(&doc, &args.pointer)
                    ))),
                }
            }
            "json_pretty" => {
                let args: PrettyArgs = parse(&arguments)?;
                let mut doc = document(&args.document)?;
                if args.sort_keys {
                    sort_keys(&mut doc);
                }
                Ok(pretty(&doc, args.indent.min(8)))
            }
            "json_validate" => {
                let args: ValidateArgs = parse(&arguments)?;
                Ok(match serde_json::from_str::<Value>(&args.document) {
                    Ok(doc) => json!({ "valid": true, "type": type_name(&doc), "bytes": args.document.len() }),
                    Err(e) => json!({ "valid": false, "line": e.line(), "column": e.column(), "error": e.to_string() }),
                }
                .to_string())
            }
            other => Err(ToolError::Failed(format!(
                "this component has no tool named {other:?}"
            ))),
        }
    }
}

/// Says how much of `pointer` does resolve, so the model can correct the rest.
fn nearest(doc: &Value, pointer: &str) -> String {
    let mut resolved = String::new();
    let mut current = doc;
    for segment in pointer.split('/').skip(1) {
        let candidate = format!("{resolved}/{segment}");
        match doc.pointer(&candidate) {
            Some(next) => {
                resolved = candidate;
                current = next;
            }
            None => break,
        }
    }
    let shape = match current {
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().take(20).map(String::as_str).collect();
            format!("an object with keys {keys:?}")
        }
        Value::Array(items) => format!("an array of {} items", items.len()),
        other => format!("a {}", type_name(other)),
    };
    format!(
        "{:?} resolves to {shape}",
        if resolved.is_empty() { "" } else { &resolved }
    )
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn sort_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (key, mut child) in entries {
                sort_keys(&mut child);
                map.insert(key, child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

fn pretty(value: &Value, indent: usize) -> String {
    if indent == 0 {
        return value.to_string();
    }
    let spaces = vec![b' '; indent];
    let formatter = serde_json::ser::PrettyFormatter::with_indent(&spaces);
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    // Serializing a Value into a Vec cannot fail.
    let _ = serde::Serialize::serialize(value, &mut serializer);
    String::from_utf8_lossy(&out).into_owned()
}

export!(Json);
