//! The `toolhost:plugin@0.1.0` world: `describe()` lists the tools, `call()` answers with one
//! text or the tool's error.

use super::{Adapter, Answer, Call};
use crate::bindings::since_v0_1_0::{PluginPre, ToolError};
use crate::state::CallState;
use crate::tools::ToolDescription;
use toolhost_contract::{BoxFuture, CallLimits, ToolFailure, ToolResult};
use wasmtime::Store;

/// A 0.1.0 component, linked.
pub(crate) struct V1(pub(crate) PluginPre<CallState>);

impl Adapter for V1 {
    fn describe<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Vec<ToolDescription>>> {
        Box::pin(async move {
            let plugin = self.0.instantiate_async(&mut *store).await?;
            let specs = plugin
                .toolhost_plugin_tool()
                .call_describe(&mut *store)
                .await?;
            Ok(specs
                .into_iter()
                .map(|s| ToolDescription::declared(s.name, s.description, s.input_schema, None))
                .collect())
        })
    }

    fn result_fuel(&self, _limits: &CallLimits) -> Option<usize> {
        None
    }

    fn call<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
        call: Call<'a>,
    ) -> BoxFuture<'a, wasmtime::Result<Answer>> {
        Box::pin(async move {
            let arguments = call.arguments.to_string();
            let plugin = self.0.instantiate_async(&mut *store).await?;
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
