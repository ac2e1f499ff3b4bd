//! The call's trace in the HTTP headers of a request to an imported server, as well as in its
//! `_meta` (SEP-414): [`TraceHeaders`] wraps whichever client rmcp's transport is given
//! (plain, OAuth's [`Renewing`](crate::oauth), a sign-in's) and copies the W3C fields the
//! request's `_meta` carries (`traceparent`, `tracestate`, `baggage`) into headers of the
//! same names, so a proxy or a server that reads only the headers joins the same trace.
//!
//! The fields are read from the message, not from the context current where the request is
//! sent: rmcp sends from its transport's own task, not the call's. They are this host's own
//! (the propagator wrote them in the client span, `server.rs`), so their sizes are the W3C
//! ones the propagator keeps; a value that is not a valid header value is left out, never an
//! error.

use futures_util::stream::BoxStream;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestParamsMeta};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use std::collections::HashMap;
use std::sync::Arc;

/// The W3C trace context fields copied from `_meta` into headers of the same names.
const FIELDS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// Redirects an import's client follows for one request, at most (rmcp's number).
const MAX_REDIRECTS: usize = 10;

type Headers = HashMap<http::HeaderName, http::HeaderValue>;
type Answer<T, E> = Result<T, StreamableHttpError<E>>;

/// An HTTP client for an imported server whose requests carry their `_meta`'s trace context
/// in headers too.
#[derive(Clone)]
pub(crate) struct TraceHeaders<C>(pub(crate) C);

/// The client of an import with no OAuth: rmcp's default one, built as rmcp builds it (its
/// builder is private): no idle connections kept (rmcp's fix for delayed-ACK stalls), and
/// only same-origin `307` and `308` redirects followed, at most [`MAX_REDIRECTS`] (another
/// origin would be sent the session id and these headers; a `301`-`303` would lose the body).
pub(crate) fn plain() -> Result<TraceHeaders<reqwest::Client>, String> {
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = (attempt.previous().first())
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(redirects)
        .build()
        .map_err(|e| format!("cannot make its HTTP client: {}", crate::said(&e)))?;
    Ok(TraceHeaders(client))
}

/// `headers` with the trace context `message`'s `_meta` carries, when it carries one.
fn with_trace(message: &ClientJsonRpcMessage, mut headers: Headers) -> Headers {
    let JsonRpcMessage::Request(request) = message else {
        return headers;
    };
    // Only a call carries one: the client span is the call's (`McpImport::call`).
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return headers;
    };
    let Some(meta) = call.params.meta() else {
        return headers;
    };
    for field in FIELDS {
        let value = (meta.0.0.get(field))
            .and_then(serde_json::Value::as_str)
            .and_then(|value| http::HeaderValue::from_str(value).ok());
        if let Some(value) = value {
            headers.insert(http::HeaderName::from_static(field), value);
        }
    }
    headers
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for TraceHeaders<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: Headers,
    ) -> Answer<StreamableHttpPostResponse, C::Error> {
        let headers = with_trace(&message, headers);
        (self.0)
            .post_message(uri, message, session_id, auth, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: Headers,
        max: usize,
    ) -> Answer<StreamableHttpPostResponse, C::Error> {
        let headers = with_trace(&message, headers);
        (self.0)
            .post_message_with_max_sse_event_size(uri, message, session_id, auth, headers, max)
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth: Option<String>,
        headers: Headers,
    ) -> Answer<(), C::Error> {
        (self.0)
            .delete_session(uri, session_id, auth, headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: Headers,
    ) -> Answer<BoxStream<'static, Result<sse_stream::Sse, SseError>>, C::Error> {
        (self.0)
            .get_stream(uri, session_id, last_event_id, auth, headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: Headers,
        max: usize,
    ) -> Answer<BoxStream<'static, Result<sse_stream::Sse, SseError>>, C::Error> {
        (self.0)
            .get_stream_with_max_sse_event_size(uri, session_id, last_event_id, auth, headers, max)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, JsonRpcRequest, RequestId};

    fn call(meta: serde_json::Value) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("echo");
        if let serde_json::Value::Object(meta) = meta {
            params.meta = Some(meta.into());
        }
        JsonRpcMessage::Request(JsonRpcRequest::new(
            RequestId::Number(1),
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
        ))
    }

    #[test]
    fn a_calls_trace_context_goes_into_headers_of_the_same_names() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let message = call(serde_json::json!({
            "traceparent": parent,
            "tracestate": "vendor=1",
            "progressToken": 7,
        }));
        let headers = with_trace(&message, Headers::new());
        let got = |name: &'static str| {
            (headers.get(&http::HeaderName::from_static(name))).and_then(|v| v.to_str().ok())
        };
        assert_eq!(got("traceparent"), Some(parent));
        assert_eq!(got("tracestate"), Some("vendor=1"));
        assert_eq!((got("baggage"), headers.len()), (None, 2));
    }

    #[test]
    fn a_call_with_no_trace_or_a_value_no_header_can_hold_adds_nothing() {
        for meta in [
            serde_json::json!(null),
            serde_json::json!({"progressToken": 7}),
            serde_json::json!({"traceparent": 17, "tracestate": "bad\nvalue"}),
        ] {
            let headers = with_trace(&call(meta.clone()), Headers::new());
            assert!(headers.is_empty(), "{meta}: {headers:?}");
        }
    }
}
