//! `toolhost chat "PROMPT"`: the agent loop at the command line. `--prompt NAME` (with
//! `--arg NAME=VALUE`) starts the conversation with one of the ensembles' prompts, and
//! `--resource URI` attaches a resource, both as the session may see them.
//!
//! For a person, the model's text streams to stdout and tool activity goes to stderr, one
//! line per call and per result, so `toolhost chat ... > answer.txt` keeps only the answer.
//! With `--json`, every event is one JSON line on stdout. When the model asks a question (or
//! converses) and stdin is a terminal, the reply is read and the run goes on.
//!
//! Exit codes: 0 an answer (or a question / a message for the user); 1 the iteration limit,
//! the conversation's size limit, or a provider failure (an answer that broke off included,
//! once its retries are spent); 3 setup (no model, no key, a bad provider name).

use super::settings::Settings;
use super::terminal::safe;
use anyhow::{Context, bail};
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use toolhost::agent::context;
use toolhost::agent::{
    Agent, AgentOptions, Approval, ApprovalPolicy, ApprovalRequest, Approver, ElicitRequest,
    Ending, Event, RunLimits,
};
use toolhost::config::draft::Role;
use toolhost::config::{Setting, written_or};
use toolhost::contract::BoxFuture;
use toolhost::contract::{AskError, ElicitAnswer};
use toolhost::invoke::CallPolicy;
use toolhost::provider::conversation::Conversation;
use toolhost::provider::{ProviderKind, ProviderSettings};

/// The command line's `chat` options.
#[derive(Debug, clap::Args)]
pub(crate) struct ChatOptions {
    /// What to ask, or `-` to read it from stdin (may be left out with --prompt).
    #[arg(value_name = "PROMPT")]
    question: Option<String>,
    /// Start with this prompt of the ensembles' (`toolhost list` shows them).
    #[arg(long = "prompt", value_name = "NAME")]
    use_prompt: Option<String>,
    /// An argument of the prompt (repeatable).
    #[arg(long = "arg", value_name = "NAME=VALUE", requires = "use_prompt")]
    prompt_args: Vec<String>,
    /// Attach this resource to the first message (repeatable; text resources only).
    #[arg(long = "resource", value_name = "URI")]
    resources: Vec<String>,
    #[command(flatten)]
    provider: ProviderFlags,
    /// A system prompt (overrides [chat] system).
    #[arg(long)]
    system: Option<String>,
    /// Model calls at most (overrides [chat] max-iterations; default 10).
    #[arg(long, value_name = "N")]
    max_iterations: Option<u32>,
    /// Offer only these tools (repeatable; a trailing `*` matches a prefix).
    #[arg(long, value_name = "TOOL")]
    allow: Vec<String>,
    /// Never offer these tools (repeatable; a trailing `*` matches a prefix).
    #[arg(long, value_name = "TOOL")]
    deny: Vec<String>,
    /// Whether the model may, must or must not call a tool on its first answer: auto,
    /// required, none or a tool's name (overrides [chat] tool-choice; default auto).
    #[arg(long, value_name = "CHOICE")]
    tool_choice: Option<toolhost::provider::ToolChoice>,
    /// Approve every destructive call without asking.
    #[arg(long)]
    yes: bool,
    /// Print every event as a JSON line.
    #[arg(long)]
    json: bool,
    /// Write the conversation as JSON to this file when the run ends.
    #[arg(long, value_name = "FILE")]
    transcript: Option<std::path::PathBuf>,
}

/// The model's flags, over `[chat]`.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct ProviderFlags {
    /// openai, anthropic or prompted (overrides [chat] provider; default openai).
    #[arg(long)]
    provider: Option<String>,
    /// The model's name (overrides [chat] model).
    #[arg(long)]
    model: Option<String>,
    /// The API's base URL, e.g. http://127.0.0.1:11434/v1 for Ollama (overrides [chat] base-url).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The environment variable that holds the API key (default OPENAI_API_KEY or ANTHROPIC_API_KEY).
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// Ask for whole answers instead of streamed ones.
    #[arg(long)]
    no_stream: bool,
}

