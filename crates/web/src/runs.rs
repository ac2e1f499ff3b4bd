//! The runs going on: one per conversation at most, `[chat] max-runs` in all; each with the
//! token that cancels it, the approvals it waits for and the questions its tools ask
//! (elicitation). The approver of a run asks the person through the run's own event stream
//! and waits, bounded by a timeout and by the run's token.

use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use toolhost_agent::{Approval, ApprovalPolicy, ApprovalRequest, Approver, ElicitRequest, Event};
use toolhost_contract::BoxFuture;
use toolhost_contract::{AskError, ElicitAnswer, fit_answer};

/// A person's answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    Allow,
    Deny,
    /// This call, and every later call of the same tool in the conversation.
    AllowAll,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::AllowAll => "allow-all",
        }
    }
}

/// Why a run could not start.
#[derive(Debug, PartialEq, Eq)]
pub enum Busy {
    /// This conversation already has a run.
    Conversation,
    /// `max-runs` runs are going on.
    Host(usize),
}

/// A person's answer to a tool's question, as the API takes it:
/// `{"action": "accept", "content": {...}}`, `{"action": "decline"}` or `{"action": "cancel"}`.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Reply {
    Accept { content: Value },
    Decline,
    Cancel,
}

/// Why an answer to a question was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// No such question is pending (never asked, answered already, or its call ended).
    NotPending,
    /// The content does not match the question's schema (the question stays pending).
    Invalid(String),
}

/// A question waiting for the person: its schema, and where the answer goes.
struct Question {
    schema: Value,
    answer: oneshot::Sender<ElicitAnswer>,
}

struct Active {
    cancel: CancellationToken,
    approvals: HashMap<String, oneshot::Sender<Decision>>,
    questions: HashMap<String, Question>,
}

/// Every run going on.
pub struct Runs {
    active: Mutex<HashMap<String, Active>>,
    max: usize,
    /// In a fleet with `[fleet] advertise`: where this replica says which runs it holds, so
    /// that requests about them reaching another replica are forwarded here.
    routes: std::sync::OnceLock<Arc<toolhost_state::routes::Routes>>,
}

/// A run's place in [`Runs`]: released when dropped.
pub struct RunSlot {
    runs: Arc<Runs>,
    conversation: String,
    pub cancel: CancellationToken,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.runs.lock().remove(&self.conversation);
        if let Some(routes) = self.runs.routes.get()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (routes, conversation) = (Arc::clone(routes), self.conversation.clone());
            runtime.spawn(async move { routes.drop_run(&conversation).await });
        }
    }
}

impl Runs {
    pub fn new(max: usize) -> Arc<Runs> {
        Arc::new(Runs {
            active: Mutex::new(HashMap::new()),
            max,
            routes: std::sync::OnceLock::new(),
        })
    }

    /// Says in the fleet's routes which runs this replica holds, from now on.
    pub fn route(&self, routes: Arc<toolhost_state::routes::Routes>) {
        let _ = self.routes.set(routes);
    }

