//! One run of the chat API: the agent loop over a conversation in a task of its own, its
//! events streamed to the client that started it (bounded: [`sse::MAX_UNREAD`] may wait
//! unread), kept in the run's log, and the conversation saved with that log when it ends;
//! `done` goes out last, once the conversation is saved.

use super::Web;
use super::runs::{RunSlot, WebApprover, event_json};
use super::sse::{self, EventStream, frame};
use super::store::RunRecord;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use toolhost_agent::context;
use toolhost_agent::provider::conversation::{Conversation, Message};
use toolhost_agent::{Agent, ApprovalPolicy, Ending, Event, limits};
use toolhost_config::draft::Role;

/// What a run does, checked against `[chat]`.
pub(super) struct Plan {
    pub(super) message: String,
    pub(super) options: toolhost_agent::AgentOptions,
    pub(super) provider: toolhost_agent::provider::ProviderSettings,
    pub(super) policy: toolhost_core::invoke::CallPolicy,
    /// Whom the run calls tools for (over `serve --http`, the guard's caller): the run's
    /// model sees, and its calls reach, only what the caller may call.
    pub(super) caller: Option<toolhost_core::invoke::Caller>,
    /// The turns the request's prompt and resources bring, before its message.
    pub(super) turns: Conversation,
    /// What the user event of the log says of them: the prompt's name, the resources' URIs,
    /// and what was left out.
    pub(super) brought: Value,
}

/// A run's log, as it is kept: text deltas joined into `text` events (in one growing
/// string, so a model streaming in tiny pieces costs time linear in its text).
#[derive(Default)]
struct Log {
    events: Vec<Value>,
    /// The text streaming now, not yet in `events`.
    text: Option<String>,
    question: Option<String>,
    /// Bytes kept so far, and the most this run may keep (what is left of the conversation's
    /// log budget): past it, text is left out and large fields are cut, with markers.
    bytes: usize,
    max: usize,
    /// Bytes of text left out since the last marker.
    text_left_out: usize,
}

/// The fields of an event that can be large: cut when the log is full.
const LARGE_FIELDS: [&str; 5] = ["content", "arguments", "text", "schema", "description"];

impl Log {
    fn new(max: usize) -> Self {
        Log {
            events: Vec::new(),
            text: None,
            question: None,
            bytes: 0,
            max,
            text_left_out: 0,
        }
    }

    fn full_note(&self) -> String {
        format!(
            "[toolhost: left out of the log: this conversation's log reached [chat] \
             max-conversation-mib ({})]",
            limits::size(self.max)
        )
    }

    fn push(&mut self, event: &Value) {
        if event["type"] == "text_delta" {
            let piece = event["text"].as_str().unwrap_or_default();
            if self.bytes + piece.len() > self.max {
                self.text_left_out += piece.len();
                return;
            }
            self.bytes += piece.len();
            self.text.get_or_insert_with(String::new).push_str(piece);
            return;
        }
        self.end_text();
        if event["type"] == "question" {
            self.question = event["id"].as_str().map(str::to_string);
        }
        let mut event = event.clone();
        let mut size = event.to_string().len();
        if self.bytes + size > self.max {
            let note = self.full_note();
            for field in LARGE_FIELDS {
                if let Some(value) = event.get_mut(field)
                    && value.to_string().len() > note.len()
                {
                    *value = json!(note);
                }
            }
            size = event.to_string().len();
        }
        self.bytes += size;
        self.events.push(event);
    }

    fn end_text(&mut self) {
        let text = self.text.take();
        if text.is_none() && self.text_left_out == 0 {
            return;
        }
        let mut text = text.unwrap_or_default();
        if self.text_left_out > 0 {
            text.push_str(&format!(
                "\n{} ({} of text)",
                self.full_note(),
                limits::size(self.text_left_out)
            ));
            self.text_left_out = 0;
        }
        self.events.push(json!({ "type": "text", "text": text }));
    }

