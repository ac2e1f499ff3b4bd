//! `toolhost serve`: the catalog over MCP (stdio by default, streamable HTTP with `--http`),
//! with hot reload (unless `--no-watch`; SIGHUP reloads either way), a status file for
//! `toolhost status`, and the shutdown of `service` on SIGTERM / SIGINT. Over HTTP the front
//! (toolhost-http) serves MCP, the web chat and the probes; this command builds what it
//! serves.

use super::service::{self, AbortOnDrop, Signals};
use super::settings::Settings;
use anyhow::{Context, bail};
use rmcp::ServiceExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use toolhost::invoke::{DrainReport, Host};
use toolhost::mcp::McpServer;
use toolhost::mcp::log::LogRelay;
use toolhost::reload::{DEFAULT_DEBOUNCE, Reloader};
use toolhost::runtime::Runtime;

/// How long `serve` waits for the fleet's Redis to answer at start before it serves anyway.
const FLEET_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
    // The engines the fleet shares state on: this process's memory unless `[fleet]` names
    // Redis, which is waited for a few seconds at start (a host that cannot reach it serves
    // anyway, ready, and refuses calls under a quota until it answers).
    let shared = Arc::new(toolhost::state::Shared::open(&settings.fleet).context("[fleet]")?);
    if let Some(redis) = &settings.fleet.redis {
        match shared.connect(FLEET_CONNECT_TIMEOUT).await {
            Ok(()) => tracing::info!(redis = %redis.shown(), "quotas are the fleet's, in Redis"),
            Err(why) => tracing::error!(
                "{why}; serving anyway (ready: every replica shares Redis), refusing calls \
                 under a quota with 503 until Redis answers"
            ),
        }
    }
    if let Some(routes) = shared.routes() {
        tracing::info!(
            replica = routes.me(),
            advertise = routes.address(),
            "requests for what another replica holds are forwarded to it"
        );
    }
    let access = Arc::new(
        toolhost::access::Access::new(settings.access.clone(), token.as_deref())
            .context("[access]")?
            .with_quotas(shared.quotas()),
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
            .with_metrics(metrics)
            .with_shared_dedup(shared.dedup()),
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
            shared.clone(),
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
            let (web, chat_off) =
                web(settings, host.clone(), reloader.clone(), shared.postgres()).await;
            let served = toolhost::http::Served {
                scrape: toolhost::http::Scrape::new(
                    host.clone(),
                    reloader.clone(),
                    runtime,
                    shared.clone(),
                ),
                access,
                web,
                page: options.page,
                logs,
                first_load,
                allowed_hosts: settings.allowed_hosts.clone(),
            };
            serve_http(served, address, settings.http, drain, chat_off).await
        }
    };
    service::close_audit(&host);
    code
}

/// The chat API's state: `[chat]`, and the database opened (or why it could not be: the
/// chat then answers 503 with the reason, and everything else serves); and why the chat is
/// off, if it is, for the line `serve` prints at start.
async fn web(
    settings: &Settings,
    host: Arc<Host>,
    reloader: Arc<Reloader>,
    postgres: Option<Arc<toolhost::state::postgres::Postgres>>,
) -> (Arc<toolhost::web::Web>, Option<String>) {
    let chat = super::chat::web_settings(settings);
    if let Err(problem) = &chat.provider {
        // No chat: no database either (nothing is created for hosts that serve MCP only).
        let off = problem.clone();
        let store = Err(toolhost::web::StoreError::Unused(problem.clone()));
        return (
            toolhost::web::Web::new(host, reloader, chat, store),
            Some(off),
        );
    }
    let limits = settings.chat_store;
    if let Some(postgres) = postgres {
        // Shared by the fleet: its tables are made now if PostgreSQL answers, or by the first
        // request that reaches it (until then the chat answers 503 with the reason).
        let store = toolhost::web::Store::postgres(postgres, limits);
        match store.prepare().await {
            Ok(()) => tracing::info!(
                database = %store.shown(),
                "conversations are the fleet's, in PostgreSQL"
            ),
            Err(e) => tracing::error!(
                "{e}; serving anyway: the chat answers 503 until PostgreSQL answers, tools \
                 are not affected"
            ),
        }
        return (
            toolhost::web::Web::new(host, reloader, chat, Ok(store)),
            None,
        );
    }
    let path = settings.chat_database.clone();
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
    let off = store
        .as_ref()
        .err()
        .map(|e| format!("{e}; the chat API answers 503 until it is fixed and the host restarted"));
    (toolhost::web::Web::new(host, reloader, chat, store), off)
}

/// What `serve` leaves in the compile cache whatever its ensembles use: components used this
/// recently, which another host of the same user (another project) may be serving.
const SPARE_USED_WITHIN: Duration = Duration::from_secs(7 * 24 * 3600);

/// Keeps the compile cache to what the ensembles use (and the `keep` most recently used of
/// the rest, and what any host used within [`SPARE_USED_WITHIN`]): once at start, then after
/// every reload that changed tools. Stops when dropped.
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
                (
                    runtime.prune_cache(&in_use, keep, Some(SPARE_USED_WITHIN)),
                    blobs,
                )
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
            let _ = tokio::time::timeout(toolhost::http::ANSWER_GRACE, waiting).await;
            Ok(service::exit_code(report))
        }
    }
}

/// MCP over streamable HTTP, the web chat and the probes on `address`, through the HTTP
/// front (toolhost-http), until the drain ends.
async fn serve_http(
    served: toolhost::http::Served,
    address: &str,
    limits: toolhost::http::Limits,
    drain: impl Future<Output = DrainReport>,
    chat_off: Option<String>,
) -> anyhow::Result<ExitCode> {
    let front = toolhost::http::Front::bind(address, served, limits).await?;
    let local = front.local_addr();
    // Tests and scripts read this line to learn the port when they asked for port 0.
    let say = |line: String| super::logging::say(tracing::Level::INFO, &line);
    say(format!("toolhost: serving MCP on http://{local}/mcp"));
    match (front.serves_page(), chat_off) {
        (true, None) => say(format!("toolhost: the web chat is at http://{local}/")),
        (true, Some(why)) => say(format!(
            "toolhost: the page is at http://{local}/ with the catalog only: the chat is off \
             ({why})"
        )),
        // No page (beyond loopback without `--page`): the chat API is what is off.
        (false, Some(why)) => say(format!("toolhost: the chat API is off ({why})")),
        (false, None) => {}
    }
    service::notify(&[sd_notify::NotifyState::Ready]);
    let report = front.serve(drain).await.context("the HTTP server failed")?;
    Ok(service::exit_code(report))
}
