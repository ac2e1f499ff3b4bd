//! hosts: the `Host` header, held to the names this host answers to on the paths rmcp does
//! not check itself (the page, the chat API, the sign-in).

/// Refuses a request whose `Host` header is none of `allowed` (names, with or without a port,
/// as rmcp takes them for /mcp): a DNS-rebinding page's requests carry its own name.
pub(crate) async fn check_host(
    allowed: &[String],
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<axum::http::uri::Authority>().ok());
    let allowed = host.as_ref().is_some_and(|host| {
        let name = host.host().trim_matches(['[', ']']);
        allowed
            .iter()
            .any(|entry| match entry.parse::<axum::http::uri::Authority>() {
                Ok(entry) => {
                    entry
                        .host()
                        .trim_matches(['[', ']'])
                        .eq_ignore_ascii_case(name)
                        && entry
                            .port_u16()
                            .is_none_or(|port| host.port_u16() == Some(port))
                }
                Err(_) => entry.trim_matches(['[', ']']).eq_ignore_ascii_case(name),
            })
    });
    if allowed {
        next.run(request).await
    } else {
        (
            axum::http::StatusCode::FORBIDDEN,
            "the Host header is not one this host answers to (see [host] allowed-hosts)",
        )
            .into_response()
    }
}
