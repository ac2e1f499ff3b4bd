//! The smallest useful plugin, written against the WIT text of DESIGN.md section 3 pasted inline
//! rather than against `wit/`: it proves that a third party with only that text can build a
//! component the host loads. It is also the "trivial tool" of the benchmarks.

wit_bindgen::generate!({
    inline: r#"
package toolhost:plugin@0.1.0;

interface types {
    record tool-spec {
        name: string,
        description: string,
        input-schema: string,
    }

    variant tool-error {
        invalid-arguments(string),
        failed(string),
    }
}

interface tool {
    use types.{tool-spec, tool-error};
    describe: func() -> list<tool-spec>;
    call: func(name: string, arguments: string) -> result<string, tool-error>;
}

interface host {
    enum log-level { trace, debug, info, warn, error }
    log: func(level: log-level, message: string);
}

world plugin {
    import host;
    export tool;
}
"#,
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};

struct Echo;

impl Guest for Echo {
    fn describe() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "echo".into(),
                description: "Return the arguments exactly as given.".into(),
                input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":true}"#.into(),
            },
            ToolSpec {
                name: "reject".into(),
                description: "Always refuses its arguments (a tool-error of the plugin's own).".into(),
                input_schema: r#"{"type":"object"}"#.into(),
            },
        ]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        match name.as_str() {
            "echo" => Ok(arguments),
            "reject" => {
                toolhost::plugin::host::log(
                    toolhost::plugin::host::LogLevel::Info,
                    "reject was called",
                );
                Err(ToolError::InvalidArguments("reject accepts nothing".into()))
            }
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

export!(Echo);