pub(crate) async fn run(settings: &Settings, options: ChatOptions) -> anyhow::Result<ExitCode> {
    let question = match &options.question {
        Some(question) => Some(super::value_or_stdin(question, "the prompt")?),
        None if options.use_prompt.is_some() => None,
        None => bail!(
            "say what to ask (\"-\" reads it from stdin), or start from a prompt with --prompt NAME"
        ),
    };
    let provider = provider_settings(settings, &options.provider)?
        .build()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let chat = &settings.chat;
    let agent_options = AgentOptions {
        max_iterations: options.max_iterations.unwrap_or_else(|| {
            written_or(chat.max_iterations, AgentOptions::default().max_iterations)
        }),
        max_parallel_calls: written_or(
            chat.max_parallel_calls,
            AgentOptions::default().max_parallel_calls,
        ),
        builtins: true,
        tool_choice: options
            .tool_choice
            .clone()
            .or(chat.tool_choice.clone())
            .unwrap_or_default(),
        limits: run_limits(chat),
    };
    if agent_options.max_iterations == 0 {
        bail!("max-iterations must be at least 1");
    }
    let interactive = std::io::stdin().is_terminal() && !options.json;
    let approver: Arc<dyn Approver> = if options.yes {
        Arc::new(ApprovalPolicy::approve_all())
    } else if interactive {
        Arc::new(Prompter {
            policy: ApprovalPolicy::approve_only(chat.auto_approve.clone()),
        })
    } else {
        Arc::new(ApprovalPolicy::approve_only(chat.auto_approve.clone()))
    };
    let mut allow = chat.allow.clone();
    if !options.allow.is_empty() {
        allow = Some(options.allow.clone());
    }
    let mut deny = chat.deny.clone();
    deny.extend(options.deny.iter().cloned());
    let signals = super::service::Signals::install()?;
    let host = Arc::new(settings.host().await?);
    let _sync = super::service::sync_audit(host.clone());
    let session = Arc::new(host.session(
        format!("chat-{}", std::process::id()),
        CallPolicy { allow, deny },
    ));
    let agent = Agent::new(host.clone(), Arc::from(provider), approver, agent_options);
    let mut conversation = Conversation::new(options.system.clone().or(chat.system.clone()));
    let notes = bring_context(&host, &session, &options, &mut conversation).await?;
    for note in notes {
        eprintln!("note: {}", safe(&note));
    }
    if let Some(question) = question {
        context::push(&mut conversation, Role::User, question);
    }
    let renderer = Renderer::new(options.json);
    let chat = async {
        loop {
            let outcome = agent
                .run(&mut conversation, &session, &|e| renderer.show(e))
                .await;
            match outcome {
                Err(e) => {
                    if !options.json {
                        eprintln!("error: {}", safe(&e.to_string()));
                    }
                    break Ok(ExitCode::from(1));
                }
                Ok(outcome) => match outcome.ending {
                    Ending::Question | Ending::Converse if interactive => {
                        // Off the runtime's threads: a signal meanwhile still stops the run.
                        let reply = tokio::task::spawn_blocking(read_reply).await??;
                        if reply.is_empty() {
                            break Ok(ExitCode::SUCCESS);
                        }
                        conversation.push_user(reply);
                    }
                    Ending::IterationLimit | Ending::SizeLimit | Ending::Error => {
                        break Ok(ExitCode::from(1));
                    }
                    _ => break Ok(ExitCode::SUCCESS),
                },
            }
        }
    };
    // On a signal the run stops once its calls in flight ended (or were cancelled).
    let drain = super::service::drain_on_signal(host.clone(), signals, settings.drain_timeout);
    let code: anyhow::Result<ExitCode> = tokio::select! {
        code = chat => code,
        report = drain => Ok(super::service::exit_code(report)),
    };
    super::service::close_audit(&host);
    let code = code?;
    if let Some(path) = &options.transcript {
        let text = serde_json::to_string_pretty(&conversation)?;
        std::fs::write(path, text)
            .with_context(|| format!("cannot write the transcript to {}", path.display()))?;
    }
    Ok(code)
}

