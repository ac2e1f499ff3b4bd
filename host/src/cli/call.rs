//! `toolhost call TOOL JSON`: one call through the same `invoke` path as every other caller.

use super::settings::Settings;
use super::terminal::safe;
use std::process::ExitCode;
use toolhost::invoke::Arguments;

pub(crate) async fn run(
    settings: &Settings,
    tool: &str,
    arguments: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let arguments = super::value_or_stdin(arguments, "the arguments")?;
    let host = settings.host().await?;
    let session = host.session(format!("cli-{}", std::process::id()), Default::default());
    let outcome = host
        .invoke(&session, tool, Arguments::Text(arguments))
        .await;
    // Synced, and a record the file refused printed on stderr rather than lost.
    super::service::close_audit(&host);
    if json {
        let report = match &outcome.result {
            // `result` is the text a model would read; `content` every item in MCP's form.
            Ok(result) => serde_json::json!({
                "tool": outcome.tool, "ok": true, "result": result.text(),
                "content": toolhost::content::to_mcp(result),
                "structured": result.structured,
                "deduplicated": outcome.deduplicated, "duration_ms": outcome.duration.as_secs_f64() * 1000.0,
            }),
            Err(error) => serde_json::json!({
                "tool": outcome.tool, "ok": false, "error": error,
                "deduplicated": outcome.deduplicated, "duration_ms": outcome.duration.as_secs_f64() * 1000.0,
            }),
        };
        outln!("{}", serde_json::to_string_pretty(&report)?);
    }
    match &outcome.result {
        Ok(result) => {
            if !json {
                outln!("{}", safe(&result.text()));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            if !json {
                let one_line = error.message.replace('\n', " ");
                super::logging::say(
                    tracing::Level::ERROR,
                    &format!("error: {}: {}", error.kind, safe(&one_line)),
                );
            }
            Ok(ExitCode::from(1))
        }
    }
}
