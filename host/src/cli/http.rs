//! The HTTP server of `serve --http`: an accept loop over hyper with the bounds that
//! `axum::serve` does not have. A connection must send each request's headers within the
//! header timeout (`[host] http-header-timeout-ms`, [`DEFAULT_HEADER_TIMEOUT`]), so half-open
//! connections do not pile up; at most `max_connections` are open at once, and a connection
//! past that is closed at once (the others are served).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use toolhost::invoke::{OwnedCounted, Tally};

/// How long a connection may take to send a request's headers.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, at most (`[host] max-http-connections`).
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// MCP sessions open at once, at most (`[host] max-mcp-sessions`).
pub(crate) const DEFAULT_MAX_SESSIONS: usize = 1000;
/// An MCP session idle this long is closed (`[host] mcp-session-idle-s`).
pub(crate) const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// How long open connections get to finish their answers once `shutdown` completed.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// Serves `router` on `listener` until `shutdown` completes, then closes the connections:
/// idle ones at once, the others when their answer is written (at most [`CLOSE_GRACE`]).
pub(crate) async fn serve<T>(
    listener: TcpListener,
    router: axum::Router,
    max_connections: usize,
    header_timeout: Duration,
    shutdown: impl Future<Output = T>,
) -> std::io::Result<T> {
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut warned = false;
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, say: wait a moment rather than spin.
                Err(e) => {
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            done = &mut shutdown => {
                drop(listener);
                let _ = tokio::time::timeout(CLOSE_GRACE, connections.shutdown()).await;
                return Ok(done);
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            if !warned {
                tracing::warn!(
                    "{max_connections} HTTP connections are open (max-http-connections); new ones are closed until some end"
                );
                warned = true;
            }
            drop(stream);
            continue;
        };
        warned = false;
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let watcher = connections.watcher();
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let connection = watcher.watch(connection);
            // A connection's failure (a client gone, a timeout) is the connection's alone.
            let _ = connection.await;
            drop(slot);
        });
    }
}

/// Middleware: counts `request` in `answering` from its arrival until its response body
/// ends (or is dropped), so that a shutdown can let the last answers go out before it closes
/// the MCP sessions.
pub(crate) async fn count_answer(
    answering: Arc<Tally>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let open = answering.enter_owned();
    let response = next.run(request).await;
    response.map(|body| axum::body::Body::new(CountedBody { body, _open: open }))
}

/// A response body that keeps its request counted until it ends.
struct CountedBody {
    body: axum::body::Body,
    _open: OwnedCounted,
}

impl http_body::Body for CountedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

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