/// The prompt `--prompt` names (with its `--arg`s) and the resources `--resource` names, put
/// in `conversation` as `session` may see them; notes on what was left out (bytes).
async fn bring_context(
    host: &toolhost::invoke::Host,
    session: &toolhost::invoke::Session,
    options: &ChatOptions,
    conversation: &mut Conversation,
) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    if let Some(name) = &options.use_prompt {
        let mut arguments = serde_json::Map::new();
        for pair in &options.prompt_args {
            let Some((key, value)) = pair.split_once('=') else {
                bail!("--arg takes NAME=VALUE; got {pair:?}");
            };
            arguments.insert(key.to_string(), Value::String(value.to_string()));
        }
        let (_, messages) = host
            .get_prompt(session, name, &arguments)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        notes.extend(context::push_prompt(conversation, messages));
    }
    for uri in &options.resources {
        let contents = host
            .read_resource(session, uri)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for contents in &contents {
            match context::resource_text(contents) {
                Ok(text) => context::push(conversation, Role::User, text),
                Err(note) => notes.push(note),
            }
        }
    }
    Ok(notes)
}

/// The provider from `[chat]`, with the flags over it; the key from the environment.
fn provider_settings(
    settings: &Settings,
    options: &ProviderFlags,
) -> anyhow::Result<ProviderSettings> {
    let chat = &settings.chat;
    let kind = match &options.provider {
        Some(name) => name
            .parse::<ProviderKind>()
            .map_err(|e| anyhow::anyhow!(e))?,
        None => chat.provider.unwrap_or(ProviderKind::OpenAi),
    };
    let Some(model) = options.model.clone().or(chat.model.clone()) else {
        bail!("no model: pass --model or set [chat] model in toolhost.toml");
    };
    let mut provider = ProviderSettings::new(kind, model);
    // Both written is refused where toolhost.toml is read, at its line.
    let from_env = match (&chat.base_url, &chat.base_url_env) {
        (None, Some(var)) => Some(
            std::env::var(var.get_ref().as_str())
                .ok()
                .filter(|url| !url.is_empty())
                .with_context(|| {
                    format!(
                        "${} ([chat] base-url-env) is not set",
                        var.get_ref().as_str()
                    )
                })?,
        ),
        _ => None,
    };
    if let Some(url) = (options.base_url.clone())
        .or(chat.base_url.clone())
        .or(from_env)
    {
        provider.base_url = url.trim_end_matches('/').to_string();
    }
    let key_env = options
        .api_key_env
        .clone()
        .or(chat.api_key_env.as_ref().map(|v| v.to_string()))
        .unwrap_or_else(|| kind.default_key_env().to_string());
    provider.api_key = std::env::var(&key_env).ok().filter(|k| !k.is_empty());
    if provider.api_key.is_none() && provider.base_url == kind.default_base_url() {
        bail!(
            "{kind} needs an API key: set {key_env} in the environment (or name another \
             variable with --api-key-env / [chat] api-key-env)"
        );
    }
    provider.stream = !options.no_stream && chat.stream.unwrap_or(true);
    provider.max_tokens = chat.max_tokens.map(Setting::value);
    provider.max_response_bytes = written_or(chat.max_response_mib, provider.max_response_bytes);
    provider.request_timeout = written_or(chat.request_timeout_s, provider.request_timeout);
    provider.retry.attempts = written_or(chat.max_attempts, provider.retry.attempts);
    provider.retry.base_delay = written_or(chat.retry_delay_ms, provider.retry.base_delay);
    Ok(provider)
}

/// What one run may hold and send: `[chat]`'s bounds over the defaults.
fn run_limits(chat: &toolhost::config::v1::ChatSection) -> RunLimits {
    let defaults = RunLimits::default();
    RunLimits {
        max_calls_per_answer: written_or(chat.max_calls_per_answer, defaults.max_calls_per_answer),
        max_run_result_bytes: written_or(chat.max_run_result_mib, defaults.max_run_result_bytes),
        max_request_bytes: written_or(chat.max_request_mib, defaults.max_request_bytes),
        max_conversation_bytes: written_or(
            chat.max_conversation_mib,
            defaults.max_conversation_bytes,
        ),
    }
}

