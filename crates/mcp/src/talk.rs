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
//! call asks in rounds instead ([`crate::rounds`]): one [`Link`] makes the requests and reads
//! the answers for both, over an [`Asker`] each.

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

/// How a link reaches its client: where progress goes, what the client cannot be asked, and
/// how a request is put to it and answered. The requests and answers themselves are made
/// once, by [`Link`]: mid-call at the handshake revisions ([`McpLink`]), in rounds at
/// 2026-07-28 ([`crate::rounds`]).
pub(crate) trait Asker: Send + Sync + 'static {
    /// The peer and progress token of the request that drives the call now.
    fn progress_target(&self) -> (Peer<RoleServer>, Option<ProgressToken>);
    /// Why the client cannot be asked for a completion, and for input, if it cannot.
    fn refusals(&self) -> (Option<&'static str>, Option<&'static str>);
    /// Puts a sampling request to the client; its answer.
    fn ask_model(
        &self,
        params: CreateMessageRequestParams,
    ) -> Pin<Box<dyn Future<Output = Result<CreateMessageResult, AskError>> + Send>>;
    /// Puts a form to the person behind the client; their answer.
    fn ask_person(
        &self,
        params: ElicitRequestParams,
    ) -> Pin<Box<dyn Future<Output = Result<ElicitResult, AskError>> + Send>>;
}

/// The [`CallerLink`] of an [`Asker`].
pub(crate) struct Link<A>(pub(crate) A);

/// One `tools/call` request's way back to its client, at the handshake revisions: requests
/// sent on the request's own stream.
pub(crate) struct McpLink {
    peer: Peer<RoleServer>,
    progress_token: Option<ProgressToken>,
    no_sampling: Option<&'static str>,
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
    /// The link of the request of `context`. At 2026-07-28 (a call that may become a task)
    /// it cannot send the client requests: asking is `unsupported`.
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Link<Self> {
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let (no_sampling, no_elicitation) = if stateless {
            (Some(AS_A_TASK), Some(AS_A_TASK))
        } else {
            refusals(context)
        };
        Link(McpLink {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            no_sampling,
            no_elicitation,
        })
    }
}

const AS_A_TASK: &str = "the client takes tasks, and at MCP 2026-07-28 a call that may become \
     a task cannot ask its client (a client without the tasks capability is asked in rounds)";

/// `request` as MCP's `sampling/createMessage` parameters, or why MCP does not allow it.
fn sampling_params(request: SamplingRequest) -> Result<CreateMessageRequestParams, AskError> {
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
fn sampling_answer(answer: CreateMessageResult) -> SamplingResponse {
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
fn elicit_params(message: String, schema: Value) -> Result<ElicitRequestParams, AskError> {
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
fn elicit_answer(answer: ElicitResult) -> ElicitAnswer {
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

impl Asker for McpLink {
    fn progress_target(&self) -> (Peer<RoleServer>, Option<ProgressToken>) {
        (self.peer.clone(), self.progress_token.clone())
    }

    fn refusals(&self) -> (Option<&'static str>, Option<&'static str>) {
        (self.no_sampling, self.no_elicitation)
    }

    fn ask_model(
        &self,
        params: CreateMessageRequestParams,
    ) -> Pin<Box<dyn Future<Output = Result<CreateMessageResult, AskError>> + Send>> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        Box::pin(ask(
            self.peer.clone(),
            request,
            "the client's model failed",
            |result| match result {
                ClientResult::CreateMessageResult(answer) => Some(*answer),
                _ => None,
            },
        ))
    }

    fn ask_person(
        &self,
        params: ElicitRequestParams,
    ) -> Pin<Box<dyn Future<Output = Result<ElicitResult, AskError>> + Send>> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        Box::pin(ask(
            self.peer.clone(),
            request,
            "the client failed to ask",
            |result| match result {
                ClientResult::ElicitResult(answer) => Some(answer),
                _ => None,
            },
        ))
    }
}

impl<A: Asker> CallerLink for Link<A> {
    fn progress(&self, progress: Progress) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let (peer, token) = self.0.progress_target();
        let Some(token) = token else {
            return Box::pin(std::future::ready(()));
        };
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
        if let (Some(why), _) = self.0.refusals() {
            return Box::pin(std::future::ready(Err(AskError::Unsupported(why.into()))));
        }
        let asked = sampling_params(request).map(|params| self.0.ask_model(params));
        Box::pin(async move { Ok(sampling_answer(asked?.await?)) })
    }

    fn elicit(
        &self,
        message: String,
        schema: Value,
    ) -> Pin<Box<dyn Future<Output = Result<ElicitAnswer, AskError>> + Send>> {
        if let (_, Some(why)) = self.0.refusals() {
            return Box::pin(std::future::ready(Err(AskError::Unsupported(why.into()))));
        }
        let asked = elicit_params(message, schema).map(|params| self.0.ask_person(params));
        Box::pin(async move { Ok(elicit_answer(asked?.await?)) })
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
