//! The `toolhost:plugin@0.1.0` world: `describe()` lists the tools, `call()` answers with one
//! text or the tool's error.

use super::{Adapter, Answer, Call, Described};
use crate::bindings::since_v0_1_0::{PluginIndices, PluginPre, ToolError};
use crate::state::CallState;
use crate::tools::ToolDescription;
use toolhost_contract::{BoxFuture, CallLimits, ToolFailure, ToolResult};
use wasmtime::Store;
use wasmtime::component::Instance;

/// A 0.1.0 component, linked, and where its exports are in an instance.
pub(crate) struct V1 {
    pre: PluginPre<CallState>,
    exports: PluginIndices,
}

impl V1 {
    pub(crate) fn new(pre: PluginPre<CallState>) -> wasmtime::Result<Self> {
        let exports = PluginIndices::new(pre.instance_pre())?;
        Ok(V1 { pre, exports })
    }
}

impl Adapter for V1 {
    fn describe<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Described>> {
        Box::pin(async move {
            let plugin = self.pre.instantiate_async(&mut *store).await?;
            let specs = plugin
                .toolhost_plugin_tool()
                .call_describe(&mut *store)
                .await?;
            Ok(Described::tools(
                specs
                    .into_iter()
                    .map(|s| ToolDescription::declared(s.name, s.description, s.input_schema, None))
                    .collect(),
            ))
        })
    }

    fn result_fuel(&self, _limits: &CallLimits) -> Option<usize> {
        None
    }

    fn instantiate<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Instance>> {
        Box::pin(self.pre.instance_pre().instantiate_async(store))
    }

    fn call<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
        instance: Instance,
        call: Call<'a>,
    ) -> BoxFuture<'a, wasmtime::Result<Answer>> {
        Box::pin(async move {
            let arguments = call.arguments.to_string();
            let plugin = self.exports.load(&mut *store, &instance)?;
            let tool = plugin.toolhost_plugin_tool();
            Ok(
                match tool.call_call(&mut *store, call.tool, &arguments).await? {
                    Ok(text) => Answer::returned(ToolResult::text_only(text)),
                    Err(ToolError::InvalidArguments(m)) => {
                        Answer::ToolError(ToolFailure::InvalidArguments(m))
                    }
                    Err(ToolError::Failed(m)) => Answer::ToolError(ToolFailure::Failed(m)),
                },
            )
        })
    }
}
