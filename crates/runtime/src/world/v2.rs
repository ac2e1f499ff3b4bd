//! The `toolhost:plugin@0.2.0` world: `describe()` lists the tools (with output schemas),
//! `call()` answers with content items and, for a tool that declared an output schema, a
//! structured result; a call may talk back to its caller (`crate::talk`).

use super::{Adapter, Answer, Call, lifted_result_fuel};
use crate::bindings::since_v0_2_0::{self as v2, PluginIndices, PluginPre};
use crate::state::CallState;
use crate::tools::ToolDescription;
use toolhost_contract::{BoxFuture, CallLimits, RunError, ToolFailure};
use wasmtime::Store;
use wasmtime::component::Instance;

/// A 0.2.0 component, linked, and where its exports are in an instance.
pub(crate) struct V2 {
    pre: PluginPre<CallState>,
    exports: PluginIndices,
}

impl V2 {
    pub(crate) fn new(pre: PluginPre<CallState>) -> wasmtime::Result<Self> {
        let exports = PluginIndices::new(pre.instance_pre())?;
        Ok(V2 { pre, exports })
    }
}

impl Adapter for V2 {
    fn describe<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Vec<ToolDescription>>> {
        Box::pin(async move {
            let plugin = self.pre.instantiate_async(&mut *store).await?;
            let specs = plugin
                .toolhost_plugin_tool()
                .call_describe(&mut *store)
                .await?;
            Ok(specs
                .into_iter()
                .map(|s| {
                    ToolDescription::declared(
                        s.name,
                        s.description,
                        s.input_schema,
                        s.output_schema,
                    )
                })
                .collect())
        })
    }

    /// Its items are lists of bytes that wasmtime lifts before the host can count them.
    fn result_fuel(&self, limits: &CallLimits) -> Option<usize> {
        Some(lifted_result_fuel(limits))
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
            let result = match tool.call_call(&mut *store, call.tool, &arguments).await? {
                Ok(result) => result,
                Err(v2::ToolError::InvalidArguments(m)) => {
                    return Ok(Answer::ToolError(ToolFailure::InvalidArguments(m)));
                }
                Err(v2::ToolError::Failed(m)) => {
                    return Ok(Answer::ToolError(ToolFailure::Failed(m)));
                }
            };
            // Before parsing: parsed JSON takes many times its text's memory.
            let structured = result.structured.as_ref().map_or(0, String::len);
            let limit = call.limits.max_output_bytes;
            if structured > limit {
                return Ok(Answer::Refused(RunError::OutputLimit {
                    bytes: structured,
                    limit,
                }));
            }
            Ok(match v2::result(result, call.declares_output) {
                Ok(result) => Answer::returned(result),
                Err(message) => Answer::Refused(RunError::Tool(ToolFailure::Failed(message))),
            })
        })
    }
}
