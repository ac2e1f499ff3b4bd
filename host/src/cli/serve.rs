//! `toolhost serve`: the catalog over MCP (stdio by default, streamable HTTP with `--http`),
//! with hot reload (unless `--no-watch`; SIGHUP reloads either way), a status file for
//! `toolhost status`, and the shutdown of `service` on SIGTERM / SIGINT. Over HTTP, `/healthz`
//! and `/readyz` answer probes.

use super::service::{self, AbortOnDrop, Signals};
use super::settings::Settings;
use anyhow::{Context, bail};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolhost::invoke::{DrainReport, Host};
use toolhost::mcp::McpServer;
use toolhost::mcp::log::LogRelay;
use toolhost::reload::{DEFAULT_DEBOUNCE, Reloader};
use toolhost::runtime::Runtime;

/// How `serve` was asked to run.
pub(crate) struct ServeOptions {
    pub(crate) http: Option<String>,
    pub(crate) token_env: Option<String>,
    pub(crate) no_watch: bool,
    /// Serve the page at `/`: `None` means on loopback only.
    pub(crate) page: Option<bool>,
}

pub(crate) async fn run(
    settings: &Settings,
    options: ServeOptions,
    logs: LogRelay,
) -> anyhow::Result<ExitCode> {
    // Caught before anything else: a signal while the host loads waits for the drain (or,
    // SIGHUP, for the reload), instead of ending the process.
    let signals = Signals::install()?;
    let hangup = service::catch_hangup()?;
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
    let access = Arc::new(
        toolhost::access::Access::new(settings.access.clone(), token.as_deref())
            .context("[access]")?,
    );
    let runtime = settings.runtime()?;
    // Nothing waits for a compile: what is loaded or cached serves at once, the rest joins
    // the catalog when its compile ends.
    let resolver = settings.resolver(runtime.clone(), toolhost::registry::Fetch::Missing);
    let reloader = Reloader::builder(resolver)
        .serving()
        .start(settings.ensembles.clone())
        .await;
    for refused in reloader.status().refused {
        tracing::warn!(
            "{} was refused ({} error(s)); run `toolhost check` for details",
            refused.file.display(),
            refused.errors.len()
        );
    }
    let metrics = Arc::new(toolhost::metrics::Metrics::new()?);
    metrics.set_identity_cap(access.metrics_identities());
    let _count_reloads = count_reloads(reloader.clone(), metrics.clone());
    let host = Arc::new(
        settings
            .host_over(reloader.catalog().clone())?
            .with_metrics(metrics),
    );
    // Without watching, components compiled in the background still join when ready.
    let _watch = if options.no_watch {
        reloader.follow_compiles()
    } else {
        reloader.watch(DEFAULT_DEBOUNCE)?
    };
    let _prune = prune_cache(reloader.clone(), runtime.clone(), settings.cache_keep);
    let _status = settings.status_file.as_ref().map(|path| {
        super::status::publish(
            reloader.clone(),
            runtime.clone(),
            host.clone(),
            path.clone(),
        )
    });
    // `[access]` is read again when toolhost.toml changes and on SIGHUP: the next request
    // sees the new rules and tokens (a file that no longer checks keeps the last good ones,
    // and says why).
    let _access_watch = match (&settings.config_path, options.no_watch) {
        (Some(path), false) => Some(
            super::access::watch(access.clone(), path.clone(), token.clone())
                .with_context(|| format!("cannot watch {}", path.display()))?,
        ),
        _ => None,
    };
    let reread = {
        let (access, path) = (access.clone(), settings.config_path.clone());
        move || super::access::reread(&access, path.as_deref(), token.as_deref(), "SIGHUP")
    };
    let _hangup = service::reload_on_hangup(hangup, reloader.clone(), host.clone(), reread);
    let _sync = service::sync_audit(host.clone());
    let drain = service::drain_on_signal(host.clone(), signals, settings.drain_timeout);
    let first_load = first_load(reloader.clone());
    let code = match &options.http {
        None => serve_stdio(host.clone(), logs, first_load, drain).await,
        Some(address) => {
            let scrape = Scrape {
                host: host.clone(),
                reloader: reloader.clone(),
                runtime: runtime.clone(),
                loaded: std::sync::atomic::AtomicBool::new(false),
            };
            let limits = (settings.http, settings.allowed_hosts.clone());
            let web = web(settings, host.clone(), reloader.clone()).await;
            let web = (web, options.page);
            let logs = (logs, first_load);
            serve_http(scrape, logs, address, access, limits, web, drain).await
        }
    };
    service::close_audit(&host);
    code
}

