//! Anthropic messages (`POST {base}/messages`).
//!
//! Calls come back as `tool_use` blocks (`stop_reason: tool_use`); results go back as
//! `tool_result` blocks with `is_error`, all results of a turn in one user message and before
//! any text in it (the API's rule). Consecutive user-side messages are merged into one, since
//! the API wants the roles to alternate.

use super::conversation::{Invocation, Message};
use super::{
    BoxFuture, ModelRequest, ModelTurn, Provider, ProviderError, ProviderSettings, TextSink,
    ToolChoice, Transport, Usage, api_error, parse_chunk,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const NAME: &str = "anthropic";
const API_VERSION: &str = "2023-06-01";
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Anthropic messages API.
#[derive(Debug)]
pub struct Anthropic {
    settings: ProviderSettings,
    transport: Transport,
    api_key: String,
}

impl Anthropic {
    pub(crate) fn new(
        settings: ProviderSettings,
        transport: Transport,
    ) -> Result<Self, ProviderError> {
        let api_key = settings.api_key.clone().ok_or_else(|| {
            ProviderError::Setup(
                "anthropic needs an API key: set ANTHROPIC_API_KEY (or the variable named by \
                 api-key-env)"
                    .into(),
            )
        })?;
        Ok(Anthropic {
            settings,
            transport,
            api_key,
        })
    }
}

impl Provider for Anthropic {
    fn model(&self) -> &str {
        &self.settings.model
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn retry(&self) -> super::RetryPolicy {
        self.settings.retry
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_text: TextSink<'a>,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let mut body = json!({
                "model": self.settings.model,
                "max_tokens": self.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                "messages": wire_messages(request.messages),
            });
            if let Some(system) = request.system {
                body["system"] = json!(system);
            }
            if !request.tools.is_empty() {
                body["tools"] = request
                    .tools
                    .iter()
                    .map(|t| {
                        json!({
                            "name": t.name,
                            "description": t.description,
                            "input_schema": t.parameters,
                        })
                    })
                    .collect();
                body["tool_choice"] = match request.tool_choice {
                    ToolChoice::Auto => json!({ "type": "auto" }),
                    ToolChoice::Required => json!({ "type": "any" }),
                    ToolChoice::None => json!({ "type": "none" }),
                    ToolChoice::Tool(name) => json!({ "type": "tool", "name": name }),
                };
            }
            if self.settings.stream {
                body["stream"] = json!(true);
            }
            let url = format!("{}/messages", self.settings.base_url);
            let headers = [
                ("x-api-key", self.api_key.as_str()),
                ("anthropic-version", API_VERSION),
            ];
            let response = self.transport.post(NAME, &url, &headers, &body).await?;
            if self.settings.stream {
                let mut turn = StreamedTurn::default();
                self.transport
                    .events(NAME, response, |event| turn.event(&event.data, on_text))
                    .await?;
                turn.finish()
            } else {
                let value = self.transport.json(NAME, response).await?;
                let turn = whole_turn(&value)?;
                if !turn.text.is_empty() {
                    on_text(&turn.text);
                }
                Ok(turn)
            }
        })
    }
}

/// The conversation in messages form: user-side messages merged, tool results first.
fn wire_messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // The user-side blocks not yet sent: tool results, then text.
    let mut results: Vec<Value> = Vec::new();
    let mut texts: Vec<Value> = Vec::new();
    let flush = |out: &mut Vec<Value>, results: &mut Vec<Value>, texts: &mut Vec<Value>| {
        if results.is_empty() && texts.is_empty() {
            return;
        }
        let content: Vec<Value> = results.drain(..).chain(texts.drain(..)).collect();
        out.push(json!({ "role": "user", "content": content }));
    };
    for message in messages {
        match message {
            Message::User { text } => texts.push(json!({ "type": "text", "text": text })),
            Message::Results { results: list } => {
                for r in list {
                    results.push(json!({
                        "type": "tool_result",
                        "tool_use_id": r.call_id,
                        "content": r.content,
                        "is_error": r.is_error,
                    }));
                }
            }
            Message::Assistant { text, calls } => {
                flush(&mut out, &mut results, &mut texts);
                let mut content = Vec::new();
                if !text.is_empty() {
                    content.push(json!({ "type": "text", "text": text }));
                }
                for c in calls {
                    content.push(json!({
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": c.arguments_object(),
                    }));
                }
                if content.is_empty() {
                    content.push(json!({ "type": "text", "text": "(no answer)" }));
                }
                out.push(json!({ "role": "assistant", "content": content }));
            }
        }
    }
    flush(&mut out, &mut results, &mut texts);
    out
}

fn usage(value: &Value) -> Usage {
    Usage {
        input_tokens: value["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: value["output_tokens"].as_u64().unwrap_or(0),
    }
}

/// A whole (non-streamed) response.
fn whole_turn(value: &Value) -> Result<ModelTurn, ProviderError> {
    if value["type"] == "error" {
        return Err(api_error(NAME, &value["error"]));
    }
    let mut turn = ModelTurn {
        usage: Some(usage(&value["usage"])),
        stop_reason: value["stop_reason"].as_str().map(str::to_string),
        ..ModelTurn::default()
    };
    for block in value["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => turn
                .text
                .push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => turn.calls.push(Invocation::new(
                block["id"].as_str().unwrap_or_default(),
                block["name"].as_str().unwrap_or_default(),
                block["input"].clone(),
            )),
            _ => {}
        }
    }
    Ok(turn)
}

