//! Tools that ask, at 2026-07-28: multi round-trip requests (SEP-2322). The revision forbids
//! requests from server to client during a call; a server instead answers the `tools/call`
//! with `input_required`, naming what it wants answered (`inputRequests`) and a
//! `requestState`, and the client sends the same `tools/call` again with the answers
//! (`inputResponses`) and that state.
//!
//! A component's `sample` or `elicit` waits in the middle of its run, so the call keeps
//! running here between the two requests: when it asks, it moves to a task of its own (a call
//! that never asks runs in its request, as at the other revisions), the request that drives
//! it answers `input_required`, and the call is parked ([`Rounds`]) under a
//! random token, which is the `requestState`. The follow-up finds it by that token (only
//! from the same caller, for the same tool and arguments), hands the answer to the waiting
//! call and drives it on, to its result or its next question. Re-running the call instead
//! and replaying the answers would run a tool's side effects twice.
//!
//! Bounds: [`MAX_WAITING`] calls parked at once on one transport, [`MAX_WAITING_PER_CALLER`]
//! of one caller (past either, the question is answered `limit-reached` and the call goes
//! on); each waits at most [`MAX_FOLLOW_UP_WAIT`] for its follow-up, and within its own
//! `timeout-ms` (the wait counts against it, as any wait of a call does). A call whose
//! follow-up does not come is cancelled.
//!
//! The token names the host instance that holds the call: behind a load balancer a
//! follow-up must reach the same instance (docs/decisions.md says how), and one that reaches
//! another is told so, plainly, with an error.

// Sampling is deprecated from 2026-07-28 on (SEP-2577); the revision still carries it as an
// input request, and the tools of the revisions before it use it.
#![allow(deprecated)]

use crate::talk::{self, Asker, Link};
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, InputRequest, InputRequests, InputRequiredResult, ProgressToken,
};
use rmcp::service::{Peer, RequestContext};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use toolhost_contract::{AskError, CallerLink};
use toolhost_core::invoke::canonical_object;

/// Calls parked at once, waiting for their follow-ups, on one transport: each holds an
/// instance (and its memory) while it waits, so this stays well below the pool's
/// `max-concurrent-calls` (128 by default).
pub const MAX_WAITING: usize = 32;
/// Calls of one caller parked at once.
pub const MAX_WAITING_PER_CALLER: usize = 8;
/// The longest a parked call waits for its follow-up: a person answering a form.
pub const MAX_FOLLOW_UP_WAIT: Duration = Duration::from_secs(300);

/// What a call running in rounds tells the request that drives it.
enum Event {
    /// It asks: the request for the client, and where the answer goes.
    Ask {
        request: InputRequest,
        answer: oneshot::Sender<Result<Value, AskError>>,
    },
    /// It ended.
    Done(CallToolResult),
}

/// Where a call's progress goes: the request that drives it now.
struct Target {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
}

impl Target {
    fn of(context: &RequestContext<RoleServer>) -> Self {
        Target {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
        }
    }
}

/// A call running in rounds, as its driver holds it.
struct Running {
    /// Who started it, and which call it is (the tool and its arguments): only the same
    /// caller's follow-up for the same call continues it.
    owner: [u8; 32],
    call: [u8; 32],
    events: mpsc::Receiver<Event>,
    target: Arc<Mutex<Target>>,
    cancel: CancellationToken,
    /// Questions asked so far: the next is keyed `ask-<n>`.
    asked: u32,
    /// The span of the request that started it, when traced: each follow-up's span links
    /// to it.
    origin: Option<Box<toolhost_core::trace::SpanContext>>,
}

/// A call dropped (its driver gone, or parked past its time) is cancelled.
impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A running call parked on its question, until its follow-up or its time is up.
struct Parked {
    running: Running,
    key: String,
    request: InputRequest,
    answer: oneshot::Sender<Result<Value, AskError>>,
    until: Instant,
    /// The timer that lets go of it at `until`; stopped when it is taken or let go of
    /// sooner, so that no more timers run than calls are parked.
    timer: AbortHandle,
}

impl Parked {
    /// Whether it still waits for its follow-up: its time is not up, and its call (whose
    /// own timeout may have ended it) still listens.
    fn waiting(&self, now: Instant) -> bool {
        let waiting = self.until > now && !self.answer.is_closed();
        if !waiting {
            self.timer.abort();
        }
        waiting
    }
}

