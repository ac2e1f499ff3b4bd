//! The way back from a running tool to the MCP client whose `tools/call` started it: the
//! [`CallerLink`] of one request.
//!
//! Progress goes out as `notifications/progress` with the token the request carried (none
//! without one); sampling as `sampling/createMessage` and elicitation as `elicitation/create`,
//! sent from inside the request's handler so that rmcp delivers them on that request's own
//! stream (SEP-2260); a request the call stops waiting for is withdrawn with
//! `notifications/cancelled`. Nothing of one request's link reaches another session. A client that
//! did not declare the capability gets `unsupported` at once rather than a request that would
//! never be answered. At 2026-07-28, which forbids requests from server to client mid-call, a
//! call asks in rounds instead ([`crate::rounds`]), with the requests and answers made here.

// Sampling is deprecated from 2026-07-28 on (SEP-2577); it is how the revisions before it,
// which this server speaks, let a tool use the client's model.
#![allow(deprecated)]

use rmcp::RoleServer;
use rmcp::model::{
    CancelledNotificationParam, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, ModelHint, ModelPreferences, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, RequestId, SamplingMessage, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use toolhost_contract::{
    AskError, CallerLink, ElicitAnswer, Progress, Role, SamplingRequest, SamplingResponse,
};

/// One `tools/call` request's way back to its client.
pub(crate) struct McpLink {
    peer: Peer<RoleServer>,
    progress_token: Option<ProgressToken>,
    /// Why this client cannot be asked for a completion, if it cannot.
    no_sampling: Option<&'static str>,
    /// Why this client cannot be asked for input, if it cannot.
    no_elicitation: Option<&'static str>,
}

/// Why the client of `context`'s request cannot be asked for a completion and for input, if
/// it cannot: the capabilities it declared (on the request itself at 2026-07-28).
pub(crate) fn refusals(
    context: &RequestContext<RoleServer>,
) -> (Option<&'static str>, Option<&'static str>) {
    let capabilities = context.client_capabilities();
    let no_sampling = if capabilities.as_ref().is_none_or(|c| c.sampling.is_none()) {
        Some("the client did not declare the sampling capability")
    } else {
        None
    };
    let elicitation = capabilities.as_ref().and_then(|c| c.elicitation.as_ref());
    let no_elicitation = match elicitation {
        None => Some("the client did not declare the elicitation capability"),
        // A client that names only `url` mode cannot show a form.
        Some(e) if e.form.is_none() && e.url.is_some() => {
            Some("the client takes only URL elicitation, not a form")
        }
        Some(_) => None,
    };
    (no_sampling, no_elicitation)
}

impl McpLink {
    /// The link of the request of `context`. At 2026-07-28 (a call run as a task) it cannot
    /// send the client requests: asking is `unsupported`.
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Self {
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let (no_sampling, no_elicitation) = if stateless {
            (Some(AS_A_TASK), Some(AS_A_TASK))
        } else {
            refusals(context)
        };
        McpLink {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            no_sampling,
            no_elicitation,
        }
    }
}

const AS_A_TASK: &str = "the call runs as a task, which cannot ask its client at MCP 2026-07-28";

/// `request` as MCP's `sampling/createMessage` parameters, or why MCP does not allow it.
pub(crate) fn sampling_params(
    request: SamplingRequest,
) -> Result<CreateMessageRequestParams, AskError> {
    let messages = request
        .messages
        .into_iter()
        .map(|(role, text)| match role {
            Role::User => SamplingMessage::user_text(text),
            Role::Assistant => SamplingMessage::assistant_text(text),
        })
        .collect();
    let mut params = CreateMessageRequestParams::new(messages, request.max_tokens);
    params.system_prompt = request.system_prompt;
    params.temperature = request.temperature;
    if !request.model_hints.is_empty() {
        params.model_preferences = Some(
            ModelPreferences::new().with_hints(
                request
                    .model_hints
                    .into_iter()
                    .map(ModelHint::new)
                    .collect(),
            ),
        );
    }
    params.validate().map_err(|e| {
        AskError::Failed(format!("the sampling request is not one MCP allows: {e}"))
    })?;
    Ok(params)
}

/// The client's model's answer, as the tool gets it: its text blocks, joined.
pub(crate) fn sampling_answer(answer: CreateMessageResult) -> SamplingResponse {
    let text = answer
        .message
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    SamplingResponse {
        text,
        model: answer.model,
        stop_reason: answer.stop_reason,
    }
}

/// A question as MCP's form `elicitation/create` parameters, or why MCP does not allow it.
pub(crate) fn elicit_params(
    message: String,
    schema: Value,
) -> Result<ElicitRequestParams, AskError> {
    // The runtime passed it through the same type: this cannot fail.
    let requested_schema: ElicitationSchema = serde_json::from_value(schema).map_err(|e| {
        AskError::Failed(format!(
            "the requested schema is not one MCP elicitation allows: {e}"
        ))
    })?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    })
}

