//! toolhost-http: the HTTP front of `serve --http`. Everything a request meets before MCP or
//! the web chat answers it is here, in the order it meets it:
//!
//! ```text
//! accept      a connection within max-http-connections (the idle one longest evicted, the
//!             probes served past the cap), headers within http-header-timeout-ms, the
//!             body within http-body-timeout-s; each POST counted until its answer
//!             ends (a shutdown waits for it)                                    [accept]
//!             a connection that wakes itself polled again at once               [repoll]
//! outside the guard:
//!   /healthz, /readyz                                                           [probes]
//!   /.well-known/oauth-protected-resource[/mcp]                                 [guard::metadata]
//!   /auth/*   the web chat's sign-in, Host checked                              [sign_in, hosts]
//! guard       other origins refused; identity (loopback, token, access token);
//!             a session bound to its identity; a request for a session, task or
//!             waiting call another replica holds forwarded to it [route]; 429 past a
//!             quota; 403 step-up; max-mcp-sessions                              [guard]
//! streams     an answer that stays open takes one of max-http-streams           [streams]
//! route       /mcp -> a session-less request that needs one answer: answered in its
//!             own request (toolhost-mcp's direct); the rest: rmcp's streamable HTTP
//!             service over toolhost-mcp's server                                [mcp]
//!             /api/*, / -> toolhost-web (Host checked); /metrics                [probes]
//! ```
//!
//! [`Front::bind`] checks the address against `[access]` (a non-loopback address needs
//! tokens), listens and builds the routes; [`Front::serve`] serves until the drain it is given
//! completes, lets the last answers out, and closes.

mod accept;
mod guard;
mod hosts;
mod mcp;
mod probes;
mod repoll;
mod route;
mod sign_in;
mod streams;

pub use accept::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_STREAMS, DEFAULT_SESSION_IDLE, PROBE_RESERVE,
};
pub use probes::Scrape;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolhost_access::Access;
use toolhost_core::invoke::Tally;
use toolhost_mcp::McpServer;
use toolhost_mcp::log::LogRelay;

/// How long the MCP layer gets, after the drain, to write the answers of the last calls.
pub const ANSWER_GRACE: Duration = Duration::from_secs(3);

/// The bounds of `serve --http` (`[host]` in toolhost.toml).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// MCP sessions open at once (`max-mcp-sessions`), and how long one may stay idle.
    pub max_sessions: usize,
    pub session_idle: Duration,
    /// Connections open at once (`max-http-connections`).
    pub max_connections: usize,
    /// Event streams open at once: at most half of `max_connections`, so that calls and
    /// probes always have connections left.
    pub max_streams: usize,
    /// How long a connection may take to send a request's headers, and its body once the
    /// headers arrived.
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: DEFAULT_SESSION_IDLE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_streams: DEFAULT_MAX_STREAMS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// What the front serves: the host's state behind `/mcp`, the chat behind `/api`, who may
/// reach them, and the gauges of `/metrics`.
pub struct Served {
    pub scrape: Scrape,
    pub access: Arc<Access>,
    pub web: Arc<toolhost_web::Web>,
    /// Serve the page at `/`: `None` means on loopback only.
    pub page: Option<bool>,
    /// The host's log lines, relayed to MCP sessions.
    pub logs: LogRelay,
    /// Turns true when the host's first load has ended (MCP lists wait for it).
    pub first_load: tokio::sync::watch::Receiver<bool>,
    /// `Host` header values taken besides loopback and the listening address (a Service's
    /// name, a load balancer's).
    pub allowed_hosts: Vec<String>,
}

/// Why the front cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    #[error("--http {0}: expected IP:PORT, e.g. 127.0.0.1:8750")]
    Address(String),
    #[error(
        "--http {0} is not a loopback address: name tokens or a provider in [access] of \
         toolhost.toml (or set --token-env VAR) so that clients must present a bearer token"
    )]
    Exposed(SocketAddr),
    #[error(
        "[access] require-token is set, but no token or provider is named: nobody could \
         connect; add [[access.tokens]] or [access.oidc]"
    )]
    NobodyCanConnect,
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// The front, listening, with its routes built.
pub struct Front {
    listener: TcpListener,
    local: SocketAddr,
    page: bool,
    router: axum::Router,
    /// What answers connections past the cap when none can be let go.
    probes_alone: axum::Router,
    max_connections: usize,
    limits: Limits,
    /// Ends rmcp's sessions once the last answers are written.
    sessions_closed: CancellationToken,
    /// POSTs whose answers are still being written.
    answering: Arc<Tally>,
}