/// The chat API's state: `[chat]`, and the database opened (or why it could not be: the
/// chat then answers 503 with the reason, and everything else serves).
async fn web(
    settings: &Settings,
    host: Arc<Host>,
    reloader: Arc<Reloader>,
) -> Arc<toolhost::web::Web> {
    let chat = super::chat::web_settings(settings);
    if let Err(problem) = &chat.provider {
        // No chat: no database either (nothing is created for hosts that serve MCP only).
        tracing::info!("{problem}; the page shows the catalog only");
        let store = Err(toolhost::web::StoreError::Unused(problem.clone()));
        return toolhost::web::Web::new(host, reloader, chat, store);
    }
    let path = settings.chat_database.clone();
    let limits = settings.chat_store;
    let store = tokio::task::spawn_blocking(move || match path {
        Some(path) => toolhost::web::Store::open(&path, limits),
        None => Err(toolhost::web::StoreError::Open {
            path: "chat.sqlite3".into(),
            message: "no state directory: set [chat] database in toolhost.toml".into(),
        }),
    })
    .await
    .unwrap_or_else(|e| {
        Err(toolhost::web::StoreError::Open {
            path: "chat.sqlite3".into(),
            message: e.to_string(),
        })
    });
    if let Err(e) = &store {
        tracing::error!("{e}; the chat API answers 503 until it is fixed and the host restarted");
    }
    toolhost::web::Web::new(host, reloader, chat, store)
}

