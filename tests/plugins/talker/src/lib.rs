//! A `toolhost:plugin@0.2.0` component for the tests of talking back: results of every kind
//! of content item, progress, sampling and elicitation, used as a plugin author would, and
//! as a hostile one would (a flood of progress, sampling in a loop, asking without end).

wit_bindgen::generate!({
    path: "../../../wit/toolhost-plugin-0.2.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolResult, ToolSpec};
use serde_json::{Value, json};
use toolhost::plugin::host::{self, AskError, ElicitAnswer, LogLevel, Role, SamplingMessage};
use toolhost::plugin::types::{Content, EmbeddedResource, Media, ResourceContents};

struct Talker;

fn spec(name: &str, description: &str, input: Value, output: Option<Value>) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: input.to_string(),
        output_schema: output.map(|o| o.to_string()),
    }
}

fn text(text: impl Into<String>) -> Result<ToolResult, ToolError> {
    Ok(ToolResult {
        content: vec![Content::Text(text.into())],
        structured: None,
    })
}

fn ask_error(error: AskError) -> String {
    match error {
        AskError::NotGranted(m) => format!("not-granted: {m}"),
        AskError::Unsupported(m) => format!("unsupported: {m}"),
        AskError::LimitReached(m) => format!("limit-reached: {m}"),
        AskError::Failed(m) => format!("failed: {m}"),
    }
}

fn number(arguments: &Value, key: &str) -> u64 {
    arguments.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl Guest for Talker {
    fn describe() -> Vec<ToolSpec> {
        let steps = json!({"type": "object", "properties": {"steps": {"type": "integer"}}});
        vec![
            spec("gallery", "Every kind of content item, and a structured result.", json!({"type": "object"}),
                Some(json!({"type": "object", "properties": {"items": {"type": "integer"}}, "required": ["items"]}))),
            spec("report", "Reports progress `steps` times, then answers.", steps.clone(), None),
            spec("ask_model", "Samples the caller's model `times` times with `prompt`.",
                json!({"type": "object", "properties": {"prompt": {"type": "string"}, "times": {"type": "integer"}}}), None),
            spec("ask_person", "Asks the person for their name.", json!({"type": "object"}), None),
            spec("ask_badly", "Asks the person with a schema elicitation does not allow.", json!({"type": "object"}), None),
            spec("ask_forever", "Asks the person until the host refuses.", json!({"type": "object"}), None),
            spec("flood", "Reports progress and logs `steps` times each.", steps, None),
            spec("wrong_structure", "Declares an output schema and returns no structured result.", json!({"type": "object"}),
                Some(json!({"type": "object"}))),
            spec("bad_structure", "Returns a structured result its own output schema refuses.", json!({"type": "object"}),
                Some(json!({"type": "object", "properties": {"items": {"type": "integer"}}}))),
        ]
    }

    fn call(name: String, arguments: String) -> Result<ToolResult, ToolError> {
        let arguments: Value = serde_json::from_str(&arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        match name.as_str() {
            "gallery" => Ok(ToolResult {
                content: vec![
                    Content::Text("a chart and a sound".into()),
                    Content::Image(Media { mime_type: "image/png".into(), data: vec![0x89, b'P', b'N', b'G'] }),
                    Content::Audio(Media { mime_type: "audio/wav".into(), data: b"RIFF".to_vec() }),
                    Content::Resource(EmbeddedResource {
                        uri: "test://notes.txt".into(),
                        mime_type: Some("text/plain".into()),
                        contents: ResourceContents::Text("the notes".into()),
                    }),
                ],
                structured: Some(json!({"items": 4}).to_string()),
            }),
            "report" => {
                let steps = number(&arguments, "steps");
                for step in 1..=steps {
                    host::progress(step as f64, Some(steps as f64), Some(&format!("step {step}")));
                }
                text(format!("reported {steps}"))
            }
            "ask_model" => {
                let prompt = arguments.get("prompt").and_then(Value::as_str).unwrap_or("hello").to_string();
                let mut answers = Vec::new();
                for _ in 0..number(&arguments, "times").max(1) {
                    let request = host::SamplingRequest {
                        messages: vec![SamplingMessage { role: Role::User, text: prompt.clone() }],
                        system_prompt: Some("Answer briefly.".into()),
                        max_tokens: 100,
                        temperature: None,
                        model_hints: vec![],
                    };
                    match host::sample(&request) {
                        Ok(answer) => answers.push(format!("{} ({})", answer.text, answer.model)),
                        Err(e) => {
                            answers.push(ask_error(e));
                            break;
                        }
                    }
                }
                text(answers.join("\n"))
            }
            "ask_person" => {
                let schema = json!({
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "Your name"}},
                    "required": ["name"]
                });
                match host::elicit("What is your name?", &schema.to_string()) {
                    Ok(ElicitAnswer::Accept(answer)) => text(format!("accepted: {answer}")),
                    Ok(ElicitAnswer::Decline) => text("declined"),
                    Ok(ElicitAnswer::Cancel) => text("cancelled"),
                    Err(e) => text(ask_error(e)),
                }
            }
            "ask_badly" => {
                let schema = json!({"type": "object", "properties": {"nested": {"type": "object"}}});
                match host::elicit("Nested?", &schema.to_string()) {
                    Ok(_) => text("answered"),
                    Err(e) => text(ask_error(e)),
                }
            }
            "ask_forever" => {
                let schema = json!({"type": "object", "properties": {"n": {"type": "number"}}});
                let mut asked = 0;
                loop {
                    match host::elicit("Again?", &schema.to_string()) {
                        Ok(_) => asked += 1,
                        Err(e) => return text(format!("asked {asked} times, then {}", ask_error(e))),
                    }
                }
            }
            "flood" => {
                let steps = number(&arguments, "steps");
                for step in 0..steps {
                    host::progress(step as f64, None, None);
                    host::log(LogLevel::Info, "flooding");
                }
                text(format!("flooded {steps}"))
            }
            "wrong_structure" => text("no structure"),
            "bad_structure" => Ok(ToolResult {
                content: vec![Content::Text("four".into())],
                structured: Some(json!({"items": "four"}).to_string()),
            }),
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

export!(Talker);
