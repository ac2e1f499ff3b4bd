//! `toolhost prompt NAME --arg K=V` and `toolhost read URI`: a prompt's messages and a
//! resource's contents, the counterparts of `call`, through the same checks an MCP client's
//! `prompts/get` and `resources/read` go through (arguments, bounds, audit).

use super::settings::Settings;
use super::terminal::safe;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use std::process::ExitCode;
use toolhost::config::draft::Role;
use toolhost::contract::{Content, ToolResult};
use toolhost::resources::{Body, Contents};

/// `toolhost prompt NAME --arg K=V ...`: exit 0 with the messages, 1 with why not.
pub(crate) async fn prompt(
    settings: &Settings,
    name: &str,
    given: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut arguments = Map::new();
    for pair in given {
        let Some((key, value)) = pair.split_once('=') else {
            super::logging::say(
                tracing::Level::ERROR,
                &format!("error: --arg takes NAME=VALUE; got {:?}", safe(pair)),
            );
            return Ok(ExitCode::from(2));
        };
        arguments.insert(key.to_string(), Value::String(value.to_string()));
    }
    let host = settings.host().await?;
    let session = host.session(format!("cli-{}", std::process::id()), Default::default());
    let outcome = host.get_prompt(&session, name, &arguments).await;
    super::service::close_audit(&host);
    let messages = match outcome {
        Ok((_, messages)) => messages,
        Err(error) => return Ok(refused(&error.to_string())),
    };
    if json {
        let messages: Vec<Value> = (messages.iter())
            .map(|m| json!({"role": role(m.role), "content": as_mcp(&m.content)}))
            .collect();
        let report = json!({"prompt": name, "messages": messages});
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for message in &messages {
            let one = ToolResult {
                content: vec![message.content.clone()],
                structured: None,
            };
            outln!("[{}] {}", role(message.role), safe(&one.text()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolhost read URI`: exit 0 with the contents, 1 with why not.
pub(crate) async fn read(settings: &Settings, uri: &str, json: bool) -> anyhow::Result<ExitCode> {
    let host = settings.host().await?;
    let session = host.session(format!("cli-{}", std::process::id()), Default::default());
    let outcome = host.read_resource(&session, uri).await;
    super::service::close_audit(&host);
    let contents = match outcome {
        Ok(contents) => contents,
        Err(error) => return Ok(refused(&error.to_string())),
    };
    if json {
        let contents: Vec<Value> = contents.iter().map(contents_json).collect();
        let report = json!({"uri": uri, "contents": contents});
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for item in &contents {
            match &item.body {
                Body::Text(text) => outln!("{}", safe(text)),
                Body::Blob(bytes) => outln!(
                    "[{} bytes of {} at {}: --json gives them in base64]",
                    bytes.len(),
                    safe(&item.mime),
                    safe(&item.uri)
                ),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Says why on stderr (one line): exit 1, as a failed `call`.
fn refused(why: &str) -> ExitCode {
    let one_line = why.replace('\n', " ");
    super::logging::say(
        tracing::Level::ERROR,
        &format!("error: {}", safe(&one_line)),
    );
    ExitCode::from(1)
}

fn role(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// One message's content in MCP's form.
fn as_mcp(content: &Content) -> Value {
    let result = ToolResult {
        content: vec![content.clone()],
        structured: None,
    };
    let items = toolhost::content::to_mcp(&result);
    serde_json::to_value(items.first()).unwrap_or(Value::Null)
}

/// A resource's contents as `resources/read` gives them: text, or a blob in base64.
fn contents_json(contents: &Contents) -> Value {
    match &contents.body {
        Body::Text(text) => json!({"uri": contents.uri, "mimeType": contents.mime, "text": text}),
        Body::Blob(bytes) => json!({
            "uri": contents.uri,
            "mimeType": contents.mime,
            "blob": base64::engine::general_purpose::STANDARD.encode(bytes),
        }),
    }
}
