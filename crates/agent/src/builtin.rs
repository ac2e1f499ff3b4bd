//! The loop's built-in tools: `task_completion`, `ask_question` and `converse`. They run in
//! the loop, not in a sandbox, and each ends the run.

use super::event::Ending;
use crate::provider::ToolSpec;
use serde_json::{Value, json};

/// A built-in tool: its name, the argument that carries its text, and how it ends a run.
pub(crate) struct Builtin {
    pub(crate) name: &'static str,
    field: &'static str,
    pub(crate) ending: Ending,
    description: &'static str,
    field_description: &'static str,
}

pub(crate) const BUILTINS: [Builtin; 3] = [
    Builtin {
        name: "task_completion",
        field: "result",
        ending: Ending::Completed,
        description: "Call this when the task is done. `result` is your final answer to the \
                      user; nothing runs after it.",
        field_description: "The final answer for the user.",
    },
    Builtin {
        name: "ask_question",
        field: "question",
        ending: Ending::Question,
        description: "Ask the user a question when you cannot go on without their answer. The \
                      run pauses until they reply.",
        field_description: "The question for the user.",
    },
    Builtin {
        name: "converse",
        field: "message",
        ending: Ending::Converse,
        description: "Say something to the user in plain conversation when no tool is needed. \
                      Ends this turn; the user may reply.",
        field_description: "What to say to the user.",
    },
];

/// The built-in named `name`.
pub(crate) fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

impl Builtin {
    pub(crate) fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_string(),
            description: self.description.to_string(),
            parameters: json!({
                "type": "object",
                "properties": {
                    self.field: { "type": "string", "description": self.field_description }
                },
                "required": [self.field],
                "additionalProperties": false,
            }),
        }
    }

    /// The text argument, or the error the model gets back.
    pub(crate) fn text(&self, arguments: &Value) -> Result<String, String> {
        let parsed;
        let arguments = match arguments {
            Value::String(text) => {
                parsed = serde_json::from_str::<Value>(text)
                    .map_err(|e| format!("the arguments are not valid JSON: {e}"))?;
                &parsed
            }
            other => other,
        };
        arguments
            .get(self.field)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "`{}` needs a string argument `{}` (at /{})",
                    self.name, self.field, self.field
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_comes_from_an_object_or_a_string_and_is_required() {
        let done = find("task_completion").unwrap();
        assert_eq!(done.text(&json!({"result": "42"})).unwrap(), "42");
        assert_eq!(done.text(&json!("{\"result\": \"42\"}")).unwrap(), "42");
        assert!(done.text(&json!({})).unwrap_err().contains("/result"));
        assert!(
            done.text(&json!("{oops"))
                .unwrap_err()
                .contains("not valid JSON")
        );
    }
}