/// The calls parked on one transport, by token.
pub struct Rounds {
    /// This host instance (its name among a fleet's replicas), as tokens name it:
    /// `<instance>.<call>`; the HTTP front forwards a follow-up to the replica it names.
    instance: &'static str,
    parked: Mutex<HashMap<String, Parked>>,
}

impl Default for Rounds {
    fn default() -> Self {
        Rounds {
            instance: toolhost_state::replica(),
            parked: Mutex::default(),
        }
    }
}

/// `bytes` random bytes, as hex (a clock-and-counter hash where the system has no
/// randomness to give, which never happens on the systems toolhost runs on).
fn random_hex(bytes: usize) -> String {
    let mut random = vec![0u8; bytes];
    if getrandom::fill(&mut random).is_err() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let seed = format!("{:?} {n}", std::time::SystemTime::now());
        random.copy_from_slice(&blake3::hash(seed.as_bytes()).as_bytes()[..bytes]);
    }
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// What identifies a call across its rounds: its tool and its arguments (their keys in any
/// order: a client may write them differently in its follow-up).
fn call_key(request: &CallToolRequestParams) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(request.name.as_bytes());
    hasher.update(&[0]);
    // Canonical JSON is self-delimiting: no two argument objects give the same bytes.
    hasher.update(&canonical_object(request.arguments.iter().flatten()));
    *hasher.finalize().as_bytes()
}

