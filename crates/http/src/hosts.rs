//! hosts: the `Host` header, held to the names this host answers to on the paths rmcp does
//! not check itself (the page, the chat API, the sign-in), and the `Origin` header, told
//! local or the host's own.

use axum::http::{HeaderMap, header};

/// The names (with or without a port) a `Host` header may carry, as rmcp takes them for
/// /mcp, read once when the front starts.
#[derive(Debug)]
pub(crate) struct AllowedHosts(Vec<(String, Option<u16>)>);

impl AllowedHosts {
    pub(crate) fn new(entries: &[String]) -> Self {
        let name = |host: &str| host.trim_matches(['[', ']']).to_ascii_lowercase();
        AllowedHosts(
            (entries.iter())
                .map(|entry| match entry.parse::<axum::http::uri::Authority>() {
                    Ok(entry) => (name(entry.host()), entry.port_u16()),
                    Err(_) => (name(entry), None),
                })
                .collect(),
        )
    }

    /// Whether the `Host` header of `headers` names one of these.
    pub(crate) fn allow(&self, headers: &HeaderMap) -> bool {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<axum::http::uri::Authority>().ok());
        host.as_ref().is_some_and(|host| {
            let name = host.host().trim_matches(['[', ']']);
            (self.0.iter()).any(|(allowed, port)| {
                allowed.eq_ignore_ascii_case(name)
                    && port.is_none_or(|port| host.port_u16() == Some(port))
            })
        })
    }
}

/// Refuses a request whose `Host` header is none of `allowed`: a DNS-rebinding page's
/// requests carry its own name.
pub(crate) async fn check_host(
    allowed: &AllowedHosts,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if allowed.allow(request.headers()) {
        next.run(request).await
    } else {
        refusal()
    }
}

/// The answer to a request whose `Host` is none of the allowed.
pub(crate) fn refusal() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::FORBIDDEN,
        "the Host header is not one this host answers to (see [host] allowed-hosts)",
    )
        .into_response()
}

/// True when `origin` is the host the request was sent to (a page this host served): its
/// authority is the `Host` header. A DNS-rebinding page also passes this, which is why it is
/// taken only on the web chat's paths, where `check_host` holds the Host header to the
/// allowed names.
pub(crate) fn is_same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    origin
        .parse::<axum::http::Uri>()
        .ok()
        .and_then(|uri| uri.authority().map(|a| a.as_str().to_ascii_lowercase()))
        .is_some_and(|authority| host.is_some_and(|h| h.eq_ignore_ascii_case(&authority)))
}

pub(crate) fn is_local_origin(origin: &str) -> bool {
    origin.parse::<axum::http::Uri>().is_ok_and(|uri| {
        matches!(
            uri.host(),
            Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
        )
    })
}
