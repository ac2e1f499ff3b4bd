//! `[access.oidc.sign-in]`: the web chat's sign-in with the trusted provider, checked
//! against the resource it signs people in to.

use super::{SignInSection, SignInSettings, is_https_or_loopback};
use toml::Spanned;

/// `[access.oidc.sign-in]` checked against the `resource` it signs people in to.
pub(super) fn check(
    section: &Spanned<SignInSection>,
    resource: &str,
    env: &dyn Fn(&str) -> Option<String>,
    error: &impl Fn(std::ops::Range<usize>, String),
    not_set: &impl Fn(std::ops::Range<usize>, String),
) -> Option<SignInSettings> {
    let sign_in = section.get_ref();
    // Err: named but not set (said; the other fields are still checked).
    let client_secret = match &sign_in.client_secret_env {
        Some(var) => env(var.get_ref().as_str()).map(Some).ok_or_else(|| {
            let message = super::Unset::message("client-secret-env", var.get_ref().as_str());
            not_set(var.span(), message);
        }),
        None => Ok(None),
    };
    let redirect_uri = match &sign_in.redirect_uri {
        Some(uri) => url::Url::parse(uri.get_ref())
            .ok()
            .filter(|url| is_https_or_loopback(url) && url.fragment().is_none())
            .or_else(|| {
                let message = format!(
                    "`redirect-uri` must be an https URL (http only on loopback), without a \
                     fragment; got {:?}",
                    uri.get_ref()
                );
                error(uri.span(), message);
                None
            }),
        None => url::Url::parse(resource)
            .ok()
            .and_then(|url| url.join("/auth/callback").ok()),
    };
    let mut scopes = sign_in.scopes.clone();
    if scopes.is_empty() {
        scopes.push("openid".into());
    }
    Some(SignInSettings {
        client_id: sign_in.client_id.clone(),
        client_secret: client_secret.ok()?,
        scopes,
        redirect_uri: redirect_uri?,
    })
}
