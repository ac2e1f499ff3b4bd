//! sign_in: an imported server that a person signs in to (`[ensemble.mcp] oauth = { sign-in =
//! true }`). `toolhost login ENSEMBLE` runs the authorization code flow with PKCE as the MCP
//! authorization spec has a client do it, all of it rmcp's (`OAuthState`, with the oauth2
//! crate): the server's `401` names its protected resource metadata, that names the
//! authorization server; the client is the one configured, else one registered by a client
//! ID metadata document or dynamic registration, whichever the server offers, in the spec's
//! order; the person is sent to the authorization URL and comes back to a loopback redirect
//! with the code and the state, which are checked and exchanged, with the server's URL as the
//! `resource` (RFC 8707). The tokens (the refresh token with them) are kept in a file of this
//! host's state, readable by its user alone ([`FileStore`]); `serve` reads them and rmcp's
//! [`AuthClient`] sends the access token with each request and renews it by the refresh token
//! before it expires, saving what it gets. No tokens, or a refresh the server refuses, is
//! "needs sign-in", with the command to run.
//!
//! Every request of a sign-in goes through toolhost's own bounded client
//! (`oauth_http`); the authorization server is found once per sign-in and pinned
//! beside the tokens (`store`), so that no token goes to another. `step_up` keeps what a
//! server's `403 insufficient_scope` asks for until the next sign-in; `revoke` is
//! `toolhost logout`'s revocation.

mod revoke;
mod step_up;
mod store;

pub use revoke::{Revoked, revoke};
pub(crate) use step_up::{insufficient_scope, step_up};
pub use store::{FileStore, Registered, forget, registered, store_path};

use crate::oauth_http::{Guarded, Refusals};
use rmcp::transport::auth::{
    AuthClient, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    OAuthClientConfig, OAuthState,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolhost_config::draft::{McpCredential, McpOauth};

/// The message of an import that has no usable tokens (said of the ensemble that imports
/// it, whose name the command takes).
fn needs_sign_in(why: impl std::fmt::Display) -> String {
    format!("{NEEDS_SIGN_IN}{why}): run `toolhost login` with this ensemble's name")
}

pub use toolhost_core::import::NEEDS_SIGN_IN;

/// How long one step of a sign-in may take (finding the authorization server, starting,
/// the exchange), whatever its requests' own bounds add up to.
const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// `step` within [`STEP_TIMEOUT`].
async fn in_time<T>(
    what: &str,
    step: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(STEP_TIMEOUT, step)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{what} took more than {} s",
                STEP_TIMEOUT.as_secs()
            ))
        })
}

/// What [`manager`] found.
struct Found {
    manager: AuthorizationManager,
    /// The server's challenge (its `WWW-Authenticate`) that found it.
    challenge: Option<String>,
    refusals: Refusals,
    /// The authorization server found, as a sign-in pins it.
    server: store::Pinned,
}

/// A manager for the server at `url` with its authorization server found (once: rmcp is not
/// left to find it again, perhaps elsewhere) and its tokens kept in `dir`, every request of
/// it made by a [`Guarded`] client.
async fn manager(url: &str, dir: &Path) -> Result<Found, String> {
    let guarded = Guarded::new(url)?;
    let refusals = guarded.refusals();
    let mut manager = AuthorizationManager::new_with_oauth_http_client(url, Arc::new(guarded))
        .await
        .map_err(|e| format!("cannot prepare its OAuth client: {e}"))?;
    let challenge = crate::oauth::probe(url).await;
    refusals.clear();
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| {
            format!(
                "its authorization server could not be found: {e}{}",
                because(&refusals)
            )
        })?;
    let server = store::Pinned {
        issuer: resolution.metadata.issuer.clone(),
        token_endpoint: resolution.metadata.token_endpoint.clone(),
    };
    manager.set_metadata(resolution.metadata);
    manager.set_credential_store(FileStore::new(store_path(dir, url)));
    Ok(Found {
        manager,
        challenge,
        refusals,
        server,
    })
}

/// What the sign-in's HTTP client refused last, said after rmcp's error (which rarely says).
fn because(refusals: &Refusals) -> String {
    refusals
        .last()
        .map_or(String::new(), |why| format!(" ({why})"))
}

/// Who is signed in to the server at `url` now, as its tokens in `dir` say: the client the
/// sign-in was made with, or `None` when no one is (no tokens: never signed in, or signed
/// out). A file that cannot be read is an error that says why.
pub(crate) fn signed_in(dir: &Path, url: &str) -> Result<Option<String>, String> {
    let stored = FileStore::new(store_path(dir, url)).read();
    let stored =
        stored.map_err(|e| toolhost_contract::without_type_paths(&e.to_string()).into_owned())?;
    Ok(stored.map(|credentials| credentials.client_id))
}

/// The message of an import whose server refused its tokens (or their renewal was refused).
pub(crate) fn refused_tokens() -> String {
    needs_sign_in(
        "the server asked for a sign-in again: its tokens were refused or could not be renewed",
    )
}

