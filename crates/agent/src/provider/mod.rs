//! provider: the LLM APIs the agent loop talks to, behind one [`Provider`] trait.
//!
//! Each provider maps the canonical conversation ([`conversation`]) to its wire
//! format and back: `openai` (chat completions; also Ollama, vLLM, llama.cpp's server,
//! LiteLLM), `anthropic` (messages) and `prompted` (chat completions without native tools:
//! tools described in the system prompt, calls parsed from `<tool>` blocks). All of them
//! stream, retry 429 and 5xx answers with backoff (`Transport`), and report usage where the
//! API gives it.

mod anthropic;
pub mod conversation;
#[cfg(feature = "test-support")]
pub mod fake;
mod openai;
mod prompted;
pub mod sse;

pub use anthropic::Anthropic;
pub use openai::OpenAi;
pub use prompted::{Prompted, parse_tool_blocks};

use conversation::{Invocation, Message};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
pub use toolhost_config::{ProviderKind, ToolChoice};
use toolhost_contract::BoxFuture;

/// Receives the model's text as it streams in.
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A tool as the model is told about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// One model call: the conversation so far, the tools on offer, and whether the model must
/// call one.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub system: Option<&'a str>,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    /// Sent whenever `tools` is not empty (some servers, llama.cpp's among them, leave the
    /// tools out of the prompt without it).
    pub tool_choice: &'a ToolChoice,
}

/// Tokens a model call used, where the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// What the model answered: text, and the tools it wants called, in its order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTurn {
    pub text: String,
    pub calls: Vec<Invocation>,
    pub usage: Option<Usage>,
    /// The provider's own word for why it stopped (`tool_calls`, `end_turn`, ...).
    pub stop_reason: Option<String>,
}

/// An LLM API.
pub trait Provider: Send + Sync {
    /// `openai`, `anthropic` or `prompted`: in messages and events.
    fn name(&self) -> &'static str;

    /// How a model call that failed part-way ([`ProviderError::CutShort`]) is retried by the
    /// agent loop: its text may already have reached the person, so the loop says so
    /// before it asks again. (Failures before an answer starts are retried inside
    /// [`Provider::complete`].)
    fn retry(&self) -> RetryPolicy {
        RetryPolicy::default()
    }

    /// The model asked for (`gen_ai.request.model` of its traced calls); empty when it has
    /// no name.
    fn model(&self) -> &str {
        ""
    }

    /// Runs one model call; streamed text goes to `on_text` as it arrives.
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_text: TextSink<'a>,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>>;
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{provider}: HTTP {status} after {attempts} attempt(s): {body}")]
    Status {
        provider: &'static str,
        status: u16,
        attempts: u32,
        body: String,
    },
    #[error("{provider}: cannot reach {url} after {attempts} attempt(s): {message}")]
    Unreachable {
        provider: &'static str,
        url: String,
        attempts: u32,
        message: String,
    },
    #[error("{provider}: the response could not be read: {message}")]
    Protocol {
        provider: &'static str,
        message: String,
    },
    /// The answer's stream ended before the answer did: the connection broke off, or the
    /// body ended without the format's last word (`[DONE]` or a `finish_reason`; Anthropic's
    /// `message_stop`). Retried like an unreachable server.
    #[error("{provider}: the answer broke off: {message}")]
    CutShort {
        provider: &'static str,
        message: String,
    },
    #[error("{provider}: the API reported an error: {message}")]
    Api {
        provider: &'static str,
        message: String,
    },
    #[error("{0}")]
    Setup(String),
}

impl ProviderError {
    /// What kind of failure it was, as a trace's `error.type` says it: the HTTP status, or
    /// `unreachable`, `protocol`, `cut_short`, `api`, `setup`.
    pub fn kind(&self) -> String {
        match self {
            ProviderError::Status { status, .. } => status.to_string(),
            ProviderError::Unreachable { .. } => "unreachable".into(),
            ProviderError::Protocol { .. } => "protocol".into(),
            ProviderError::CutShort { .. } => "cut_short".into(),
            ProviderError::Api { .. } => "api".into(),
            ProviderError::Setup(_) => "setup".into(),
        }
    }
}

