//! The fixture tools of the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! as one `toolhost:plugin@0.2.0` component: every kind of content item, a tool error, log
//! lines and progress during a call, sampling the client's model, asking the person (with
//! defaults and with every kind of enum), and a JSON Schema 2020-12 input schema.
//! `conformance/toolhost.toml` serves it; `toolhost --config conformance/toolhost.toml serve
//! --http ADDR` is what the suite runs against.

wit_bindgen::generate!({
    path: "../../wit/toolhost-plugin-0.2.0",
    world: "plugin",
});

mod media;

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolResult, ToolSpec};
use serde_json::{Value, json};
use toolhost::plugin::host::{self, AskError, ElicitAnswer, LogLevel, Role, SamplingMessage};
use toolhost::plugin::types::{Content, EmbeddedResource, Media, ResourceContents};

struct Conformance;

fn spec(name: &str, description: &str, input: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: input.to_string(),
        output_schema: None,
    }
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

fn text(text: impl Into<String>) -> Content {
    Content::Text(text.into())
}

fn result(content: Vec<Content>) -> Result<ToolResult, ToolError> {
    Ok(ToolResult {
        content,
        structured: None,
    })
}

fn image() -> Content {
    Content::Image(Media {
        mime_type: "image/png".into(),
        data: media::PNG.to_vec(),
    })
}

fn refused(error: AskError) -> ToolError {
    let message = match error {
        AskError::NotGranted(m)
        | AskError::Unsupported(m)
        | AskError::LimitReached(m)
        | AskError::Failed(m) => m,
    };
    ToolError::Failed(message)
}

/// Asks the person with `schema` and says what they answered.
fn elicit(message: &str, schema: Value) -> Result<ToolResult, ToolError> {
    let answer = host::elicit(message, &schema.to_string()).map_err(refused)?;
    let said = match answer {
        ElicitAnswer::Accept(content) => format!("User response: action=accept, content={content}"),
        ElicitAnswer::Decline => "User response: action=decline".into(),
        ElicitAnswer::Cancel => "User response: action=cancel".into(),
    };
    result(vec![text(said)])
}

