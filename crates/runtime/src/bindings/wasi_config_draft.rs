//! `wasi:config/store@0.2.0-draft` (`wit/wasi-config-0.2.0-draft`), which jco's components
//! import; the same interface as the `0.2.0-rc.1` that wasmtime-wasi-config provides. A call's
//! answers are `crate::settings`'.

wasmtime::component::bindgen!({
    path: "../../wit/wasi-config-0.2.0-draft",
    world: "imports",
    imports: { default: trappable },
});
