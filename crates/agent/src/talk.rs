//! The way back from a tool to the agent loop that called it: sampling goes to the run's own
//! provider (the model the conversation uses, without tools, with the request's messages
//! alone: nothing of the conversation is shared with the tool), and elicitation to the
//! run's [`Approver`], which asks the person (at the terminal, or on the web chat's page). Progress
//! reports are not shown in a chat.

use super::Approver;
use crate::provider::conversation::Message;
use crate::provider::{ModelRequest, Provider, ToolChoice};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use toolhost_contract::{
    Answer, AskError, CallerLink, ElicitAnswer, Progress, Role, SamplingRequest, SamplingResponse,
};

/// The link of one call the agent loop runs.
pub(super) struct AgentLink {
    pub(super) provider: Arc<dyn Provider>,
    pub(super) approver: Arc<dyn Approver>,
    /// The tool, named to the person when it asks.
    pub(super) tool: String,
    /// The model's id of the call.
    pub(super) call_id: String,
}

impl CallerLink for AgentLink {
    fn progress(&self, _progress: Progress) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(std::future::ready(()))
    }

    fn sample(&self, request: SamplingRequest) -> Answer<SamplingResponse> {
        let provider = Arc::clone(&self.provider);
        Box::pin(async move {
            let messages: Vec<Message> = request
                .messages
                .into_iter()
                .map(|(role, text)| match role {
                    Role::User => Message::User { text },
                    Role::Assistant => Message::Assistant {
                        text,
                        calls: Vec::new(),
                    },
                })
                .collect();
            let model_request = ModelRequest {
                system: request.system_prompt.as_deref(),
                messages: &messages,
                tools: &[],
                tool_choice: &ToolChoice::None,
            };
            let turn = provider
                .complete(model_request, &|_| {})
                .await
                .map_err(|e| AskError::Failed(format!("the chat's model failed: {e}")))?;
            Ok(SamplingResponse {
                text: turn.text,
                model: provider.name().to_string(),
                stop_reason: turn.stop_reason,
            })
        })
    }

    fn elicit(&self, message: String, schema: Value) -> Answer<ElicitAnswer> {
        let approver = Arc::clone(&self.approver);
        let (tool, call_id) = (self.tool.clone(), self.call_id.clone());
        Box::pin(async move {
            let request = ElicitRequest {
                call_id,
                tool,
                message,
                schema,
            };
            approver.elicit(&request).await
        })
    }
}

/// What a tool asks the person during a chat.
#[derive(Debug, Clone)]
pub struct ElicitRequest {
    /// The model's id of the call that asks.
    pub call_id: String,
    pub tool: String,
    pub message: String,
    /// The requested schema: an object of flat properties.
    pub schema: Value,
}
