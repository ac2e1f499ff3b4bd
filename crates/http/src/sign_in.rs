//! sign_in: the web chat's sign-in over HTTP (`[access.oidc.sign-in]`): the browser's side of
//! toolhost-access's authorization code flow, outside the guard (whoever signs in has no
//! token yet).
//!
//! ```text
//! GET  /auth/options   {"sign_in": bool}: whether the page offers "Sign in"
//! GET  /auth/sign-in   303 to the provider; cookie toolhost-sign-in = state.verifier
//!                      (HttpOnly, SameSite=Lax, Path=/auth, 10 minutes)
//! GET  /auth/callback  ?code&state from the provider: states compared, code exchanged,
//!                      token checked -> cookie toolhost-session = the access token
//!                      (HttpOnly, SameSite=Lax, Path=/, as long as the token holds), 303 to /
//! POST /auth/sign-out  the cookie cleared
//! ```
//!
//! The guard takes the session cookie as the bearer token on the page's paths (never on
//! `/mcp`), and checks it as any other: a forged or expired cookie is a refused token. The
//! host keeps nothing per sign-in. Answers are plain text (what a provider's error says is
//! never markup).

use crate::hosts::is_same_origin;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::collections::HashMap;
use std::sync::Arc;
use toolhost_access::Access;

/// The cookie that holds a signed-in browser's access token.
pub(crate) const SESSION_COOKIE: &str = "toolhost-session";
/// The cookie that holds a sign-in's state and PKCE verifier until the provider sends the
/// browser back.
const SIGN_IN_COOKIE: &str = "toolhost-sign-in";
/// How long a sign-in may take at the provider.
const SIGN_IN_SECONDS: u64 = 600;

/// The `/auth/...` routes.
pub(crate) fn router(access: Arc<Access>) -> axum::Router {
    axum::Router::new()
        .route("/auth/options", get(options))
        .route("/auth/sign-in", get(start))
        .route("/auth/callback", get(callback))
        .route("/auth/sign-out", post(sign_out))
        .with_state(access)
}

/// The value of the cookie `name` in `headers`, if it is there once.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut found = (headers.get_all(header::COOKIE).iter())
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(key, _)| *key == name)
        .map(|(_, value)| value);
    let value = found.next()?;
    found.next().is_none().then_some(value)
}

/// The provider the page signs people in with, if this host has one.
fn signing_in(access: &Access) -> Option<Arc<toolhost_access::Oidc>> {
    access.oidc().filter(|o| o.settings.sign_in.is_some())
}

/// The answer of a host without `[access.oidc.sign-in]`.
fn no_sign_in() -> Response {
    failed(
        StatusCode::NOT_FOUND,
        "this host has no [access.oidc.sign-in]",
    )
}

async fn options(State(access): State<Arc<Access>>) -> Response {
    let offered = signing_in(&access).is_some();
    axum::Json(serde_json::json!({ "sign_in": offered })).into_response()
}

async fn start(State(access): State<Arc<Access>>) -> Response {
    let Some(oidc) = signing_in(&access) else {
        return no_sign_in();
    };
    match oidc.start_sign_in().await {
        Ok(started) => {
            let secure = is_secure(&oidc);
            let cookie = format!(
                "{SIGN_IN_COOKIE}={}; Path=/auth; Max-Age={SIGN_IN_SECONDS}; HttpOnly; \
                 SameSite=Lax{secure}",
                started.kept
            );
            redirect(&started.location, &[cookie])
        }
        Err(e) => failed(StatusCode::BAD_GATEWAY, &e.0),
    }
}

async fn callback(State(access): State<Arc<Access>>, uri: Uri, headers: HeaderMap) -> Response {
    let query: HashMap<String, String> =
        url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let Some(oidc) = signing_in(&access) else {
        return no_sign_in();
    };
    if let Some(error) = query.get("error") {
        let description = query.get("error_description").map_or("", String::as_str);
        let said: String = format!("{error} {description}").chars().take(300).collect();
        return failed(
            StatusCode::BAD_REQUEST,
            &format!("the provider did not sign you in: {said}"),
        );
    }
    let (Some(code), Some(state)) = (query.get("code"), query.get("state")) else {
        return failed(
            StatusCode::BAD_REQUEST,
            "the provider's redirect carries no `code` and `state`",
        );
    };
    let Some(kept) = cookie(&headers, SIGN_IN_COOKIE) else {
        return failed(
            StatusCode::BAD_REQUEST,
            "this browser did not start a sign-in here (no sign-in cookie: it expires after \
             10 minutes, and a browser that refuses cookies cannot sign in)",
        );
    };
    match oidc.finish_sign_in(code, state, kept).await {
        Ok(signed_in) => {
            tracing::info!("{} signed in to the web chat", signed_in.identity);
            let secure = is_secure(&oidc);
            let cookies = [
                format!(
                    "{SESSION_COOKIE}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
                    signed_in.token,
                    signed_in.lifetime.as_secs()
                ),
                format!("{SIGN_IN_COOKIE}=; Path=/auth; Max-Age=0; HttpOnly; SameSite=Lax{secure}"),
            ];
            redirect("/", &cookies)
        }
        Err(e) => failed(StatusCode::BAD_REQUEST, &e.0),
    }
}

/// Forgets the browser's sign-in (the provider's own session is the provider's: signing in
/// again may not ask for a password).
async fn sign_out(State(access): State<Arc<Access>>, request: Request) -> Response {
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && !is_same_origin(origin, headers)
    {
        return failed(StatusCode::FORBIDDEN, "cross-origin requests are refused");
    }
    let secure = access.oidc().map_or("", |oidc| is_secure(&oidc));
    let cookie = format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax{secure}");
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// `; Secure` when the browser comes back over https (a cookie marked so is never sent over
/// plain http, which loopback set-ups use).
fn is_secure(oidc: &toolhost_access::Oidc) -> &'static str {
    let https =
        (oidc.settings.sign_in.as_ref()).is_some_and(|s| s.redirect_uri.scheme() == "https");
    if https { "; Secure" } else { "" }
}

fn redirect(location: &str, cookies: &[String]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, value);
    }
    for cookie in cookies {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            headers.append(header::SET_COOKIE, value);
        }
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A sign-in that did not happen, said in plain text with the way to start again.
fn failed(status: StatusCode, why: &str) -> Response {
    let text = format!("Sign-in failed: {why}\n\nStart again: /auth/sign-in\n");
    let mut response = (status, text).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
