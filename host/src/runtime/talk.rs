//! A running call talking back to whoever made it (`toolhost:plugin@0.2.0`'s `host`
//! interface): progress reports, sampling the caller's model, asking the person.
//!
//! The runtime does not know who the caller is. Each call carries a [`CallerLink`], made by
//! the caller (an MCP request, a turn of the agent loop): the only way to reach that caller,
//! so a call's progress and questions go to the session that made it and nowhere else. What
//! an invoker may use is its [`TalkGrants`]; how much of it one call may use is bounded here
//! ([`TalkBudget`]), whatever the guest does.

pub use crate::sandbox::TalkGrants;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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

/// What is left to one call of each kind of talking back.
pub(crate) struct TalkBudget {
    pub(crate) grants: TalkGrants,
    pub(crate) link: Arc<dyn CallerLink>,
    progress: u32,
    samples: u32,
    elicitations: u32,
    /// Progress reports dropped (past the limit, or not granted).
    pub(crate) progress_dropped: u32,
}

impl TalkBudget {
    pub(crate) fn new(grants: TalkGrants, link: Arc<dyn CallerLink>) -> Self {
        TalkBudget {
            grants,
            link,
            progress: PROGRESS_PER_CALL,
            samples: SAMPLES_PER_CALL,
            elicitations: ELICITATIONS_PER_CALL,
            progress_dropped: 0,
        }
    }

    /// A progress report to pass on, or `None` when it is dropped.
    pub(crate) fn progress(&mut self, mut report: Progress) -> Option<Progress> {
        if !self.grants.progress || self.progress == 0 || !report.done.is_finite() {
            self.progress_dropped = self.progress_dropped.saturating_add(1);
            return None;
        }
        self.progress -= 1;
        report.total = report.total.filter(|t| t.is_finite());
        if let Some(message) = &mut report.message {
            cut(message, MESSAGE_BYTES);
        }
        Some(report)
    }

    /// The request as it may be sent, or why not.
    pub(crate) fn sample(
        &mut self,
        mut request: SamplingRequest,
    ) -> Result<SamplingRequest, AskError> {
        if !self.grants.sampling {
            return Err(AskError::NotGranted(
                "sampling is not granted to this tool (the operator grants it with \
                 `sampling = true` in the ensemble's [grants] and the invoker's [capabilities])"
                    .into(),
            ));
        }
        if self.samples == 0 {
            return Err(AskError::LimitReached(format!(
                "a call may sample at most {SAMPLES_PER_CALL} times"
            )));
        }
        request.model_hints.truncate(8);
        let bytes: usize = request
            .messages
            .iter()
            .map(|(_, text)| text.len())
            .chain(request.model_hints.iter().map(String::len))
            .sum::<usize>()
            + request.system_prompt.as_ref().map_or(0, String::len);
        if bytes > SAMPLE_REQUEST_BYTES {
            return Err(AskError::LimitReached(format!(
                "the sampling request holds {bytes} bytes of text, more than the \
                 {SAMPLE_REQUEST_BYTES} a request may"
            )));
        }
        if request.messages.is_empty() {
            return Err(AskError::Failed(
                "a sampling request needs at least one message".into(),
            ));
        }
        self.samples -= 1;
        request.max_tokens = request.max_tokens.clamp(1, SAMPLE_MAX_TOKENS);
        request.temperature = request.temperature.filter(|t| t.is_finite());
        Ok(request)
    }

    /// The message and schema of an elicitation as they may be sent, or why not.
    pub(crate) fn elicit(
        &mut self,
        mut message: String,
        schema: &str,
    ) -> Result<(String, Value), AskError> {
        if !self.grants.elicitation {
            return Err(AskError::NotGranted(
                "elicitation is not granted to this tool (the operator grants it with \
                 `elicitation = true` in the ensemble's [grants] and the invoker's \
                 [capabilities])"
                    .into(),
            ));
        }
        if self.elicitations == 0 {
            return Err(AskError::LimitReached(format!(
                "a call may ask the person at most {ELICITATIONS_PER_CALL} times"
            )));
        }
        if schema.len() > ELICIT_SCHEMA_BYTES {
            return Err(AskError::LimitReached(format!(
                "the requested schema has {} bytes, more than the {ELICIT_SCHEMA_BYTES} an \
                 elicitation may",
                schema.len()
            )));
        }
        let schema: Value = serde_json::from_str(schema)
            .map_err(|e| AskError::Failed(format!("the requested schema is not JSON: {e}")))?;
        let schema = form_schema(schema)?;
        self.elicitations -= 1;
        cut(&mut message, MESSAGE_BYTES);
        Ok((message, schema))
    }
}

/// The schema of a question as every caller can ask it: one MCP elicitation allows (an object
/// of string, number, boolean or enum properties, rmcp's `ElicitationSchema`), written anew
/// from what was understood. Nothing else the tool wrote goes on: no `$ref` or `$schema` a
/// validator might try to fetch, no keyword a form would not show.
fn form_schema(schema: Value) -> Result<Value, AskError> {
    let refused = |e: &dyn std::fmt::Display| {
        AskError::Failed(format!(
            "the requested schema is not one MCP elicitation allows (an object of string, \
             number, boolean or enum properties): {e}"
        ))
    };
    let mut form: rmcp::model::ElicitationSchema =
        serde_json::from_value(schema).map_err(|e| refused(&e))?;
    form.schema = None;
    serde_json::to_value(form).map_err(|e| refused(&e))
}

/// Why an accepted answer was refused: where in the answer (a JSON pointer, `""` for the
/// whole) and what was wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerRefused {
    pub pointer: String,
    pub reason: String,
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

