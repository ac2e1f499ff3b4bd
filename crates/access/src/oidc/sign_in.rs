//! The web chat's sign-in with the trusted provider: OAuth 2.1's authorization code with
//! PKCE (S256), as a client registered at the provider (`[access.oidc.sign-in]`), through
//! the `oauth2` crate.
//!
//! ```text
//! start:  a fresh state and PKCE verifier -> the provider's authorization URL (with
//!         `resource`, RFC 8707) and a value the browser keeps for the way back (a cookie)
//! finish: the provider's code, the state it returned, and the kept value -> states compared
//!         (constant time) -> the code exchanged with the verifier -> the access token checked
//!         as any other (issuer, audience, keys) -> the token and its identity
//! ```
//!
//! Nothing is kept on the host between the two: the state and verifier travel with the
//! browser, so a sign-in that starts on one replica may end on another, and a flood of
//! starts costs no memory. A token exchange reads at most [`MAX_DOCUMENT_BYTES`] within
//! [`FETCH_TIMEOUT`], and [`MAX_EXCHANGES`] run at once.

use super::{FETCH_TIMEOUT, Invalid, MAX_DOCUMENT_BYTES, Oidc, read_bounded};
use oauth2::basic::{BasicClient, BasicErrorResponse, BasicTokenResponse};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use toolhost_contract::Identity;

/// Token exchanges (one outgoing request each) in progress at once; more are refused.
pub const MAX_EXCHANGES: usize = 32;
/// The longest `code` or `state` taken from the provider's redirect.
pub const MAX_CODE_BYTES: usize = 2 << 10;
/// The longest access token a browser is given to keep (a cookie holds about 4 KiB).
pub const MAX_COOKIE_TOKEN_BYTES: usize = 3800;
/// How long a sign-in token is kept when the provider does not say (`expires_in`).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
/// The longest a browser keeps a sign-in token, whatever `expires_in` says (the cookie's
/// `Max-Age`): a day. The token's own `exp` still ends it sooner.
pub const MAX_SIGN_IN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// A sign-in started: where to send the browser, and what it keeps until it comes back.
#[derive(Debug)]
pub struct Started {
    pub location: String,
    /// `state.verifier`: checked and used when the browser comes back.
    pub kept: String,
}

/// A sign-in finished.
pub struct SignedIn {
    pub token: String,
    pub identity: Arc<Identity>,
    /// How long the token holds.
    pub lifetime: Duration,
}

impl Oidc {
    /// Starts a sign-in: the provider's authorization URL and what the browser keeps.
    pub async fn start_sign_in(&self) -> Result<Started, Invalid> {
        let sign_in = self.sign_in_settings()?;
        let endpoints = self.endpoints().await?;
        let client = BasicClient::new(ClientId::new(sign_in.client_id.clone()))
            .set_auth_uri(AuthUrl::from_url(endpoints.authorization))
            .set_redirect_uri(RedirectUrl::from_url(sign_in.redirect_uri.clone()));
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state) = client
            .authorize_url(CsrfToken::new_random)
            .add_scopes(sign_in.scopes.iter().cloned().map(Scope::new))
            .add_extra_param("resource", &self.settings.resource)
            .set_pkce_challenge(challenge)
            .url();
        Ok(Started {
            location: url.into(),
            kept: format!("{}.{}", state.secret(), verifier.secret()),
        })
    }

    /// Finishes a sign-in: `code` and `state` from the provider's redirect, `kept` as
    /// [`Started::kept`] said.
    pub async fn finish_sign_in(
        &self,
        code: &str,
        state: &str,
        kept: &str,
    ) -> Result<SignedIn, Invalid> {
        let sign_in = self.sign_in_settings()?;
        if code.len() > MAX_CODE_BYTES || state.len() > MAX_CODE_BYTES {
            return Err(Invalid(format!(
                "the code or state is longer than {} KiB",
                MAX_CODE_BYTES >> 10
            )));
        }
        let (kept_state, verifier) = kept
            .split_once('.')
            .ok_or_else(|| Invalid("the sign-in this browser started cannot be read".into()))?;
        if !bool::from(kept_state.as_bytes().ct_eq(state.as_bytes())) {
            return Err(Invalid(
                "the state the provider sent back is not the one this browser's sign-in \
                 started with (another sign-in, or a forged link): sign in again"
                    .into(),
            ));
        }
        let _running = self.exchanges.clone().try_acquire_owned().map_err(|_| {
            Invalid(format!(
                "{MAX_EXCHANGES} sign-ins are being finished at once, the most this host \
                 runs: try again"
            ))
        })?;
        let endpoints = self.endpoints().await?;
        let mut client = BasicClient::new(ClientId::new(sign_in.client_id.clone()))
            .set_token_uri(TokenUrl::from_url(endpoints.token))
            .set_redirect_uri(RedirectUrl::from_url(sign_in.redirect_uri.clone()));
        if let Some(secret) = &sign_in.client_secret {
            client = client.set_client_secret(ClientSecret::new(secret.clone()));
        }
        let http = self.client.clone();
        let send = move |request: oauth2::HttpRequest| send(http.clone(), request);
        let answer: BasicTokenResponse = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_string()))
            .add_extra_param("resource", &self.settings.resource)
            .request_async(&send)
            .await
            .map_err(describe)?;
        let token = answer.access_token().secret().clone();
        if token.len() > MAX_COOKIE_TOKEN_BYTES {
            return Err(Invalid(format!(
                "the provider's access token is {} bytes, longer than a browser keeps \
                 ({MAX_COOKIE_TOKEN_BYTES})",
                token.len()
            )));
        }
        let identity = self.identify(&token).await?;
        Ok(SignedIn {
            token,
            identity,
            lifetime: (answer.expires_in().unwrap_or(DEFAULT_LIFETIME)).min(MAX_SIGN_IN_LIFETIME),
        })
    }

    fn sign_in_settings(&self) -> Result<&toolhost_config::access::SignInSettings, Invalid> {
        (self.settings.sign_in.as_ref())
            .ok_or_else(|| Invalid("this host has no [access.oidc.sign-in]".into()))
    }
}

/// One request of the `oauth2` crate, sent without redirects (the provider's client does not
/// follow them), its answer bounded.
async fn send(
    client: reqwest::Client,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, Invalid> {
    let failed = |e: String| Invalid(format!("the provider's token endpoint: {e}"));
    let (parts, body) = request.into_parts();
    let mut response = client
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = read_bounded(&mut response).await.map_err(failed)?;
    let mut answer = http::Response::new(body);
    *answer.status_mut() = status;
    *answer.headers_mut() = headers;
    Ok(answer)
}

/// What a failed exchange says to the person signing in.
fn describe(error: RequestTokenError<Invalid, BasicErrorResponse>) -> Invalid {
    match error {
        RequestTokenError::ServerResponse(answer) => Invalid(format!(
            "the provider refused the code: {}{}",
            answer.error(),
            (answer.error_description()).map_or(String::new(), |d| format!(" ({d})"))
        )),
        RequestTokenError::Request(e) => e,
        RequestTokenError::Parse(e, _) => Invalid(format!(
            "the provider's token answer is not the JSON expected: {e} (at most {} KiB read)",
            MAX_DOCUMENT_BYTES >> 10
        )),
        RequestTokenError::Other(e) => Invalid(format!("the provider's token answer: {e}")),
    }
}
