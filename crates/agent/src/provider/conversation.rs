//! The canonical conversation: what the providers map to and from their wire formats, and
//! what an agent run keeps (and a caller may save as JSON and continue later). It lives with
//! the providers, the lowest layer that speaks it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A conversation: an optional system prompt and its messages, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default)]
    pub messages: Vec<Message>,
}

impl Conversation {
    pub fn new(system: Option<String>) -> Self {
        Conversation {
            system,
            messages: Vec::new(),
        }
    }

    /// Adds the user's words.
    pub fn push_user(&mut self, text: impl Into<String>) {
        self.messages.push(Message::User { text: text.into() });
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// What the user said.
    User { text: String },
    /// What the model said, and the tools it called, in its order.
    Assistant {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        calls: Vec<Invocation>,
    },
    /// The results of one assistant message's calls, in the calls' order.
    Results { results: Vec<ToolResult> },
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invocation {
    /// The provider's id, or one the loop generated when the provider gave none.
    pub id: String,
    pub name: String,
    /// An object, or a string holding the JSON text the model wrote (checked when it runs).
    pub arguments: Value,
    /// Set when the provider could not make out the call (e.g. a `<tool>` block that does
    /// not parse); the model gets this back as an error and nothing runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl Invocation {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Invocation {
            id: id.into(),
            name: name.into(),
            arguments,
            problem: None,
        }
    }

    /// The arguments as JSON text, as OpenAI's wire format carries them.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }

    /// The arguments as an object, as Anthropic's wire format carries them. Text that is not
    /// a JSON object is kept under `invalid_json` (the model was told it was malformed).
    pub fn arguments_object(&self) -> Value {
        match &self.arguments {
            Value::Object(_) => self.arguments.clone(),
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(value @ Value::Object(_)) => value,
                _ if text.trim().is_empty() => Value::Object(Default::default()),
                _ => serde_json::json!({ "invalid_json": text }),
            },
            other => serde_json::json!({ "invalid_json": other.to_string() }),
        }
    }
}

/// The result of one call, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
}
