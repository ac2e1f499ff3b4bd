//! OpenAI chat completions (`POST {base}/chat/completions`), the format Ollama, vLLM,
//! llama.cpp's server and LiteLLM also speak.
//!
//! Tools go out as `{type: function, function: {name, description, parameters}}`; calls come
//! back as `tool_calls` with JSON-string arguments (kept as the text the model wrote, checked
//! when the call runs); results go back as `role: tool` messages. When streaming, tool-call
//! deltas are assembled per `index`, and a call's id is taken from the first delta that has one.

use super::conversation::{Invocation, Message};
use super::{
    BoxFuture, ModelRequest, ModelTurn, Provider, ProviderError, ProviderSettings, TextSink,
    ToolChoice, Transport, Usage, api_error, parse_chunk,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const NAME: &str = "openai";

/// The OpenAI chat completions API.
#[derive(Debug)]
pub struct OpenAi {
    settings: ProviderSettings,
    transport: Transport,
}

impl OpenAi {
    pub(crate) fn new(settings: ProviderSettings, transport: Transport) -> Self {
        OpenAi {
            settings,
            transport,
        }
    }

    /// Sends `messages` (already in the wire format) with `tools` (none: no `tools` field)
    /// and reads the answer, streamed or whole. `provider` names the caller in errors.
    pub(crate) async fn chat(
        &self,
        provider: &'static str,
        messages: Vec<Value>,
        tools: Vec<Value>,
        tool_choice: &ToolChoice,
        on_text: TextSink<'_>,
    ) -> Result<ModelTurn, ProviderError> {
        let mut body = json!({
            "model": self.settings.model,
            "messages": messages,
        });
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = wire_tool_choice(tool_choice);
        }
        if let Some(max) = self.settings.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if self.settings.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({ "include_usage": true });
        }
        let url = format!("{}/chat/completions", self.settings.base_url);
        let auth = self
            .settings
            .api_key
            .as_ref()
            .map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| ("authorization", a))
            .into_iter()
            .collect();
        let response = self.transport.post(provider, &url, &headers, &body).await?;
        if self.settings.stream {
            let mut turn = StreamedTurn::default();
            self.transport
                .events(provider, response, |event| {
                    turn.event(provider, &event.data, on_text)
                })
                .await?;
            turn.finish(provider)
        } else {
            let value = self.transport.json(provider, response).await?;
            let turn = whole_turn(provider, &value)?;
            if !turn.text.is_empty() {
                on_text(&turn.text);
            }
            Ok(turn)
        }
    }
}

impl Provider for OpenAi {
    fn name(&self) -> &'static str {
        NAME
    }

    fn model(&self) -> &str {
        &self.settings.model
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
            let tools = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        }
                    })
                })
                .collect();
            self.chat(
                NAME,
                wire_messages(request),
                tools,
                request.tool_choice,
                on_text,
            )
            .await
        })
    }
}

/// `tool_choice` in chat-completions form.
fn wire_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::None => json!("none"),
        ToolChoice::Tool(name) => json!({ "type": "function", "function": { "name": name } }),
    }
}

/// The conversation in chat-completions form.
fn wire_messages(request: ModelRequest<'_>) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(system) = request.system {
        out.push(json!({ "role": "system", "content": system }));
    }
    for message in request.messages {
        match message {
            Message::User { text } => out.push(json!({ "role": "user", "content": text })),
            Message::Assistant { text, calls } => {
                // Always a string, empty without text: OpenAI takes `null` too, but
                // llama-cpp-python's server refuses `null` (its `content` is an optional
                // string) and its tool-calling template fails without the field.
                let mut m = json!({ "role": "assistant", "content": text });
                if !calls.is_empty() {
                    m["tool_calls"] = calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": { "name": c.name, "arguments": c.arguments_text() },
                            })
                        })
                        .collect();
                }
                out.push(m);
            }
            Message::Results { results } => {
                for r in results {
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": r.call_id,
                        "content": r.content,
                    }));
                }
            }
        }
    }
    out
}

fn usage(value: &Value) -> Option<Usage> {
    let usage = value.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
    })
}

