//! `toolhost serve`: the catalog over MCP (stdio by default, streamable HTTP with `--http`),
//! with hot reload (unless `--no-watch`) and a status file for `toolhost status`.

use super::settings::Settings;
use anyhow::{Context, bail};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolhost::invoke::Host;
use toolhost::mcp::McpServer;
use toolhost::mcp::log::LogRelay;
use toolhost::reload::{DEFAULT_DEBOUNCE, Reloader};
use toolhost::runtime::Runtime;

/// How `serve` was asked to run.
pub(crate) struct ServeOptions {
    pub(crate) http: Option<String>,
    pub(crate) token_env: Option<String>,
    pub(crate) no_watch: bool,
}

pub(crate) async fn run(
    settings: &Settings,
    options: ServeOptions,
    logs: LogRelay,
) -> anyhow::Result<ExitCode> {
    let token = match &options.token_env {
        Some(var) => Some(
            std::env::var(var)
                .with_context(|| format!("--token-env {var}: the variable is not set"))?,
        ),
        None => None,
    };
    if token.as_deref().is_some_and(str::is_empty) {
        bail!("--token-env: the token is empty");
    }
    let runtime = settings.runtime()?;
    // Nothing waits for a compile: what is loaded or cached serves at once, the rest joins
    // the catalog when its compile ends.
    let reloader = Reloader::start_serving(runtime.clone(), settings.ensembles.clone()).await;
    for refused in reloader.status().refused {
        tracing::warn!(
            "{} was refused ({} error(s)); run `toolhost check` for details",
            refused.file.display(),
            refused.errors.len()
        );
    }
    let host = Arc::new(settings.host_over(reloader.catalog().clone())?);
    // Without watching, components compiled in the background still join when ready.
    let _watch = if options.no_watch {
        reloader.follow_compiles()
    } else {
        reloader.watch(DEFAULT_DEBOUNCE)?
    };
    let _prune = prune_cache(reloader.clone(), runtime.clone(), settings.cache_keep);
    let _status = settings
        .status_file
        .as_ref()
        .map(|path| super::status::publish(reloader.clone(), runtime.clone(), path.clone()));
    match &options.http {
        None => serve_stdio(host, logs).await,
        Some(address) => serve_http(host, logs, address, token, settings.http).await,
    }
}

/// Keeps the compile cache to what the ensembles use (and the `keep` most recently used of
/// the rest): once at start, then after every reload that changed tools. Stops when dropped.
fn prune_cache(reloader: Arc<Reloader>, runtime: Arc<Runtime>, keep: usize) -> AbortOnDrop {
    let mut changes = reloader.subscribe();
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let in_use = reloader.components_in_use();
            let runtime = Arc::clone(&runtime);
            let pruned = tokio::task::spawn_blocking(move || runtime.prune_cache(&in_use, keep));
            if let Ok(Some(pruned)) = pruned.await
                && pruned.removed > 0
            {
                tracing::info!(
                    "compile cache: removed {} component(s) no ensemble uses ({} MiB); kept {}",
                    pruned.removed,
                    pruned.freed_bytes >> 20,
                    pruned.kept
                );
            }
            // Every change made meanwhile is answered by the next pass.
            loop {
                match changes.recv().await {
                    Ok(change) if change.tools_changed() => break,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }))
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve_stdio(host: Arc<Host>, logs: LogRelay) -> anyhow::Result<ExitCode> {
    let id = format!("mcp-stdio-{}", std::process::id());
    let server = McpServer::new(host, id).with_logs(logs);
    let signal = shutdown_signal();
    // Only protocol messages reach stdout: logs go to stderr, plugins' output is captured.
    let service = match server.serve(rmcp::transport::stdio()).await {
        Ok(service) => service,
        // The client went away before it said hello: nothing to serve, nothing wrong.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e).context("the MCP session did not start"),
    };
    tokio::select! {
        result = service.waiting() => {
            result.context("the MCP session failed")?;
        }
        () = signal => {}
    }
    Ok(ExitCode::SUCCESS)
}