    /// Says in the fleet's routes that this replica runs `conversation` now (a slot of it is
    /// held): before the run's first event, so that its approvals and questions may be
    /// answered through any replica. Nothing without routes.
    pub async fn announce(&self, conversation: &str) {
        if let Some(routes) = self.routes.get() {
            routes.hold_run(conversation).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Active>> {
        // Nothing holding the lock can leave the map inconsistent.
        self.active
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the conversation's slot, if it is free and the host has room.
    pub fn start(self: &Arc<Self>, conversation: &str) -> Result<RunSlot, Busy> {
        let mut active = self.lock();
        if active.contains_key(conversation) {
            return Err(Busy::Conversation);
        }
        if active.len() >= self.max {
            return Err(Busy::Host(self.max));
        }
        let cancel = CancellationToken::new();
        active.insert(
            conversation.to_string(),
            Active {
                cancel: cancel.clone(),
                approvals: HashMap::new(),
                questions: HashMap::new(),
            },
        );
        Ok(RunSlot {
            runs: Arc::clone(self),
            conversation: conversation.to_string(),
            cancel,
        })
    }

    pub fn is_running(&self, conversation: &str) -> bool {
        self.lock().contains_key(conversation)
    }

    /// Cancels the conversation's run, if it has one.
    pub fn cancel(&self, conversation: &str) {
        if let Some(active) = self.lock().get(conversation) {
            active.cancel.cancel();
        }
    }

    /// Hands a person's decision to the approval waiting for it; false if none is.
    pub fn decide(&self, conversation: &str, call: &str, decision: Decision) -> bool {
        let sender = self
            .lock()
            .get_mut(conversation)
            .and_then(|active| active.approvals.remove(call));
        sender.is_some_and(|sender| sender.send(decision).is_ok())
    }

    fn wait_for(&self, conversation: &str, call: &str) -> Option<oneshot::Receiver<Decision>> {
        let (sender, receiver) = oneshot::channel();
        let mut active = self.lock();
        active
            .get_mut(conversation)?
            .approvals
            .insert(call.to_string(), sender);
        Some(receiver)
    }

    fn forget(&self, conversation: &str, call: &str) {
        if let Some(active) = self.lock().get_mut(conversation) {
            active.approvals.remove(call);
        }
    }

    /// Hands a person's answer to the question `id` waiting for it. Accepted content is
    /// checked against the question's schema first: refused, the question stays pending, and
    /// the error names the property (a JSON pointer).
    pub fn answer(&self, conversation: &str, id: &str, reply: Reply) -> Result<(), Unanswered> {
        let schema = self
            .lock()
            .get(conversation)
            .and_then(|active| active.questions.get(id))
            .map(|question| question.schema.clone())
            .ok_or(Unanswered::NotPending)?;
        let answer = match reply {
            Reply::Accept { content } => {
                // The same check the runtime makes again for the tool: only the properties
                // the form asked for, each as it describes it.
                fit_answer(&schema, &content).map_err(|refused| {
                    Unanswered::Invalid(format!("/content{}: {}", refused.pointer, refused.reason))
                })?;
                ElicitAnswer::Accept(content)
            }
            Reply::Decline => ElicitAnswer::Decline,
            Reply::Cancel => ElicitAnswer::Cancel,
        };
        let question = self
            .lock()
            .get_mut(conversation)
            .and_then(|active| active.questions.remove(id))
            .ok_or(Unanswered::NotPending)?;
        question
            .answer
            .send(answer)
            .map_err(|_| Unanswered::NotPending)
    }

    fn pose(
        &self,
        conversation: &str,
        id: &str,
        schema: Value,
    ) -> Option<oneshot::Receiver<ElicitAnswer>> {
        let (answer, receiver) = oneshot::channel();
        self.lock()
            .get_mut(conversation)?
            .questions
            .insert(id.to_string(), Question { schema, answer });
        Some(receiver)
    }
}

/// A question asked: forgotten when its wait ends, however it ends. One whose call ended
/// first (the call's timeout, or its cancellation) is reported as `ended`.
struct Asked<'a> {
    approver: &'a WebApprover,
    id: String,
    request: &'a ElicitRequest,
    settled: bool,
}

impl Asked<'_> {
    fn settle(&mut self, action: &str) {
        self.settled = true;
        (self.approver.events)(json!({
            "type": "elicitation",
            "id": self.id,
            "call_id": self.request.call_id,
            "tool": self.request.tool,
            "action": action,
        }));
    }
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        if let Some(active) = self
            .approver
            .runs
            .lock()
            .get_mut(&self.approver.conversation)
        {
            active.questions.remove(&self.id);
        }
        if !self.settled {
            self.settle("ended");
        }
    }
}

/// Asks the person about each destructive call of one run, through the run's events.
pub struct WebApprover {
    pub runs: Arc<Runs>,
    pub conversation: String,
    /// `[chat] auto-approve`.
    pub policy: ApprovalPolicy,
    /// Tools the person allowed for the whole conversation; saved with it.
    pub allowed: Arc<Mutex<HashSet<String>>>,
    pub timeout: Duration,
    pub cancel: CancellationToken,
    /// Where the run's events go (the `approval_request` and `approval` events, here, and
    /// `elicitation_request` and `elicitation`).
    pub events: Arc<dyn Fn(Value) + Send + Sync>,
    /// Questions asked in this run so far: their ids are `CALL-ask-N`.
    pub asked: AtomicU32,
}

impl WebApprover {
    fn allowed_for_all(&self, tool: &str) -> bool {
        self.allowed
            .lock()
            .map(|allowed| allowed.contains(tool))
            .unwrap_or(false)
    }