fn follow_up_error(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

impl Rounds {
    /// Runs `run` (the call, given its link) for the request of `context` from `owner`, in
    /// rounds; or, when the request carries a `requestState`, continues the call it names.
    pub(crate) async fn call<F>(
        self: &Arc<Self>,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        owner: [u8; 32],
        run: impl FnOnce(CallToolRequestParams, CancellationToken, Arc<dyn CallerLink>) -> F,
    ) -> Result<CallToolResponse, ErrorData>
    where
        F: Future<Output = CallToolResult> + Send + 'static,
    {
        if let Some(state) = &request.request_state {
            return self.resume(state, &request, context, owner).await;
        }
        let (events, receiver) = mpsc::channel(1);
        let target = Arc::new(Mutex::new(Target::of(context)));
        let (no_sampling, no_elicitation) = talk::refusals(context);
        let link: Arc<dyn CallerLink> = Arc::new(Link(RoundsLink {
            events: events.clone(),
            target: Arc::clone(&target),
            no_sampling,
            no_elicitation,
        }));
        let cancel = CancellationToken::new();
        let mut running = Running {
            owner,
            call: call_key(&request),
            events: receiver,
            target,
            cancel: cancel.clone(),
            asked: 0,
            origin: toolhost_core::trace::current_context().map(Box::new),
        };
        let mut call = Box::pin(run(request, cancel, link));
        // Most calls never ask: they run here, as at the other revisions. Only a call that
        // asks moves to a task of its own, to outlive this request while it waits.
        let first = tokio::select! {
            result = &mut call => return Ok(result.into()),
            event = running.events.recv() => event,
        };
        // In the request's span still: the call's spans stay in its trace.
        let moved = async move {
            let result = call.await;
            // Nobody drives a call whose follow-up never came: its result goes nowhere.
            let _ = events.send(Event::Done(result)).await;
        };
        tokio::spawn(toolhost_core::trace::carried(moved));
        self.drive(running, first).await
    }

    /// Takes `running`'s events, `first` the first of them, then the next as they come: its
    /// result, or a question, which parks it and answers `input_required`.
    async fn drive(
        self: &Arc<Self>,
        mut running: Running,
        mut first: Option<Event>,
    ) -> Result<CallToolResponse, ErrorData> {
        loop {
            let event = match first.take() {
                Some(event) => Some(event),
                None => running.events.recv().await,
            };
            let Some(event) = event else {
                return Err(ErrorData::internal_error(
                    "the call ended without a result",
                    None,
                ));
            };
            let (request, answer) = match event {
                Event::Done(result) => return Ok(result.into()),
                Event::Ask { request, answer } => (request, answer),
            };
            running.asked += 1;
            let key = format!("ask-{}", running.asked);
            match self.park(running, key, request, answer) {
                Ok(parked) => return Ok(parked.into()),
                Err(back) => running = back,
            }
        }
    }

    /// Parks `running` on its question; the answer to give the client. When the table is
    /// full (for everyone, or for this caller), the question is answered `limit-reached` and
    /// the call is handed back to go on.
    fn park(
        self: &Arc<Self>,
        running: Running,
        key: String,
        request: InputRequest,
        answer: oneshot::Sender<Result<Value, AskError>>,
    ) -> Result<InputRequiredResult, Running> {
        let mut parked = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        // The calls no longer waiting (their time, or their own timeout, is up) go first.
        parked.retain(|_, p| p.waiting(now));
        let mine = parked
            .values()
            .filter(|p| p.running.owner == running.owner)
            .count();
        if parked.len() >= MAX_WAITING || mine >= MAX_WAITING_PER_CALLER {
            let _ = answer.send(Err(AskError::LimitReached(format!(
                "{} calls are waiting for their clients' answers ({mine} of this caller), the \
                 most this host keeps ({MAX_WAITING}, {MAX_WAITING_PER_CALLER} per caller)",
                parked.len()
            ))));
            return Err(running);
        }
        let token = format!("{}.{}", self.instance, random_hex(16));
        let result = input_required(&key, &request, &token);
        // Let go of a call whose follow-up never comes, at its time.
        let rounds: Weak<Rounds> = Arc::downgrade(self);
        let expiring = token.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(MAX_FOLLOW_UP_WAIT).await;
            if let Some(rounds) = rounds.upgrade() {
                let expired = rounds
                    .parked
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&expiring);
                drop(expired);
            }
        })
        .abort_handle();
        parked.insert(
            token,
            Parked {
                running,
                key,
                request,
                answer,
                until: now + MAX_FOLLOW_UP_WAIT,
                timer,
            },
        );
        Ok(result)
    }

    /// Continues the call `state` names with the answers `request` brings: only for the
    /// caller who started it and the same tool and arguments. Without the answer to its
    /// question it is asked again.
    async fn resume(
        self: &Arc<Self>,
        state: &str,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        owner: [u8; 32],
    ) -> Result<CallToolResponse, ErrorData> {
        let (parked, answer) = match self.take(state, request, owner) {
            Taken::Answered(parked, answer) => (parked, answer),
            Taken::Instead(instead) => return instead,
        };
        let Parked {
            running,
            answer: to,
            ..
        } = *parked;
        toolhost_core::trace::follow_up(running.origin.as_deref(), running.asked + 1);
        *running
            .target
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Target::of(context);
        // A call whose own timeout ran out meanwhile has stopped listening: its result
        // follows.
        let _ = to.send(Ok(answer));
        self.drive(running, None).await
    }

    /// The call `state` names and the answer `request` brings to its question; or what to
    /// answer instead: the error of a state that names no call of this caller, or the
    /// question again when the answer is missing.
    fn take(&self, state: &str, request: &CallToolRequestParams, owner: [u8; 32]) -> Taken {
        let mut table = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(parked) = table.remove(state) else {
            let elsewhere = state
                .split_once('.')
                .is_some_and(|(instance, _)| instance != self.instance);
            return Taken::Instead(Err(follow_up_error(if elsewhere {
                "this requestState names a call started on another toolhost instance; send \
                 the follow-up to the instance that started it, or call the tool again"
                    .into()
            } else {
                "no call is waiting under this requestState (it ended, its time to wait for \
                 the answer ran out, or it was answered already); call the tool again"
                    .into()
            })));
        };
        if parked.running.owner != owner || parked.running.call != call_key(request) {
            table.insert(state.to_string(), parked);
            return Taken::Instead(Err(follow_up_error(
                "this requestState belongs to another call: a follow-up repeats the tool and \
                 arguments of the call that asked, from the same caller"
                    .into(),
            )));
        }
        let answered = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get(&parked.key))
            .cloned();
        match answered {
            Some(answer) => {
                parked.timer.abort();
                Taken::Answered(Box::new(parked), answer)
            }
            None => {
                // Asked again, as the revision asks, under the same state.
                let result = input_required(&parked.key, &parked.request, state);
                table.insert(state.to_string(), parked);
                Taken::Instead(Ok(result.into()))
            }
        }
    }
}

