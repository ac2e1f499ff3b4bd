//! The chat endpoints: conversations listed, read, started, continued and deleted; approvals
//! and tools' questions answered; a run started ([`super::chat_run`] streams it).
//! docs/chat-api.md is their reference.

use super::api_error::{ApiError, error};
use super::chat_run::{Plan, Resumed, start_run};
use super::runs::{Busy, Decision, Unanswered};
use super::store::{Store, StoreError, Stored};
use super::{ChatSettings, Web};
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use toolhost_agent::provider::ToolChoice;
use toolhost_agent::provider::conversation::Conversation;
use toolhost_agent::{AgentOptions, limits};
use toolhost_core::invoke::{CallPolicy, Caller};
use toolhost_core::trace::Traced;

/// The longest message a request may carry.
const MAX_MESSAGE: usize = 256 << 10;
/// The longest title, taken from the first message.
const TITLE_CHARS: usize = 80;

/// A chat request's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatRequest {
    message: String,
    #[serde(default = "yes")]
    tools: bool,
    allow: Option<Vec<String>>,
    max_iterations: Option<u32>,
    tool_choice: Option<WireChoice>,
    model: Option<String>,
    max_tokens: Option<u32>,
    system: Option<String>,
    reply_to: Option<String>,
    /// One of the ensembles' prompts to start with (`{"name", "arguments"}`).
    prompt: Option<super::offers::PromptAsk>,
    /// Resources to attach, by URI.
    #[serde(default)]
    resources: Vec<String>,
}

fn yes() -> bool {
    true
}

/// `"auto"`, `"required"`, `"none"` or `{"tool": NAME}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WireChoice {
    Word(String),
    Tool { tool: String },
}

/// A JSON body; a bad one is a 400 naming the field by its path (`/max_iterations: ...`).
fn from_json<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let at = e.path().to_string();
        let at = if at == "." {
            String::new()
        } else {
            format!("/{}: ", at.replace('.', "/"))
        };
        error(StatusCode::BAD_REQUEST, format!("{at}{}", e.inner()))
    })
}

/// Checks a request against what `[chat]` permits.
fn plan(web: &Web, request: &ChatRequest, caller: Option<Caller>) -> Result<Plan, ApiError> {
    let bad = |message: String| error(StatusCode::BAD_REQUEST, message);
    let chat: &ChatSettings = &web.chat;
    let mut provider = chat
        .provider
        .clone()
        .map_err(|problem| error(StatusCode::SERVICE_UNAVAILABLE, problem))?;
    let brings = request.prompt.is_some() || !request.resources.is_empty();
    if request.message.trim().is_empty() && !brings {
        return Err(bad("/message: the message is empty".into()));
    }
    if request.message.len() > MAX_MESSAGE {
        return Err(bad(format!(
            "/message: {} bytes, more than the {MAX_MESSAGE} a message may be",
            request.message.len()
        )));
    }
    let max_iterations = match request.max_iterations {
        None => chat.max_iterations,
        Some(n) if (1..=chat.max_iterations).contains(&n) => n,
        Some(n) => {
            return Err(bad(format!(
                "/max_iterations: {n} is outside 1 to {} ([chat] max-iterations)",
                chat.max_iterations
            )));
        }
    };
    let tool_choice = match &request.tool_choice {
        None => chat.tool_choice.clone(),
        Some(WireChoice::Word(word)) => match word.as_str() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            other => {
                return Err(bad(format!(
                    "/tool_choice: `{other}`; expected \"auto\", \"required\", \"none\" or \
                     {{\"tool\": NAME}}"
                )));
            }
        },
        Some(WireChoice::Tool { tool }) => ToolChoice::Tool(tool.clone()),
    };
    if let Some(model) = &request.model {
        if *model != provider.model && !chat.models.contains(model) {
            return Err(bad(format!(
                "/model: `{model}` is not [chat] model or one of [chat] models"
            )));
        }
        provider.model = model.clone();
    }
    if let Some(tokens) = request.max_tokens {
        if tokens == 0 || provider.max_tokens.is_some_and(|max| tokens > max) {
            return Err(bad(format!(
                "/max_tokens: {tokens} is outside 1 to {} ([chat] max-tokens)",
                provider.max_tokens.unwrap_or(u32::MAX)
            )));
        }
        provider.max_tokens = Some(tokens);
    }
    let policy = if !request.tools {
        CallPolicy {
            allow: Some(Vec::new()),
            deny: Vec::new(),
        }
    } else if let Some(allow) = &request.allow {
        // Within [chat]'s lists: the tools both permit, by name, now.
        let asked = CallPolicy {
            allow: Some(allow.clone()),
            deny: Vec::new(),
        };
        let names = web
            .host
            .catalog()
            .snapshot()
            .tools()
            .filter(|t| chat.policy.permits(t.name()) && asked.permits(t.name()))
            .map(|t| t.name().to_string())
            .collect();
        CallPolicy {
            allow: Some(names),
            deny: Vec::new(),
        }
    } else {
        chat.policy.clone()
    };
    Ok(Plan {
        message: request.message.clone(),
        options: AgentOptions {
            max_iterations,
            max_parallel_calls: chat.max_parallel_calls,
            builtins: request.tools,
            tool_choice,
            limits: chat.limits,
        },
        provider,
        policy,
        caller,
        turns: Conversation::new(None),
        brought: Value::Null,
    })
}

