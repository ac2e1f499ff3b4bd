//! The ensembles' prompts and resources in the chat: `GET /api/prompts` and
//! `GET /api/resources` list what the page may offer (the caller's and `[chat]`'s lists
//! apply, as to tools), and a chat request's `prompt` and `resources` become the turns the
//! run starts with ([`bring`]), rendered and read as the conversation's session would.

use super::Web;
use super::api_error::{ApiError, error};
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use toolhost_agent::context;
use toolhost_agent::provider::conversation::Conversation;
use toolhost_core::invoke::{CallPolicy, Caller, Session};

/// Resources one chat request may attach.
pub(super) const MAX_ATTACHED: usize = 16;
/// Resources `GET /api/resources` lists, at most.
const MAX_LISTED: usize = 1000;

/// A chat request's `prompt`: its name and its arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PromptAsk {
    name: String,
    #[serde(default)]
    arguments: Map<String, Value>,
}

impl PromptAsk {
    pub(super) fn name(&self) -> &str {
        &self.name
    }
}

/// The session that sees what a request's caller may, within `[chat]`'s lists.
fn session(web: &Web, id: &str, policy: CallPolicy, caller: Option<Caller>) -> Session {
    let session = web.host.session(format!("chat-{id}"), policy);
    match caller {
        Some(caller) => session.for_caller(caller),
        None => session,
    }
}

/// The session of a page's listing: the request's caller, within `[chat]`'s lists.
fn page_session(web: &Web, caller: Option<Extension<Caller>>) -> Session {
    session(
        web,
        "page",
        web.chat.policy.clone(),
        caller.map(|Extension(c)| c),
    )
}

pub(super) async fn prompts(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let session = page_session(&web, caller);
    let catalog = web.host.catalog().snapshot();
    let prompts: Vec<Value> = catalog
        .prompts()
        .filter(|p| session.permits_offer(p.ensemble(), p.name()))
        .map(|p| {
            json!({
                "name": p.name(),
                "title": p.title(),
                "description": p.description(),
                "ensemble": p.ensemble(),
                "arguments": p.arguments().iter().map(|a| json!({
                    "name": a.name,
                    "description": a.description,
                    "required": a.required,
                    "values": a.values,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    axum::Json(json!({ "prompts": prompts })).into_response()
}

pub(super) async fn resources(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let session = page_session(&web, caller);
    let catalog = web.host.catalog().snapshot();
    let mut listed = Vec::new();
    let mut cut = false;
    for set in catalog
        .resource_sets()
        .filter(|set| session.permits_offer(set.ensemble(), set.name()))
    {
        let (files, set_cut) = set.list().await;
        cut |= set_cut;
        listed.extend(files.into_iter().map(|f| {
            json!({
                "uri": f.uri, "name": f.path, "mime_type": f.mime, "size": f.size,
                "set": set.name(),
            })
        }));
    }
    if listed.len() > MAX_LISTED {
        listed.truncate(MAX_LISTED);
        cut = true;
    }
    axum::Json(json!({ "resources": listed, "cut": cut })).into_response()
}

/// The turns a request's `prompt` and `resources` bring, with notes on what was left out
/// (bytes): a prompt that cannot be got or a resource that cannot be read is a `400` naming
/// it.
pub(super) async fn bring(
    web: &Web,
    id: &str,
    policy: &CallPolicy,
    caller: Option<&Caller>,
    prompt: Option<&PromptAsk>,
    resources: &[String],
) -> Result<(Conversation, Vec<String>), ApiError> {
    let bad =
        |at: &str, message: String| error(StatusCode::BAD_REQUEST, format!("{at}: {message}"));
    if resources.len() > MAX_ATTACHED {
        return Err(bad(
            "/resources",
            format!(
                "{} resources; at most {MAX_ATTACHED} may be attached",
                resources.len()
            ),
        ));
    }
    let session = session(web, id, policy.clone(), caller.cloned());
    let mut turns = Conversation::new(None);
    let mut notes = Vec::new();
    if let Some(prompt) = prompt {
        let (_, messages) = web
            .host
            .get_prompt(&session, &prompt.name, &prompt.arguments)
            .await
            .map_err(|e| bad("/prompt", e.to_string()))?;
        notes.extend(context::push_prompt(&mut turns, messages));
    }
    for (index, uri) in resources.iter().enumerate() {
        let contents = web
            .host
            .read_resource(&session, uri)
            .await
            .map_err(|e| bad(&format!("/resources/{index}"), e.to_string()))?;
        for contents in &contents {
            match context::resource_text(contents) {
                Ok(text) => context::push(&mut turns, toolhost_config::draft::Role::User, text),
                Err(note) => notes.push(note),
            }
        }
    }
    Ok((turns, notes))
}