/// A streamed response, assembled event by event.
#[derive(Debug, Default)]
struct StreamedTurn {
    text: String,
    /// `tool_use` blocks by their content index.
    calls: BTreeMap<u64, PartialCall>,
    usage: Usage,
    stop_reason: Option<String>,
    /// `message_stop` arrived: the answer is whole.
    stopped: bool,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    /// The input from `content_block_start` (usually `{}`), used when no delta follows.
    start_input: Value,
    json: String,
}

impl StreamedTurn {
    fn event(&mut self, data: &str, on_text: TextSink<'_>) -> Result<(), ProviderError> {
        let event = parse_chunk(NAME, data)?;
        let index = event["index"].as_u64().unwrap_or(0);
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                self.usage += usage(&event["message"]["usage"]);
            }
            "content_block_start" => {
                let block = &event["content_block"];
                match block["type"].as_str() {
                    Some("tool_use") => {
                        self.calls.insert(
                            index,
                            PartialCall {
                                id: block["id"].as_str().unwrap_or_default().to_string(),
                                name: block["name"].as_str().unwrap_or_default().to_string(),
                                start_input: block["input"].clone(),
                                json: String::new(),
                            },
                        );
                    }
                    Some("text") => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            self.text.push_str(text);
                            on_text(text);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        self.text.push_str(text);
                        on_text(text);
                    }
                    Some("input_json_delta") => {
                        if let Some(call) = self.calls.get_mut(&index) {
                            call.json
                                .push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_string());
                }
                self.usage.output_tokens += event["usage"]["output_tokens"].as_u64().unwrap_or(0);
            }
            "message_stop" => self.stopped = true,
            "error" => return Err(api_error(NAME, &event["error"])),
            _ => {}
        }
        Ok(())
    }

    /// The answer, once the stream said it ended (`message_stop`, or a `message_delta` with
    /// its `stop_reason`): a body that just stops is not a whole answer.
    fn finish(self) -> Result<ModelTurn, ProviderError> {
        if !self.stopped && self.stop_reason.is_none() {
            return Err(ProviderError::CutShort {
                provider: NAME,
                message: "the stream ended without `message_stop` or a `stop_reason`".into(),
            });
        }
        let calls = self
            .calls
            .into_values()
            .map(|c| {
                let arguments = if c.json.trim().is_empty() {
                    match c.start_input {
                        Value::Null => json!({}),
                        input => input,
                    }
                } else {
                    // Malformed JSON stays text, and the loop tells the model so.
                    serde_json::from_str(&c.json).unwrap_or(Value::String(c.json))
                };
                Invocation::new(c.id, c.name, arguments)
            })
            .collect();
        Ok(ModelTurn {
            text: self.text,
            calls,
            usage: Some(self.usage),
            stop_reason: self.stop_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::conversation::ToolResult;

    #[test]
    fn results_come_first_in_one_user_message() {
        let messages = vec![
            Message::User { text: "hi".into() },
            Message::Assistant {
                text: "two calls".into(),
                calls: vec![
                    Invocation::new("a", "x", json!({})),
                    Invocation::new("b", "y", json!("{\"n\": 1}")),
                ],
            },
            Message::Results {
                results: vec![
                    ToolResult {
                        call_id: "a".into(),
                        name: "x".into(),
                        content: "1".into(),
                        is_error: false,
                    },
                    ToolResult {
                        call_id: "b".into(),
                        name: "y".into(),
                        content: "no".into(),
                        is_error: true,
                    },
                ],
            },
            Message::User {
                text: "and now?".into(),
            },
        ];
        let wire = wire_messages(&messages);
        assert_eq!(wire.len(), 3);
        assert_eq!(wire[1]["content"][2]["input"], json!({"n": 1}));
        let user = &wire[2]["content"];
        assert_eq!(user[0]["type"], "tool_result");
        assert_eq!(user[1]["is_error"], true);
        assert_eq!(user[2]["type"], "text");
    }

    #[test]
    fn streamed_tool_input_assembles_and_malformed_input_stays_text() {
        let events = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":20,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Sure."}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu_1","name":"calc","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"expr"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ession\": \"1+1\"}"}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu_2","name":"calc","input":{}}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{oops"}}"#,
            r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"tu_3","name":"now","input":{}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let mut turn = StreamedTurn::default();
        for e in events {
            turn.event(e, &|_| {}).unwrap();
        }
        let turn = turn.finish().unwrap();
        assert_eq!(turn.text, "Sure.");
        assert_eq!(turn.calls[0].arguments, json!({"expression": "1+1"}));
        assert_eq!(turn.calls[1].arguments, json!("{oops"));
        assert_eq!(turn.calls[2].arguments, json!({}));
        assert_eq!(turn.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            turn.usage,
            Some(Usage {
                input_tokens: 20,
                output_tokens: 31
            })
        );
    }

    #[test]
    fn a_stream_without_its_stop_is_cut_short() {
        let mut turn = StreamedTurn::default();
        for e in [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":2}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hal"}}"#,
        ] {
            turn.event(e, &|_| {}).unwrap();
        }
        let error = turn.finish().expect_err("no message_stop");
        assert!(matches!(error, ProviderError::CutShort { .. }), "{error}");
    }
}
