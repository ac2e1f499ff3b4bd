//! `toolhost cache prune`: removes the compiled components no ensemble uses from the compile
//! cache (`serve` does the same as it reloads, keeping the most recently used few).

use super::settings::Settings;
use std::process::ExitCode;

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
    let resolver = toolhost::resolve::Resolver::new(runtime.clone());
    let resolved = resolver.resolve_dir(&settings.ensembles).await;
    let in_use = resolver.components_in_use(&resolved.catalog);
    let pruned = tokio::task::spawn_blocking(move || runtime.prune_cache(&in_use, keep))
        .await?
        .unwrap_or_default();
    if json {
        println!("{}", serde_json::to_string_pretty(&pruned)?);
    } else {
        println!(
            "{}: removed {} compiled component(s) ({} MiB); kept {}",
            dir.display(),
            pruned.removed,
            pruned.freed_bytes >> 20,
            pruned.kept
        );
    }
    Ok(ExitCode::SUCCESS)
}
