//! Events: what a run reports as it happens, for a person's terminal or a program.

use crate::provider::Usage;
use serde::Serialize;
use serde_json::Value;

/// One thing that happened in a run. Serialized as `{"type": "tool_call", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A piece of the model's text, as it streams in.
    TextDelta { text: String },
    /// The model called a tool; it is about to run (or to be answered at once, if it cannot).
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
    },
    /// A call ended. `outcome` is `ok` or the error kind (`invalid-arguments`, `denied`, ...).
    ToolResult {
        id: String,
        name: String,
        outcome: String,
        is_error: bool,
        content: String,
        duration_ms: f64,
        deduplicated: bool,
    },
    /// The model's answer broke off part-way (its stream ended before the answer did): the
    /// text that streamed since the last tool call or result is void, and the model is asked
    /// again. `attempt` is the try about to start, of `attempts` in all.
    Retry {
        attempt: u32,
        attempts: u32,
        reason: String,
    },
    /// The model asked the person something (`ask_question`); the run ends with it, and the
    /// reply is the conversation's next message.
    Question { id: String, text: String },
    /// The run ended.
    Done {
        ending: Ending,
        text: String,
        iterations: u32,
        usage: Usage,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ending {
    /// The model answered without calling a tool.
    Answer,
    /// The model called `task_completion`; its text is the final answer.
    Completed,
    /// The model called `ask_question`; the run waits for the user's reply.
    Question,
    /// The model called `converse`: a turn of plain conversation.
    Converse,
    /// `max-iterations` model calls were made without an answer.
    IterationLimit,
    /// The conversation grew past `max-conversation-mib`: it is kept, and cannot go on.
    SizeLimit,
    /// The provider failed (after its retries).
    Error,
    /// The host began shutting down (a signal): no further model call was made.
    ShutDown,
    /// Its caller cancelled the run (e.g. the HTTP client went away).
    Cancelled,
}

/// Where a run's events go. Called from the run's own task, in order.
pub type EventSink<'a> = &'a (dyn Fn(Event) + Send + Sync);