/// The plan with the turns `request`'s prompt and resources bring, for conversation `id`.
async fn bring(
    web: &Web,
    id: &str,
    request: &ChatRequest,
    mut plan: Plan,
) -> Result<Plan, ApiError> {
    if request.prompt.is_none() && request.resources.is_empty() {
        return Ok(plan);
    }
    let (turns, notes) = super::offers::bring(
        web,
        id,
        &plan.policy,
        plan.caller.as_ref(),
        request.prompt.as_ref(),
        &request.resources,
    )
    .await?;
    plan.turns = turns;
    plan.brought = json!({
        "prompt": request.prompt.as_ref().map(super::offers::PromptAsk::name),
        "resources": request.resources,
        "notes": notes,
    });
    Ok(plan)
}

/// The database, or a 503 that says why it is not there.
fn store(web: &Web) -> Result<&Store, ApiError> {
    web.store
        .as_ref()
        .map_err(|problem| error(StatusCode::SERVICE_UNAVAILABLE, problem.clone()))
}

/// What the database answered, as the API says it: a bound reached is `507`, a database
/// that cannot be used `503`, with the reason.
async fn stored<T>(work: impl Future<Output = Result<T, StoreError>>) -> Result<T, ApiError> {
    match work.await {
        Ok(value) => Ok(value),
        Err(e @ (StoreError::Full(_) | StoreError::DatabaseFull { .. })) => {
            Err(error(StatusCode::INSUFFICIENT_STORAGE, e.to_string()))
        }
        // Logged by the store (or the engine's health) once, when it happened.
        Err(e @ (StoreError::Detached { .. } | StoreError::Unavailable(_))) => {
            Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
        }
        Err(e) => {
            tracing::error!("{e}");
            Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
        }
    }
}

fn busy(busy: Busy) -> ApiError {
    match busy {
        Busy::Conversation => error(
            StatusCode::CONFLICT,
            "a run of this conversation is going on; wait for its `done` event",
        ),
        Busy::Host(max) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{max} runs are going on, the most this host takes ([chat] max-runs); try again later"
            ),
        ),
    }
}

pub(super) async fn settings(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let chat = &web.chat;
    let problem = match (&chat.provider, &web.store) {
        (Err(problem), _) | (_, Err(problem)) => Some(problem.clone()),
        _ => None,
    };
    let provider = chat.provider.as_ref().ok();
    axum::Json(json!({
        "chat": problem.is_none(),
        "problem": problem,
        "provider": provider.map(|p| p.kind.to_string()),
        "model": provider.map(|p| p.model.clone()),
        "models": chat.models,
        "max_iterations": chat.max_iterations,
        "max_tokens": provider.and_then(|p| p.max_tokens),
        "tool_choice": chat.tool_choice,
        // Who the page is signed in as (kind, name, client, groups; never a token).
        "identity": caller.map(|Extension(caller)| caller.identity),
    }))
    .into_response()
}

/// Whose conversations a request sees: its identity's (by its key), or the local operator's
/// (`None`: loopback without a token, `--token-env`'s token, a host without a guard).
fn owner(caller: &Option<Extension<Caller>>) -> Option<String> {
    let Extension(caller) = caller.as_ref()?;
    let identity = &caller.identity;
    (!identity.is_operator()).then(|| blake3::Hash::from(identity.key()).to_hex().to_string())
}

/// What a request answers for a conversation: an approval, or a tool's question.
#[derive(Clone, Copy)]
enum Answering {
    Approval,
    Question,
}

/// Whether the request may answer `what` in conversation `id`: its owner may, and an
/// identity a rule of `[access]` names for it (`approve = true` for approvals, `answer =
/// true` for questions). Told apart from a conversation that does not exist by nothing.
async fn may_answer(
    web: &Web,
    id: &str,
    caller: &Option<Extension<Caller>>,
    what: Answering,
) -> Result<bool, ApiError> {
    let named = caller.as_ref().is_some_and(|Extension(c)| match what {
        Answering::Approval => c.may_approve(),
        Answering::Question => c.may_answer(),
    });
    if named {
        return Ok(true);
    }
    stored(store(web)?.owns(id, owner(caller).as_deref())).await
}

