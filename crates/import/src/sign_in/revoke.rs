//! revoke: `toolhost logout`'s revocation of a sign-in at its authorization server.

use super::store::{FileStore, forget, store_path};
use crate::oauth_http::Guarded;
use rmcp::transport::auth::{AuthorizationManager, StoredCredentials};
use std::path::Path;
use std::sync::Arc;
use toolhost_config::draft::{McpCredential, McpOauth};

/// How `toolhost logout` ended at the authorization server.
pub enum Revoked {
    /// Nobody was signed in: nothing to revoke or forget.
    NobodySignedIn,
    /// The grant was revoked there (RFC 7009), and the tokens are forgotten here.
    Revoked,
    /// The tokens are forgotten here; there they lapse when they expire (the server offers
    /// no revocation, or refused it: said why).
    ForgottenOnly(String),
}

/// `toolhost logout`: revokes the sign-in's refresh token (else its access token) at the
/// authorization server where it offers revocation (RFC 7009), sent by the sign-in's
/// [`Guarded`] client, then forgets the tokens here whatever it answered.
pub async fn revoke(url: &str, oauth: &McpOauth, dir: &Path) -> std::io::Result<Revoked> {
    let store = FileStore::new(store_path(dir, url));
    let Ok(Some(kept)) = store.read() else {
        forget(dir, url)?;
        return Ok(Revoked::NobodySignedIn);
    };
    let revoked = revoke_at_server(url, oauth, &kept).await;
    forget(dir, url)?;
    Ok(match revoked {
        Ok(()) => Revoked::Revoked,
        Err(why) => Revoked::ForgottenOnly(why),
    })
}

/// The RFC 7009 request, written here: the oauth2 crate's refuses an `http` endpoint even on
/// a loopback address, where the rest of a sign-in allows one (as in the tests); any other
/// endpoint must be `https`, as the RFC asks.
async fn revoke_at_server(
    url: &str,
    oauth: &McpOauth,
    kept: &StoredCredentials,
) -> Result<(), String> {
    use oauth2::TokenResponse;
    let tokens = kept.token_response.as_ref().ok_or("no tokens were kept")?;
    let (token, hint) = match tokens.refresh_token() {
        Some(refresh) => (refresh.secret().clone(), "refresh_token"),
        None => (tokens.access_token().secret().clone(), "access_token"),
    };
    let guarded = Arc::new(Guarded::new(url)?);
    let manager = AuthorizationManager::new_with_oauth_http_client(url, guarded.clone())
        .await
        .map_err(|e| format!("cannot prepare its OAuth client: {e}"))?;
    let challenge = crate::oauth::probe(url).await;
    let metadata = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("its authorization server could not be found: {e}"))?
        .metadata;
    let endpoint = (metadata.additional_fields.get("revocation_endpoint"))
        .and_then(|e| e.as_str())
        .ok_or("its authorization server offers no revocation")?;
    let parsed = url::Url::parse(endpoint)
        .map_err(|e| format!("its revocation endpoint `{endpoint}`: {e}"))?;
    if !toolhost_config::access::is_https_or_loopback(&parsed) {
        return Err(format!("its revocation endpoint `{endpoint}` is not https"));
    }
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("token", &token)
        .append_pair("token_type_hint", hint);
    let mut request = http::Request::post(endpoint)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json");
    match &oauth.credential {
        McpCredential::SignIn {
            client_secret: Some(secret),
            ..
        } => {
            use base64::Engine;
            let pair = format!("{}:{secret}", kept.client_id);
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header(http::header::AUTHORIZATION, format!("Basic {basic}"));
        }
        // A public client names itself in the request's body.
        _ => {
            form.append_pair("client_id", &kept.client_id);
        }
    }
    let request = request
        .body(form.finish().into_bytes())
        .map_err(|e| format!("cannot revoke: {e}"))?;
    let answer = guarded.send(request, false).await?;
    match answer.status() {
        status if status.is_success() => Ok(()),
        status => Err(format!(
            "its authorization server answered the revocation {status}"
        )),
    }
}
