//! Bindings for `toolhost:plugin@0.1.0` (`wit/toolhost-plugin-0.1.0`).

wasmtime::component::bindgen!({
    path: "../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
    exports: { default: async },
});

pub(crate) use self::exports::toolhost::plugin::tool::ToolError;
pub(crate) use self::toolhost::plugin::host::{Host, LogLevel};
pub(crate) use self::toolhost::plugin::types::Host as TypesHost;
