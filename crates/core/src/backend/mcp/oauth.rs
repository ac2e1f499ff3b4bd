//! An imported server that needs an OAuth access token (`[ensemble.mcp] oauth`): this host is
//! its own OAuth client there, never a caller's proxy. As the MCP authorization spec has a
//! client do it: the server's `401` names its protected resource metadata, that names the
//! authorization server, whose metadata gives the token endpoint; the token is asked for by
//! client credentials with the server's URL as the `resource` (RFC 8707), the client proving
//! itself with a secret (`client_secret_post`, or `client_secret_basic` where that is all the
//! server takes) or a signed assertion (`private_key_jwt`, RFC 7523). rmcp's auth support
//! does the discovery and the exchange (with the oauth2 crate) and sends the token with each
//! request; a token that expires ends the session, and the next call starts a new one with a
//! new token.
//!
//! Bounds: the probe's answer is read for its headers only, within [`PROBE_TIMEOUT`]; rmcp
//! bounds and times its own requests and follows no redirect to another host.

use rmcp::transport::auth::{
    AuthClient, AuthorizationManager, ClientCredentialsConfig, JwtSigningAlgorithm,
};
use std::time::Duration;
use toolhost_config::draft::{McpCredential, McpOauth};

/// How long the unauthenticated probe for the server's challenge may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP client for `url` that carries an access token got with `oauth`'s credentials.
pub(super) async fn client(
    url: &str,
    oauth: &McpOauth,
) -> Result<AuthClient<reqwest::Client>, String> {
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
        oauth.client_id.clone(),
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
    // rmcp's exchange future is not `Send` once `private_key_jwt` is built in (its form
    // serializer lives across an await), so it runs to its end on a blocking thread of this
    // runtime rather than on a worker; rmcp's own timeouts bound it.
    let runtime = tokio::runtime::Handle::current();
    let manager = tokio::task::spawn_blocking(move || {
        runtime
            .block_on(manager.exchange_client_credentials(&credentials))
            .map(|_| manager)
    })
    .await
    .map_err(|e| format!("its token exchange ended abnormally: {e}"))?
    .map_err(|e| format!("its authorization server gave no access token: {e}"))?;
    Ok(AuthClient::new(reqwest::Client::default(), manager))
}

/// The server's `WWW-Authenticate` challenge to a request without a token, if it gives one.
async fn probe(url: &str) -> Option<String> {
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