/// Everything needed to talk to one provider.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    pub model: String,
    /// Without a trailing slash, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The API key, read from the environment by the caller; never from a config file.
    pub api_key: Option<String>,
    /// Stream the answer (server-sent events); off for servers that cannot.
    pub stream: bool,
    /// The most tokens one answer may use (Anthropic requires it; OpenAI gets it when set).
    pub max_tokens: Option<u32>,
    pub retry: RetryPolicy,
    /// How long one model call may take, streaming included.
    pub request_timeout: Duration,
    /// The most bytes one answer may bring, streamed or whole.
    pub max_response_bytes: usize,
}

impl ProviderSettings {
    /// Settings with the defaults of `kind`: its public base URL, streaming, 3 attempts.
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> Self {
        ProviderSettings {
            kind,
            model: model.into(),
            base_url: kind.default_base_url().to_string(),
            api_key: None,
            stream: true,
            max_tokens: None,
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(300),
            max_response_bytes: DEFAULT_MAX_RESPONSE_MIB << 20,
        }
    }

    /// Builds the provider these settings describe.
    pub fn build(&self) -> Result<Box<dyn Provider>, ProviderError> {
        let transport = Transport::new(self)?;
        Ok(match self.kind {
            ProviderKind::OpenAi => Box::new(OpenAi::new(self.clone(), transport)),
            ProviderKind::Anthropic => Box::new(Anthropic::new(self.clone(), transport)?),
            ProviderKind::Prompted => Box::new(Prompted::new(OpenAi::new(self.clone(), transport))),
        })
    }
}

/// How failed requests are retried: 429, 5xx (and Anthropic's 529) and connection failures,
/// with exponential backoff from `base_delay`, honouring `Retry-After` up to `max_delay`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// The delay a `Retry-After: <seconds>` header asks for; one too long for a `Duration` (a
/// provider may send anything) is the longest, which the policy's cap then cuts.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let seconds = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)?;
    Some(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

impl RetryPolicy {
    /// The wait before try `attempt + 1`, after `attempt` tries failed.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exponential = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        retry_after.unwrap_or(exponential).min(self.max_delay)
    }
}

/// The HTTP side shared by the providers: one client, retries, error bodies, and the bound on
/// what one answer may make the host read.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    client: reqwest::Client,
    retry: RetryPolicy,
    max_response_bytes: usize,
}

/// An error body is read no further than this (its start is all a message shows).
const ERROR_BODY_BYTES: usize = 64 * 1024;
/// The default of `[chat] max-response-mib`: one model answer, streamed or whole.
pub const DEFAULT_MAX_RESPONSE_MIB: usize = 16;

