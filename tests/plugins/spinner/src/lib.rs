//! A component whose `describe()` never returns: loading it must end at the host's describe
//! deadline, and cost nothing at the next reload.

wit_bindgen::generate!({
    path: "../../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};

struct Spinner;

impl Guest for Spinner {
    fn describe() -> Vec<ToolSpec> {
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    fn call(_name: String, _arguments: String) -> Result<String, ToolError> {
        Err(ToolError::Failed("never described".into()))
    }
}

export!(Spinner);
