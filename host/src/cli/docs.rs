//! `toolhost add-docs FILE.wasm --wit DIR`: a typed component's WIT doc comments, put back.
//! A typed component's tools take their descriptions from its `package-docs` section (what
//! wit-component writes from the WIT's `///` comments), but a component built by cargo with
//! wit-bindgen has none: the comments are lost on the way through the bindings. This parses
//! the WIT the component was built from (wit-parser, the parser wit-component uses) and
//! writes its docs into the component, so that `describe` and the model read them.

use anyhow::{Context, bail};
use std::path::Path;
use std::process::ExitCode;

/// The largest component read: as large as a host accepts by default.
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

pub(crate) fn run(file: &Path, wit: &Path, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    let mut resolve = wit_parser::Resolve::default();
    let package = if wit.is_dir() {
        resolve.push_dir(wit).map(|(package, _)| package)
    } else {
        resolve.push_file(wit)
    }
    .with_context(|| format!("cannot read the WIT at {}", wit.display()))?;
    let docs = wit_parser::PackageMetadata::extract(&resolve, package)
        .encode()
        .context("cannot encode the doc comments")?;
    let bytes = toolhost::config::read_limited(file, MAX_COMPONENT_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let Some(written) = toolhost::runtime::with_package_docs(&bytes, &docs) else {
        bail!("{} is not a WebAssembly file", file.display());
    };
    let target = output.unwrap_or(file);
    // A new file renamed over the target: a reader never sees half of it.
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let temporary = toolhost::config::write_new(dir, "add-docs", &[&written])
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::fs::set_permissions(&temporary, mode_of(file))
        .and_then(|()| std::fs::rename(&temporary, target))
        .with_context(|| format!("cannot write {}", target.display()))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })?;
    outln!(
        "{}: the doc comments of {} ({} bytes of package-docs)",
        target.display(),
        resolve.packages[package].name,
        docs.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The permissions a rewritten file keeps: its own, else readable by all (as a build writes).
fn mode_of(file: &Path) -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file)
        .map(|m| m.permissions())
        .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644))
}