/// A whole (non-streamed) response.
fn whole_turn(provider: &'static str, value: &Value) -> Result<ModelTurn, ProviderError> {
    if let Some(error) = value.get("error") {
        return Err(api_error(provider, error));
    }
    let choice = value["choices"]
        .get(0)
        .ok_or_else(|| ProviderError::Protocol {
            provider,
            message: "the response has no choices".into(),
        })?;
    let message = &choice["message"];
    let calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    Invocation::new(
                        c["id"].as_str().unwrap_or_default(),
                        c["function"]["name"].as_str().unwrap_or_default(),
                        c["function"]["arguments"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ModelTurn {
        text: message["content"].as_str().unwrap_or_default().to_string(),
        calls,
        usage: usage(value),
        stop_reason: choice["finish_reason"].as_str().map(str::to_string),
    })
}

/// A streamed response, assembled chunk by chunk.
#[derive(Debug, Default)]
struct StreamedTurn {
    text: String,
    /// Tool calls by their `index`.
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    done: bool,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl StreamedTurn {
    fn event(
        &mut self,
        provider: &'static str,
        data: &str,
        on_text: TextSink<'_>,
    ) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if self.done {
            return Ok(());
        }
        let chunk = parse_chunk(provider, data)?;
        if let Some(error) = chunk.get("error") {
            return Err(api_error(provider, error));
        }
        if let Some(usage) = usage(&chunk) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return Ok(());
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            on_text(text);
        }
        for (position, call) in delta["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            // Some servers leave `index` out when they send each call whole.
            let index = call["index"].as_u64().unwrap_or(position as u64);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call["id"].as_str().filter(|id| !id.is_empty())
                && entry.id.is_empty()
            {
                entry.id = id.to_string();
            }
            let function = &call["function"];
            if let Some(name) = function["name"].as_str()
                && entry.name.is_empty()
            {
                entry.name = name.to_string();
            }
            match &function["arguments"] {
                Value::String(part) => entry.arguments.push_str(part),
                Value::Null => {}
                whole => entry.arguments.push_str(&whole.to_string()),
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.stop_reason = Some(reason.to_string());
        }
        Ok(())
    }

    /// The answer, once the stream said it ended (`[DONE]` or a `finish_reason`): a body that
    /// just stops (a server whose handler failed mid-answer) is not a whole answer.
    fn finish(self, provider: &'static str) -> Result<ModelTurn, ProviderError> {
        if !self.done && self.stop_reason.is_none() {
            return Err(ProviderError::CutShort {
                provider,
                message: "the stream ended without `[DONE]` or a `finish_reason`".into(),
            });
        }
        Ok(ModelTurn {
            text: self.text,
            calls: self
                .calls
                .into_values()
                .map(|c| Invocation::new(c.id, c.name, Value::String(c.arguments)))
                .collect(),
            usage: self.usage,
            stop_reason: self.stop_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_deltas_assemble_per_index_and_keep_the_first_id() {
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"check."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"calc","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_other","function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":": 1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \"a\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}"#,
            "[DONE]",
        ];
        let seen = std::sync::Mutex::new(String::new());
        let sink = |t: &str| seen.lock().unwrap().push_str(t);
        let mut turn = StreamedTurn::default();
        for chunk in chunks {
            turn.event(NAME, chunk, &sink).unwrap();
        }
        let turn = turn.finish(NAME).unwrap();
        assert_eq!(*seen.lock().unwrap(), "Let me check.");
        assert_eq!(turn.text, "Let me check.");
        assert_eq!(
            turn.calls,
            vec![
                Invocation::new("call_a", "read", json!("{\"path\": \"a\"}")),
                Invocation::new("call_b", "calc", json!("{\"x\": 1}")),
            ]
        );
        assert_eq!(
            turn.usage,
            Some(Usage {
                input_tokens: 12,
                output_tokens: 7
            })
        );
        assert_eq!(turn.stop_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn an_assistant_message_without_text_has_empty_content() {
        let messages = vec![
            Message::User { text: "hi".into() },
            Message::Assistant {
                text: String::new(),
                calls: vec![Invocation::new("c1", "calc", json!({"x": 1}))],
            },
            Message::Assistant {
                text: String::new(),
                calls: Vec::new(),
            },
        ];
        let request = ModelRequest {
            system: None,
            messages: &messages,
            tools: &[],
            tool_choice: &ToolChoice::Auto,
        };
        let wire = wire_messages(request);
        assert_eq!(wire[1]["content"], "", "{}", wire[1]);
        assert_eq!(
            wire[1]["tool_calls"][0]["function"]["arguments"],
            "{\"x\":1}"
        );
        assert_eq!(wire[2]["content"], "");
    }

    #[test]
    fn a_stream_that_just_stops_is_cut_short_and_either_ending_completes_it() {
        let text = r#"{"choices":[{"index":0,"delta":{"content":"Half an ans"}}]}"#;
        let mut cut = StreamedTurn::default();
        cut.event(NAME, text, &|_| {}).unwrap();
        let error = cut.finish(NAME).expect_err("no ending");
        assert!(matches!(error, ProviderError::CutShort { .. }), "{error}");
        assert!(error.to_string().contains("without `[DONE]`"), "{error}");
        let mut done = StreamedTurn::default();
        done.event(NAME, text, &|_| {}).unwrap();
        done.event(NAME, "[DONE]", &|_| {}).unwrap();
        assert_eq!(done.finish(NAME).unwrap().text, "Half an ans");
        let mut finished = StreamedTurn::default();
        finished.event(NAME, text, &|_| {}).unwrap();
        let stop = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        finished.event(NAME, stop, &|_| {}).unwrap();
        assert_eq!(finished.finish(NAME).unwrap().text, "Half an ans");
    }
}
