//! `toolhost list`: the tools of the loaded ensembles, enabled or not.

use super::settings::Settings;
use super::terminal::safe;
use std::process::ExitCode;

pub(crate) async fn run(settings: &Settings, json: bool) -> anyhow::Result<ExitCode> {
    let host = settings.host().await?;
    let catalog = host.catalog().snapshot();
    let tools: Vec<_> = catalog.all_tools().collect();
    if json {
        let rows: Vec<_> = tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name(),
                    "ensemble": t.ensemble(),
                    "enabled": t.enabled(),
                    "component": t.source_hash().to_string(),
                    "component_path": t.source(),
                    "tool": t.backend_tool(),
                    "description": t.description(),
                    "input_schema": t.input_schema(),
                    "output_schema": t.accepts().output.as_ref().map(|o| &o.schema),
                    "destructive": t.policy().destructive,
                    "dedup": t.policy().dedup,
                    "limits": {
                        "timeout_ms": t.policy().limits.timeout.as_millis() as u64,
                        "memory_mib": t.policy().limits.memory_bytes >> 20,
                        "max_output_bytes": t.policy().limits.max_output_bytes,
                        "max_concurrency": t.policy().gate.max_running,
                        "max_queue": t.policy().gate.max_waiting,
                    },
                    "grants": t.policy().sandbox.preopens.iter().map(|p| serde_json::json!({
                        "guest": p.guest, "host": p.host, "writable": p.writable,
                    })).collect::<Vec<_>>(),
                    "env": t.policy().sandbox.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                    "version": t.version().to_string(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let name_width = tools
        .iter()
        .map(|t| t.name().len())
        .max()
        .unwrap_or(4)
        .max(4);
    let ensemble_width = tools
        .iter()
        .map(|t| t.ensemble().len())
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:name_width$}  {:ensemble_width$}  ENABLED  COMPONENT     DESCRIPTION",
        "TOOL", "ENSEMBLE"
    );
    for tool in &tools {
        let hash = tool.source_hash().to_string();
        let first_line = tool.description().lines().next().unwrap_or("");
        let description: String = first_line.chars().take(70).collect();
        let cut = if description.len() < first_line.len() {
            "…"
        } else {
            ""
        };
        println!(
            "{:name_width$}  {:ensemble_width$}  {:7}  {}  {}{cut}",
            tool.name(),
            tool.ensemble(),
            if tool.enabled() { "yes" } else { "no" },
            &hash[..12],
            safe(&description),
        );
    }
    // Where registry components came from: the reference and the digest it resolved to.
    let mut sources: Vec<String> = tools.iter().map(|t| t.source()).collect();
    sources.retain(|s| s.starts_with(toolhost::registry::SCHEME));
    sources.sort();
    sources.dedup();
    for source in sources {
        println!("from {}", safe(&source));
    }
    Ok(ExitCode::SUCCESS)
}
