//! `toolhost list`: the tools of the loaded ensembles, enabled or not; with `--as`, only
//! those an identity may list and call under `[access]`.

use super::settings::Settings;
use super::terminal::safe;
use std::process::ExitCode;

/// `--as`: who to list for.
pub(crate) struct Identity {
    pub(crate) name: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) groups: Vec<String>,
}

pub(crate) async fn run(
    settings: &Settings,
    json: bool,
    identity: Option<Identity>,
) -> anyhow::Result<ExitCode> {
    let host = settings.host().await?;
    let catalog = host.catalog().snapshot();
    let mut tools: Vec<_> = catalog.all_tools().collect();
    if let Some(identity) = identity {
        let caller = caller_of(settings, identity)?;
        tools.retain(|tool| tool.enabled() && caller.permits(tool));
    }
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

/// The caller `--as` names: a static token of `[access]` (its groups), or else the subject
/// of an access token with the scopes and groups given.
fn caller_of(settings: &Settings, identity: Identity) -> anyhow::Result<toolhost::invoke::Caller> {
    use toolhost::contract::{Identity as Who, IdentityKind};
    let access = toolhost::access::Access::new(settings.access.clone(), None)?;
    let who = match access.token_identity(&identity.name) {
        Some(token) if identity.scopes.is_empty() => Who {
            groups: [token.groups, identity.groups].concat(),
            ..token
        },
        Some(_) => anyhow::bail!(
            "--as {}: a static token has no scopes; --scope is for an access token's subject",
            identity.name
        ),
        None => Who {
            kind: IdentityKind::Oauth,
            name: identity.name,
            client: None,
            groups: identity.groups,
            scopes: identity.scopes,
        },
    };
    Ok(access.caller(who))
}
