//! talk: an imported server talking back while a call of its tools runs. Each call is a
//! [`Route`] to its caller (the caller's `CallerLink` and session, and the call's
//! [`TalkBudget`]: the bounds a component's call has), registered under the progress token
//! its request carries. The server's progress with that token goes to that caller only (a
//! report that comes before the token is known goes to the one call running, if one is).
//! rmcp hands each notification to its handler on a task of its own, so a report or log line
//! the server sent just before its answer can be handled after the answer: a call's route
//! lingers for those ([`LINGER`]), and takes no question meanwhile. A log message, a sampling request or an elicitation carries no token, so it goes to
//! the call only when exactly one call of the server is running; otherwise it is refused
//! (logged to nobody), never guessed at another caller.

// Sampling and logging are deprecated from 2026-07-28 on (SEP-2577), but servers speaking
// the revisions before it use them, and their callers rely on them there.
#![allow(deprecated)]

use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, LoggingLevel, LoggingMessageNotificationParam, NumberOrString,
    ProgressNotificationParam, Role as McpRole, SamplingMessage,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use toolhost_contract::talk::{
    ANSWER_BYTES, AskError, ElicitAnswer, MESSAGE_BYTES, Progress, Role, SamplingRequest,
};
use toolhost_runtime::talk::{TalkBudget, check_answer, cut};

/// Log messages one call passes on, as a component's `host.log` is bounded.
const LOGS_PER_CALL: u32 = 100;

/// The calls of one server running now, and their progress tokens.
#[derive(Default)]
pub(super) struct Routes {
    calls: Mutex<HashMap<u64, Arc<Route>>>,
    tokens: Mutex<HashMap<String, u64>>,
    next: AtomicU64,
    /// Requests to the server for no tool call (prompts, resources) under way: a question
    /// that comes meanwhile may be theirs, so it goes to no caller.
    others: std::sync::atomic::AtomicUsize,
}

/// A request to the server for no tool call, counted while it is under way.
pub(super) struct Other<'a>(&'a Routes);

impl Drop for Other<'_> {
    fn drop(&mut self) {
        self.0.others.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One call's way back to its caller.
pub(super) struct Route {
    invoker: String,
    session: String,
    budget: tokio::sync::Mutex<TalkBudget>,
    logs: std::sync::atomic::AtomicU32,
    /// Its call has ended: its route lingers for late progress and log lines only.
    ended: std::sync::atomic::AtomicBool,
}

/// How long a call's route outlives it, for the progress and log lines rmcp hands over on
/// tasks of their own that were sent before the server's answer.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// A call registered in [`Routes`]: taken out [`LINGER`] after it is dropped (meanwhile only
/// its progress and log lines are passed on).
pub(super) struct Registered {
    routes: Arc<Routes>,
    key: u64,
    token: Option<String>,
}

impl Registered {
    /// The progress token its request went out with.
    pub(super) fn bind(&mut self, token: &NumberOrString) {
        let token = token.to_string();
        let mut tokens = self
            .routes
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tokens.insert(token.clone(), self.key);
        self.token = Some(token);
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let (routes, key, token) = (Arc::clone(&self.routes), self.key, self.token.take());
        if let Some(route) = (routes.calls.lock().unwrap_or_else(PoisonError::into_inner)).get(&key)
        {
            route.ended.store(true, Ordering::Release);
        }
        let forget = move || {
            if let Some(token) = &token {
                (routes.tokens.lock().unwrap_or_else(PoisonError::into_inner)).remove(token);
            }
            (routes.calls.lock().unwrap_or_else(PoisonError::into_inner)).remove(&key);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(LINGER).await;
                    forget();
                });
            }
            Err(_) => forget(),
        }
    }
}

