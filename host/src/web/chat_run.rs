//! One run of the chat API: the agent loop over a conversation in a task of its own, its
//! events streamed to the client that started it (bounded: [`sse::MAX_UNREAD`] may wait
//! unread), kept in the run's log, and the conversation saved with that log when it ends;
//! `done` goes out last, once the conversation is saved.

use super::Web;
use super::api::Plan;
use super::runs::{RunSlot, WebApprover, event_json};
use super::sse::{self, EventStream, frame};
use super::store::RunRecord;
use crate::agent::{Agent, ApprovalPolicy, Ending, Event, limits};
use crate::provider::conversation::Conversation;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// A run's log, as it is kept: text deltas joined into `text` events (in one growing
/// string, so a model streaming in tiny pieces costs time linear in its text).
#[derive(Default)]
struct Log {
    events: Vec<Value>,
    /// The text streaming now, not yet in `events`.
    text: Option<String>,
    question: Option<String>,
}

impl Log {
    fn push(&mut self, event: &Value) {
        if event["type"] == "text_delta" {
            let piece = event["text"].as_str().unwrap_or_default();
            self.text.get_or_insert_with(String::new).push_str(piece);
            return;
        }
        self.end_text();
        if event["type"] == "question" {
            self.question = event["id"].as_str().map(str::to_string);
        }
        self.events.push(event.clone());
    }

    fn end_text(&mut self) {
        if let Some(text) = self.text.take() {
            self.events.push(json!({ "type": "text", "text": text }));
        }
    }

    /// Every event, the streaming text ended.
    fn take(&mut self) -> (Vec<Value>, Option<String>) {
        self.end_text();
        (std::mem::take(&mut self.events), self.question.take())
    }
}

/// Starts the run in a task of its own and answers its event stream. The run is cancelled
/// when the stream is dropped (the client went away).
pub(super) fn start_run(
    web: Arc<Web>,
    slot: RunSlot,
    id: String,
    conversation: Conversation,
    allowed_tools: Vec<String>,
    plan: Plan,
    first: Option<Value>,
) -> Response {
    // A client that leaves MAX_UNREAD bytes of events unread ends its run, as one that went
    // away does.
    let (sender, frames) = sse::channel(sse::MAX_UNREAD, slot.cancel.clone());
    if let Some(first) = &first {
        sender.send(frame(first));
    }
    let stream = EventStream::new(frames, Some(slot.cancel.clone()));
    tokio::spawn(run(
        web,
        slot,
        id,
        conversation,
        allowed_tools,
        plan,
        sender,
    ));
    stream.response()
}

async fn run(
    web: Arc<Web>,
    slot: RunSlot,
    id: String,
    mut conversation: Conversation,
    allowed_tools: Vec<String>,
    plan: Plan,
    sender: sse::FrameSender,
) {
    let log = Arc::new(Mutex::new(Log::default()));
    let user = json!({ "type": "user", "text": plan.message });
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
    conversation.push_user(plan.message.clone());
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
            let session = Arc::new(web.host.session(format!("chat-{id}"), plan.policy));
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
    if let Ok(store) = web.store.clone() {
        let pending = question.filter(|_| ended_with_question);
        let key = id.clone();
        let saved = tokio::task::spawn_blocking(move || {
            store.save_run(
                &key,
                &RunRecord {
                    conversation: &conversation,
                    log: &events,
                    allowed_tools: &allowed,
                    pending_question: pending.as_deref(),
                },
            )
        })
        .await;
        let problem = match saved {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(problem) = problem {
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
        let mut log = Log::default();
        log.push(&json!({"type": "text_delta", "text": "It "}));
        log.push(&json!({"type": "text_delta", "text": "is 42."}));
        log.push(&json!({"type": "question", "id": "q", "text": "?"}));
        log.push(&json!({"type": "text_delta", "text": "More"}));
        let (events, question) = log.take();
        assert_eq!(events[0], json!({"type": "text", "text": "It is 42."}));
        assert_eq!(events[2], json!({"type": "text", "text": "More"}));
        assert_eq!(question.as_deref(), Some("q"));
    }
}
