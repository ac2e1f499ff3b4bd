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

/// How long a connection may take to send a request's headers.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, at most (`[host] max-http-connections`).
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// MCP sessions open at once, at most (`[host] max-mcp-sessions`).
pub(crate) const DEFAULT_MAX_SESSIONS: usize = 1000;
/// An MCP session idle this long is closed (`[host] mcp-session-idle-s`).
pub(crate) const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// Serves `router` on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: TcpListener,
    router: axum::Router,
    max_connections: usize,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
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
            () = &mut shutdown => return Ok(()),
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
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .with_upgrades();
            // A connection's failure (a client gone, a timeout) is the connection's alone.
            let _ = connection.await;
            drop(slot);
        });
    }
}