impl Routes {
    /// Registers a call of `invoker` for `session`, reaching its caller within `budget`
    /// (bound to its progress token once its request is sent).
    pub(super) fn register(
        self: &Arc<Self>,
        invoker: &str,
        session: &str,
        budget: TalkBudget,
    ) -> Registered {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let route = Arc::new(Route {
            invoker: invoker.to_string(),
            session: session.to_string(),
            budget: tokio::sync::Mutex::new(budget),
            logs: std::sync::atomic::AtomicU32::new(LOGS_PER_CALL),
            ended: std::sync::atomic::AtomicBool::new(false),
        });
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.insert(key, route);
        Registered {
            routes: Arc::clone(self),
            key,
            token: None,
        }
    }

    fn by_token(&self, token: &NumberOrString) -> Option<Arc<Route>> {
        let key = (self.tokens.lock().unwrap_or_else(PoisonError::into_inner))
            .get(&token.to_string())
            .copied();
        match key {
            Some(key) => {
                let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
                calls.get(&key).cloned()
            }
            None => self.only(true).ok(),
        }
    }

    /// Counts a request to the server for no tool call until the guard is dropped.
    pub(super) fn other(&self) -> Other<'_> {
        self.others.fetch_add(1, Ordering::AcqRel);
        Other(self)
    }

    /// The one call running, when there is exactly one; with `lately`, else the one call
    /// that ended within [`LINGER`], when no call runs and there is exactly one.
    fn only(&self, lately: bool) -> Result<Arc<Route>, String> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if !lately && self.others.load(Ordering::Acquire) > 0 {
            return Err(
                "a request for this server's prompts or resources is under way, and \
                        the request does not say whether it belongs to that or to a call"
                    .into(),
            );
        }
        let running: Vec<&Arc<Route>> = calls
            .values()
            .filter(|r| !r.ended.load(Ordering::Acquire))
            .collect();
        if let [route] = running.as_slice() {
            return Ok(Arc::clone(route));
        }
        if lately
            && running.is_empty()
            && calls.len() == 1
            && let Some(route) = calls.values().next()
        {
            return Ok(Arc::clone(route));
        }
        Err(match running.len() {
            0 => "no call of this server's tools is running".into(),
            n => format!(
                "{n} calls of this server's tools are running, and the request does not say \
                 which one it belongs to"
            ),
        })
    }

    /// The server's progress report: to the call whose token it carries.
    pub(super) async fn progress(&self, params: ProgressNotificationParam) {
        let Some(route) = self.by_token(&params.progress_token.0) else {
            return;
        };
        let report = Progress {
            done: params.progress,
            total: params.total,
            message: params.message,
        };
        let mut budget = route.budget.lock().await;
        if let Some(report) = budget.progress(report) {
            let link = Arc::clone(&budget.link);
            drop(budget);
            link.progress(report).await;
        }
    }

    /// The server's log message: to the session of the one call running, as a component's
    /// `host.log` line; otherwise into the host's debug log, for nobody's session.
    pub(super) fn log(&self, server: &str, params: LoggingMessageNotificationParam) {
        let mut message = match &params.data {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        cut(&mut message, MESSAGE_BYTES);
        let route = self.only(true).ok().filter(|route| {
            route
                .logs
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        });
        let Some(route) = route else {
            tracing::debug!("MCP server `{server}` logged: {message}");
            return;
        };
        let (invoker, session) = (route.invoker.as_str(), route.session.as_str());
        match params.level {
            LoggingLevel::Debug => tracing::debug!(target: "plugin", invoker, session, "{message}"),
            LoggingLevel::Info | LoggingLevel::Notice => {
                tracing::info!(target: "plugin", invoker, session, "{message}")
            }
            LoggingLevel::Warning => {
                tracing::warn!(target: "plugin", invoker, session, "{message}")
            }
            _ => tracing::error!(target: "plugin", invoker, session, "{message}"),
        }
    }

    /// The server's sampling request: to the caller of the one call running, within its
    /// grant and budget.
    pub(super) async fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ErrorData> {
        let route = self.only(false).map_err(refused)?;
        let mut messages = Vec::with_capacity(params.messages.len());
        for message in &params.messages {
            let role = match message.role {
                McpRole::Assistant => Role::Assistant,
                _ => Role::User,
            };
            let text: Vec<&str> = message
                .content
                .iter()
                .map(|c| c.as_text().map(|t| t.text.as_str()))
                .collect::<Option<_>>()
                .ok_or_else(|| refused("only text can be sampled through toolhost".into()))?;
            messages.push((role, text.join("\n")));
        }
        let request = SamplingRequest {
            messages,
            system_prompt: params.system_prompt.clone(),
            max_tokens: params.max_tokens,
            temperature: params.temperature,
            model_hints: (params.model_preferences.as_ref())
                .and_then(|p| p.hints.as_ref())
                .map(|hints| hints.iter().filter_map(|h| h.name.clone()).collect())
                .unwrap_or_default(),
        };
        let mut budget = route.budget.lock().await;
        let request = budget.sample(request).map_err(asked)?;
        let link = Arc::clone(&budget.link);
        drop(budget);
        let mut answer = link.sample(request).await.map_err(asked)?;
        cut(&mut answer.text, ANSWER_BYTES);
        cut(&mut answer.model, MESSAGE_BYTES);
        let mut result =
            CreateMessageResult::new(SamplingMessage::assistant_text(answer.text), answer.model);
        result.stop_reason = answer.stop_reason;
        Ok(result)
    }

    /// The server's question for the person: to the caller of the one call running, within
    /// its grant and budget; an answer that does not fit the form is refused.
    pub(super) async fn elicit(
        &self,
        request: ElicitRequestParams,
    ) -> Result<ElicitResult, ErrorData> {
        let route = self.only(false).map_err(refused)?;
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Err(refused("only forms can be asked through toolhost".into()));
        };
        let schema = serde_json::to_string(&requested_schema).unwrap_or_default();
        let mut budget = route.budget.lock().await;
        let (message, schema) = budget.elicit(message, &schema).map_err(asked)?;
        let link = Arc::clone(&budget.link);
        drop(budget);
        match link.elicit(message, schema.clone()).await.map_err(asked)? {
            ElicitAnswer::Accept(mut value) => {
                // The server hears the form's defaults where the person left them, as from
                // any MCP client (SEP-1034).
                toolhost_contract::talk::with_defaults(&schema, &mut value);
                let bytes = value.to_string().len();
                if bytes > ANSWER_BYTES {
                    return Err(refused(format!(
                        "the answer has {bytes} bytes, more than the {ANSWER_BYTES} a call is given"
                    )));
                }
                check_answer(&schema, &value).map_err(asked)?;
                let mut result = ElicitResult::new(ElicitationAction::Accept);
                result.content = Some(value);
                Ok(result)
            }
            ElicitAnswer::Decline => Ok(ElicitResult::new(ElicitationAction::Decline)),
            ElicitAnswer::Cancel => Ok(ElicitResult::new(ElicitationAction::Cancel)),
        }
    }
}

fn refused(reason: String) -> ErrorData {
    ErrorData::invalid_request(reason, None)
}

fn asked(error: AskError) -> ErrorData {
    refused(error.to_string())
}

/// Tells the server a request was abandoned (`notifications/cancelled`) when dropped armed:
/// a call that timed out or was cancelled stops on the server too.
pub(super) struct Abandoned {
    peer: rmcp::Peer<rmcp::RoleClient>,
    id: Option<rmcp::model::RequestId>,
}

impl Abandoned {
    pub(super) fn new(peer: rmcp::Peer<rmcp::RoleClient>, id: rmcp::model::RequestId) -> Self {
        Abandoned { peer, id: Some(id) }
    }

    pub(super) fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let param = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("the call ended on the host (timeout or cancelled)".into()),
                );
                let _ = peer.notify_cancelled(param).await;
            });
        }
    }
}