async fn serve_http(
    host: Arc<Host>,
    logs: LogRelay,
    address: &str,
    token: Option<String>,
    limits: super::settings::HttpLimits,
) -> anyhow::Result<ExitCode> {
    let address: SocketAddr = address
        .parse()
        .with_context(|| format!("--http {address}: expected IP:PORT, e.g. 127.0.0.1:8750"))?;
    if !address.ip().is_loopback() && token.is_none() {
        bail!(
            "--http {address} is not a loopback address: set --token-env VAR so that clients must present a bearer token"
        );
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let local = listener.local_addr()?;
    let mut config = StreamableHttpServerConfig::default();
    if !local.ip().is_loopback() {
        let mut hosts = config.allowed_hosts.clone();
        hosts.push(local.ip().to_string());
        config = config.with_allowed_hosts(hosts);
    }
    let cancel = config.cancellation_token.clone();
    let factory = McpServer::factory(host, Some(logs), "mcp-http");
    // Idle sessions close after `mcp-session-idle-s`; new ones past `max-mcp-sessions` are
    // refused (`guard`).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(limits.session_idle);
    let sessions = Arc::new(sessions);
    let service = StreamableHttpService::new(move || Ok(factory()), Arc::clone(&sessions), config);
    let guard_state = Arc::new(Guard {
        token: token.map(|t| blake3::hash(t.as_bytes())),
        sessions,
        max_sessions: limits.max_sessions,
        opening: AtomicUsize::new(0),
    });
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(move |request, next| {
                let guard_state = guard_state.clone();
                async move { guard(&guard_state, request, next).await }
            }));
    let signal = shutdown_signal();
    // Tests and scripts read this line to learn the port when they asked for port 0.
    eprintln!("toolhost: serving MCP on http://{local}/mcp");
    let shutdown = async move {
        signal.await;
        cancel.cancel();
    };
    super::http::serve(
        listener,
        router,
        limits.max_connections,
        limits.header_timeout,
        shutdown,
    )
    .await
    .context("the HTTP server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// What every HTTP request is checked against.
struct Guard {
    /// The token's hash: comparing hashes takes the same time whatever the guess shares
    /// with the token (`blake3::Hash` compares in constant time).
    token: Option<blake3::Hash>,
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    /// Requests that may open a session and have not finished yet: counted with the open
    /// sessions, so a burst of them cannot all pass the cap before the first one opens.
    opening: AtomicUsize,
}

/// One request counted in [`Guard::opening`] until it ends.
struct Opening<'a>(&'a AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Refuses requests from other origins (a web page the user visits must not reach local
/// tools), requests without the token when one is set, and a new MCP session when
/// `max-mcp-sessions` are open. rmcp checks the Host header.
async fn guard(guard: &Guard, request: Request, next: Next) -> Response {
    if let Some(origin) = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        && !is_local_origin(origin)
    {
        return (StatusCode::FORBIDDEN, "cross-origin requests are refused").into_response();
    }
    if let Some(expected) = guard.token
        && bearer(request.headers()).map(|t| blake3::hash(t.as_bytes())) != Some(expected)
    {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required").into_response();
    }
    let opens_a_session = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    let (opening, _counted) = if opens_a_session {
        let opening = guard.opening.fetch_add(1, Ordering::SeqCst);
        (opening, Some(Opening(&guard.opening)))
    } else {
        (0, None)
    };
    if opens_a_session && guard.sessions.sessions.read().await.len() + opening >= guard.max_sessions
    {
        let message = format!(
            "{} MCP sessions are open, the most this host takes (max-mcp-sessions); \
             close one or try again later",
            guard.max_sessions
        );
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    }
    next.run(request).await
}

/// The token of `Authorization: Bearer <token>`; the scheme is case-insensitive (RFC 9110).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn is_local_origin(origin: &str) -> bool {
    origin.parse::<axum::http::Uri>().is_ok_and(|uri| {
        matches!(
            uri.host(),
            Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
        )
    })
}

/// Ctrl-C (SIGINT) or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled, so a signal that comes right after the server says it is ready
/// still stops it cleanly instead of killing it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        let wait = |signal: std::io::Result<tokio::signal::unix::Signal>| async move {
            match signal {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(terminate) => {}
            () = wait(interrupt) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_local_origin;

    #[test]
    fn only_local_origins_pass() {
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://localhost",
            "http://[::1]:8080",
            "http://[::1]",
        ] {
            assert!(is_local_origin(origin), "{origin}");
        }
        for origin in [
            "https://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io:80",
            "null",
            "http://[::2]",
        ] {
            assert!(!is_local_origin(origin), "{origin}");
        }
    }
}