/// Reads `response`'s body, at most `limit` bytes: `None` when it is longer.
async fn read_at_most(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

impl Transport {
    fn new(settings: &ProviderSettings) -> Result<Self, ProviderError> {
        toolhost_contract::tls::install_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(settings.request_timeout)
            .build()
            .map_err(|e| ProviderError::Setup(format!("cannot build the HTTP client: {e}")))?;
        Ok(Transport {
            client,
            retry: settings.retry,
            max_response_bytes: settings.max_response_bytes,
        })
    }

    /// POSTs `body` as JSON, retrying what is worth retrying; returns a 2xx response.
    pub(crate) async fn post(
        &self,
        provider: &'static str,
        url: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Result<reqwest::Response, ProviderError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ProviderError::Protocol {
            provider,
            message: e.to_string(),
        })?;
        let attempts = self.retry.attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = self
                .client
                .post(url)
                .header("content-type", "application/json")
                .body(bytes.clone());
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            // The run's trace goes on at the model's server, if it reads W3C headers.
            for (name, value) in toolhost_core::trace::injected().unwrap_or_default() {
                if let Some(value) = value.as_str() {
                    request = request.header(name, value);
                }
            }
            let (retry_after, failure) = match request.send().await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    let retry_after = retry_after(response.headers());
                    let body = read_at_most(&mut response, ERROR_BODY_BYTES)
                        .await
                        .ok()
                        .flatten()
                        .map_or_else(
                            || "(a body too long to show)".to_string(),
                            |body| excerpt(&String::from_utf8_lossy(&body)),
                        );
                    let failure = ProviderError::Status {
                        provider,
                        status,
                        attempts: attempt,
                        body,
                    };
                    if !matches!(status, 408 | 429 | 500 | 502 | 503 | 504 | 529) {
                        return Err(failure);
                    }
                    (retry_after, failure)
                }
                Err(e) => (
                    None,
                    ProviderError::Unreachable {
                        provider,
                        url: url.to_string(),
                        attempts: attempt,
                        message: error_chain(&e),
                    },
                ),
            };
            if attempt >= attempts {
                return Err(failure);
            }
            let delay = self.retry.delay(attempt, retry_after);
            tracing::warn!("{failure}; retrying in {} ms", delay.as_millis());
            tokio::time::sleep(delay).await;
        }
    }

    /// The error of an answer past `max_response_bytes`.
    fn too_long(&self, provider: &'static str) -> ProviderError {
        ProviderError::Protocol {
            provider,
            message: format!(
                "the answer is longer than {} MiB (max-response-mib); it was cut off",
                self.max_response_bytes >> 20
            ),
        }
    }

    /// Reads a whole JSON response, no longer than `max_response_bytes`.
    pub(crate) async fn json(
        &self,
        provider: &'static str,
        mut response: reqwest::Response,
    ) -> Result<Value, ProviderError> {
        let body = read_at_most(&mut response, self.max_response_bytes)
            .await
            .map_err(|e| ProviderError::Protocol {
                provider,
                message: error_chain(&e),
            })?
            .ok_or_else(|| self.too_long(provider))?;
        serde_json::from_slice(&body).map_err(|e| ProviderError::Protocol {
            provider,
            message: format!(
                "not JSON ({e}): {}",
                excerpt(&String::from_utf8_lossy(&body))
            ),
        })
    }

    /// Feeds a streamed response's server-sent events to `on_event` as they arrive, until the
    /// stream ends or has brought `max_response_bytes`.
    pub(crate) async fn events(
        &self,
        provider: &'static str,
        mut response: reqwest::Response,
        mut on_event: impl FnMut(sse::Event) -> Result<(), ProviderError>,
    ) -> Result<(), ProviderError> {
        let mut decoder = sse::Decoder::default();
        let mut received = 0usize;
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|e| ProviderError::CutShort {
                    provider,
                    message: format!("the stream broke off: {}", error_chain(&e)),
                })?;
            let Some(chunk) = chunk else { break };
            received += chunk.len();
            if received > self.max_response_bytes {
                return Err(self.too_long(provider));
            }
            for event in decoder.feed(&chunk) {
                on_event(event)?;
            }
        }
        for event in decoder.finish() {
            on_event(event)?;
        }
        Ok(())
    }
}

/// The start of a response body, for error messages.
fn excerpt(text: &str) -> String {
    const LIMIT: usize = 500;
    let text = text.trim();
    if text.len() <= LIMIT {
        return text.to_string();
    }
    format!("{}...", &text[..text.floor_char_boundary(LIMIT)])
}

/// An error and its sources on one line (reqwest's own message hides the cause).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Parses a JSON chunk of a stream.
pub(crate) fn parse_chunk(provider: &'static str, data: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(data).map_err(|e| ProviderError::Protocol {
        provider,
        message: format!("a streamed chunk is not JSON ({e}): {}", excerpt(data)),
    })
}

/// The `message` of an API error object (`{"error": {"message": ...}}`), or the whole value.
pub(crate) fn api_error(provider: &'static str, error: &Value) -> ProviderError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| error.to_string());
    ProviderError::Api { provider, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_honours_retry_after_within_the_cap() {
        let policy = RetryPolicy {
            attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        assert_eq!(policy.delay(1, None), Duration::from_millis(100));
        assert_eq!(policy.delay(3, None), Duration::from_millis(400));
        assert_eq!(policy.delay(9, None), Duration::from_secs(1));
        assert_eq!(
            policy.delay(1, Some(Duration::from_millis(250))),
            Duration::from_millis(250)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(60))),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn any_retry_after_a_provider_sends_is_read_without_panicking() {
        let read = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(
                reqwest::header::RETRY_AFTER,
                reqwest::header::HeaderValue::from_str(value).expect("a header value"),
            );
            retry_after(&headers)
        };
        assert_eq!(read(" 2.5 "), Some(Duration::from_millis(2500)));
        assert_eq!(read("1e300"), Some(Duration::MAX));
        assert_eq!(read("-1"), None);
        assert_eq!(read("NaN"), None);
        assert_eq!(read("Wed, 21 Oct 2026 07:28:00 GMT"), None);
    }

    #[test]
    fn excerpts_cut_on_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = excerpt(&long);
        assert!(cut.ends_with("..."));
        assert!(cut.len() <= 504);
    }
}