/// What `[chat]` permits the HTTP chat API, and its model (or why there is none).
pub(crate) fn web_settings(settings: &Settings) -> toolhost::web::ChatSettings {
    let chat = &settings.chat;
    let defaults = toolhost::web::ChatSettings::default();
    let provider = if chat.model.is_none() {
        Err(anyhow::anyhow!("set [chat] model in toolhost.toml"))
    } else {
        provider_settings(settings, &ProviderFlags::default())
    };
    let provider = provider
        .and_then(|p| {
            // A provider that cannot be built (a bad base URL) is said at once, not per run.
            p.build().map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(p)
        })
        .map_err(|e| format!("the chat has no model: {e:#}"));
    toolhost::web::ChatSettings {
        provider,
        models: chat.models.clone(),
        max_iterations: written_or(chat.max_iterations, defaults.max_iterations),
        max_parallel_calls: written_or(chat.max_parallel_calls, defaults.max_parallel_calls),
        tool_choice: chat.tool_choice.clone().unwrap_or_default(),
        policy: CallPolicy {
            allow: chat.allow.clone(),
            deny: chat.deny.clone(),
        },
        auto_approve: chat.auto_approve.clone(),
        approval_timeout: written_or(chat.approval_timeout_s, defaults.approval_timeout),
        max_runs: written_or(chat.max_runs, defaults.max_runs),
        system: chat.system.clone(),
        limits: run_limits(chat),
    }
}

/// Reads the user's reply to a question from the terminal.
fn read_reply() -> anyhow::Result<String> {
    eprint!("> ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("cannot read the reply")?;
    Ok(line.trim().to_string())
}

/// Asks the person at the terminal before each destructive call (the auto-approved run at
/// once).
struct Prompter {
    policy: ApprovalPolicy,
}

impl Approver for Prompter {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            if self.policy.decide(&request.tool) == Approval::Approved {
                return Approval::Approved;
            }
            let question = format!(
                "\n`{}` ({}) is destructive: {}\n  arguments: {}\nRun it? [y/N] ",
                request.tool,
                request.ensemble,
                safe(&request.description),
                safe(&request.arguments.to_string())
            );
            let answer = tokio::task::spawn_blocking(move || {
                eprint!("{question}");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(|_| line)
            })
            .await;
            match answer {
                Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes" | "Yes") => {
                    Approval::Approved
                }
                _ => Approval::Refused(format!(
                    "the user refused to run `{}`; do not retry it",
                    request.tool
                )),
            }
        })
    }

    /// Asks at the terminal, one property of the requested schema at a time.
    fn elicit<'a>(
        &'a self,
        request: &'a ElicitRequest,
    ) -> BoxFuture<'a, Result<ElicitAnswer, AskError>> {
        let request = request.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || ask_form(&request, &mut std::io::stdin().lock()))
                .await
                .unwrap_or_else(|e| {
                    Err(AskError::Failed(format!("the terminal prompt failed: {e}")))
                })
        })
    }
}

/// Asks the person at the terminal what a tool wants to know: answer (each property in
/// turn, its default on an empty line), decline, or cancel.
fn ask_form(
    request: &ElicitRequest,
    input: &mut dyn std::io::BufRead,
) -> Result<ElicitAnswer, AskError> {
    let mut read = |prompt: &str| -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_string()),
        }
    };
    let choice = read(&format!(
        "\n`{}` asks: {}\nAnswer? [y = answer, n = decline, Enter = cancel] ",
        request.tool,
        safe(&request.message)
    ));
    match choice.as_deref() {
        Some("y" | "Y" | "yes") => {}
        Some("n" | "N" | "no") => return Ok(ElicitAnswer::Decline),
        _ => return Ok(ElicitAnswer::Cancel),
    }
    let empty = serde_json::Map::new();
    let properties = request
        .schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut answer = serde_json::Map::new();
    for (name, property) in properties {
        let kind = property
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("string");
        let label = property
            .get("title")
            .or_else(|| property.get("description"))
            .and_then(Value::as_str)
            .unwrap_or(name);
        let default = property.get("default");
        let hint = default.map_or(String::new(), |d| format!(", default {d}"));
        let mut value = None;
        for _ in 0..3 {
            let Some(line) = read(&format!("  {} ({kind}{hint}): ", safe(label))) else {
                return Ok(ElicitAnswer::Cancel);
            };
            value = match (line.as_str(), default) {
                ("", Some(default)) => Some(default.clone()),
                ("", None) => Some(Value::Null),
                (text, _) => typed_answer(kind, text),
            };
            if value.is_some() {
                break;
            }
            eprintln!("  that is not a {kind}");
        }
        match value {
            Some(Value::Null) => {}
            Some(value) => {
                answer.insert(name.clone(), value);
            }
            None => return Ok(ElicitAnswer::Cancel),
        }
    }
    Ok(ElicitAnswer::Accept(Value::Object(answer)))
}