/// [`fit_answer`] as the tool hears it: whoever answered (an MCP client, a terminal, the web
/// chat), the tool gets only the form it asked for, or `failed` naming the property that did
/// not fit (a JSON pointer).
pub(crate) fn check_answer(schema: &Value, answer: &Value) -> Result<(), AskError> {
    fit_answer(schema, answer).map_err(|refused| {
        AskError::Failed(format!(
            "the answer does not fit the requested schema at {}: {}",
            if refused.pointer.is_empty() {
                "/"
            } else {
                &refused.pointer
            },
            refused.reason
        ))
    })
}

/// Cuts `text` to at most `bytes`, on a character boundary.
pub(crate) fn cut(text: &mut String, bytes: usize) {
    if text.len() > bytes {
        text.truncate(text.floor_char_boundary(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(grants: TalkGrants) -> TalkBudget {
        TalkBudget::new(grants, Arc::new(Unlinked))
    }

    #[test]
    fn an_answer_that_does_not_fit_its_form_is_refused_with_its_pointer() {
        let schema = form_schema(serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name"]
        }))
        .unwrap();
        check_answer(&schema, &serde_json::json!({"name": "Ada", "age": 36})).unwrap();
        let Err(AskError::Failed(wrong)) = check_answer(&schema, &serde_json::json!({"name": 7}))
        else {
            panic!("a number for a string is refused")
        };
        assert!(wrong.contains("at /name:"), "{wrong}");
        let Err(AskError::Failed(missing)) = check_answer(&schema, &serde_json::json!({})) else {
            panic!("a missing required property is refused")
        };
        assert!(
            missing.contains("at /:") && missing.contains("name"),
            "{missing}"
        );
        for extra in ["isAdmin", "__proto__", "a/b"] {
            let mut answer = serde_json::json!({"name": "Ada"});
            answer[extra] = serde_json::json!(true);
            let Err(AskError::Failed(refused)) = check_answer(&schema, &answer) else {
                panic!("a property the form did not ask for is refused: {extra}")
            };
            let pointer = extra.replace('/', "~1");
            assert!(
                refused.contains(&format!("at /{pointer}: the form did not ask")),
                "{refused}"
            );
        }
        let Err(AskError::Failed(not_object)) = check_answer(&schema, &serde_json::json!([1]))
        else {
            panic!("an answer that is not an object is refused")
        };
        assert!(not_object.contains("not an object"), "{not_object}");
    }

    #[test]
    fn each_kind_is_bounded_per_call_and_refused_unless_granted() {
        let mut denied = budget(TalkGrants::default());
        let request = SamplingRequest {
            messages: vec![(Role::User, "hi".into())],
            system_prompt: None,
            max_tokens: 1_000_000,
            temperature: Some(f32::NAN),
            model_hints: vec![],
        };
        assert!(matches!(
            denied.sample(request.clone()),
            Err(AskError::NotGranted(_))
        ));
        assert!(matches!(
            denied.elicit("?".into(), "{}"),
            Err(AskError::NotGranted(_))
        ));

        let mut all = budget(TalkGrants {
            sampling: true,
            elicitation: true,
            ..TalkGrants::default()
        });
        // Model hints count toward the request's bytes too.
        let hinted = SamplingRequest {
            model_hints: vec!["h".repeat(SAMPLE_REQUEST_BYTES)],
            ..request.clone()
        };
        assert!(matches!(all.sample(hinted), Err(AskError::LimitReached(_))));
        for _ in 0..SAMPLES_PER_CALL {
            let sent = all.sample(request.clone()).unwrap();
            assert_eq!(sent.max_tokens, SAMPLE_MAX_TOKENS);
            assert_eq!(sent.temperature, None);
        }
        assert!(matches!(
            all.sample(request),
            Err(AskError::LimitReached(_))
        ));
        let form = r#"{"type":"object","properties":{"n":{"type":"string"}}}"#;
        for _ in 0..ELICITATIONS_PER_CALL {
            all.elicit("?".into(), form).unwrap();
        }
        assert!(matches!(
            all.elicit("?".into(), "{}"),
            Err(AskError::LimitReached(_))
        ));

        let report = Progress {
            done: 1.0,
            total: Some(f64::INFINITY),
            message: Some("x".repeat(MESSAGE_BYTES * 2)),
        };
        let sent = all.progress(report.clone()).unwrap();
        assert_eq!(sent.total, None);
        assert_eq!(sent.message.unwrap().len(), MESSAGE_BYTES);
        for _ in 1..PROGRESS_PER_CALL {
            assert!(all.progress(report.clone()).is_some());
        }
        assert!(all.progress(report).is_none());
        assert_eq!(all.progress_dropped, 1);
    }

    #[test]
    fn a_question_goes_on_as_a_form_and_nothing_else() {
        let written = serde_json::json!({
            "$schema": "https://evil.example/meta",
            "$ref": "https://evil.example/schema",
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "x-script": "alert(1)"},
                "age": {"type": "integer", "minimum": 0}
            },
            "required": ["name"]
        });
        let form = form_schema(written).unwrap();
        assert_eq!(
            form,
            serde_json::json!({
                "type": "object",
                "properties": {
                    "age": {"type": "integer", "minimum": 0},
                    "name": {"type": "string", "title": "Name"}
                },
                "required": ["name"]
            })
        );
        let nested = serde_json::json!({
            "type": "object",
            "properties": {"address": {"type": "object"}}
        });
        let Err(AskError::Failed(why)) = form_schema(nested) else {
            panic!("a nested object was taken")
        };
        assert!(why.contains("not one MCP elicitation allows"), "{why}");
    }
}
