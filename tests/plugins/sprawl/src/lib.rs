//! A component that describes more tools than the host keeps of one component (20,000 small
//! ones): its load must be refused with the bound named, and the host must go on serving.

wit_bindgen::generate!({
    path: "../../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};

struct Sprawl;

impl Guest for Sprawl {
    fn describe() -> Vec<ToolSpec> {
        (0..20_000)
            .map(|n| ToolSpec {
                name: format!("tool_{n}"),
                description: "One of very many.".into(),
                input_schema: r#"{"type":"object"}"#.into(),
            })
            .collect()
    }

    fn call(_name: String, _arguments: String) -> Result<String, ToolError> {
        Err(ToolError::Failed("never loaded".into()))
    }
}

export!(Sprawl);