    fn decided(&self, request: &ApprovalRequest, decision: &str) {
        (self.events)(json!({
            "type": "approval",
            "id": request.call_id,
            "tool": request.tool,
            "decision": decision,
        }));
    }

    async fn ask(&self, request: &ApprovalRequest) -> Approval {
        if self.policy.decide(&request.tool) == Approval::Approved {
            self.decided(request, "auto");
            return Approval::Approved;
        }
        if self.allowed_for_all(&request.tool) {
            self.decided(request, "allow-all");
            return Approval::Approved;
        }
        let Some(answer) = self.runs.wait_for(&self.conversation, &request.call_id) else {
            return refused(request, "the run ended before it was approved");
        };
        (self.events)(json!({
            "type": "approval_request",
            "id": request.call_id,
            "tool": request.tool,
            "ensemble": request.ensemble,
            "description": request.description,
            "arguments": request.arguments,
        }));
        let decision = tokio::select! {
            answer = answer => answer.ok(),
            () = tokio::time::sleep(self.timeout) => None,
            () = self.cancel.cancelled() => {
                self.runs.forget(&self.conversation, &request.call_id);
                self.decided(request, "gone");
                return refused(request, "the person left before answering");
            }
        };
        self.runs.forget(&self.conversation, &request.call_id);
        match decision {
            Some(Decision::Deny) => {
                self.decided(request, Decision::Deny.as_str());
                Approval::Refused(format!(
                    "the user refused to run `{}`; do not retry it",
                    request.tool
                ))
            }
            Some(decision) => {
                if decision == Decision::AllowAll
                    && let Ok(mut allowed) = self.allowed.lock()
                {
                    allowed.insert(request.tool.clone());
                }
                self.decided(request, decision.as_str());
                Approval::Approved
            }
            None => {
                self.decided(request, "timeout");
                refused(
                    request,
                    &format!(
                        "nobody answered within {} s ([chat] approval-timeout-s)",
                        self.timeout.as_secs()
                    ),
                )
            }
        }
    }
}

impl WebApprover {
    /// Asks the person a tool's question through the run's events and waits for the answer
    /// (`POST .../elicitations/{id}`), at most `[chat] approval-timeout-s`, and no longer than
    /// the run or the call lasts.
    async fn question(&self, request: &ElicitRequest) -> Result<ElicitAnswer, AskError> {
        let number = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{}-ask-{number}", request.call_id);
        let Some(answer) = self
            .runs
            .pose(&self.conversation, &id, request.schema.clone())
        else {
            return Err(AskError::Failed(
                "the run ended before the person was asked".into(),
            ));
        };
        let mut asked = Asked {
            approver: self,
            id,
            request,
            settled: false,
        };
        (self.events)(json!({
            "type": "elicitation_request",
            "id": asked.id,
            "call_id": request.call_id,
            "tool": request.tool,
            "message": request.message,
            "schema": request.schema,
        }));
        let answer = tokio::select! {
            answer = answer => answer.ok(),
            () = tokio::time::sleep(self.timeout) => {
                asked.settle("timeout");
                return Err(AskError::Failed(format!(
                    "nobody answered within {} s ([chat] approval-timeout-s)",
                    self.timeout.as_secs()
                )));
            }
            () = self.cancel.cancelled() => None,
        };
        match answer {
            Some(answer) => {
                asked.settle(match answer {
                    ElicitAnswer::Accept(_) => "accept",
                    ElicitAnswer::Decline => "decline",
                    ElicitAnswer::Cancel => "cancel",
                });
                Ok(answer)
            }
            None => {
                asked.settle("gone");
                Err(AskError::Failed("the person left before answering".into()))
            }
        }
    }
}

fn refused(request: &ApprovalRequest, why: &str) -> Approval {
    Approval::Refused(format!(
        "`{}` was not approved: {why}; do not retry it",
        request.tool
    ))
}

impl Approver for WebApprover {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(self.ask(request))
    }

    fn elicit<'a>(
        &'a self,
        request: &'a ElicitRequest,
    ) -> BoxFuture<'a, Result<ElicitAnswer, AskError>> {
        Box::pin(self.question(request))
    }
}

/// An agent event as the API's JSON.
pub fn event_json(event: &Event) -> Value {
    serde_json::to_value(event)
        .unwrap_or_else(|e| json!({"type": "error", "message": e.to_string()}))
}
