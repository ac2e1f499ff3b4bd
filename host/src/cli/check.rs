//! `toolhost check`: every error in every file, then a summary; non-zero exit on any error.

use super::settings::Settings;
use super::terminal::safe;
use std::process::ExitCode;
use toolhost::catalog::Catalog;
use toolhost::registry::Fetch;

pub(crate) async fn run(settings: &Settings, json: bool) -> anyhow::Result<ExitCode> {
    // A check fetches no component: what is not pulled yet is said, and its ensemble is
    // refused (its tools could not be checked). It needs to know that each component
    // compiles, links and describes itself: in tiers, what is not cached is compiled by
    // Winch alone (and cached, for `serve`).
    let (runtime, resolved, resolver) = settings.load_with(Fetch::ManifestsOnly).await?;
    let pulls = resolver.pulls();
    let diagnostics: Vec<_> = resolved.diagnostics().collect();
    let catalog: &Catalog = &resolved.catalog;
    // What loaded but gives nothing (a grant no tool asks for): said, not refused.
    let mut warnings: Vec<String> = settings.unset.clone();
    warnings.extend(
        (catalog.ensembles().iter())
            .flat_map(|e| e.warnings.iter())
            .map(super::settings::as_warning),
    );
    let stats = runtime.compile_stats();
    if json {
        let report = serde_json::json!({
            "ok": diagnostics.is_empty(),
            "ensembles_dir": settings.ensembles,
            "ensembles": catalog.ensembles(),
            "refused": resolved.refused.iter().map(|r| &r.file).collect::<Vec<_>>(),
            "tools": catalog.all_tools().map(|t| serde_json::json!({
                "name": t.name(), "ensemble": t.ensemble(), "enabled": t.enabled(), "component": t.source_hash().to_string(),
            })).collect::<Vec<_>>(),
            "errors": diagnostics.iter().map(|d| serde_json::json!({
                "message": d.message,
                "file": d.location.file,
                "line": d.location.line,
                "column": d.location.column,
                "notes": d.notes,
                "rendered": d.to_string(),
            })).collect::<Vec<_>>(),
            "components": { "compiled": stats.compiled, "from_cache": stats.cache_hits },
            "references": super::oci::report_json(&pulls),
            "warnings": warnings,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for warning in &warnings {
            outln!("{}", safe(warning));
        }
        for diagnostic in &diagnostics {
            outln!("{}", safe(&diagnostic.to_string()));
        }
        super::oci::print_report(&pulls);
        let enabled = catalog.tools().count();
        let loaded = catalog.ensembles().len();
        // A set of resources is an ensemble's `[[resources]]`, or what an imported server or a
        // component passes on.
        let resources = catalog.resource_sets().len() + catalog.passed_resources().len();
        let prompts = catalog.prompts().len();
        outln!(
            "checked {}: {loaded} ensemble(s) loaded with {enabled} enabled tool(s), {prompts} \
             prompt(s), {resources} resource set(s); {} refused; {} error(s)",
            settings.ensembles.display(),
            resolved.refused.len(),
            diagnostics.len()
        );
    }
    Ok(if diagnostics.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