    /// Every event, the streaming text ended.
    fn take(&mut self) -> (Vec<Value>, Option<String>) {
        self.end_text();
        (std::mem::take(&mut self.events), self.question.take())
    }
}

/// Starts the run in a task of its own, in the request's span `traced`, and answers its
/// event stream. The run is cancelled when the stream is dropped (the client went away).
pub(super) fn start_run(
    web: Arc<Web>,
    slot: RunSlot,
    from: Resumed,
    plan: Plan,
    first: Option<Value>,
    traced: toolhost_core::trace::Traced,
) -> Response {
    // A client that leaves MAX_UNREAD bytes of events unread ends its run, as one that went
    // away does.
    let (sender, frames) = sse::channel(sse::MAX_UNREAD, slot.cancel.clone());
    if let Some(first) = &first {
        sender.send(frame(first));
    }
    let stream = EventStream::new(frames, Some(slot.cancel.clone()));
    tokio::spawn(traced.carry(run(web, slot, from, plan, sender)));
    stream.response()
}

/// What a run starts from: the conversation as kept (empty for a new one).
pub(super) struct Resumed {
    pub(super) id: String,
    pub(super) conversation: Conversation,
    pub(super) allowed_tools: Vec<String>,
    /// Bytes its log holds already (its earlier runs').
    pub(super) log_bytes: usize,
}