/// The person's text as a value of the property's type, if it is one.
fn typed_answer(kind: &str, text: &str) -> Option<Value> {
    match kind {
        "number" => text.parse::<f64>().ok().map(Value::from),
        "integer" => text.parse::<i64>().ok().map(Value::from),
        "boolean" => match text {
            "y" | "yes" | "true" => Some(Value::Bool(true)),
            "n" | "no" | "false" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => Some(Value::String(text.to_string())),
    }
}

/// Shows events as they come: for a person, or as JSON lines.
struct Renderer {
    json: bool,
    /// The model's text left the cursor mid-line.
    mid_line: AtomicBool,
}

impl Renderer {
    fn new(json: bool) -> Self {
        Renderer {
            json,
            mid_line: AtomicBool::new(false),
        }
    }

    /// Shows `text` at once (the model's text comes a few words at a time); nobody reading
    /// it any more ends the run, as for every command's output.
    fn out(&self, text: &str) {
        out!("{text}");
        super::output::flush();
    }

    fn end_line(&self) {
        if self.mid_line.swap(false, Ordering::Relaxed) {
            self.out("\n");
        }
    }

    fn show(&self, event: Event) {
        if self.json {
            if let Ok(line) = serde_json::to_string(&event) {
                self.out(&format!("{line}\n"));
            }
            return;
        }
        match event {
            Event::TextDelta { text } => {
                self.out(&safe(&text));
                self.mid_line
                    .store(!text.ends_with('\n'), Ordering::Relaxed);
            }
            Event::ToolCall {
                name, arguments, ..
            } => {
                self.end_line();
                let text = match arguments {
                    serde_json::Value::String(text) => text,
                    other => other.to_string(),
                };
                eprintln!("  -> {} {}", safe(&name), safe(&one_line(&text, 160)));
            }
            Event::ToolResult {
                name,
                is_error,
                content,
                duration_ms,
                deduplicated,
                ..
            } => {
                let mark = if is_error { "x" } else { "ok" };
                let dedup = if deduplicated { ", deduplicated" } else { "" };
                eprintln!(
                    "  {mark} {}: {} ({duration_ms:.1} ms{dedup})",
                    safe(&name),
                    safe(&one_line(&content, 160))
                );
            }
            // The question is printed with the run's end.
            Event::Question { .. } => {}
            Event::Retry {
                attempt,
                attempts,
                reason,
            } => {
                self.end_line();
                eprintln!(
                    "  [{}; the text above is void, asking again: try {attempt} of {attempts}]",
                    safe(&reason)
                );
            }
            Event::Done { ending, text, .. } => {
                self.end_line();
                match ending {
                    Ending::Answer => {}
                    Ending::Completed | Ending::Converse => self.out(&format!("{}\n", safe(&text))),
                    Ending::Question => self.out(&format!("? {}\n", safe(&text))),
                    Ending::IterationLimit | Ending::SizeLimit => eprintln!("error: {text}"),
                    Ending::ShutDown | Ending::Cancelled => eprintln!("{text}"),
                    Ending::Error => {}
                }
            }
        }
    }
}

/// `text` on one line, cut at `limit` characters.
fn one_line(text: &str, limit: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= limit {
        flat
    } else {
        let cut: String = flat.chars().take(limit).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_asked_property_by_property_with_defaults_and_retries() {
        let request = ElicitRequest {
            call_id: "c1".into(),
            tool: "signup".into(),
            message: "Who are you?".into(),
            schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": "integer", "default": 30},
                    "member": {"type": "boolean"}
                }
            }),
        };
        let mut typed = "y\nAda\n\nmaybe\nyes\n".as_bytes();
        let answer = ask_form(&request, &mut typed).unwrap();
        assert_eq!(
            answer,
            ElicitAnswer::Accept(serde_json::json!({"name": "Ada", "age": 30, "member": true}))
        );
        assert_eq!(
            ask_form(&request, &mut "n\n".as_bytes()).unwrap(),
            ElicitAnswer::Decline
        );
        assert_eq!(
            ask_form(&request, &mut "\n".as_bytes()).unwrap(),
            ElicitAnswer::Cancel
        );
        // The input ends mid-form: cancelled, not half an answer.
        assert_eq!(
            ask_form(&request, &mut "y\nAda\n".as_bytes()).unwrap(),
            ElicitAnswer::Cancel
        );
    }
}
