//! The module layout of `host/src/lib.rs`, checked: every module of the library imports only
//! modules below it in the layout (so none imports one above it, and no two import each
//! other), and no source file grows past the size where it stops being one concern.

use std::path::{Path, PathBuf};

/// The library's modules, top layer first (the order of the layout in `host/src/lib.rs`).
const LAYERS: &[&str] = &[
    "web", "mcp", "agent", "reload", "resolve", "registry", "invoke", "catalog", "backend",
    "runtime", "sandbox", "config", "provider", "audit", "metrics",
];

/// Past this many lines a file is split along its concerns.
const MAX_LINES: usize = 650;

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The top-level module a file of the library belongs to (`None` for lib.rs and the binary).
fn module_of(file: &Path) -> Option<&'static str> {
    let relative = file.strip_prefix(source_dir()).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    LAYERS.iter().copied().find(|m| *m == name)
}

/// The top-level modules a file's code names as `crate::<module>`.
fn imports(text: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if let Some(module) = LAYERS.iter().copied().find(|m| *m == name)
            && !found.contains(&module)
        {
            found.push(module);
        }
    }
    found
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let mut files = Vec::new();
    rust_files(&source_dir(), &mut files);
    files.sort();
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m).expect("a layer");
    let mut upward = Vec::new();
    let mut modules_seen = Vec::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        modules_seen.push(module);
        let text = std::fs::read_to_string(file).expect("read source");
        for target in imports(&text) {
            if target != module && rank(target) < rank(module) {
                upward.push(format!(
                    "{} ({module}) imports {target}, a layer above it",
                    file.display()
                ));
            }
        }
    }
    for layer in LAYERS {
        assert!(
            modules_seen.contains(layer),
            "the layer list names `{layer}`, which has no file"
        );
    }
    assert!(upward.is_empty(), "{}", upward.join("\n"));
}

#[test]
fn no_source_file_is_over_the_size_of_one_concern() {
    let mut files = Vec::new();
    rust_files(&source_dir(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).expect("read").lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these files:\n{}", long.join("\n"));
}

#[test]
fn the_layout_doc_lists_the_layers_in_this_order() {
    let lib = std::fs::read_to_string(source_dir().join("lib.rs")).expect("lib.rs");
    let listed: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//! "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|word| LAYERS.contains(word))
        .collect();
    let mut order: Vec<&str> = Vec::new();
    for word in listed {
        if !order.contains(&word) {
            order.push(word);
        }
    }
    assert_eq!(
        order, LAYERS,
        "host/src/lib.rs lists the layers in another order"
    );
}
