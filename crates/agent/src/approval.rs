//! Approvals: `destructive` invokers run only when an [`Approver`] says yes. The CLI asks the
//! person at the terminal; a non-interactive caller uses an [`ApprovalPolicy`].

use super::talk::ElicitRequest;
use serde_json::Value;
use toolhost_contract::BoxFuture;
use toolhost_contract::{AskError, ElicitAnswer};
use toolhost_core::catalog::VersionHash;
use toolhost_core::invoke::CallPolicy;

/// A call that needs a yes before it runs. What is approved is exactly what runs: this
/// version of the tool, with these arguments.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// The model's id of the call: what a person's answer names.
    pub call_id: String,
    pub tool: String,
    pub ensemble: String,
    pub description: String,
    pub arguments: Value,
    /// The tool's version (component and descriptor) that runs if the call is approved.
    pub version: VersionHash,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    Approved,
    /// Refused; the reason goes back to the model.
    Refused(String),
}

/// `request`'s approval, waited for in its span when the run is traced (`approval`: the
/// tool, and `toolhost.approved` once answered): how long a person took is part of the trace.
pub(crate) async fn awaited(approver: &dyn Approver, request: &ApprovalRequest) -> Approval {
    use toolhost_core::trace::{KeyValue, SpanBuilder};
    let span = toolhost_core::trace::step(|| {
        SpanBuilder::from_name("approval")
            .with_attributes([KeyValue::new("gen_ai.tool.name", request.tool.clone())])
    });
    let approval = span.carry(approver.approve(request)).await;
    span.set("toolhost.approved", approval == Approval::Approved);
    approval
}

/// Decides whether a destructive call may run. Called once per call, one at a time. Also the
/// one who asks the person when a tool asks for input during a call (elicitation).
pub trait Approver: Send + Sync {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval>;

    /// Asks the person what a tool wants to know. By default nobody can be asked.
    fn elicit<'a>(
        &'a self,
        request: &'a ElicitRequest,
    ) -> BoxFuture<'a, Result<ElicitAnswer, AskError>> {
        let _ = request;
        Box::pin(std::future::ready(Err(AskError::Unsupported(
            "this chat has nobody to ask".into(),
        ))))
    }
}

/// A fixed answer for callers that cannot ask anyone: approve the tools that `approved`
/// permits (names, or prefixes ending in `*`), refuse the rest.
#[derive(Debug, Clone)]
pub struct ApprovalPolicy {
    pub approved: CallPolicy,
}

impl ApprovalPolicy {
    /// Approves every call (`toolhost chat --yes`).
    pub fn approve_all() -> Self {
        ApprovalPolicy {
            approved: CallPolicy::default(),
        }
    }

    /// Refuses every destructive call.
    pub fn refuse_all() -> Self {
        Self::approve_only(Vec::new())
    }

    /// Approves the tools matching `patterns`, refuses the others.
    pub fn approve_only(patterns: Vec<String>) -> Self {
        ApprovalPolicy {
            approved: CallPolicy {
                allow: Some(patterns),
                deny: Vec::new(),
            },
        }
    }

    /// The policy's answer for `tool`, without the future.
    pub fn decide(&self, tool: &str) -> Approval {
        if self.approved.permits(tool) {
            Approval::Approved
        } else {
            Approval::Refused(format!(
                "`{tool}` is destructive and this run's approval policy does not allow it; \
                 do not retry it, tell the user what you wanted to do instead"
            ))
        }
    }
}

impl Approver for ApprovalPolicy {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move { self.decide(&request.tool) })
    }
}