pub(super) async fn list(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
) -> Result<Response, ApiError> {
    let owner = owner(&caller);
    let conversations: Vec<Value> = stored(store(&web)?.list(owner.as_deref()))
        .await?
        .into_iter()
        .map(|s| {
            let running = web.runs.is_running(&s.id);
            let mut value = json!(s);
            value["running"] = json!(running);
            value
        })
        .collect();
    Ok(axum::Json(json!({ "conversations": conversations })).into_response())
}

async fn load(web: &Web, id: String, owner: Option<String>) -> Result<Stored, ApiError> {
    let id = conversation_id(id)?;
    let missing = format!("no conversation `{id}`");
    stored(store(web)?.get(&id, owner.as_deref()))
        .await?
        .ok_or_else(|| error(StatusCode::NOT_FOUND, missing))
}

pub(super) async fn read(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Result<Response, ApiError> {
    let stored = load(&web, id, owner(&caller)).await?;
    Ok(axum::Json(json!({
            "id": stored.summary.id,
            "title": stored.summary.title,
            "created": stored.summary.created,
            "updated": stored.summary.updated,
            "running": web.runs.is_running(&stored.summary.id),
            "allowed_tools": stored.allowed_tools,
            "pending_question": stored.pending_question,
            "system": stored.conversation.system,
            "messages": stored.conversation.messages,
            "log": stored.log,
    }))
    .into_response())
}

pub(super) async fn delete(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Result<Response, ApiError> {
    let id = conversation_id(id)?;
    let store = store(&web)?;
    let missing = format!("no conversation `{id}`");
    let owner = owner(&caller);
    if !stored(store.owns(&id, owner.as_deref())).await? {
        return Err(error(StatusCode::NOT_FOUND, missing));
    }
    web.runs.cancel(&id);
    if stored(store.delete(&id, owner.as_deref())).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(error(StatusCode::NOT_FOUND, missing))
    }
}

pub(super) async fn decide(
    State(web): State<Arc<Web>>,
    Path((id, call)): Path<(String, String)>,
    caller: Option<Extension<Caller>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        decision: Decision,
    }
    let id = conversation_id(id)?;
    let answer: Answer = from_json(&body)?;
    if may_answer(&web, &id, &caller, Answering::Approval).await?
        && web.runs.decide(&id, &call, answer.decision)
    {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(error(
            StatusCode::NOT_FOUND,
            format!("no approval of call `{call}` is pending in conversation `{id}`"),
        ))
    }
}

pub(super) async fn answer(
    State(web): State<Arc<Web>>,
    Path((id, question)): Path<(String, String)>,
    caller: Option<Extension<Caller>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = conversation_id(id)?;
    let answered = if may_answer(&web, &id, &caller, Answering::Question).await? {
        web.runs.answer(&id, &question, from_json(&body)?)
    } else {
        Err(Unanswered::NotPending)
    };
    match answered {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(Unanswered::Invalid(message)) => Err(error(StatusCode::BAD_REQUEST, message)),
        Err(Unanswered::NotPending) => Err(error(
            StatusCode::NOT_FOUND,
            format!("no question `{question}` is pending in conversation `{id}`"),
        )),
    }
}

/// The server span of a chat request whose run starts (`route`, the path's template: no
/// conversation id in a span's name), continuing the trace its `traceparent` header names.
fn traced(route: &'static str, headers: &axum::http::HeaderMap) -> Traced {
    use toolhost_core::trace::{Carrier, KeyValue, SpanBuilder, SpanKind, entry};
    let carrier = Carrier {
        meta: None,
        headers: Some(headers),
    };
    entry(&carrier, || {
        SpanBuilder::from_name(route)
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.route", &route[5..]),
            ])
    })
}

pub(super) async fn start_conversation(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ChatRequest = from_json(&body)?;
    if request.reply_to.is_some() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "/reply_to: a new conversation answers no question; continue the one that asked",
        ));
    }
    let owner = owner(&caller);
    let plan = plan(&web, &request, caller.map(|Extension(caller)| caller))?;
    let store = store(&web)?;
    let id = new_id();
    let plan = bring(&web, &id, &request, plan).await?;
    let slot = web.runs.start(&id).map_err(busy)?;
    web.runs.announce(&id).await;
    let conversation = Conversation::new(request.system.clone().or(web.chat.system.clone()));
    let title = match (&request.prompt, request.message.trim().is_empty()) {
        (Some(prompt), true) => title_of(&format!("/{}", prompt.name())),
        _ => title_of(&request.message),
    };
    stored(store.create(&id, &title, &conversation, owner.as_deref())).await?;
    let first = json!({ "type": "conversation", "id": id });
    let from = Resumed {
        id,
        conversation,
        allowed_tools: Vec::new(),
        log_bytes: 0,
    };
    let traced = traced("POST /api/conversations", &headers);
    Ok(start_run(web, slot, from, plan, Some(first), traced))
}