/// Keeps the compile cache to what the ensembles use (and the `keep` most recently used of
/// the rest): once at start, then after every reload that changed tools. Stops when dropped.
fn prune_cache(reloader: Arc<Reloader>, runtime: Arc<Runtime>, keep: usize) -> AbortOnDrop {
    let mut changes = reloader.subscribe();
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let in_use = reloader.components_in_use();
            let digests = reloader.resolver().digests_in_use();
            let registry = Arc::clone(reloader.resolver().registry());
            let runtime = Arc::clone(&runtime);
            let pruned = tokio::task::spawn_blocking(move || {
                let blobs = registry.store().map(|store| store.prune(&digests, keep));
                (runtime.prune_cache(&in_use, keep), blobs)
            });
            let (compiled, blobs) = pruned.await.unwrap_or_default();
            if let Some(pruned) = compiled.filter(|p| p.removed > 0) {
                tracing::info!(
                    "compile cache: removed {} component(s) no ensemble uses ({} MiB); kept {}",
                    pruned.removed,
                    pruned.freed_bytes >> 20,
                    pruned.kept
                );
            }
            if let Some(pruned) = blobs.filter(|p| p.removed > 0) {
                tracing::info!(
                    "content store: removed {} pulled blob(s) no reference uses ({} MiB); kept {}",
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

/// Counts each reload in `metrics`, by whether it refused an ensemble. Stops when dropped.
fn count_reloads(reloader: Arc<Reloader>, metrics: Arc<toolhost::metrics::Metrics>) -> AbortOnDrop {
    let mut changes = reloader.subscribe();
    AbortOnDrop(tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(change) => metrics.reload(!change.refused.is_empty()),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }))
}

/// Turns true when the first load has ended (every component it named compiled or refused,
/// every imported server up or refused): MCP lists wait for it, bounded
/// (`toolhost::mcp::FIRST_LIST_WAIT`). The task ends with it.
fn first_load(reloader: Arc<Reloader>) -> tokio::sync::watch::Receiver<bool> {
    let (loaded, waiting) = tokio::sync::watch::channel(false);
    let mut changes = reloader.subscribe();
    tokio::spawn(async move {
        while !reloader.status().loading.is_empty() {
            if let Err(tokio::sync::broadcast::error::RecvError::Closed) = changes.recv().await {
                break;
            }
        }
        let _ = loaded.send(true);
    });
    waiting
}

/// How long the MCP layer gets, after the drain, to write the answers of the last calls.
const ANSWER_GRACE: Duration = Duration::from_secs(3);

/// One MCP session over stdin/stdout, until the client closes stdin or a signal's drain ends
/// (stdin may stay open: the session is ended from this side).
async fn serve_stdio(
    host: Arc<Host>,
    logs: LogRelay,
    first_load: tokio::sync::watch::Receiver<bool>,
    drain: impl Future<Output = DrainReport>,
) -> anyhow::Result<ExitCode> {
    let id = format!("mcp-stdio-{}", std::process::id());
    let server = McpServer::new(host.clone(), id)
        .with_logs(logs)
        .with_first_load(first_load);
    tokio::pin!(drain);
    service::notify(&[sd_notify::NotifyState::Ready]);
    // Only protocol messages reach stdout: logs go to stderr, plugins' output is captured.
    let started = tokio::select! {
        // Pipes (as MCP clients start servers) are read and written on the reactor, not
        // through the blocking pool: no hand-off between threads per message. A message too
        // large or too deep is answered with an error (rmcp's own transport drops it).
        started = {
            let (stdin, stdout) = rmcp::transport::stdio_pipes();
            server.serve(toolhost::mcp::stdio::BoundedStdio::new(stdin, stdout))
        } => started,
        report = &mut drain => return Ok(service::exit_code(report)),
    };
    let service = match started {
        Ok(service) => service,
        // The client went away before it said hello: nothing to serve, nothing wrong.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e).context("the MCP session did not start"),
    };
    let session = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        result = &mut waiting => {
            // The client closed stdin: no answer can reach it any more. rmcp gave the calls
            // in flight a few seconds; the ones still running end now, as `cancelled`.
            host.shutdown(Duration::ZERO).await;
            result.context("the MCP session failed")?;
            Ok(ExitCode::SUCCESS)
        }
        report = &mut drain => {
            // rmcp writes the answers of handlers that already finished before it closes.
            session.cancel();
            let _ = tokio::time::timeout(ANSWER_GRACE, waiting).await;
            Ok(service::exit_code(report))
        }
    }
}

/// What `/metrics` reads its gauges from when it is scraped, and `/readyz` its answer.
struct Scrape {
    host: Arc<Host>,
    reloader: Arc<Reloader>,
    runtime: Arc<Runtime>,
    /// Set once the first load's compiles have all ended: later reloads keep serving the
    /// previous versions while they compile, so they do not make the host unready.
    loaded: std::sync::atomic::AtomicBool,
}

impl Scrape {
    /// True once the first load ended: every component it named compiled, or was refused.
    fn loaded(&self) -> bool {
        if self.loaded.load(Ordering::SeqCst) {
            return true;
        }
        let loaded = self.reloader.status().loading.is_empty();
        if loaded {
            self.loaded.store(true, Ordering::SeqCst);
        }
        loaded
    }