/// What a follow-up came to: the parked call and the answer to its question, or what to
/// answer the follow-up instead.
enum Taken {
    Answered(Box<Parked>, Value),
    Instead(Result<CallToolResponse, ErrorData>),
}

/// The `input_required` answer of question `key`, under `token`.
fn input_required(key: &str, request: &InputRequest, token: &str) -> InputRequiredResult {
    let mut requests = InputRequests::new();
    requests.insert(key.to_string(), request.clone());
    InputRequiredResult::new(Some(requests), Some(token.to_string()))
}

/// How a call running in rounds asks: its questions go to its driver, its progress to the
/// request that drives it now.
struct RoundsLink {
    events: mpsc::Sender<Event>,
    target: Arc<Mutex<Target>>,
    no_sampling: Option<&'static str>,
    no_elicitation: Option<&'static str>,
}

impl RoundsLink {
    /// Asks the client through the driver; the client's answer, as the kind `T` the question
    /// asked for (`what`, for the error).
    fn ask<T: serde::de::DeserializeOwned>(
        &self,
        request: InputRequest,
        what: &'static str,
    ) -> Pin<Box<dyn Future<Output = Result<T, AskError>> + Send>> {
        let events = self.events.clone();
        Box::pin(async move {
            let (answer, answered) = oneshot::channel();
            events
                .send(Event::Ask { request, answer })
                .await
                .map_err(|_| AskError::Failed("the request that ran the call is gone".into()))?;
            let value = answered.await.map_err(|_| {
                AskError::Failed(format!(
                    "the client did not answer: no follow-up came in time (at most {} s)",
                    MAX_FOLLOW_UP_WAIT.as_secs()
                ))
            })??;
            serde_json::from_value(value)
                .map_err(|e| AskError::Failed(format!("the client's answer is not {what}: {e}")))
        })
    }
}

impl Asker for RoundsLink {
    fn progress_target(&self) -> (Peer<RoleServer>, Option<ProgressToken>) {
        let target = self.target.lock().unwrap_or_else(PoisonError::into_inner);
        (target.peer.clone(), target.token.clone())
    }

    fn refusals(&self) -> (Option<&'static str>, Option<&'static str>) {
        (self.no_sampling, self.no_elicitation)
    }

    fn ask_model(
        &self,
        params: CreateMessageRequestParams,
    ) -> Pin<Box<dyn Future<Output = Result<CreateMessageResult, AskError>> + Send>> {
        let request = InputRequest::CreateMessage(CreateMessageRequest::new(params));
        self.ask(request, "a model's message")
    }

    fn ask_person(
        &self,
        params: ElicitRequestParams,
    ) -> Pin<Box<dyn Future<Output = Result<ElicitResult, AskError>> + Send>> {
        let request = InputRequest::Elicitation(ElicitRequest::new(params));
        self.ask(request, "an elicitation result")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, arguments: Option<Value>) -> CallToolRequestParams {
        let mut request = CallToolRequestParams::new(name.to_string());
        request.arguments = arguments.map(|a| a.as_object().expect("an object").clone());
        request
    }

    #[test]
    fn a_follow_up_is_matched_to_its_call_by_name_and_arguments_in_any_key_order() {
        let key = |name, arguments| call_key(&request(name, arguments));
        let one = serde_json::json!({"a": 1, "b": {"y": "x", "x": [1, "2"]}});
        let same = serde_json::json!({"b": {"x": [1, "2"], "y": "x"}, "a": 1});
        assert_eq!(key("t", Some(one.clone())), key("t", Some(same)));
        assert_eq!(key("t", None), key("t", Some(serde_json::json!({}))));
        assert_ne!(key("t", Some(one.clone())), key("u", Some(one)));
        // A number and the string of it, or values run together, never hash alike.
        assert_ne!(
            key("t", Some(serde_json::json!({"a": 1}))),
            key("t", Some(serde_json::json!({"a": "1"})))
        );
        assert_ne!(
            key("t", Some(serde_json::json!({"a": ["bc"]}))),
            key("t", Some(serde_json::json!({"a": ["b", "c"]})))
        );
    }
}
