//! A files tool: list, read (with a size cap) and search the files of the directories the
//! operator granted. The host's sandbox decides what is reachable; this plugin only walks
//! what it is given, and says so clearly when a path is outside.

wit_bindgen::generate!({
    path: "../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};

/// Walks stop after this many entries, so a huge tree cannot make a call run away.
const MAX_ENTRIES: usize = 10_000;

struct Files;

#[derive(Deserialize)]
struct ListArgs {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Deserialize)]
struct ReadArgs {
    path: String,
    #[serde(default = "default_max_bytes")]
    max_bytes: u64,
}

#[derive(Deserialize)]
struct SearchArgs {
    path: String,
    pattern: String,
    #[serde(default)]
    regex: bool,
    #[serde(default = "default_max_matches")]
    max_matches: usize,
}

fn default_max_bytes() -> u64 {
    65_536
}

fn default_max_matches() -> usize {
    100
}

fn parse<T: for<'de> Deserialize<'de>>(arguments: &str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

fn io_error(path: &Path, e: std::io::Error) -> ToolError {
    let hint = match e.kind() {
        std::io::ErrorKind::NotFound => " (paths start at a granted directory, such as /data)",
        std::io::ErrorKind::PermissionDenied => {
            " (outside the granted directories, or not allowed)"
        }
        _ => "",
    };
    ToolError::Failed(format!("{}: {e}{hint}", path.display()))
}

impl Guest for Files {
    fn describe() -> Vec<ToolSpec> {
        let path = json!({ "type": "string", "description": "Absolute path inside a granted directory, e.g. /data" });
        vec![
            ToolSpec {
                name: "list_files".into(),
                description: "List the files and directories at a path, with their sizes.".into(),
                input_schema: json!({
                    "type": "object", "required": ["path"], "additionalProperties": false,
                    "properties": { "path": path, "recursive": { "type": "boolean", "default": false } }
                })
                .to_string(),
            },
            ToolSpec {
                name: "read_file".into(),
                description: "Read a text file, up to max_bytes (default 65536); says when the file was cut.".into(),
                input_schema: json!({
                    "type": "object", "required": ["path"], "additionalProperties": false,
                    "properties": {
                        "path": path,
                        "max_bytes": { "type": "integer", "minimum": 1, "maximum": 1048576, "default": 65536 }
                    }
                })
                .to_string(),
            },
            ToolSpec {
                name: "search_files".into(),
                description: "Search the text files under a path for a string (or a regex with regex=true). \
                    Returns file, line number and line for each match."
                    .into(),
                input_schema: json!({
                    "type": "object", "required": ["path", "pattern"], "additionalProperties": false,
                    "properties": {
                        "path": path,
                        "pattern": { "type": "string", "minLength": 1 },
                        "regex": { "type": "boolean", "default": false },
                        "max_matches": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 100 }
                    }
                })
                .to_string(),
            },
        ]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        match name.as_str() {
            "list_files" => list(parse(&arguments)?).map(|v| v.to_string()),
            "read_file" => read(parse(&arguments)?),
            "search_files" => search(parse(&arguments)?).map(|v| v.to_string()),
            other => Err(ToolError::Failed(format!(
                "this component has no tool named {other:?}"
            ))),
        }
    }
}

/// Collects the files under `root` (itself, if it is a file), depth first, in name order.
fn walk(
    root: &Path,
    recursive: bool,
    out: &mut Vec<(PathBuf, fs::Metadata)>,
) -> Result<(), ToolError> {
    let mut entries: Vec<_> = fs::read_dir(root)
        .map_err(|e| io_error(root, e))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() >= MAX_ENTRIES {
            return Ok(());
        }
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        let is_dir = meta.is_dir();
        out.push((path.clone(), meta));
        if recursive && is_dir {
            walk(&path, true, out)?;
        }
    }
    Ok(())
}

fn list(args: ListArgs) -> Result<Value, ToolError> {
    let mut found = Vec::new();
    walk(Path::new(&args.path), args.recursive, &mut found)?;
    let entries: Vec<Value> = found
        .iter()
        .map(|(path, meta)| {
            json!({
                "path": path.display().to_string(),
                "kind": if meta.is_dir() { "directory" } else { "file" },
                "bytes": meta.len(),
            })
        })
        .collect();
    Ok(json!({ "entries": entries, "truncated": found.len() >= MAX_ENTRIES }))
}

fn read(args: ReadArgs) -> Result<String, ToolError> {
    use std::io::Read;
    let path = Path::new(&args.path);
    let file = fs::File::open(path).map_err(|e| io_error(path, e))?;
    let size = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut bytes = Vec::new();
    file.take(args.max_bytes)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if size > args.max_bytes {
        text.push_str(&format!("\n[cut at {} of {size} bytes]", args.max_bytes));
    }
    Ok(text)
}

fn search(args: SearchArgs) -> Result<Value, ToolError> {
    let pattern = if args.regex {
        args.pattern.clone()
    } else {
        regex::escape(&args.pattern)
    };
    let regex = regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ToolError::InvalidArguments(format!("bad pattern: {e}")))?;
    let root = Path::new(&args.path);
    let mut files = Vec::new();
    if fs::metadata(root).map_err(|e| io_error(root, e))?.is_file() {
        files.push(root.to_path_buf());
    } else {
        let mut found = Vec::new();
        walk(root, true, &mut found)?;
        files.extend(
            found
                .into_iter()
                .filter(|(_, m)| m.is_file())
                .map(|(p, _)| p),
        );
    }
    let mut matches = Vec::new();
    'files: for file in files {
        // Binary and unreadable files are skipped, not errors: a search is best effort.
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if matches.len() == args.max_matches {
                    break 'files;
                }
                matches.push(
                    json!({ "file": file.display().to_string(), "line": number + 1, "text": line }),
                );
            }
        }
    }
    Ok(json!({ "count": matches.len(), "matches": matches }))
}

export!(Files);
