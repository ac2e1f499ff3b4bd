//! Raw wasmtime, with the host's engine settings (`engine_config`) and nothing of the host
//! around it: the baselines of the pipeline benchmark.

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "../wit/toolhost-plugin-0.1.0",
    world: "plugin",
    exports: { default: async },
});

pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    http: wasmtime_wasi_http::WasiHttpCtx,
    hooks: NoNetwork,
}

impl State {
    fn new() -> Self {
        State {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            hooks: NoNetwork,
        }
    }
}

/// wasi:http linked as the host links it (a JavaScript component imports it); a request
/// is never made here.
pub struct NoNetwork;

type Sent = (
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
);

impl wasmtime_wasi_http::WasiHttpHooks for NoNetwork {
    fn send_request(
        &mut self,
        _request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn std::future::Future<Output = Result<Sent, wasmtime_wasi_http::Error>> + Send> {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

impl wasmtime_wasi_http::WasiHttpView for State {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl toolhost::plugin::host::Host for State {
    fn log(&mut self, _level: toolhost::plugin::host::LogLevel, _message: String) {}
}

impl toolhost::plugin::types::Host for State {}

/// An instance and its store, made ahead of a call.
pub struct Ready {
    store: Store<State>,
    plugin: Plugin,
}

pub struct Bare {
    engine: Engine,
    pre: PluginPre<State>,
    tool: String,
}

impl Bare {
    pub fn new(wasm: &str, tool: &str) -> Self {
        let engine = Engine::new(&::toolhost::runtime::engine_config(64, 0)).expect("engine");
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).expect("http");
        Plugin::add_to_linker::<_, HasSelf<State>>(&mut linker, |s| s).expect("host");
        let component = Component::from_file(&engine, wasm).expect("component");

        let pre =
            PluginPre::new(linker.instantiate_pre(&component).expect("pre")).expect("plugin pre");
        Bare {
            engine,
            pre,
            tool: tool.to_string(),
        }
    }

    /// A fresh instance in its own store, made and not called: a prepared instance, raw.
    pub async fn instantiate(&self) -> Ready {
        let mut store = Store::new(&self.engine, State::new());
        store.set_epoch_deadline(u64::MAX / 2);
        let plugin = (self.pre.instantiate_async(&mut store).await).expect("instantiate");
        Ready { store, plugin }
    }

    /// One call on `ready`, which is dropped after it as a call's instance is.
    pub async fn call_on(&self, ready: Ready, arguments: &str) -> String {
        self.call_and_keep(ready, arguments).await.0
    }

    /// One call on `ready`, which is given back to be dropped later.
    pub async fn call_and_keep(&self, ready: Ready, arguments: &str) -> (String, Ready) {
        let Ready { mut store, plugin } = ready;
        let result = plugin
            .toolhost_plugin_tool()
            .call_call(&mut store, &self.tool, arguments)
            .await
            .expect("call");
        let text = result.expect("the tool succeeds");
        (text, Ready { store, plugin })
    }

    /// A fresh instance in a fresh store, one call.
    pub async fn call(&self, arguments: &str) -> String {
        self.call_on(self.instantiate().await, arguments).await
    }
}

/// A typed component's export, called as raw wasmtime calls it: a fresh instance, one
/// call with values already made.
pub struct BareTyped {
    engine: Engine,
    pre: wasmtime::component::InstancePre<State>,
    export: wasmtime::component::ComponentExportIndex,
}

impl BareTyped {
    /// `path` is the export's name, or an interface's name and the function's.
    pub fn new(wasm: &str, path: &[&str]) -> Self {
        let engine = Engine::new(&::toolhost::runtime::engine_config(64, 0)).expect("engine");
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).expect("http");
        let component = Component::from_file(&engine, wasm).expect("component");

        let mut export = None;
        for name in path {
            export = Some(
                component
                    .get_export_index(export.as_ref(), name)
                    .expect("export"),
            );
        }
        let export = export.expect("a path");
        let pre = linker.instantiate_pre(&component).expect("pre");
        BareTyped {
            engine,
            pre,
            export,
        }
    }

    pub async fn call(&self, params: &[wasmtime::component::Val]) {
        let state = State::new();
        let mut store = Store::new(&self.engine, state);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
        let func = instance
            .get_func(&mut store, self.export)
            .expect("a function");
        // Every export benchmarked returns one value.
        let mut results = vec![wasmtime::component::Val::Bool(false)];
        func.call_async(&mut store, params, &mut results)
            .await
            .expect("call");
    }
}
