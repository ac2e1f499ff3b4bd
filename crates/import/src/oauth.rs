//! An imported server that needs an OAuth access token (`[ensemble.mcp] oauth`): this host is
//! its own OAuth client there, never a caller's proxy. As the MCP authorization spec has a
//! client do it: the server's `401` names its protected resource metadata, that names the
//! authorization server, whose metadata gives the token endpoint; the token is asked for by
//! client credentials with the server's URL as the `resource` (RFC 8707), the client proving
//! itself with a secret (`client_secret_post`, or `client_secret_basic` where that is all the
//! server takes) or a signed assertion (`private_key_jwt`, RFC 7523). rmcp's auth support
//! does the discovery and the exchange (with the oauth2 crate); [`Renewing`] sends the token
//! with each request and gets a new one by the same credentials before it expires (a
//! quarter of its life ahead, at most 30 s) and once when the server refuses it, so a token
//! running out never fails a call. (rmcp's own client would stop sending a token in its last
//! 30 s and never get another: client credentials have no refresh token.)
//!
//! Bounds: the probe's answer is read for its headers only, within [`PROBE_TIMEOUT`]; rmcp
//! bounds and times its own requests and follows no redirect to another host; one token
//! request at a time per server, and at most two per request it sends (the held token due,
//! then the new one refused).

use futures_util::stream::BoxStream;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, ClientCredentialsConfig, JwtSigningAlgorithm,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_config::draft::{McpCredential, McpOauth};

/// How long the unauthenticated probe for the server's challenge may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A token held renewed this long before it expires, at most (a quarter of its life when
/// that is shorter).
const RENEW_AHEAD: Duration = Duration::from_secs(30);
/// How long a token is used when the authorization server does not say (`expires_in`), and
/// at most: then a new one is got (and sooner when the server refuses it).
const UNTOLD_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// An HTTP client for `url` that carries an access token got with `oauth`'s credentials (the
/// first one got now, so that credentials the server refuses keep the import out).
pub(super) async fn client(url: &str, oauth: &McpOauth) -> Result<Renewing, String> {
    // Imported servers are the operator's choice, on private networks too.
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url)
        .await
        .map_err(|e| format!("cannot prepare its OAuth client: {e}"))?;
    let challenge = probe(url).await;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("its authorization server could not be found: {e}"))?;
    manager.set_metadata(resolution.metadata);
    let (client_id, scopes, resource) = (
        // Always set for client credentials (the check refuses it left out).
        oauth.client_id.clone().unwrap_or_default(),
        oauth.scopes.clone(),
        Some(url.to_string()),
    );
    let credentials = match &oauth.credential {
        McpCredential::Secret(secret) => ClientCredentialsConfig::ClientSecret {
            client_id,
            client_secret: secret.clone(),
            scopes,
            resource,
        },
        McpCredential::SignIn { .. } => {
            return Err("signs a person in (`toolhost login`), not by client credentials".into());
        }
        McpCredential::PrivateKey { pem, algorithm } => ClientCredentialsConfig::PrivateKeyJwt {
            client_id,
            signing_key: pem.clone().into_bytes(),
            signing_algorithm: match algorithm.as_str() {
                "ES384" => JwtSigningAlgorithm::ES384,
                "RS256" => JwtSigningAlgorithm::RS256,
                "RS384" => JwtSigningAlgorithm::RS384,
                "RS512" => JwtSigningAlgorithm::RS512,
                // The default, and what the check lets through (ASSERTION_ALGORITHMS).
                _ => JwtSigningAlgorithm::ES256,
            },
            token_endpoint_audience: None,
            scopes,
            resource,
        },
    };
    manager
        .configure_client_credentials(&credentials)
        .map_err(|e| format!("cannot use its authorization server: {e}"))?;
    let client = Renewing {
        http: reqwest::Client::default(),
        tokens: Arc::new(Tokens {
            manager: Arc::new(tokio::sync::Mutex::new(manager)),
            credentials,
            held: tokio::sync::Mutex::new(None),
        }),
    };
    client
        .tokens
        .current()
        .await
        .map_err(|e| format!("its authorization server gave no access token: {e}"))?;
    Ok(client)
}

/// The HTTP client of an import that needs OAuth: rmcp's reqwest client, each request with
/// this host's current token.
#[derive(Clone)]
pub(super) struct Renewing {
    http: reqwest::Client,
    tokens: Arc<Tokens>,
}

/// The token held for one server, and how to get the next.
struct Tokens {
    manager: Arc<tokio::sync::Mutex<AuthorizationManager>>,
    credentials: ClientCredentialsConfig,
    held: tokio::sync::Mutex<Option<Held>>,
}

struct Held {
    token: String,
    renew_at: Instant,
}