pub(super) async fn continue_conversation(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = conversation_id(id)?;
    let request: ChatRequest = from_json(&body)?;
    if request.system.is_some() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "/system: the system prompt is set when a conversation starts",
        ));
    }
    let owner = owner(&caller);
    let plan = plan(&web, &request, caller.map(|Extension(caller)| caller))?;
    // What it holds, asked of the database before anything is read; another identity's
    // conversation is not there for this one (not even as busy).
    let limit = web.chat.limits.max_conversation_bytes;
    let database = store(&web)?;
    let sizes = stored(async {
        database.has_room().await?;
        database.sizes(&id, owner.as_deref()).await
    })
    .await?;
    let Some((_, log_bytes)) = sizes else {
        return Err(error(
            StatusCode::NOT_FOUND,
            format!("no conversation `{id}`"),
        ));
    };
    // The prompt and resources are got once the conversation is known to be the caller's.
    let plan = bring(&web, &id, &request, plan).await?;
    let slot = web.runs.start(&id).map_err(busy)?;
    web.runs.announce(&id).await;
    if log_bytes as usize >= limit {
        return Err(too_large(&id, log_bytes as usize, limit, "its log"));
    }
    let stored = load(&web, id.clone(), owner).await?;
    if let Some(call) = &request.reply_to
        && stored.pending_question.as_deref() != Some(call.as_str())
    {
        return Err(error(
            StatusCode::CONFLICT,
            format!("/reply_to: the conversation is not waiting for an answer to `{call}`"),
        ));
    }
    let held = limits::conversation_bytes(&stored.conversation);
    if held > limit {
        return Err(too_large(&id, held, limit, "its messages"));
    }
    let from = Resumed {
        id,
        conversation: stored.conversation,
        allowed_tools: stored.allowed_tools,
        log_bytes: log_bytes as usize,
    };
    let traced = traced("POST /api/conversations/{id}/messages", &headers);
    Ok(start_run(web, slot, from, plan, None, traced))
}

/// The refusal of a conversation that cannot go on: `what` (its messages, or its log) holds
/// `held` bytes, past `limit`.
fn too_large(id: &str, held: usize, limit: usize, what: &str) -> ApiError {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "conversation `{id}` holds {} in {what}, more than a conversation may ([chat] \
             max-conversation-mib, {}): it is kept and can be read, but not continued; start \
             a new one",
            limits::size(held),
            limits::size(limit)
        ),
    )
}

/// `id` if it can name a conversation (as [`new_id`] makes them: hex digits; letters, digits,
/// `-` and `_` up to 64 are taken, for ids an older host made), else a `404` that does not
/// echo it: no store is asked about a path that names nothing.
fn conversation_id(id: String) -> Result<String, ApiError> {
    let named = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if named {
        Ok(id)
    } else {
        Err(error(
            StatusCode::NOT_FOUND,
            "no conversation has that id (ids are letters, digits, - and _)",
        ))
    }
}

/// A new conversation's id: 128 random bits, in hex.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    // Without the system's randomness, a hash of the time and a counter: unique still.
    if getrandom::fill(&mut bytes).is_err() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seed = format!(
            "{:?}{}",
            std::time::SystemTime::now(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        bytes.copy_from_slice(&blake3::hash(seed.as_bytes()).as_bytes()[..16]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The first line of the first message, cut at [`TITLE_CHARS`], control characters (a NUL,
/// which PostgreSQL's text cannot hold, among them) made spaces. The message itself is kept
/// as sent, on either store.
fn title_of(message: &str) -> String {
    let line = message.trim().lines().next().unwrap_or_default();
    let shown = line.chars().map(|c| if c.is_control() { ' ' } else { c });
    let mut title: String = shown.take(TITLE_CHARS).collect();
    if line.chars().count() > TITLE_CHARS {
        title.push('…');
    }
    title
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_the_first_line_cut_short() {
        assert_eq!(title_of("  Hello\nworld"), "Hello");
        let long = "x".repeat(100);
        assert_eq!(title_of(&long).chars().count(), TITLE_CHARS + 1);
        assert_eq!(title_of("a\u{0}b\tc"), "a b c");
    }

    #[test]
    fn only_what_can_name_a_conversation_reaches_a_store() {
        assert!(conversation_id("0f".repeat(16)).is_ok());
        for bad in ["", "\u{0}", "a\u{0}", "../x", "a b", &"a".repeat(65)] {
            assert!(conversation_id(bad.to_string()).is_err(), "{bad:?}");
        }
    }
}