impl Front {
    /// Listens on `address` and builds the routes over `served`.
    pub async fn bind(address: &str, served: Served, limits: Limits) -> Result<Front, FrontError> {
        let Served {
            scrape,
            access,
            web,
            page,
            logs,
            first_load,
            allowed_hosts,
        } = served;
        let address: SocketAddr = address
            .parse()
            .map_err(|_| FrontError::Address(address.to_string()))?;
        if !address.ip().is_loopback() && !access.has_identities() {
            return Err(FrontError::Exposed(address));
        }
        if !access.local_allowed() && !access.has_identities() {
            return Err(FrontError::NobodyCanConnect);
        }
        // The provider's keys are fetched ahead of the first token (a failure is logged, and
        // fetched again when a token needs them).
        if let Some(oidc) = access.oidc() {
            tokio::spawn(async move { oidc.prefetch().await });
        }
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| FrontError::Listen { address, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| FrontError::Listen { address, source })?;
        // Connections within the open-file limit (raised to its hard limit), streams within
        // half of them, so that calls and probes always find a connection.
        let max_connections = accept::fit_to_open_files(limits.max_connections);
        let streams = toolhost_mcp::StreamSlots::new(limits.max_streams.min(max_connections / 2));
        // rmcp takes loopback names in the Host header; add the listening address and the
        // names operators list (`allowed-hosts`: a Service's, a load balancer's).
        let mut config = StreamableHttpServerConfig::default();
        let mut hosts = config.allowed_hosts.clone();
        if !local.ip().is_loopback() {
            hosts.push(local.ip().to_string());
        }
        hosts.extend(allowed_hosts);
        // A request whose answer is one message gets it as a JSON body (rmcp falls back to a
        // stream when the handler sends anything first): no event stream to set up and end.
        config = config
            .with_allowed_hosts(hosts.clone())
            .with_json_response(true);
        let max_body = config.max_request_body_bytes;
        // The page and the chat API check the Host header as rmcp does for /mcp.
        let page = page.unwrap_or(local.ip().is_loopback());
        let allowed = Arc::new(hosts::AllowedHosts::new(&hosts));
        let checked = |router: axum::Router| {
            let hosts = allowed.clone();
            router.layer(axum::middleware::from_fn(
                move |request: Request, next: Next| {
                    let hosts = hosts.clone();
                    async move { hosts::check_host(&hosts, request, next).await }
                },
            ))
        };
        // Chat runs are said in the fleet's routes, and requests about a run elsewhere sent
        // there (with `[fleet] advertise`).
        let forward = scrape.shared().routes().and_then(|routes| {
            web.route_runs(Arc::clone(&routes));
            route::Forward::new(routes, Arc::clone(&web), max_connections, max_body)
        });
        let web = checked(toolhost_web::router(web, page));
        // The web chat's sign-in, outside the guard (whoever signs in has no token yet).
        let sign_in = checked(sign_in::router(Arc::clone(&access)));
        let sessions_closed = config.cancellation_token.clone();
        let host = scrape.host.clone();
        // Conversations and `subscriptions/listen` streams are shared by every HTTP client; a
        // stream replaces a session's notifications, so as many may be open as sessions may.
        let shared = toolhost_mcp::Shared::new(
            &format!("mcp-http-{}", std::process::id()),
            limits.session_idle,
            limits.max_sessions,
        )
        .with_streams(Arc::clone(&streams))
        .with_first_load(first_load)
        .with_twins(limits.max_sessions, limits.session_idle);
        let factory = McpServer::factory(host.clone(), Some(logs), "mcp-http", Arc::new(shared));
        // Idle sessions close after `mcp-session-idle-s`; new ones past `max-mcp-sessions`
        // are refused (`guard`).
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(limits.session_idle);
        let sessions = Arc::new(sessions);
        let direct = toolhost_mcp::direct::Direct::new(
            factory.clone(),
            max_body,
            sessions_closed.child_token(),
        );
        let rmcp = StreamableHttpService::new(move || Ok(factory()), Arc::clone(&sessions), config);
        let mcp = Arc::new(mcp::Mcp {
            direct,
            rmcp,
            hosts: Arc::clone(&allowed),
            max_body,
            sessions: Arc::clone(&sessions),
            metrics: host.metrics().cloned(),
        });
        let metadata = guard::metadata(&access);
        let guard_state = Arc::new(guard::Guard::new(
            access,
            host.clone(),
            sessions,
            limits.max_sessions,
            forward,
            Arc::clone(&streams),
        ));
        let scrape = Arc::new(scrape);
        // Tool calls are POSTs, answered on their own response stream: counted until it ends
        // (by `accept`, which holds every response body).
        let answering = Arc::new(Tally::default());
        let router = axum::Router::new()
            .route(
                "/mcp",
                axum::routing::any(move |request: Request| {
                    let mcp = Arc::clone(&mcp);
                    async move { mcp::route(&mcp, request).await }
                }),
            )
            .merge(web)
            .merge(probes::metrics(scrape.clone()))
            .layer(axum::middleware::from_fn(move |request, next| {
                let guard_state = guard_state.clone();
                async move { guard::guard(&guard_state, request, next).await }
            }))
            .merge(probes::probes(scrape.clone()))
            .merge(metadata)
            .merge(sign_in);
        // Past the connection cap with every connection busy, a new one is answered by this.
        let probes_alone = probes::probes(scrape).fallback(|| async {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "every HTTP connection this host keeps is busy (max-http-connections); only \
                 /healthz and /readyz are answered now, try again later",
            )
        });
        Ok(Front {
            listener,
            local,
            page,
            router,
            probes_alone,
            max_connections,
            limits,
            sessions_closed,
            answering,
        })
    }

    /// The address it listens on (the port chosen, when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether it serves the web chat's page at `/`.
    pub fn serves_page(&self) -> bool {
        self.page
    }

    /// Serves until `drain` completes; connections are still taken while the calls in flight
    /// drain (their answers, `/readyz` saying 503). Once the last answers are written (at
    /// most [`ANSWER_GRACE`] later) the MCP sessions close, and so do the connections.
    pub async fn serve<T>(self, drain: impl Future<Output = T>) -> std::io::Result<T> {
        let (answering, sessions_closed) = (self.answering, self.sessions_closed);
        let counted = Arc::clone(&answering);
        let shutdown = async move {
            let report = drain.await;
            let _ = tokio::time::timeout(ANSWER_GRACE, answering.idle()).await;
            sessions_closed.cancel();
            report
        };
        accept::serve(
            self.listener,
            self.router,
            self.probes_alone,
            self.max_connections,
            (self.limits.header_timeout, self.limits.body_timeout),
            counted,
            shutdown,
        )
        .await
    }
}
