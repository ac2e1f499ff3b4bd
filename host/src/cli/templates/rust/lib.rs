//! {{name}}: a toolhost plugin (the toolhost:plugin@0.1.0 world, in wit/). `describe` lists
//! the tools, `call` runs one; the arguments already passed the tool's schema.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};

struct Plugin;

impl Guest for Plugin {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "{{tool}}".into(),
            description: "Greet someone by name.".into(),
            input_schema: r#"{"type":"object","required":["name"],"additionalProperties":false,
                              "properties":{"name":{"type":"string","minLength":1}}}"#
                .into(),
        }]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        let args: serde_json::Value = serde_json::from_str(&arguments)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        match name.as_str() {
            "{{tool}}" => Ok(format!("Hello, {}!", args["name"].as_str().unwrap_or("stranger"))),
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

export!(Plugin);
