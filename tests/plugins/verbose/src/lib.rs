//! A component that describes few tools with enormous descriptions (20 of 1 MiB each): more
//! than the host keeps of one component; its load must be refused with the bound named.

wit_bindgen::generate!({
    path: "../../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};

struct Verbose;

impl Guest for Verbose {
    fn describe() -> Vec<ToolSpec> {
        (0..20)
            .map(|n| ToolSpec {
                name: format!("tool_{n}"),
                description: "x".repeat(1 << 20),
                input_schema: r#"{"type":"object"}"#.into(),
            })
            .collect()
    }

    fn call(_name: String, _arguments: String) -> Result<String, ToolError> {
        Err(ToolError::Failed("never loaded".into()))
    }
}

export!(Verbose);