    /// Every metric, gauges set to what they are now.
    fn render(&self) -> String {
        let Some(metrics) = self.host.metrics() else {
            return String::new();
        };
        let pool = self.runtime.pool();
        metrics.instances_in_use.set(pool.in_use as i64);
        metrics.instances_waiting.set(pool.waiting as i64);
        metrics.instances_capacity.set(pool.capacity as i64);
        let prepared = self.runtime.prepared();
        metrics.prepared_instances.set(prepared.instances as i64);
        metrics.prepared_bytes.set(prepared.bytes as i64);
        for (outcome, count) in [
            ("made", prepared.made),
            ("used", prepared.used),
            ("evicted", prepared.evicted),
            ("failed", prepared.failed),
        ] {
            (metrics.prepared_outcomes.with_label_values(&[outcome])).set(count as i64);
        }
        let status = self.reloader.status();
        metrics.catalog_generation.set(status.generation as i64);
        metrics.refused_ensembles.set(status.refused.len() as i64);
        let catalog = self.reloader.catalog().snapshot();
        metrics.catalog_tools.set(catalog.tools().count() as i64);
        // Imported servers by ensemble; an ensemble gone since the last scrape drops out.
        metrics.mcp_servers_up.reset();
        let mut seen = std::collections::HashSet::new();
        for tool in catalog.tools() {
            if let Some(up) = tool.backend().is_up()
                && seen.insert(tool.ensemble())
            {
                (metrics.mcp_servers_up.with_label_values(&[tool.ensemble()])).set(i64::from(up));
            }
        }
        if let Some(log) = self.host.audit_log() {
            let health = log.health();
            metrics.audit_held.set(health.held as i64);
            metrics.audit_lost.set(health.lost as i64);
            metrics
                .audit_reopen_failures
                .set(health.reopen_failures as i64);
        }
        metrics.draining.set(i64::from(self.host.is_draining()));
        metrics.render()
    }
}

