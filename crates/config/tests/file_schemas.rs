//! The JSON Schemas published for editors (`schemas/`) are what the configuration types say,
//! and every configuration file the repository ships names its schema on its first line and
//! fits it. `BLESS=1` rewrites the published schemas after the types changed.

use std::path::{Path, PathBuf};
use toolhost_config::file_schemas::Kind;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_published_schemas_are_generated_from_the_types() {
    for kind in Kind::ALL {
        let path = repository().join("schemas").join(kind.file_name());
        let generated = kind.schema_text();
        if std::env::var_os("BLESS").is_some() {
            std::fs::write(&path, &generated).expect("write the schema");
            continue;
        }
        let published = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            published == generated,
            "{} is not what the types say; run `BLESS=1 cargo test -p toolhost-config --test \
             file_schemas` and commit it",
            path.display()
        );
    }
}

/// The configuration files the repository ships, with their kinds.
fn shipped() -> Vec<(PathBuf, Kind)> {
    let root = repository();
    let mut files = vec![
        (root.join("conformance/toolhost.toml"), Kind::Host),
        (root.join("deploy/systemd/toolhost.toml"), Kind::Host),
    ];
    for dir in ["ensembles", "conformance/ensembles"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("an ensembles folder") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                files.push((path, Kind::Ensemble));
            } else if path.is_dir() {
                for invoker in std::fs::read_dir(&path).expect("an invokers folder") {
                    let invoker = invoker.expect("an entry").path();
                    if invoker.extension().is_some_and(|e| e == "toml") {
                        files.push((invoker, Kind::Invoker));
                    }
                }
            }
        }
    }
    files
}

#[test]
fn every_shipped_file_names_its_schema_and_fits_it() {
    let files = shipped();
    assert!(files.len() >= 9, "the shipped files were not found");
    let mut problems = Vec::new();
    for (path, kind) in files {
        let text = std::fs::read_to_string(&path).expect("read");
        let named = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("#:schema "))
            .map(|schema| path.parent().unwrap_or(Path::new(".")).join(schema.trim()));
        match named.map(|p| p.canonicalize()) {
            Some(Ok(schema)) if schema.ends_with(Path::new("schemas").join(kind.file_name())) => {}
            other => problems.push(format!(
                "{}: its first line must be `#:schema <relative path to schemas/{}>` ({other:?})",
                path.display(),
                kind.file_name()
            )),
        }
        for error in kind.check(&text) {
            problems.push(format!("{}: {error}", path.display()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
