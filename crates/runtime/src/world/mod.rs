//! One adapter per kind of component the host runs: the `toolhost:plugin@0.1.0` world
//! ([`v1`]), `@0.2.0` ([`v2`]), `@0.3.0` ([`v3`], which also offers prompts and resources)
//! and typed components ([`typed`]). Each implements [`Adapter`] on its own pre-instantiated
//! component: how it describes its tools, how it is instantiated, and how one call (or one
//! prompt or resource of 0.3.0) runs on a fresh instance. Instantiation is a step
//! of its own so that it can happen before the call arrives (`crate::prepared`). Everything
//! around that (the store, its limits and deadline, the sandbox, captured output, what a trap
//! means) is the runtime's, written once, whichever world runs.

mod plugin;
pub(crate) mod typed;
pub(crate) mod v1;
pub(crate) mod v2;
pub(crate) mod v3;

use crate::offers::{OfferRequest, Offered, Offers};
use crate::state::CallState;
use crate::tools::ToolDescription;
use serde_json::Value;
use toolhost_contract::{BoxFuture, CallLimits, RunError, ToolFailure, ToolResult};
use wasmtime::Store;
use wasmtime::component::Instance;

/// The hostcall fuel of a result per byte of its `max-output-bytes`: a 0.2.0 result's items
/// and a typed result are lifted by wasmtime (into values of some 40 bytes each, for a typed
/// one) before the host can count them, so what a guest can make the host hold stays a fixed
/// multiple of what the call may return.
const RESULT_FUEL_PER_BYTE: usize = 16;

/// The hostcall fuel of a result that wasmtime lifts before the host counts it.
fn lifted_result_fuel(limits: &CallLimits) -> usize {
    limits
        .max_output_bytes
        .saturating_mul(RESULT_FUEL_PER_BYTE)
        .saturating_add(1 << 20)
}

/// One kind of component, ready to instantiate.
pub(crate) trait Adapter: Send + Sync {
    /// The tools the component offers, and its prompts and resources. The plugin worlds run
    /// their `describe()` (and 0.3.0 its lists) in `store` (fresh, under the load's limits);
    /// a typed component's tools are its exports, read from its types when it was linked, so
    /// nothing runs.
    fn describe<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Described>>;

    /// The most wasmtime may copy out of the guest as this call's result, as hostcall fuel;
    /// `None` when the result is one string, counted once it is in the host.
    fn result_fuel(&self, limits: &CallLimits) -> Option<usize>;

    /// Instantiates the component in `store` (its start-up code runs): nothing of any call
    /// is in the store yet. An `Err` is a trap or a failed instantiation.
    fn instantiate<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
    ) -> BoxFuture<'a, wasmtime::Result<Instance>>;

    /// Calls one tool on `instance`, made by [`Adapter::instantiate`] in `store` and never
    /// called before. An `Err` is a trap, which the runtime classifies.
    fn call<'a>(
        &'a self,
        store: &'a mut Store<CallState>,
        instance: Instance,
        call: Call<'a>,
    ) -> BoxFuture<'a, wasmtime::Result<Answer>>;

    /// Renders a prompt or reads a resource on `instance`, made by [`Adapter::instantiate`]
    /// in `store` and never called before. Only a world with offers lists any, so the others
    /// are never asked; they refuse.
    fn offer<'a>(
        &'a self,
        _store: &'a mut Store<CallState>,
        _instance: Instance,
        _request: OfferRequest<'a>,
    ) -> BoxFuture<'a, wasmtime::Result<Result<Offered, RunError>>> {
        Box::pin(async {
            Ok(Err(RunError::Tool(ToolFailure::Failed(
                "this component offers no prompts or resources".into(),
            ))))
        })
    }
}

/// What a component offers, as its load found it.
pub(crate) struct Described {
    pub tools: Vec<ToolDescription>,
    pub offers: Offers,
}

impl Described {
    /// Tools only: every world before 0.3.0.
    pub(crate) fn tools(tools: Vec<ToolDescription>) -> Self {
        Described {
            tools,
            offers: Offers::default(),
        }
    }
}

/// One call of a tool, as a world gets it.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    /// The tool as the component names it (an export's id, for a typed component).
    pub tool: &'a str,
    pub arguments: &'a Value,
    pub limits: CallLimits,
    /// Whether the tool declared an output schema (it must then return structured content).
    pub declares_output: bool,
}

/// What a call came back with.
pub(crate) enum Answer {
    /// What the tool returned, and how many of its bytes count against `max-output-bytes`.
    Returned { result: ToolResult, counted: usize },
    /// The tool's own error: it ran and said why it could not (when a network request of it
    /// was refused, the refusal is the better answer).
    ToolError(ToolFailure),
    /// The host refuses the call or what came back: arguments a typed export cannot take, a
    /// result that breaks the contract or is over the limit.
    Refused(RunError),
}

impl Answer {
    /// The answer to a call that ended with the tool's own error.
    pub(crate) fn is_tool_error(&self) -> bool {
        matches!(self, Answer::ToolError(_))
    }

    /// A result whose every byte counts.
    fn returned(result: ToolResult) -> Self {
        let counted = result.bytes();
        Answer::Returned { result, counted }
    }
}
