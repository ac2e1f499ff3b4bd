//! `toolhost pull` and `toolhost push`: components to and from OCI registries, and the lines
//! `check` and `pull` print for each reference (pulled, would be fetched, out of reach).

use super::settings::Settings;
use super::terminal::safe;
use anyhow::{Context, bail};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::registry::{Fetch, Reference, Registry, RegistryError, SigningKey};
use toolhost::resolve::PullSummary;

/// One reference's state, as `check` and `pull` report it.
pub(crate) fn report_json(
    pulls: &[(Reference, Result<PullSummary, RegistryError>)],
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = pulls
        .iter()
        .map(|(reference, result)| match result {
            Ok(pulled) => serde_json::json!({
                "reference": reference.to_string(),
                "state": if pulled.fetched { "fetched" } else { "pulled" },
                "resolved": pulled.resolved,
                "component": pulled.component,
                "bytes": pulled.bytes,
                "warning": pulled.warning,
                "signed_by": pulled.signature.as_ref().and_then(|s| s.as_ref().ok()),
                "unsigned_because": pulled.signature.as_ref().and_then(|s| s.as_ref().err()),
            }),
            Err(RegistryError::NotPulled { digest, size, .. }) => serde_json::json!({
                "reference": reference.to_string(),
                "state": "would be fetched",
                "component": digest,
                "bytes": size,
            }),
            Err(e) => serde_json::json!({
                "reference": reference.to_string(),
                "state": "unreachable",
                "error": e.to_string(),
            }),
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// One line per reference.
pub(crate) fn print_report(pulls: &[(Reference, Result<PullSummary, RegistryError>)]) {
    for (reference, result) in pulls {
        let line = match result {
            Ok(pulled) => {
                let state = if pulled.fetched { "fetched" } else { "pulled" };
                let mut line = format!(
                    "{reference}: {state} {} ({} bytes)",
                    pulled.resolved, pulled.bytes
                );
                match &pulled.signature {
                    Some(Ok(key)) => line.push_str(&format!("; signed by {key}")),
                    Some(Err(why)) => line.push_str(&format!("; not accepted as signed: {why}")),
                    None => {}
                }
                if let Some(warning) = &pulled.warning {
                    line.push_str(&format!("; warning: {warning}"));
                }
                line
            }
            Err(RegistryError::NotPulled { digest, size, .. }) => {
                format!("{reference}: would be fetched (component {digest}, {size} bytes)")
            }
            Err(e) => format!("{reference}: cannot be resolved: {e}"),
        };
        outln!("{}", safe(&line));
    }
}

/// `toolhost pull [REFERENCE]`.
pub(crate) async fn pull(
    settings: &Settings,
    reference: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let pulls = match reference {
        Some(text) => {
            let reference = Reference::parse(text).map_err(|e| anyhow::anyhow!(e))?;
            let registry = Arc::new(Registry::new(settings.registry.clone()));
            let result = registry.pull(&reference, Fetch::Missing).await;
            vec![(
                reference,
                result.as_ref().map(PullSummary::from).map_err(Clone::clone),
            )]
        }
        None => {
            let (_, resolved, resolver) = settings.load_with(Fetch::Missing).await?;
            let pulls = resolver.pulls();
            if !json {
                for diagnostic in resolved.diagnostics() {
                    outln!("{}", safe(&diagnostic.to_string()));
                }
            }
            pulls
        }
    };
    let failed = pulls.iter().filter(|(_, result)| result.is_err()).count();
    if json {
        outln!("{}", serde_json::to_string_pretty(&report_json(&pulls))?);
    } else {
        print_report(&pulls);
        outln!(
            "{} reference(s): {} in the store, {failed} failed",
            pulls.len(),
            pulls.len() - failed
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `toolhost push FILE REFERENCE`.
pub(crate) async fn push(
    settings: &Settings,
    file: &Path,
    reference: &str,
    sign: Option<&Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse(reference).map_err(|e| anyhow::anyhow!(e))?;
    let key = match sign {
        Some(path) => {
            let pem = toolhost::config::read_limited(path, 64 * 1024)
                .map_err(|e| anyhow::anyhow!("cannot read the key {}: {e}", path.display()))?;
            let password = std::env::var("COSIGN_PASSWORD").map_err(|_| {
                anyhow::anyhow!("set COSIGN_PASSWORD to the password of {}", path.display())
            })?;
            let key = SigningKey::from_encrypted_pem(&pem, password.as_bytes())
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Some(key)
        }
        None => None,
    };
    let max = settings.compile.max_component_bytes;
    let bytes = toolhost::config::read_limited(file, max)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let (imports, exports) = world_names(&bytes)
        .with_context(|| format!("{} is not a WebAssembly component", file.display()))?;
    let pushed = toolhost::registry::push(
        &settings.registry,
        &reference,
        bytes,
        &imports,
        &exports,
        key.as_ref(),
    )
    .await;
    // The registry refused or could not be reached: the work failed (1), not the host.
    let pushed = match pushed {
        Ok(pushed) => pushed,
        Err(e) => {
            super::logging::say(
                tracing::Level::ERROR,
                &format!("error: {}", safe(&e.to_string())),
            );
            return Ok(ExitCode::from(1));
        }
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&pushed)?);
    } else {
        outln!(
            "pushed {} ({} bytes, component {}){}",
            pushed.reference,
            pushed.bytes,
            pushed.component,
            if pushed.signed { ", signed" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The names a component imports and exports (its own, not those of components inside it),
/// read without compiling it.
fn world_names(bytes: &[u8]) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    use wasmparser::{Encoding, Parser, Payload};
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    bail!("it is a core module; build a component (wasm32-wasip2)");
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section {
                    imports.push(import?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    exports.push(export?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    if depth != 0 {
        bail!("it ends before its last section");
    }
    Ok((imports, exports))
}
