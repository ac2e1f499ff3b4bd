//! agent: the host's own agent loop. A model ([`crate::provider::Provider`]) is given the
//! catalog's tools and calls them over several steps; every call goes through the one call
//! path ([`Host::prepare`], then [`Host::run`]), so validation, dedup, limits and audit hold
//! as on every other path. A destructive call is approved between the two halves, on the
//! prepared call: the version the person approves is the version that runs, whatever reload
//! happens in between.
//!
//! One run: up to `max_iterations` model calls. Each answer's tool calls run concurrently (at
//! most `max_parallel_calls` at once) and their results go back in the calls' order. The run
//! ends when the model answers without a call, calls a built-in loop-breaking tool
//! (`builtin`), reaches the iteration limit, or its provider fails after its retries; the
//! conversation keeps everything said so far in each case, so it can be continued.
//!
//! What one run may hold and send is bounded whatever the model answers ([`limits`]): calls
//! per answer, bytes of results per run, the size of each request and of the conversation.
//! An answer whose stream breaks off is asked for again (the provider's retry policy), after
//! a [`Event::Retry`] that tells the person the text so far is void.
//!
//! Decisions the design leaves open: a turn that mixes a loop-breaking built-in with other
//! calls runs the other calls first (their results are kept), then ends; empty argument text
//! (`""`) means no arguments; a tool whose name a built-in takes is hidden from the model.

mod approval;
mod builtin;
mod calls;
pub mod context;
mod event;
pub mod limits;
pub mod provider;
mod talk;

pub use approval::{Approval, ApprovalPolicy, ApprovalRequest, Approver};
pub use event::{Ending, Event, EventSink};
pub use limits::RunLimits;
pub use talk::ElicitRequest;

use crate::provider::conversation::{Conversation, Invocation, Message, ToolResult};
use crate::provider::{ModelRequest, Provider, ProviderError, ToolChoice, ToolSpec, Usage};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use toolhost_core::invoke::{
    Arguments, Attached, CallError, CallOutcome, ErrorKind, Host, PreparedCall, Session,
};
use toolhost_core::trace::{KeyValue, SpanBuilder, SpanKind};

/// How a run behaves.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Model calls per run, at most.
    pub max_iterations: u32,
    /// Tool calls of one turn running at once, at most.
    pub max_parallel_calls: usize,
    /// Offer `task_completion`, `ask_question` and `converse`.
    pub builtins: bool,
    /// Whether the first model call of a run may, must or must not call a tool; later calls
    /// use [`ToolChoice::after_first`].
    pub tool_choice: ToolChoice,
    /// What one run may hold and send.
    pub limits: RunLimits,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            max_iterations: 10,
            max_parallel_calls: 4,
            builtins: true,
            tool_choice: ToolChoice::Auto,
            limits: RunLimits::default(),
        }
    }
}

/// How a run ended, with its final text.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub ending: Ending,
    /// The answer, the question, the conversational message, or what the limit message says.
    pub text: String,
    /// Model calls made.
    pub iterations: u32,
    pub usage: Usage,
}

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The conversation cannot be sent within `max-request-mib`.
    #[error("{0}")]
    Request(String),
}

/// The loop: a host, a model, and who approves destructive calls.
pub struct Agent {
    host: Arc<Host>,
    provider: Arc<dyn Provider>,
    approver: Arc<dyn Approver>,
    options: AgentOptions,
}

/// A call of one turn, ready to run or already answered.
enum Step {
    Answered(ToolResult, &'static str),
    Run(PreparedCall),
}

impl Agent {
    pub fn new(
        host: Arc<Host>,
        provider: Arc<dyn Provider>,
        approver: Arc<dyn Approver>,
        options: AgentOptions,
    ) -> Self {
        Agent {
            host,
            provider,
            approver,
            options,
        }
    }

    /// The tools offered on the next turn: the built-ins, then the catalog's enabled tools
    /// that the session's policy permits, from a fresh snapshot (so a reload shows up).
    pub fn tools(&self, session: &Session) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = Vec::new();
        if self.options.builtins {
            specs.extend(builtin::BUILTINS.iter().map(|b| b.spec()));
        }
        let catalog = self.host.catalog().snapshot();
        for tool in catalog.tools() {
            if !session.permits(tool) || self.builtin(tool.name()).is_some() {
                continue;
            }
            specs.push(ToolSpec {
                name: tool.name().to_string(),
                description: tool.description().to_string(),
                parameters: serde_json::Value::Object(tool.input_schema().clone()),
            });
        }
        specs
    }