/// Whether `error` is the server (or the client's renewal) asking for a sign-in: rmcp's
/// `AuthRequired` from the transport, or an authorization error of its OAuth client.
pub(crate) fn asks_for_sign_in(error: &rmcp::ServiceError) -> bool {
    let text = error.to_string();
    [
        "Auth required",
        "authorization required",
        "refresh token was rejected",
    ]
    .iter()
    .any(|said| text.contains(said))
}

/// The message of an import no one is signed in to any more (`toolhost logout` removed the
/// tokens while it served).
pub(crate) fn signed_out() -> String {
    needs_sign_in("no one is signed in: the sign-in was ended")
}

/// The HTTP client of the import at `url`, with the tokens a person's sign-in left in `dir`
/// (and the client they were issued to); "needs sign-in" when there are none or they cannot
/// be renewed. Without tokens nothing is sent anywhere.
pub(super) async fn client(
    url: &str,
    oauth: &McpOauth,
    dir: &Path,
) -> Result<(AuthClient<reqwest::Client>, String), String> {
    let Some(client_id) = signed_in(dir, url)? else {
        return Err(needs_sign_in("no one has signed in"));
    };
    let Found {
        mut manager,
        refusals,
        server,
        ..
    } = manager(url, dir).await?;
    // Nothing is sent (a refresh token least of all) to an authorization server other than
    // the one signed in at; the tokens are kept, in case the server names it again (rmcp
    // would drop them).
    let pinned = store::pinned(dir, url);
    if let Some(pinned) = pinned.as_ref().filter(|pinned| **pinned != server) {
        return Err(needs_sign_in(format!(
            "the server now names another authorization server ({}, token endpoint {}) than \
             the one signed in at ({}): signing in again trusts it",
            server.issuer.as_deref().unwrap_or("no issuer"),
            server.token_endpoint,
            pinned.issuer.as_deref().unwrap_or(&pinned.token_endpoint),
        )));
    }
    let stored = manager
        .initialize_from_store()
        .await
        .map_err(needs_sign_in)?;
    if !stored {
        return Err(needs_sign_in("no one has signed in"));
    }
    if pinned.is_none() {
        return Err(needs_sign_in(
            "the sign-in's authorization server is not known",
        ));
    }
    if let McpCredential::SignIn {
        client_secret: Some(secret),
        ..
    } = &oauth.credential
        && let Some(id) = &oauth.client_id
    {
        let config = OAuthClientConfig::new(id.clone(), "http://127.0.0.1/callback")
            .with_client_secret(secret.clone());
        manager
            .configure_client(config)
            .map_err(|e| format!("cannot use its authorization server: {e}"))?;
    }
    // The token now (renewed if it is due), so that an import nobody can use stays out.
    refusals.clear();
    manager
        .get_access_token()
        .await
        .map_err(|e| needs_sign_in(format!("{e}{}", because(&refusals))))?;
    Ok((
        AuthClient::new(reqwest::Client::default(), manager),
        client_id,
    ))
}

/// Whether the authorization server still knows `client` (registered at an earlier sign-in):
/// a refresh with a token that is no token, which takes nothing and tells an unknown client
/// (`invalid_client`, RFC 6749 §5.2) from a known one (`invalid_grant`). Anything else (no
/// answer, a refusal of the request) is taken as not known: a new client is registered.
async fn still_registered(url: &str, client: &store::Registered) -> bool {
    let Ok(guarded) = Guarded::new(url) else {
        return false;
    };
    let body = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("grant_type", "refresh_token")
        .append_pair("refresh_token", "toolhost-asks-whether-its-client-is-known")
        .append_pair("client_id", &client.client_id)
        .finish();
    let asked = http::Request::post(&client.server.token_endpoint)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json")
        .body(body.into_bytes());
    let Ok(asked) = asked else {
        return false;
    };
    let Ok(answer) = in_time("asking for the registered client", async {
        guarded.send(asked, false).await
    })
    .await
    else {
        return false;
    };
    let error = serde_json::from_slice::<serde_json::Value>(answer.body())
        .ok()
        .and_then(|body| body["error"].as_str().map(str::to_string));
    answer.status().is_client_error() && error.is_some_and(|error| error != "invalid_client")
}

/// A sign-in under way: the URL to send the person to, and what checks and exchanges the
/// code that comes back.
pub struct SignIn {
    state: OAuthState,
    url: String,
    /// The step-up scopes this sign-in asks for, forgotten once it is done.
    wanted: PathBuf,
    refusals: Refusals,
    /// The authorization server it is made at, pinned once it is done.
    server: store::Pinned,
    dir: PathBuf,
    resource: String,
    redirect_uri: String,
    /// The client registered at an earlier sign-in that this one signs in with.
    reused: Option<String>,
    /// Whether the client is registered by this sign-in (then kept for the next one).
    registers: bool,
}