/// What the person did, as the tool gets it.
pub(crate) fn elicit_answer(answer: ElicitResult) -> ElicitAnswer {
    match answer.action {
        ElicitationAction::Accept => ElicitAnswer::Accept(
            answer
                .content
                .unwrap_or_else(|| Value::Object(Default::default())),
        ),
        ElicitationAction::Decline => ElicitAnswer::Decline,
        _ => ElicitAnswer::Cancel,
    }
}

impl CallerLink for McpLink {
    fn progress(&self, progress: Progress) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let Some(token) = self.progress_token.clone() else {
            return Box::pin(std::future::ready(()));
        };
        let peer = self.peer.clone();
        Box::pin(async move {
            let mut param = ProgressNotificationParam::new(token, progress.done);
            param.total = progress.total;
            param.message = progress.message;
            // A client that has gone away ends the call by its own means; a report is lost.
            let _ = peer.notify_progress(param).await;
        })
    }

    fn sample(
        &self,
        request: SamplingRequest,
    ) -> Pin<Box<dyn Future<Output = Result<SamplingResponse, AskError>> + Send>> {
        if let Some(why) = self.no_sampling {
            return Box::pin(std::future::ready(Err(AskError::Unsupported(why.into()))));
        }
        let params = match sampling_params(request) {
            Ok(params) => params,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        let peer = self.peer.clone();
        Box::pin(async move {
            let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
            let answer = ask(
                peer,
                request,
                "the client's model failed",
                |result| match result {
                    ClientResult::CreateMessageResult(answer) => Some(answer),
                    _ => None,
                },
            )
            .await?;
            Ok(sampling_answer(*answer))
        })
    }

    fn elicit(
        &self,
        message: String,
        schema: Value,
    ) -> Pin<Box<dyn Future<Output = Result<ElicitAnswer, AskError>> + Send>> {
        if let Some(why) = self.no_elicitation {
            return Box::pin(std::future::ready(Err(AskError::Unsupported(why.into()))));
        }
        let params = match elicit_params(message, schema) {
            Ok(params) => params,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        let peer = self.peer.clone();
        Box::pin(async move {
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let answer = ask(
                peer,
                request,
                "the client failed to ask",
                |result| match result {
                    ClientResult::ElicitResult(answer) => Some(answer),
                    _ => None,
                },
            )
            .await?;
            Ok(elicit_answer(answer))
        })
    }
}

/// Sends `request` to the client and waits for its result, the kind `expected` picks out;
/// anything else is `failed`, `failure` saying what failed. A wait the call abandons (its
/// timeout, or the call cancelled) drops this future: the client is then sent
/// `notifications/cancelled` for the request, so a form or a model request it holds open is
/// closed, and rmcp forgets the request instead of keeping it for an answer that never comes.
async fn ask<T>(
    peer: Peer<RoleServer>,
    request: ServerRequest,
    failure: &str,
    expected: impl FnOnce(ClientResult) -> Option<T>,
) -> Result<T, AskError> {
    let failed = |e: &dyn std::fmt::Display| AskError::Failed(format!("{failure}: {e}"));
    let handle = peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| failed(&e))?;
    let mut abandoned = Abandoned(Some((peer, handle.id.clone())));
    let result = handle.await_response().await;
    abandoned.0 = None;
    expected(result.map_err(|e| failed(&e))?).ok_or_else(|| failed(&"it answered something else"))
}

/// A request to the client whose answer nobody waits for any more, until it is disarmed.
struct Abandoned(Option<(Peer<RoleServer>, RequestId)>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let param = CancelledNotificationParam::new(
                Some(id),
                Some("the tool's call ended before the answer came".into()),
            );
            // A client that has gone away needs no notice.
            let _ = peer.notify_cancelled(param).await;
        });
    }
}
