//! The `toolhost:plugin@0.2.0` world: `describe()` lists the tools (with output schemas),
//! `call()` answers with content items and, for a tool that declared an output schema, a
//! structured result; a call may talk back to its caller (`crate::talk`). Written once with
//! 0.3.0's ([`super::plugin`]).

use super::{Adapter, Answer, Call, Described, lifted_result_fuel};
use crate::bindings::since_v0_2_0 as v2;
use crate::state::CallState;
use crate::tools::ToolDescription;
use toolhost_contract::{BoxFuture, CallLimits, RunError, ToolFailure};
use wasmtime::Store;
use wasmtime::component::Instance;

super::plugin::plugin_world!(V2, v2);
