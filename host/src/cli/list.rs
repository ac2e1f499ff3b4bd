//! `toolhost list`: the tools of the loaded ensembles, enabled or not, then the enabled
//! ensembles' prompts and resource sets; with `--as`, only those an identity may list and
//! call under `[access]`. `--json` lists the tools.

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
    let mut prompts: Vec<_> = catalog.prompts().collect();
    let mut resources: Vec<_> = catalog.resource_sets().collect();
    if let Some(identity) = identity {
        let named = identity.name.clone();
        let caller = caller_of(settings, identity)?;
        tools.retain(|tool| tool.enabled() && caller.permits(tool));
        prompts.retain(|p| caller.access.permits_named(p.ensemble(), p.name()));
        resources.retain(|r| caller.access.permits_named(r.ensemble(), r.name()));
        if tools.is_empty() && prompts.is_empty() && resources.is_empty() {
            // An empty table says nothing of why: say it.
            let known = caller.identity.kind != toolhost::contract::IdentityKind::Oauth;
            let why = if known {
                "the rules grant this token nothing".to_string()
            } else {
                format!(
                    "no token is named `{}`, and no rule grants an access token's subject of \
                     that name, with the --scope and --group given, anything",
                    super::terminal::safe(&named)
                )
            };
            super::logging::say(
                tracing::Level::WARN,
                &format!(
                    "--as {}: nothing to list: {why}",
                    super::terminal::safe(&named)
                ),
            );
        }
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
                    // A setting from the environment by its variable's name, never its value.
                    "config": t.policy().sandbox.config.iter()
                        .map(|c| (c.key.clone(), serde_json::Value::from(c.shown())))
                        .collect::<serde_json::Map<_, _>>(),
                    "version": t.version().to_string(),
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&rows)?);
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
    outln!(
        "{:name_width$}  {:ensemble_width$}  ENABLED  COMPONENT     DESCRIPTION",
        "TOOL",
        "ENSEMBLE"
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
        outln!(
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
        outln!("from {}", safe(&source));
    }
    print_offers(&prompts, &resources);
    Ok(ExitCode::SUCCESS)
}

/// The prompts (required arguments marked `*`) and resource sets, when there are any.
fn print_offers(
    prompts: &[&std::sync::Arc<toolhost::prompts::Prompt>],
    resources: &[&std::sync::Arc<toolhost::resources::ResourceSet>],
) {
    let first_line = |text: &str| -> String {
        let start: String = text.lines().next().unwrap_or("").chars().take(60).collect();
        start.trim_end().to_string()
    };
    if !prompts.is_empty() {
        let width = prompts
            .iter()
            .map(|p| p.name().len())
            .max()
            .unwrap_or(6)
            .max(6);
        outln!(
            "\n{:width$}  {:10}  {:24}  DESCRIPTION",
            "PROMPT",
            "ENSEMBLE",
            "ARGUMENTS"
        );
        for prompt in prompts {
            let arguments: Vec<String> = prompt
                .arguments()
                .iter()
                .map(|a| format!("{}{}", a.name, if a.required { "*" } else { "" }))
                .collect();
            outln!(
                "{:width$}  {:10}  {:24}  {}",
                safe(prompt.name()),
                prompt.ensemble(),
                safe(&arguments.join(", ")),
                safe(&first_line(prompt.description())),
            );
        }
    }
    if !resources.is_empty() {
        let width = resources
            .iter()
            .map(|r| r.template().len())
            .max()
            .unwrap_or(9)
            .max(9);
        outln!("\n{:width$}  {:10}  DIRECTORY", "RESOURCES", "ENSEMBLE");
        for set in resources {
            outln!(
                "{:width$}  {:10}  {}",
                set.template(),
                set.ensemble(),
                safe(&set.directory().display().to_string()),
            );
        }
    }
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
