//! A running call talking back to whoever made it (`toolhost:plugin@0.2.0`'s `host`
//! interface): progress reports, sampling the caller's model, asking the person. The types
//! every side shares: the caller makes a [`CallerLink`] per call (an MCP request, a turn of the
//! agent loop), the runtime calls it within the call's [`TalkGrants`] and the bounds below.

use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

/// What an invoker may use of whoever calls it, granted by the operator: `log` and
/// `progress` unless taken away, `sampling` (the caller's model) and `elicitation` (asking
/// the person) only when given. The runtime bounds how much of each one call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct TalkGrants {
    pub log: bool,
    pub progress: bool,
    pub sampling: bool,
    pub elicitation: bool,
}

impl Default for TalkGrants {
    fn default() -> Self {
        TalkGrants {
            log: true,
            progress: true,
            sampling: false,
            elicitation: false,
        }
    }
}

/// Progress reports one call may send; later ones are dropped.
pub const PROGRESS_PER_CALL: u32 = 256;
/// Sampling requests one call may make.
pub const SAMPLES_PER_CALL: u32 = 8;
/// Elicitations one call may make.
pub const ELICITATIONS_PER_CALL: u32 = 4;
/// The most text one sampling request may carry (its messages and system prompt).
pub const SAMPLE_REQUEST_BYTES: usize = 256 << 10;
/// A sampling request asks for at most this many tokens, whatever the guest asks.
pub const SAMPLE_MAX_TOKENS: u32 = 4096;
/// The most of a sampling answer, or of an elicitation's answer, the guest is given.
pub const ANSWER_BYTES: usize = 1 << 20;
/// The longest message of a progress report or an elicitation.
pub const MESSAGE_BYTES: usize = 4096;
/// The largest schema an elicitation may request.
pub const ELICIT_SCHEMA_BYTES: usize = 16 << 10;

/// How far along a call is.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub done: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Who speaks a sampling message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// A completion a call asks of its caller's model.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingRequest {
    pub messages: Vec<(Role, String)>,
    pub system_prompt: Option<String>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    pub model_hints: Vec<String>,
}

/// The caller's model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplingResponse {
    pub text: String,
    pub model: String,
    pub stop_reason: Option<String>,
}

/// What the person did with an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitAnswer {
    /// Their answer: an object the requested schema describes.
    Accept(Value),
    Decline,
    Cancel,
}

/// Why a call's question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    #[error("{0}")]
    NotGranted(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    LimitReached(String),
    #[error("{0}")]
    Failed(String),
}

/// A boxed future of an answer.
pub type Answer<T> = Pin<Box<dyn Future<Output = Result<T, AskError>> + Send>>;

/// The way back to whoever made a call. Every caller of tools makes one per call (or uses
/// [`Unlinked`]); its methods are only called within the grants and bounds of the call.
pub trait CallerLink: Send + Sync {
    /// Passes a progress report on. Awaited: a caller that reads slowly slows the guest down
    /// rather than making the host queue reports.
    fn progress(&self, progress: Progress) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// Asks the caller's model.
    fn sample(&self, request: SamplingRequest) -> Answer<SamplingResponse>;
    /// Asks the person: `schema` is the requested schema, a JSON object.
    fn elicit(&self, message: String, schema: Value) -> Answer<ElicitAnswer>;
}

/// A caller with nobody to ask (`toolhost call`, a benchmark): progress goes nowhere, and
/// questions are answered `unsupported`.
pub struct Unlinked;

impl CallerLink for Unlinked {
    fn progress(&self, _progress: Progress) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(std::future::ready(()))
    }

    fn sample(&self, _request: SamplingRequest) -> Answer<SamplingResponse> {
        Box::pin(std::future::ready(Err(AskError::Unsupported(
            "this caller has no model to sample".into(),
        ))))
    }

    fn elicit(&self, _message: String, _schema: Value) -> Answer<ElicitAnswer> {
        Box::pin(std::future::ready(Err(AskError::Unsupported(
            "this caller has nobody to ask".into(),
        ))))
    }
}

/// Why an accepted answer was refused: where in the answer (a JSON pointer, `""` for the
/// whole) and what was wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerRefused {
    pub pointer: String,
    pub reason: String,
}

/// Fills in an accepted answer the properties it leaves out that the form gives a `default`
/// (SEP-1034: the defaults a form showed are the answer where the person changed nothing).
/// The form is one `form_schema` wrote (flat properties); an answer that is not an object is
/// left for [`fit_answer`] to refuse.
pub fn with_defaults(schema: &Value, answer: &mut Value) {
    let (Some(asked), Some(object)) = (
        schema.get("properties").and_then(Value::as_object),
        answer.as_object_mut(),
    ) else {
        return;
    };
    for (name, property) in asked {
        if let Some(default) = property.get("default")
            && !object.contains_key(name)
        {
            object.insert(name.clone(), default.clone());
        }
    }
}

/// Checks an accepted answer against the form its question went out with: an object holding
/// only the properties the form asked for, each as the form describes it. The first property
/// that does not fit is named (a form's own schema may leave `additionalProperties` open, so
/// properties it did not ask for are refused here, before any validator runs).
pub fn fit_answer(schema: &Value, answer: &Value) -> Result<(), AnswerRefused> {
    let Some(object) = answer.as_object() else {
        return Err(AnswerRefused {
            pointer: String::new(),
            reason: "the answer is not an object of the form's properties".into(),
        });
    };
    let asked = schema.get("properties").and_then(Value::as_object);
    if let Some(extra) = object
        .keys()
        .find(|key| !asked.is_some_and(|asked| asked.contains_key(key.as_str())))
    {
        return Err(AnswerRefused {
            pointer: format!("/{}", extra.replace('~', "~0").replace('/', "~1")),
            reason: "the form did not ask for this property".into(),
        });
    }
    // The schema is one `form_schema` wrote: flat properties, 16 KiB at most.
    let validator = jsonschema::validator_for(schema).map_err(|e| AnswerRefused {
        pointer: String::new(),
        reason: format!("the requested schema: {e}"),
    })?;
    match validator.iter_errors(answer).next() {
        None => Ok(()),
        Some(e) => Err(AnswerRefused {
            pointer: e.instance_path().to_string(),
            reason: e.to_string(),
        }),
    }
}