impl Guest for Conformance {
    fn describe() -> Vec<ToolSpec> {
        vec![
            spec("test_simple_text", "Returns simple text content.", no_arguments()),
            spec("test_image_content", "Returns an image (PNG).", no_arguments()),
            spec("test_audio_content", "Returns audio (WAV).", no_arguments()),
            spec("test_embedded_resource", "Returns an embedded text resource.", no_arguments()),
            spec(
                "test_multiple_content_types",
                "Returns text, an image and an embedded resource.",
                no_arguments(),
            ),
            spec("test_tool_with_logging", "Logs three messages while it runs.", no_arguments()),
            spec("test_error_handling", "Always fails with a tool error.", no_arguments()),
            spec("test_tool_with_progress", "Reports progress three times.", no_arguments()),
            spec(
                "test_sampling",
                "Asks the client's model to answer a prompt.",
                json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
            ),
            spec(
                "test_elicitation",
                "Asks the person for a username and an email address.",
                json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
            ),
            spec(
                "test_elicitation_sep1034_defaults",
                "Asks the person with a default for every primitive type (SEP-1034).",
                no_arguments(),
            ),
            spec(
                "test_elicitation_sep1330_enums",
                "Asks the person with every kind of enum (SEP-1330).",
                no_arguments(),
            ),
            spec("test_reconnection", "Answers after a moment (SSE polling, SEP-1699).", no_arguments()),
            spec(
                "json_schema_2020_12_tool",
                "Takes arguments described with JSON Schema 2020-12 keywords (SEP-1613).",
                json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {
                        "address": {
                            "type": "object",
                            "properties": {
                                "street": {"type": "string"},
                                "city": {"type": "string"}
                            }
                        }
                    },
                    "properties": {
                        "name": {"type": "string"},
                        "address": {"$ref": "#/$defs/address"}
                    },
                    "additionalProperties": false
                }),
            ),
        ]
    }

    fn call(name: String, arguments: String) -> Result<ToolResult, ToolError> {
        let arguments: Value = serde_json::from_str(&arguments)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        match name.as_str() {
            "test_simple_text" => result(vec![text("This is a simple text response for testing.")]),
            "test_image_content" => result(vec![image()]),
            "test_audio_content" => result(vec![Content::Audio(Media {
                mime_type: "audio/wav".into(),
                data: media::WAV.to_vec(),
            })]),
            "test_embedded_resource" => result(vec![Content::Resource(EmbeddedResource {
                uri: "test://embedded-resource".into(),
                mime_type: Some("text/plain".into()),
                contents: ResourceContents::Text("This is an embedded resource content.".into()),
            })]),
            "test_multiple_content_types" => result(vec![
                text("Multiple content types test:"),
                image(),
                Content::Resource(EmbeddedResource {
                    uri: "test://mixed-content-resource".into(),
                    mime_type: Some("application/json".into()),
                    contents: ResourceContents::Text(json!({"test": "data", "value": 123}).to_string()),
                }),
            ]),
            "test_tool_with_logging" => {
                for message in ["Tool execution started", "Tool processing data", "Tool execution completed"] {
                    host::log(LogLevel::Info, message);
                }
                result(vec![text("Tool with logging executed successfully")])
            }
            "test_error_handling" => Err(ToolError::Failed(
                "This tool intentionally returns an error for testing".into(),
            )),
            "test_tool_with_progress" => {
                for done in [0.0, 50.0, 100.0] {
                    host::progress(done, Some(100.0), Some(&format!("{done}% done")));
                }
                result(vec![text("Progress reported: 0, 50, 100 of 100")])
            }
            "test_sampling" => {
                let prompt = arguments["prompt"].as_str().unwrap_or_default();
                let request = host::SamplingRequest {
                    messages: vec![SamplingMessage {
                        role: Role::User,
                        text: prompt.into(),
                    }],
                    system_prompt: None,
                    max_tokens: 100,
                    temperature: None,
                    model_hints: vec![],
                };
                let answer = host::sample(&request).map_err(refused)?;
                result(vec![text(format!("LLM response: {}", answer.text))])
            }
            "test_elicitation" => elicit(
                arguments["message"].as_str().unwrap_or("Please provide your information"),
                json!({
                    "type": "object",
                    "properties": {
                        "username": {"type": "string", "description": "Your username"},
                        "email": {"type": "string", "description": "Your email address"}
                    },
                    "required": ["username", "email"]
                }),
            ),
            "test_elicitation_sep1034_defaults" => elicit(
                "Please review and update the form fields with defaults",
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {
                            "type": "string",
                            "description": "User status",
                            "enum": ["active", "inactive", "pending"],
                            "default": "active"
                        },
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    }
                }),
            ),
            "test_elicitation_sep1330_enums" => elicit(
                "Please select options from the enum fields",
                json!({
                    "type": "object",
                    "properties": {
                        "untitledSingle": {
                            "type": "string",
                            "description": "Select one option",
                            "enum": ["option1", "option2", "option3"]
                        },
                        "titledSingle": {
                            "type": "string",
                            "description": "Select one option with titles",
                            "oneOf": [
                                {"const": "value1", "title": "First Option"},
                                {"const": "value2", "title": "Second Option"},
                                {"const": "value3", "title": "Third Option"}
                            ]
                        },
                        "legacyEnum": {
                            "type": "string",
                            "description": "Select one option (legacy)",
                            "enum": ["opt1", "opt2", "opt3"],
                            "enumNames": ["Option One", "Option Two", "Option Three"]
                        },
                        "untitledMulti": {
                            "type": "array",
                            "description": "Select multiple options",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
                        },
                        "titledMulti": {
                            "type": "array",
                            "description": "Select multiple options with titles",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {
                                "anyOf": [
                                    {"const": "value1", "title": "First Choice"},
                                    {"const": "value2", "title": "Second Choice"},
                                    {"const": "value3", "title": "Third Choice"}
                                ]
                            }
                        }
                    },
                    "required": []
                }),
            ),
            "test_reconnection" => {
                // Long enough for a client to see the stream open, short of any timeout.
                let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
                while std::time::Instant::now() < until {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                result(vec![text("Reconnection test completed")])
            }
            "json_schema_2020_12_tool" => result(vec![text(format!("Received: {arguments}"))]),
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

export!(Conformance);
