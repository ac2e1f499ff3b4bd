//! A running call talking back to whoever made it (`toolhost:plugin@0.2.0`'s `host`
//! interface): progress reports, sampling the caller's model, asking the person.
//!
//! The runtime does not know who the caller is. Each call carries a [`CallerLink`], made by
//! the caller (an MCP request, a turn of the agent loop): the only way to reach that caller,
//! so a call's progress and questions go to the session that made it and nowhere else. What
//! an invoker may use is its [`TalkGrants`]; how much of it one call may use is bounded here
//! ([`TalkBudget`]), whatever the guest does. An imported MCP server's calls are bounded by
//! the same budget (`toolhost-import`), with the grant named where an import sets
//! it.

use serde_json::Value;
use std::sync::Arc;
use toolhost_contract::talk::{
    AskError, CallerLink, ELICIT_SCHEMA_BYTES, ELICITATIONS_PER_CALL, MESSAGE_BYTES,
    PROGRESS_PER_CALL, Progress, SAMPLE_MAX_TOKENS, SAMPLE_REQUEST_BYTES, SAMPLES_PER_CALL,
    SamplingRequest, TalkGrants, fit_answer,
};

/// What is left to one call of each kind of talking back.
pub struct TalkBudget {
    pub grants: TalkGrants,
    pub link: Arc<dyn CallerLink>,
    /// Where the operator grants sampling and elicitation, for the refusal's message.
    granted_in: &'static str,
    progress: u32,
    samples: u32,
    elicitations: u32,
    /// Progress reports dropped (past the limit, or not granted).
    pub progress_dropped: u32,
}

impl TalkBudget {
    pub fn new(grants: TalkGrants, link: Arc<dyn CallerLink>) -> Self {
        TalkBudget {
            grants,
            link,
            granted_in: "the ensemble's [grants] and the invoker's [capabilities]",
            progress: PROGRESS_PER_CALL,
            samples: SAMPLES_PER_CALL,
            elicitations: ELICITATIONS_PER_CALL,
            progress_dropped: 0,
        }
    }

    /// A progress report to pass on, or `None` when it is dropped.
    /// The budget of an imported MCP server's call, whose grants are in `[ensemble.mcp]`.
    pub fn for_import(grants: TalkGrants, link: Arc<dyn CallerLink>) -> Self {
        TalkBudget {
            granted_in: "the ensemble's [ensemble.mcp]",
            ..TalkBudget::new(grants, link)
        }
    }

    pub fn progress(&mut self, mut report: Progress) -> Option<Progress> {
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
    pub fn sample(&mut self, mut request: SamplingRequest) -> Result<SamplingRequest, AskError> {
        if !self.grants.sampling {
            return Err(AskError::NotGranted(format!(
                "sampling is not granted to this tool (the operator grants it with \
                 `sampling = true` in {})",
                self.granted_in
            )));
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
    pub fn elicit(
        &mut self,
        mut message: String,
        schema: &str,
    ) -> Result<(String, Value), AskError> {
        if !self.grants.elicitation {
            return Err(AskError::NotGranted(format!(
                "elicitation is not granted to this tool (the operator grants it with \
                 `elicitation = true` in {})",
                self.granted_in
            )));
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

/// [`fit_answer`] as the tool hears it: whoever answered (an MCP client, a terminal, the web
/// chat), the tool gets only the form it asked for, or `failed` naming the property that did
/// not fit (a JSON pointer).
pub fn check_answer(schema: &Value, answer: &Value) -> Result<(), AskError> {
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

/// Cuts `text` to at most `bytes`, on a character boundary, with no mark: a field whose bound
/// its reader knows.
pub fn cut(text: &mut String, bytes: usize) {
    toolhost_contract::cut_in_place(text, bytes, |_| String::new());
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_contract::{Role, TalkGrants, Unlinked};

    fn budget(grants: TalkGrants) -> TalkBudget {
        TalkBudget::new(grants, Arc::new(Unlinked))
    }

    #[test]
    fn a_property_the_answer_leaves_out_takes_the_forms_default_and_nothing_else_changes() {
        let schema = form_schema(serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "status": {"type": "string", "enum": ["active", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
                "note": {"type": "string"}
            }
        }))
        .unwrap();
        let mut answer = serde_json::json!({"age": 41});
        toolhost_contract::talk::with_defaults(&schema, &mut answer);
        assert_eq!(
            answer,
            serde_json::json!({"name": "John Doe", "age": 41, "status": "active", "verified": true})
        );
        check_answer(&schema, &answer).unwrap();
        // Not an object: left as it is, for the check to refuse.
        let mut wrong = serde_json::json!("Ada");
        toolhost_contract::talk::with_defaults(&schema, &mut wrong);
        assert_eq!(wrong, serde_json::json!("Ada"));
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
