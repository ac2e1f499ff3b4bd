//! `toolhost cache prune`: removes the compiled components no ensemble uses from the compile
//! cache (`serve` does the same as it reloads, keeping the most recently used few), and the
//! pulled blobs no `oci://` reference uses from the content store beside it.

use super::settings::Settings;
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::registry::Fetch;

pub(crate) async fn prune(
    settings: &Settings,
    keep: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(dir) = &settings.cache_dir else {
        anyhow::bail!("there is no compile cache (--no-cache)");
    };
    // What the ensembles name now, compiled where needed (as `check` would).
    let runtime = settings.runtime()?;
    // A reference not pulled yet stays so: pruning fetches nothing.
    let resolver = settings.resolver(runtime.clone(), Fetch::ManifestsOnly);
    let resolved = resolver.resolve_dir(&settings.ensembles).await;
    let in_use = resolver.components_in_use(&resolved.catalog);
    let digests = resolver.digests_in_use();
    let registry = Arc::clone(resolver.registry());
    let (pruned, blobs) = tokio::task::spawn_blocking(move || {
        // Asked for: whatever this configuration does not use goes, however recent.
        let pruned = runtime.prune_cache(&in_use, keep, None).unwrap_or_default();
        let blobs = registry.store().map(|store| store.prune(&digests, keep));
        (pruned, blobs.unwrap_or_default())
    })
    .await?;
    if json {
        let report = serde_json::json!({
            "removed": pruned.removed, "freed_bytes": pruned.freed_bytes, "kept": pruned.kept,
            "pulled": blobs,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "{}: removed {} compiled component(s) ({} MiB); kept {}",
            dir.display(),
            pruned.removed,
            pruned.freed_bytes >> 20,
            pruned.kept
        );
        outln!(
            "{}: removed {} pulled blob(s) ({} MiB); kept {}",
            dir.join("oci").display(),
            blobs.removed,
            blobs.freed_bytes >> 20,
            blobs.kept
        );
    }
    Ok(ExitCode::SUCCESS)
}