async fn run(web: Arc<Web>, slot: RunSlot, from: Resumed, plan: Plan, sender: sse::FrameSender) {
    let Resumed {
        id,
        mut conversation,
        allowed_tools,
        log_bytes,
    } = from;
    // The conversation's log, all runs together, within the conversation's budget.
    let log_room = (web.chat.limits.max_conversation_bytes).saturating_sub(log_bytes);
    let log = Arc::new(Mutex::new(Log::new(log_room)));
    let mut user = json!({ "type": "user", "text": plan.message });
    if let Value::Object(brought) = &plan.brought {
        for (key, value) in brought {
            user[key] = value.clone();
        }
    }
    if let Ok(mut log) = log.lock() {
        log.push(&user);
    }
    // Every event but `done` goes out as it happens; `done` once the run is saved, so that a
    // client reading the conversation after it sees the run whole.
    let done: Arc<Mutex<Option<Value>>> = Arc::default();
    let emit: Arc<dyn Fn(Value) + Send + Sync> = {
        let (log, done, sender) = (log.clone(), done.clone(), sender.clone());
        Arc::new(move |event: Value| {
            if let Ok(mut log) = log.lock() {
                log.push(&event);
            }
            if event["type"] == "done" {
                if let Ok(mut done) = done.lock() {
                    *done = Some(event);
                }
            } else {
                sender.send(frame(&event));
            }
        })
    };
    let allowed = Arc::new(Mutex::new(
        allowed_tools.into_iter().collect::<HashSet<String>>(),
    ));
    for turn in plan.turns.messages {
        match turn {
            Message::User { text } => context::push(&mut conversation, Role::User, text),
            Message::Assistant { text, .. } => {
                context::push(&mut conversation, Role::Assistant, text)
            }
            Message::Results { .. } => {}
        }
    }
    if !plan.message.trim().is_empty() {
        context::push(&mut conversation, Role::User, plan.message.clone());
    }
    match plan.provider.build() {
        Err(e) => emit(event_json(&Event::Done {
            ending: Ending::Error,
            text: e.to_string(),
            iterations: 0,
            usage: Default::default(),
        })),
        Ok(provider) => {
            let approver = WebApprover {
                runs: web.runs.clone(),
                conversation: id.clone(),
                policy: ApprovalPolicy::approve_only(web.chat.auto_approve.clone()),
                allowed: allowed.clone(),
                timeout: web.chat.approval_timeout,
                cancel: slot.cancel.clone(),
                events: emit.clone(),
                asked: Default::default(),
            };
            let agent = Agent::new(
                web.host.clone(),
                Arc::from(provider),
                Arc::new(approver),
                plan.options,
            );
            let session = web.host.session(format!("chat-{id}"), plan.policy);
            let session = Arc::new(match plan.caller {
                Some(caller) => session.for_caller(caller),
                None => session,
            });
            let sink = |event: Event| emit(event_json(&event));
            // A provider failure was reported as the run's `done` event.
            let _ = agent
                .run_until(&mut conversation, &session, &sink, &slot.cancel)
                .await;
        }
    }
    if sender.overflowed() {
        tracing::warn!(
            "conversation {id}: the client left {} of events unread; its run was ended",
            limits::size(sse::MAX_UNREAD)
        );
        if let Ok(mut done) = done.lock()
            && let Some(done) = done.as_mut()
        {
            done["text"] = json!(format!(
                "the run was ended: its client left {} of events unread; the conversation so \
                 far is kept",
                limits::size(sse::MAX_UNREAD)
            ));
        }
    }
    let (events, question) = match log.lock() {
        Ok(mut log) => log.take(),
        Err(_) => (Vec::new(), None),
    };
    let ended_with_question = done
        .lock()
        .ok()
        .and_then(|d| d.as_ref().map(|d| d["ending"] == "question"))
        .unwrap_or(false);
    let allowed: Vec<String> = allowed
        .lock()
        .map(|a| a.iter().cloned().collect())
        .unwrap_or_default();
    if let Ok(store) = &web.store {
        let record = RunRecord {
            conversation,
            log: events,
            allowed_tools: allowed,
            pending_question: question.filter(|_| ended_with_question),
        };
        if let Err(problem) = store.save_run(&id, record).await {
            tracing::error!("conversation {id}: {problem}");
            let event = json!({
                "type": "error",
                "message": format!("the conversation could not be saved: {problem}"),
            });
            sender.send_last(frame(&event));
        }
    }
    // The slot is free before `done` goes out: a client may continue at once.
    drop(slot);
    let done = done.lock().ok().and_then(|mut d| d.take());
    if let Some(done) = done {
        sender.send_last(frame(&done));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_deltas_are_kept_joined() {
        let mut log = Log::new(1 << 20);
        log.push(&json!({"type": "text_delta", "text": "It "}));
        log.push(&json!({"type": "text_delta", "text": "is 42."}));
        log.push(&json!({"type": "question", "id": "q", "text": "?"}));
        log.push(&json!({"type": "text_delta", "text": "More"}));
        let (events, question) = log.take();
        assert_eq!(events[0], json!({"type": "text", "text": "It is 42."}));
        assert_eq!(events[2], json!({"type": "text", "text": "More"}));
        assert_eq!(question.as_deref(), Some("q"));
    }

    #[test]
    fn a_log_stops_at_its_budget_and_says_what_it_left_out() {
        let mut log = Log::new(10_000);
        for _ in 0..100 {
            log.push(&json!({"type": "text_delta", "text": "x".repeat(1000)}));
        }
        let big = json!({"type": "tool_result", "id": "c1", "content": "y".repeat(50_000)});
        log.push(&big);
        log.push(&json!({"type": "done", "ending": "answer", "text": "z".repeat(50_000)}));
        let (events, _) = log.take();
        let kept: usize = events.iter().map(|e| e.to_string().len()).sum();
        assert!(kept < 12_000, "{kept} bytes kept");
        let text = events[0]["text"].as_str().expect("text");
        assert!(
            text.starts_with(&"x".repeat(10_000)),
            "the text up to the budget"
        );
        let note = &text[10_000..];
        assert!(
            note.contains("left out of the log") && note.contains("(87 KiB of text)"),
            "{note}"
        );
        assert!(
            events[1]["content"]
                .as_str()
                .is_some_and(|c| c.contains("left out"))
        );
        assert_eq!(events[2]["ending"], "answer", "small fields stay");
    }
}
