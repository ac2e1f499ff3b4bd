//! Typed components: any component that is not of the `toolhost:plugin` world. Each exported
//! function is a tool; its arguments are converted from the call's JSON to component values
//! directly, and what it returns back to JSON (`crate::typed` holds the conversions and the
//! schemas made from WIT types).

use super::{Adapter, Answer, Call, Described, lifted_result_fuel};
use crate::state::CallState;
use crate::tools::ToolDescription;
use crate::typed::{self as types, TypedFunc};
use std::collections::HashMap;
use toolhost_contract::{BoxFuture, CallLimits, Content, RunError, ToolFailure, ToolResult};
use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre, Val};

/// A typed component, linked: its exports by id, and the tools they make.
pub(crate) struct Typed {
    pre: InstancePre<CallState>,
    funcs: HashMap<String, TypedFunc>,
    tools: Vec<ToolDescription>,
}

impl Typed {
    pub(crate) fn new(
        pre: InstancePre<CallState>,
        funcs: Vec<TypedFunc>,
        tools: Vec<ToolDescription>,
    ) -> Self {
        let funcs = funcs.into_iter().map(|f| (f.id.clone(), f)).collect();
        Typed { pre, funcs, tools }
    }
}

impl Adapter for Typed {
    fn describe<'a>(
        &'a self,
        _store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Described>> {
        Box::pin(async move { Ok(Described::tools(self.tools.clone())) })
    }

    /// A typed result is lifted into values of some 40 bytes each before it becomes JSON.
    fn result_fuel(&self, limits: &CallLimits) -> Option<usize> {
        Some(lifted_result_fuel(limits))
    }

    fn instantiate<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Instance>> {
        Box::pin(self.pre.instantiate_async(store))
    }

    fn call<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
        instance: Instance,
        call: Call<'a>,
    ) -> BoxFuture<'a, wasmtime::Result<Answer>> {
        Box::pin(async move {
            let refused = |message: String| {
                Ok(Answer::Refused(RunError::Tool(
                    ToolFailure::InvalidArguments(message),
                )))
            };
            let Some(func) = self.funcs.get(call.tool) else {
                return refused(format!("the component has no function `{}`", call.tool));
            };
            let params = match types::parameters(func, call.arguments) {
                Ok(params) => params,
                Err(e) => return refused(e.to_string()),
            };
            let function = instance
                .get_func(&mut *store, func.index)
                .ok_or_else(|| wasmtime::Error::msg("the export is not a function"))?;
            let mut results = vec![Val::Bool(false); usize::from(func.result.is_some())];
            function
                .call_async(&mut *store, &params, &mut results)
                .await?;
            let failed = |message| Answer::Refused(RunError::Tool(ToolFailure::Failed(message)));
            Ok(match types::outcome(results.pop()) {
                // The structured result is the text parsed again: the text is what counts.
                Ok(Ok(text)) => Answer::Returned {
                    counted: text.len(),
                    result: ToolResult {
                        structured: func.shape.and_then(|shape| shape.structured(&text)),
                        content: vec![Content::Text(text)],
                    },
                },
                Ok(Err(error)) => Answer::ToolError(ToolFailure::Failed(error)),
                Err(e) => failed(format!("the tool returned a value JSON cannot hold at {e}")),
            })
        })
    }
}
