//! Bindings for `toolhost:plugin@0.2.0` (`wit/toolhost-plugin-0.2.0`): results of content
//! items, and the `host` functions a call uses to talk back to its caller.

wasmtime::component::bindgen!({
    path: "../../wit/toolhost-plugin-0.2.0",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
});

pub(crate) use self::exports::toolhost::plugin::tool::ToolError;
pub(crate) use self::toolhost::plugin::host;
pub(crate) use self::toolhost::plugin::types;

use toolhost_contract::content;

super::content_conversions!();
