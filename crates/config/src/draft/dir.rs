//! The ensembles directory: which files in it are ensembles, and what `toolhost check` can
//! say of them all without an engine.

use super::{CheckReference, read};
use crate::schema::SchemaCache;
use crate::{Diagnostic, Location, in_file_order};
use std::path::{Path, PathBuf};

/// The ensemble files of `dir`: every `*.toml` in it (not recursively: invoker files live in
/// subdirectories and are reached through `source`), hidden ones left out, in file-name
/// order; or why the directory cannot be read.
pub fn ensemble_files(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let unreadable = |e: std::io::Error| {
        Diagnostic::new(
            Location::file(dir),
            format!("cannot read the ensembles directory: {e}"),
        )
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if !hidden && path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Every error the ensemble files of `dir` have that shows without an engine, in the order
/// `toolhost check` prints them: each ensemble's, in file order (its own file's first, then
/// each of its invoker files'). (Resolving adds what only the components can say.)
pub fn check_dir(dir: &Path, check: CheckReference) -> Result<Vec<Diagnostic>, Diagnostic> {
    let files = ensemble_files(dir)?;
    let schemas = SchemaCache::default();
    let mut errors = Vec::new();
    for file in files {
        match read(&file, &schemas, check) {
            Ok(mut draft) => {
                let mut these = std::mem::take(&mut draft.errors);
                for invoker in &mut draft.invokers {
                    these.append(&mut invoker.errors);
                }
                these.extend(draft.duplicates());
                errors.extend(in_file_order(these, &file));
            }
            Err(mut these) => errors.append(&mut these),
        }
    }
    Ok(errors)
}