impl Tokens {
    /// The token to send: the one held, or a new one when it is due (one exchange at a time).
    async fn current(&self) -> Result<String, AuthError> {
        let mut held = self.held.lock().await;
        if let Some(held) = held.as_ref().filter(|h| Instant::now() < h.renew_at) {
            return Ok(held.token.clone());
        }
        let fresh = self.exchange().await?;
        let token = fresh.token.clone();
        *held = Some(fresh);
        Ok(token)
    }

    /// A new token after the server refused `refused`, unless another request got one since.
    async fn after_refusal(&self, refused: &str) -> Result<String, AuthError> {
        let mut held = self.held.lock().await;
        if let Some(held) = held.as_ref().filter(|h| h.token != refused) {
            return Ok(held.token.clone());
        }
        let fresh = self.exchange().await?;
        let token = fresh.token.clone();
        *held = Some(fresh);
        Ok(token)
    }

    async fn exchange(&self) -> Result<Held, AuthError> {
        // rmcp's exchange future is not `Send` once `private_key_jwt` is built in (its form
        // serializer lives across an await), so it runs to its end on a blocking thread of
        // this runtime rather than on a worker; rmcp's own timeouts bound it.
        let runtime = tokio::runtime::Handle::current();
        let (manager, credentials) = (Arc::clone(&self.manager), self.credentials.clone());
        let asked = Instant::now();
        let answer = tokio::task::spawn_blocking(move || {
            runtime.block_on(async move {
                let manager = manager.lock().await;
                manager.exchange_client_credentials(&credentials).await
            })
        })
        .await
        .map_err(|e| AuthError::InternalError(format!("the token exchange ended: {e}")))??;
        use oauth2::TokenResponse;
        // A day at most, whatever the server says (an `expires_in` of centuries is no reason
        // to overflow the clock).
        let life = answer
            .expires_in()
            .map_or(UNTOLD_LIFETIME, |l| l.min(UNTOLD_LIFETIME));
        Ok(Held {
            token: answer.access_token().secret().clone(),
            renew_at: asked + life - RENEW_AHEAD.min(life / 4),
        })
    }
}

type Answer<T> = Result<T, StreamableHttpError<reqwest::Error>>;

impl Renewing {
    /// `call` with the current token; when the server refuses it, once more with a new one.
    async fn with_token<T, F, Fut>(&self, call: F) -> Answer<T>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Answer<T>>,
    {
        let token = self.tokens.current().await?;
        match call(Some(token.clone())).await {
            Err(StreamableHttpError::AuthRequired(_)) => {
                let fresh = self.tokens.after_refusal(&token).await?;
                call(Some(fresh)).await
            }
            answer => answer,
        }
    }
}

type Headers = HashMap<http::HeaderName, http::HeaderValue>;

impl StreamableHttpClient for Renewing {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: Headers,
    ) -> Answer<StreamableHttpPostResponse> {
        self.with_token(|token| {
            let (uri, message, session, headers) = (
                uri.clone(),
                message.clone(),
                session_id.clone(),
                headers.clone(),
            );
            async move {
                (self.http)
                    .post_message(uri, message, session, token, headers)
                    .await
            }
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: Headers,
        max: usize,
    ) -> Answer<StreamableHttpPostResponse> {
        self.with_token(|token| {
            let (uri, message, session, headers) = (
                uri.clone(),
                message.clone(),
                session_id.clone(),
                headers.clone(),
            );
            async move {
                (self.http)
                    .post_message_with_max_sse_event_size(
                        uri, message, session, token, headers, max,
                    )
                    .await
            }
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth: Option<String>,
        headers: Headers,
    ) -> Answer<()> {
        self.with_token(|token| {
            let (uri, session, headers) = (uri.clone(), session_id.clone(), headers.clone());
            async move {
                (self.http)
                    .delete_session(uri, session, token, headers)
                    .await
            }
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        headers: Headers,
    ) -> Answer<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        self.with_token(|token| {
            let (uri, session, last, headers) = (
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                headers.clone(),
            );
            async move {
                (self.http)
                    .get_stream(uri, session, last, token, headers)
                    .await
            }
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        headers: Headers,
        max: usize,
    ) -> Answer<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        self.with_token(|token| {
            let (uri, session, last, headers) = (
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                headers.clone(),
            );
            async move {
                (self.http)
                    .get_stream_with_max_sse_event_size(uri, session, last, token, headers, max)
                    .await
            }
        })
        .await
    }
}

/// The server's `WWW-Authenticate` challenge to a request without a token, if it gives one.
pub(super) async fn probe(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()?;
    let response = client
        .post(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body("{}")
        .send()
        .await
        .ok()?;
    (response.status() == reqwest::StatusCode::UNAUTHORIZED)
        .then(|| {
            response
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)?
                .to_str()
                .ok()
        })
        .flatten()
        .map(str::to_string)
}