    fn builtin(&self, name: &str) -> Option<&'static builtin::Builtin> {
        self.options.builtins.then(|| builtin::find(name)).flatten()
    }

    /// Runs the conversation until it ends; see the module docs. `session` scopes dedup and
    /// carries the allow/deny lists; use one session per conversation.
    pub async fn run(
        &self,
        conversation: &mut Conversation,
        session: &Arc<Session>,
        events: EventSink<'_>,
    ) -> Result<RunOutcome, AgentError> {
        self.run_until(conversation, session, events, &CancellationToken::new())
            .await
    }

    /// [`Agent::run`], ended as [`Ending::Cancelled`] once `cancel` is cancelled: a model
    /// request is dropped, calls in flight end as `cancelled` (their results are kept, so the
    /// conversation stays whole and can be continued). Approvers watch the token themselves.
    pub async fn run_until(
        &self,
        conversation: &mut Conversation,
        session: &Arc<Session>,
        events: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, AgentError> {
        // One trace per run: its model calls and its tools' calls under one span.
        let carrier = toolhost_core::trace::Carrier::NONE;
        let traced = toolhost_core::trace::entry(&carrier, || {
            SpanBuilder::from_name("invoke_agent toolhost").with_attributes([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.provider.name", self.provider.name()),
            ])
        });
        traced
            .carry(self.run_traced(conversation, session, events, cancel))
            .await
    }

    /// [`Agent::run_until`], in its span.
    async fn run_traced(
        &self,
        conversation: &mut Conversation,
        session: &Arc<Session>,
        events: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, AgentError> {
        let limits = self.options.limits;
        let mut usage = Usage::default();
        let mut iterations = 0;
        // Bytes of tool results this run kept so far ([`RunLimits::max_run_result_bytes`]).
        let mut results_kept = 0usize;
        let outcome = loop {
            if iterations >= self.options.max_iterations {
                break RunOutcome {
                    ending: Ending::IterationLimit,
                    text: format!(
                        "stopped after {iterations} model call(s) (max-iterations) without a \
                         final answer; the conversation so far is kept"
                    ),
                    iterations,
                    usage,
                };
            }
            // A host that is shutting down finishes its calls in flight but starts no new turn.
            if self.host.is_draining() {
                break RunOutcome {
                    ending: Ending::ShutDown,
                    text: "the host is shutting down; the conversation so far is kept".into(),
                    iterations,
                    usage,
                };
            }
            if cancel.is_cancelled() {
                break cancelled(iterations, usage);
            }
            let held = limits::conversation_bytes(conversation);
            if held > limits.max_conversation_bytes {
                break RunOutcome {
                    ending: Ending::SizeLimit,
                    text: format!(
                        "the conversation holds {}, more than a conversation may ([chat] \
                         max-conversation-mib, {}); it is kept, but cannot go on: start a new \
                         one",
                        limits::size(held),
                        limits::size(limits.max_conversation_bytes)
                    ),
                    iterations,
                    usage,
                };
            }
            iterations += 1;
            let tools = self.tools(session);
            let tool_choice = if iterations == 1 {
                self.options.tool_choice.clone()
            } else {
                self.options.tool_choice.after_first()
            };
            // What every request carries besides the messages: the system prompt, the tools.
            let fixed = conversation.system.as_deref().map_or(0, limits::json_len)
                + serde_json::to_vec(&tools).map_or(0, |json| json.len());
            let Some(messages) =
                limits::fit_request(fixed, &conversation.messages, limits.max_request_bytes)
            else {
                let text = format!(
                    "the conversation cannot be sent within [chat] max-request-mib ({}), even \
                     with every earlier part cut short; start a new conversation",
                    limits::size(limits.max_request_bytes)
                );
                events(Event::Done {
                    ending: Ending::Error,
                    text: text.clone(),
                    iterations,
                    usage,
                });
                return Err(AgentError::Request(text));
            };
            let request = ModelRequest {
                system: conversation.system.as_deref(),
                messages: &messages,
                tools: &tools,
                tool_choice: &tool_choice,
            };
            let answer = tokio::select! {
                answer = self.complete(request, events) => answer,
                () = cancel.cancelled() => break cancelled(iterations, usage),
            };
            let turn = match answer {
                Ok(turn) => turn,
                Err(e) => {
                    events(Event::Done {
                        ending: Ending::Error,
                        text: e.to_string(),
                        iterations,
                        usage,
                    });
                    return Err(e.into());
                }
            };
            usage += turn.usage.unwrap_or_default();
            let (calls, dropped) = calls::at_most(
                calls::name_calls(turn.calls, conversation, iterations),
                &limits,
            );
            conversation.messages.push(Message::Assistant {
                text: turn.text.clone(),
                calls: calls.clone(),
            });
            if calls.is_empty() {
                break RunOutcome {
                    ending: Ending::Answer,
                    text: turn.text,
                    iterations,
                    usage,
                };
            }
            let (results, ending) = self
                .run_calls(&calls, dropped, session, events, cancel, &mut results_kept)
                .await;
            conversation.messages.push(Message::Results { results });
            if let Some((ending, text)) = ending {
                break RunOutcome {
                    ending,
                    text,
                    iterations,
                    usage,
                };
            }
        };
        events(Event::Done {
            ending: outcome.ending,
            text: outcome.text.clone(),
            iterations: outcome.iterations,
            usage: outcome.usage,
        });
        Ok(outcome)
    }

    /// One model call, asked again when its answer broke off part-way, as the provider's
    /// retry policy allows: the person is told first ([`Event::Retry`]), since the text that
    /// streamed is void.
    async fn complete(
        &self,
        request: ModelRequest<'_>,
        events: EventSink<'_>,
    ) -> Result<crate::provider::ModelTurn, ProviderError> {
        let on_text = |text: &str| {
            events(Event::TextDelta {
                text: text.to_string(),
            })
        };
        let policy = self.provider.retry();
        let attempts = policy.attempts.max(1);
        let mut attempt = 1;
        loop {
            // A GenAI client span per model call (never the prompt or the completion).
            let model = self.provider.model();
            let traced = toolhost_core::trace::step(|| {
                SpanBuilder::from_name(format!("chat {model}").trim_end().to_string())
                    .with_kind(SpanKind::Client)
                    .with_attributes([
                        KeyValue::new("gen_ai.operation.name", "chat"),
                        KeyValue::new("gen_ai.provider.name", self.provider.name()),
                        KeyValue::new("gen_ai.request.model", model.to_string()),
                    ])
            });
            let answer = traced
                .carry(self.provider.complete(request, &on_text))
                .await;
            match &answer {
                Ok(turn) => {
                    if let Some(usage) = turn.usage {
                        let tokens = |n| i64::try_from(n).unwrap_or(i64::MAX);
                        traced.set("gen_ai.usage.input_tokens", tokens(usage.input_tokens));
                        traced.set("gen_ai.usage.output_tokens", tokens(usage.output_tokens));
                    }
                }
                Err(e) => traced.failed(e.kind().as_str().to_string()),
            }
            match answer {
                Err(e @ ProviderError::CutShort { .. }) if attempt < attempts => {
                    let delay = policy.delay(attempt, None);
                    tracing::warn!("{e}; asking again in {} ms", delay.as_millis());
                    attempt += 1;
                    events(Event::Retry {
                        attempt,
                        attempts,
                        reason: e.to_string(),
                    });
                    tokio::time::sleep(delay).await;
                }
                answer => return answer,
            }
        }
    }

    /// Runs one turn's calls; returns their results in the calls' order, and the ending the
    /// first valid loop-breaking built-in asks for.
    /// `dropped` calls of the answer were left out past the per-answer bound: the last of
    /// `calls` stands for them and is refused. `results_kept` counts the run's result bytes.
    async fn run_calls(
        &self,
        calls: &[Invocation],
        dropped: usize,
        session: &Arc<Session>,
        events: EventSink<'_>,
        cancel: &CancellationToken,
        results_kept: &mut usize,
    ) -> (Vec<ToolResult>, Option<(Ending, String)>) {
        let limits = self.options.limits;
        let budget_spent = *results_kept >= limits.max_run_result_bytes;
        let mut ending = None;
        let mut steps = Vec::with_capacity(calls.len());
        for (index, call) in calls.iter().enumerate() {
            events(Event::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            let step = if dropped > 0 && index + 1 == calls.len() {
                let message = format!(
                    "not run: this answer asked for {} tool calls, and at most {} run per \
                     answer ([chat] max-calls-per-answer); this call and the {} after it were \
                     not run and are left out of the conversation. Ask for the ones you still \
                     need in your next answer",
                    index + dropped,
                    limits.max_calls_per_answer,
                    dropped - 1
                );
                error_step(call, ErrorKind::ResourceLimit, &message)
            } else if budget_spent && self.builtin(&call.name).is_none() {
                let message = format!(
                    "not run: this run's tool results already reached [chat] \
                     max-run-result-mib ({}); answer with what you have, or ask the user to \
                     continue in a new message",
                    limits::size(limits.max_run_result_bytes)
                );
                error_step(call, ErrorKind::ResourceLimit, &message)
            } else if let Some(problem) = &call.problem {
                error_step(call, ErrorKind::InvalidArguments, problem)
            } else if let Some(builtin) = self.builtin(&call.name) {
                match builtin.text(&call.arguments) {
                    Ok(text) => {
                        if builtin.ending == Ending::Question && ending.is_none() {
                            events(Event::Question {
                                id: call.id.clone(),
                                text: text.clone(),
                            });
                        }
                        ending.get_or_insert((builtin.ending, text));
                        Step::Answered(result(call, "delivered to the user".into(), false), "ok")
                    }
                    Err(message) => error_step(call, ErrorKind::InvalidArguments, &message),
                }
            } else {
                match self.host.prepare(session, &call.name, arguments_of(call)) {
                    // Unknown, denied or invalid: answered (and audited) without running.
                    Err(outcome) => {
                        Step::Answered(outcome_result(call, &outcome), outcome_kind(&outcome))
                    }
                    Ok(prepared) => self.approve(session, call, prepared, cancel).await,
                }
            };
            steps.push(step);
        }

        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        let limit = Arc::new(Semaphore::new(self.options.max_parallel_calls.max(1)));
        let mut running = JoinSet::new();
        for (index, step) in steps.into_iter().enumerate() {
            match step {
                // Answered without running (refusals, built-ins): short texts of the host's own.
                Step::Answered(answer, outcome) => {
                    events(result_event(&answer, outcome, Duration::ZERO, false));
                    results[index] = Some(answer);
                }
                Step::Run(prepared) => {
                    let host = Arc::clone(&self.host);
                    let session = Arc::clone(session);
                    let limit = Arc::clone(&limit);
                    let cancel = cancel.clone();
                    // The tool's questions go to this run's model and person.
                    let link: Arc<dyn toolhost_contract::CallerLink> = Arc::new(talk::AgentLink {
                        provider: Arc::clone(&self.provider),
                        approver: Arc::clone(&self.approver),
                        tool: prepared.tool().name().to_string(),
                        call_id: calls[index].id.clone(),
                    });
                    // In the run's span: the call's spans stay in its trace.
                    let call = async move {
                        // The semaphore is never closed; without a permit the call still runs.
                        let _permit = limit.acquire_owned().await.ok();
                        let attached = Attached::default()
                            .until(cancel.cancelled_owned())
                            .linked(&link);
                        let outcome = host.run(&session, prepared, attached).await;
                        (index, outcome)
                    };
                    running.spawn(toolhost_core::trace::carried(call));
                }
            }
        }
        while let Some(joined) = running.join_next().await {
            let Ok((index, outcome)) = joined else {
                continue;
            };
            let mut answer = outcome_result(&calls[index], &outcome);
            // Cut as each result arrives: the run holds no more than its budget.
            keep_within(&mut answer, results_kept, &limits);
            events(result_event(
                &answer,
                outcome_kind(&outcome),
                outcome.duration,
                outcome.deduplicated,
            ));
            results[index] = Some(answer);
        }
        let results = calls
            .iter()
            .zip(results)
            .map(|(call, r)| {
                r.unwrap_or_else(|| {
                    // Its task panicked: still one result (and one event) per call.
                    let answer = result(call, "crashed: the call's task failed".into(), true);
                    events(result_event(&answer, "crashed", Duration::ZERO, false));
                    answer
                })
            })
            .collect();
        (results, ending)
    }

    /// Asks the approver about a prepared call to a destructive tool: the request names the
    /// exact version that runs if it is approved. A refusal is audited as `denied`.
    async fn approve(
        &self,
        session: &Session,
        call: &Invocation,
        prepared: PreparedCall,
        cancel: &CancellationToken,
    ) -> Step {
        let tool = prepared.tool();
        if !tool.policy().destructive {
            return Step::Run(prepared);
        }
        let request = ApprovalRequest {
            call_id: call.id.clone(),
            tool: tool.name().to_string(),
            ensemble: tool.ensemble().to_string(),
            description: tool.description().to_string(),
            arguments: prepared.arguments().clone(),
            version: tool.version(),
        };
        // The approver first: one that watches the token itself says how it ended.
        let approval = tokio::select! {
            biased;
            approval = approval::awaited(&*self.approver, &request) => approval,
            () = cancel.cancelled() => Approval::Refused(format!(
                "`{}` was not run: the run was cancelled before it was approved",
                request.tool
            )),
        };
        match approval {
            Approval::Approved => Step::Run(prepared),
            Approval::Refused(reason) => {
                let error = CallError::new(ErrorKind::Denied, reason);
                let outcome = self.host.refuse(session, prepared, error);
                Step::Answered(outcome_result(call, &outcome), ErrorKind::Denied.as_str())
            }
        }
    }
}

/// How a cancelled run ends.
fn cancelled(iterations: u32, usage: Usage) -> RunOutcome {
    RunOutcome {
        ending: Ending::Cancelled,
        text: "the run was cancelled by its caller; the conversation so far is kept".into(),
        iterations,
        usage,
    }
}

/// Counts `answer` against the run's result budget, cut with a marker where it passes it.
fn keep_within(answer: &mut ToolResult, kept: &mut usize, limits: &RunLimits) {
    let room = limits.max_run_result_bytes.saturating_sub(*kept);
    limits::cut_with_marker(
        &mut answer.content,
        room,
        &format!(
            "this run's tool results reached [chat] max-run-result-mib ({})",
            limits::size(limits.max_run_result_bytes)
        ),
    );
    *kept += answer.content.len();
}

/// The arguments as `invoke` takes them: an object as it is, text to be parsed there (empty
/// text meaning no arguments).
fn arguments_of(call: &Invocation) -> Arguments {
    match &call.arguments {
        Value::String(text) if text.trim().is_empty() => Arguments::Value(json!({})),
        Value::String(text) => Arguments::Text(text.clone()),
        other => Arguments::Value(other.clone()),
    }
}

fn result(call: &Invocation, content: String, is_error: bool) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error,
    }
}

fn error_step(call: &Invocation, kind: ErrorKind, message: &str) -> Step {
    let error = CallError::new(kind, message);
    Step::Answered(result(call, error.to_string(), true), kind.as_str())
}

/// What the model reads: the tool's text, or `<kind>: <message>`.
fn outcome_result(call: &Invocation, outcome: &CallOutcome) -> ToolResult {
    match &outcome.result {
        Ok(answer) => result(call, answer.text().into_owned(), false),
        Err(e) => result(call, e.to_string(), true),
    }
}

/// `ok`, or the error kind, for events.
fn outcome_kind(outcome: &CallOutcome) -> &'static str {
    match &outcome.result {
        Ok(_) => "ok",
        Err(e) => e.kind.as_str(),
    }
}

fn result_event(
    answer: &ToolResult,
    outcome: &str,
    duration: Duration,
    deduplicated: bool,
) -> Event {
    Event::ToolResult {
        id: answer.call_id.clone(),
        name: answer.name.clone(),
        outcome: outcome.to_string(),
        is_error: answer.is_error,
        content: answer.content.clone(),
        duration_ms: duration.as_secs_f64() * 1000.0,
        deduplicated,
    }
}
