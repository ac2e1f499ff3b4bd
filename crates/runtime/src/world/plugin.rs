//! What the `toolhost:plugin@0.2.0` and `@0.3.0` worlds share, written once: `describe()`
//! lists the tools (with output schemas), `call()` answers with content items and, for a
//! tool that declared an output schema, a structured result. wasmtime makes distinct types
//! of each version's bindings, so this is a macro that [`super::v2`] and [`super::v3`]
//! instantiate; 0.3.0 adds its prompts and resources (`offers`) to the adapter.

/// The adapter `$name` of the plugin world whose bindings are the module `$v`. With
/// `offers`, the world lists prompts and resources at load (`$name::offers_of`) and answers
/// them (`$name::offer_on`), both written beside the invocation.
macro_rules! plugin_world {
    ($name:ident, $v:ident) => {
        $crate::world::plugin::plugin_world!(@common $name, $v, {
            fn describe<'a>(
                &'a self,
                store: &'a mut Store<CallState>,
            ) -> BoxFuture<'a, wasmtime::Result<Described>> {
                Box::pin(async move { Ok(Described::tools(self.described(store).await?.1)) })
            }
        });
    };
    ($name:ident, $v:ident, offers) => {
        $crate::world::plugin::plugin_world!(@common $name, $v, {
            fn describe<'a>(
                &'a self,
                store: &'a mut Store<CallState>,
            ) -> BoxFuture<'a, wasmtime::Result<Described>> {
                Box::pin(async move {
                    let (plugin, tools) = self.described(&mut *store).await?;
                    let offers = self.offers_of(store, &plugin).await?;
                    Ok(Described { tools, offers })
                })
            }

            fn offer<'a>(
                &'a self,
                store: &'a mut Store<CallState>,
                instance: Instance,
                request: OfferRequest<'a>,
            ) -> BoxFuture<'a, wasmtime::Result<Result<Offered, RunError>>> {
                Box::pin(self.offer_on(store, instance, request))
            }
        });
    };
    (@common $name:ident, $v:ident, { $($methods:tt)* }) => {
        /// A component of this world, linked, and where its exports are in an instance.
        pub(crate) struct $name {
            pre: $v::PluginPre<CallState>,
            exports: $v::PluginIndices,
        }

        impl $name {
            pub(crate) fn new(pre: $v::PluginPre<CallState>) -> wasmtime::Result<Self> {
                let exports = $v::PluginIndices::new(pre.instance_pre())?;
                Ok($name { pre, exports })
            }

            /// A fresh instance in `store`, and the tools its `describe()` lists.
            async fn described(
                &self,
                store: &mut Store<CallState>,
            ) -> wasmtime::Result<($v::Plugin, Vec<ToolDescription>)> {
                let plugin = self.pre.instantiate_async(&mut *store).await?;
                let specs = plugin
                    .toolhost_plugin_tool()
                    .call_describe(&mut *store)
                    .await?;
                let tools = specs
                    .into_iter()
                    .map(|s| {
                        ToolDescription::declared(
                            s.name,
                            s.description,
                            s.input_schema,
                            s.output_schema,
                        )
                    })
                    .collect();
                Ok((plugin, tools))
            }

            async fn call_tool(
                &self,
                store: &mut Store<CallState>,
                instance: Instance,
                call: Call<'_>,
            ) -> wasmtime::Result<Answer> {
                let arguments = call.arguments.to_string();
                let plugin = self.exports.load(&mut *store, &instance)?;
                let tool = plugin.toolhost_plugin_tool();
                let result = match tool.call_call(&mut *store, call.tool, &arguments).await? {
                    Ok(result) => result,
                    Err($v::ToolError::InvalidArguments(m)) => {
                        return Ok(Answer::ToolError(ToolFailure::InvalidArguments(m)));
                    }
                    Err($v::ToolError::Failed(m)) => {
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
                Ok(match $v::result(result, call.declares_output) {
                    Ok(result) => Answer::returned(result),
                    Err(message) => Answer::Refused(RunError::Tool(ToolFailure::Failed(message))),
                })
            }
        }

        impl Adapter for $name {
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
                Box::pin(self.call_tool(store, instance, call))
            }

            $($methods)*
        }
    };
}
pub(crate) use plugin_world;