impl SignIn {
    /// Starts signing in to the server at `url` for `oauth`, the person to come back to
    /// `redirect_uri` (a loopback address of `toolhost login`); the tokens will be kept in
    /// `dir`.
    pub async fn begin(
        url: &str,
        oauth: &McpOauth,
        dir: &Path,
        redirect_uri: &str,
    ) -> Result<SignIn, String> {
        let Found {
            manager,
            challenge,
            refusals,
            server,
        } = in_time("finding its authorization server", manager(url, dir)).await?;
        let mut request = AuthorizationRequest::new(redirect_uri).with_client_name("toolhost");
        // The scopes configured, with those a server's step-up asked for since the last
        // sign-in (which include what that one was granted).
        let mut scopes = oauth.scopes.clone();
        for scope in step_up::wanted(dir, url) {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        request = match scopes.is_empty() {
            // The challenge's `scope`, else the server's `scopes_supported` (rmcp's choice,
            // as the spec orders it).
            true => request.with_initial_scope_selection(),
            false => request.with_scopes(scopes),
        };
        // A client configured is used as it is; else the one an earlier sign-in registered,
        // while the authorization server still knows it; else rmcp registers one.
        let mut reused = None;
        let configured = match &oauth.credential {
            McpCredential::SignIn { metadata_url, .. } => metadata_url.is_some(),
            _ => false,
        };
        if let Some(id) = &oauth.client_id {
            request = request.with_preregistered_client(id.clone());
        } else if !configured
            && let Some(client) = store::registered(dir, url)
            && client.redirect_uri == redirect_uri
            && client.server == server
            && still_registered(url, &client).await
        {
            request = request.with_preregistered_client(client.client_id.clone());
            reused = Some(client.client_id);
        }
        let registers = oauth.client_id.is_none() && !configured && reused.is_none();
        if let McpCredential::SignIn {
            client_secret,
            metadata_url,
        } = &oauth.credential
        {
            if let Some(secret) = client_secret {
                request = request.with_client_secret(secret.clone());
            }
            // Used where the authorization server takes client ID metadata documents, before
            // dynamic registration (rmcp keeps the spec's order).
            if let Some(document) = metadata_url {
                request = request.with_client_metadata_url(document.clone());
            }
        }
        if let Some(challenge) = challenge {
            request = request.with_challenge(challenge);
        }
        // The session made on the metadata found above (rmcp's `start_authorization` would
        // look for the authorization server again, and a hostile server may answer otherwise
        // the second time).
        refusals.clear();
        let session = in_time("starting the sign-in", async {
            AuthorizationSession::new(manager, request)
                .await
                .map_err(|(_, e)| format!("cannot start signing in: {e}{}", because(&refusals)))
        })
        .await?;
        let state = OAuthState::Session(session);
        let address = state
            .get_authorization_url()
            .await
            .map_err(|e| format!("cannot start signing in: {e}"))?;
        // Opened in a browser: a web address, no weaker than the server's own.
        let scheme = url::Url::parse(&address).map(|a| a.scheme().to_string());
        let plain_allowed = url.starts_with("http://");
        match scheme.as_deref() {
            Ok("https") => {}
            Ok("http") if plain_allowed => {}
            _ => {
                return Err(format!(
                    "the authorization server's sign-in page `{}` is not an https address",
                    address.chars().take(200).collect::<String>()
                ));
            }
        }
        Ok(SignIn {
            state,
            url: address,
            wanted: store::wanted_path(dir, url),
            refusals,
            server,
            dir: dir.to_path_buf(),
            resource: url.to_string(),
            redirect_uri: redirect_uri.to_string(),
            reused,
            registers,
        })
    }

    /// The authorization URL to open.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The client registered at an earlier sign-in that this one signs in with, if any.
    pub fn reused_client(&self) -> Option<&str> {
        self.reused.as_deref()
    }

    /// Checks the redirect the person came back with (`callback`, the whole URL: the state
    /// must be this sign-in's) and exchanges its code for tokens, which are then kept.
    pub async fn finish(mut self, callback: &str) -> Result<(), String> {
        // Pinned before the tokens land, so that a `serve` that sees them (its watch) finds
        // their authorization server; put back as it was if no tokens come, so that earlier
        // tokens are never taken for this server's.
        let (dir, resource) = (self.dir.clone(), self.resource.clone());
        let previous = store::pinned(&dir, &resource);
        store::pin(&dir, &resource, &self.server)
            .map_err(|e| format!("cannot keep the sign-in's authorization server: {e}"))?;
        self.refusals.clear();
        let refusals = self.refusals.clone();
        let exchanged = in_time("the token exchange", async {
            (self.state.handle_callback_url(callback).await)
                .map_err(|e| format!("signing in failed: {e}{}", because(&refusals)))
        })
        .await;
        if let Err(e) = exchanged {
            store::unpin(&dir, &resource, previous.as_ref());
            return Err(e);
        }
        let _ = std::fs::remove_file(&self.wanted);
        // The client it registered, kept for the next sign-in (a failure to keep it costs
        // only a registration then).
        if self.registers
            && let Ok(Some(client_id)) = signed_in(&dir, &resource)
        {
            let client = store::Registered {
                client_id,
                redirect_uri: self.redirect_uri.clone(),
                server: self.server.clone(),
            };
            let _ = store::keep_registered(&dir, &resource, &client);
        }
        Ok(())
    }
}