async fn serve_http(
    scrape: Scrape,
    (logs, first_load): (LogRelay, tokio::sync::watch::Receiver<bool>),
    address: &str,
    access: Arc<toolhost::access::Access>,
    (limits, allowed_hosts): (super::settings::HttpLimits, Vec<String>),
    (web, page): (Arc<toolhost::web::Web>, Option<bool>),
    drain: impl Future<Output = DrainReport>,
) -> anyhow::Result<ExitCode> {
    let address: SocketAddr = address
        .parse()
        .with_context(|| format!("--http {address}: expected IP:PORT, e.g. 127.0.0.1:8750"))?;
    if !address.ip().is_loopback() && !access.has_identities() {
        bail!(
            "--http {address} is not a loopback address: name tokens or a provider in [access] of \
             toolhost.toml (or set --token-env VAR) so that clients must present a bearer token"
        );
    }
    if !access.local_allowed() && !access.has_identities() {
        bail!(
            "[access] require-token is set, but no token or provider is named: nobody could \
             connect; add [[access.tokens]] or [access.oidc]"
        );
    }
    // The provider's keys are fetched ahead of the first token (a failure is logged, and
    // fetched again when a token needs them).
    if let Some(oidc) = access.oidc() {
        tokio::spawn(async move { oidc.prefetch().await });
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    // Connections within the open-file limit (raised to its hard limit), streams within half
    // of them, so that calls and probes always find a connection.
    let max_connections = super::http::fit_to_open_files(limits.max_connections);
    let streams = toolhost::mcp::StreamSlots::new(limits.max_streams.min(max_connections / 2));
    let local = listener.local_addr()?;
    // rmcp takes loopback names in the Host header; add the listening address and the
    // names operators list (`allowed-hosts`: a Service's, a load balancer's).
    let mut config = StreamableHttpServerConfig::default();
    let mut hosts = config.allowed_hosts.clone();
    if !local.ip().is_loopback() {
        hosts.push(local.ip().to_string());
    }
    hosts.extend(allowed_hosts);
    config = config.with_allowed_hosts(hosts.clone());
    // The page and the chat API check the Host header as rmcp does for /mcp.
    let page = page.unwrap_or(local.ip().is_loopback());
    let hosts = Arc::new(hosts);
    let checked = move |router: axum::Router| {
        let hosts = hosts.clone();
        router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let hosts = hosts.clone();
                async move { super::http::check_host(&hosts, request, next).await }
            },
        ))
    };
    let web = checked(toolhost::web::router(web, page));
    // The web chat's sign-in, outside the guard (whoever signs in has no token yet).
    let sign_in = checked(super::sign_in::router(Arc::clone(&access)));
    let cancel = config.cancellation_token.clone();
    let host = scrape.host.clone();
    // Conversations and `subscriptions/listen` streams are shared by every HTTP client; a
    // stream replaces a session's notifications, so as many may be open as sessions may.
    let shared = toolhost::mcp::Shared::new(
        &format!("mcp-http-{}", std::process::id()),
        limits.session_idle,
        limits.max_sessions,
    )
    .with_streams(Arc::clone(&streams))
    .with_first_load(first_load);
    let factory = McpServer::factory(host.clone(), Some(logs), "mcp-http", Arc::new(shared));
    // Idle sessions close after `mcp-session-idle-s`; new ones past `max-mcp-sessions` are
    // refused (`guard`).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(limits.session_idle);
    let sessions = Arc::new(sessions);
    let service = StreamableHttpService::new(move || Ok(factory()), Arc::clone(&sessions), config);
    let metadata = super::guard::metadata(&access);
    let guard_state = Arc::new(super::guard::Guard::new(
        access,
        host.clone(),
        sessions,
        limits.max_sessions,
    ));
    // Probes come from kubelets and load balancers, which carry no token: they are outside
    // the guard, and say nothing but whether this host serves.
    let scrape = Arc::new(scrape);
    let ready = scrape.clone();
    // Tool calls are POSTs, answered on their own response stream: counted until it ends.
    let answering = Arc::new(toolhost::invoke::Tally::default());
    let counted = answering.clone();
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .merge(web)
        .route(
            "/metrics",
            axum::routing::get(move || {
                let scrape = scrape.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        scrape.render(),
                    )
                }
            }),
        )
        // Inside the guard: only requests it lets through take a stream's place.
        .layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let streams = streams.clone();
                async move { super::http::limit_streams(&streams, request, next).await }
            },
        ))
        .layer(axum::middleware::from_fn(move |request, next| {
            let guard_state = guard_state.clone();
            async move { super::guard::guard(&guard_state, request, next).await }
        }))
        .layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let counted = counted.clone();
                async move {
                    if request.method() == axum::http::Method::POST {
                        super::http::count_answer(counted, request, next).await
                    } else {
                        next.run(request).await
                    }
                }
            },
        ))
        .merge(probes(ready.clone()))
        .merge(metadata)
        .merge(sign_in);
    // Past the connection cap with every connection busy, a new one is answered by this.
    let probes_alone = probes(ready).fallback(|| async {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "every HTTP connection this host keeps is busy (max-http-connections); only \
             /healthz and /readyz are answered now, try again later",
        )
    });
    // Tests and scripts read this line to learn the port when they asked for port 0.
    let say = |line: String| super::logging::say(tracing::Level::INFO, &line);
    say(format!("toolhost: serving MCP on http://{local}/mcp"));
    if page {
        say(format!("toolhost: the web chat is at http://{local}/"));
    }
    service::notify(&[sd_notify::NotifyState::Ready]);
    // Connections are still taken while the calls in flight drain (their answers, `/readyz`
    // saying 503); once the last answers are written the MCP sessions close, and so do the
    // connections.
    let shutdown = async move {
        let report = drain.await;
        let _ = tokio::time::timeout(ANSWER_GRACE, answering.idle()).await;
        cancel.cancel();
        report
    };
    let report = super::http::serve(
        listener,
        router,
        probes_alone,
        max_connections,
        (limits.header_timeout, limits.body_timeout),
        shutdown,
    )
    .await
    .context("the HTTP server failed")?;
    Ok(service::exit_code(report))
}

/// `/healthz` and `/readyz`: outside every guard (kubelets and load balancers carry no
/// token), saying nothing but whether this host serves.
fn probes(ready: Arc<Scrape>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let answer = if ready.host.is_draining() {
                    (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
                } else if ready.loaded() {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "loading\n")
                };
                async move { answer }
            }),
        )
}
