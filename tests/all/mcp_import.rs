//! MCP servers imported as ensembles (`[ensemble.mcp]`). The imported server is a real MCP
//! peer built with rmcp: another `toolhost serve` over its own ensembles (echo and testbed),
//! started as a child process or reached over streamable HTTP.

use crate::support::{Fixture, cache_dir, ensemble, err, ok, session};
use rmcp::model::ProtocolVersion;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use toolhost::catalog::CatalogChange;
use toolhost::invoke::{ErrorKind, Host};
use toolhost::reload::Reloader;

/// A failure deadline for waits, not a timing assertion.
const DEADLINE: Duration = Duration::from_secs(60);

/// The inner host's ensembles: `echo`, and testbed's `sleep` and `fail` (10 s timeout).
pub(crate) fn inner_fixture() -> Fixture {
    let inner = Fixture::new();
    inner.write_echo();
    inner.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[defaults]\ntimeout-ms = 10000\ndedup = \"off\"\n\n\
             [[invokers]]\ninvoker = { name = \"sleep\" }\n\n[[invokers]]\ninvoker = { name = \"fail\" }\n",
        ),
    );
    inner
}

/// The arguments that make `toolhost` serve `inner` over stdio.
fn serve_args(inner: &Fixture) -> Vec<String> {
    let path = |p: PathBuf| p.display().to_string();
    vec![
        "--ensembles".into(),
        path(inner.ensembles()),
        "--cache-dir".into(),
        path(cache_dir()),
        "--cache-keep".into(),
        crate::mcp::SHARED_CACHE_KEEP.into(),
        "--status-file".into(),
        path(inner.root().join("status.json")),
        "serve".into(),
    ]
}

/// An outer ensemble `inner` (prefix `in`) importing `inner` over stdio, with `rest` after.
pub(crate) fn import_ensemble(inner: &Fixture, rest: &str) -> String {
    format!(
        "schema-version = 1\n\n[ensemble]\nname = \"inner\"\nprefix = \"in\"\n\n\
         [ensemble.mcp]\ncommand = {:?}\nargs = {:?}\n\n{rest}\n",
        env!("CARGO_BIN_EXE_toolhost"),
        serve_args(inner),
    )
}

async fn outer_host(outer: &Fixture) -> Host {
    outer.host().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_servers_tools_are_validated_called_deduplicated_and_audited() {
    let inner = inner_fixture();
    let outer = Fixture::new();
    // Every tool of the server, plus one invoker listed with a stricter schema.
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "[defaults]\ntimeout-ms = 5000\n"),
    );
    outer.write(
        "strict.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"strict\"\n\n[ensemble.mcp]\ncommand = {:?}\nargs = {:?}\n\n\
             [[invokers]]\ninvoker = {{ name = \"shout\", tool = \"echo\", description = \"Echo, strictly\" }}\n\
             arguments = {{ type = \"object\", required = [\"text\"], additionalProperties = false, properties = {{ text = {{ type = \"string\" }} }} }}\n",
            env!("CARGO_BIN_EXE_toolhost"),
            serve_args(&inner),
        ),
    );
    let audit = outer.root().join("audit.jsonl");
    let host = outer.host_with_audit(Some(&audit)).await;
    let catalog = host.catalog().snapshot();
    let mut names: Vec<&str> = catalog.tools().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["in_echo", "in_fail", "in_sleep", "shout"]);
    let shout = catalog.get("shout").expect("shout");
    assert_eq!(&*shout.description, "Echo, strictly");
    assert!(shout.source().starts_with("mcp: "), "{}", shout.source());

    let s = session();
    let first = host.invoke(&s, "in_echo", json!({"text": "hi"})).await;
    assert_eq!(ok(&first), r#"{"text":"hi"}"#);
    assert!(!first.deduplicated);
    let again = host.invoke(&s, "in_echo", json!({"text": "hi"})).await;
    assert!(again.deduplicated);

    // The schema is checked here, before the server sees anything.
    let error = err(&host.invoke(&s, "shout", json!({"text": 5})).await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert_eq!(error.violations[0].pointer, "/text");
    assert_eq!(
        ok(&host.invoke(&s, "shout", json!({"text": "loud"})).await),
        r#"{"text":"loud"}"#
    );

    // The server's own error result is a tool error with its text.
    let error = err(&host.invoke(&s, "in_fail", json!({})).await);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert!(
        error.message.contains("the tool failed on purpose"),
        "{}",
        error.message
    );

    let records = std::fs::read_to_string(&audit).expect("audit");
    let first: serde_json::Value =
        serde_json::from_str(records.lines().next().expect("a record")).expect("JSON");
    assert_eq!(first["tool"], "in_echo");
    assert_eq!(first["ensemble"], "inner");
    assert_eq!(first["outcome"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_server_never_answers_ends_at_the_timeout() {
    let inner = inner_fixture();
    let outer = Fixture::new();
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "[defaults]\ntimeout-ms = 300\n"),
    );
    let host = outer_host(&outer).await;
    let error = err(&host
        .invoke(&session(), "in_sleep", json!({"ms": 8000}))
        .await);
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    // The server is still there for the next call.
    assert_eq!(
        ok(&host
            .invoke(&session(), "in_echo", json!({"after": "hang"}))
            .await),
        r#"{"after":"hang"}"#
    );
}

/// The pid the inner `toolhost serve` published in its status file.
pub(crate) async fn inner_pid(status: &Path) -> u32 {
    let wait = async {
        loop {
            if let Ok(text) = std::fs::read_to_string(status)
                && let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
                && let Some(pid) = value["pid"].as_u64()
            {
                return pid as u32;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the inner server publishes its status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_fails_that_call_and_is_started_again() {
    let inner = inner_fixture();
    let outer = Fixture::new();
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "[defaults]\ntimeout-ms = 30000\n"),
    );
    let host = Arc::new(outer_host(&outer).await);
    let status = inner.root().join("status.json");
    let pid = inner_pid(&status).await;
    let calling = {
        let host = Arc::clone(&host);
        tokio::spawn(async move {
            host.invoke(&session(), "in_sleep", json!({"ms": 20000}))
                .await
        })
    };
    // Kill the server while the call is in flight (the call sleeps 20 s; a failure here
    // would show as a completed sleep, not as a flaky pass).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let outcome = tokio::time::timeout(DEADLINE, calling)
        .await
        .expect("the call ends")
        .expect("the task");
    let error = err(&outcome);
    assert_eq!(error.kind, ErrorKind::Crashed, "{error}");
    assert!(
        error.message.contains("exited during the call"),
        "{}",
        error.message
    );

    // The next call starts the server again.
    std::fs::remove_file(&status).expect("remove the old status");
    assert_eq!(
        ok(&host
            .invoke(&session(), "in_echo", json!({"back": true}))
            .await),
        r#"{"back":true}"#
    );
    assert_ne!(inner_pid(&status).await, pid, "a new server process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_refuses_only_its_ensemble() {
    let outer = Fixture::new();
    outer.write(
        "broken.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"broken\"\n\n[ensemble.mcp]\ncommand = \"./no-such-server\"\nargs = [\"--stdio\"]\n",
    );
    outer.write_echo();
    let resolved = outer.resolve().await;
    assert_eq!(resolved.refused.len(), 1);
    let message = resolved.refused[0].diagnostics[0].to_string();
    assert!(
        message.contains("MCP server `")
            && message.contains("no-such-server --stdio` could not be started"),
        "{message}"
    );
    assert!(message.contains("broken.toml:6:1"), "{message}");
    assert!(resolved.catalog.get("echo").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_ensembles_refuse_what_does_not_apply_to_them() {
    let outer = Fixture::new();
    outer.write(
        "mixed.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"mixed\"\ncomponent = \"../echo.wasm\"\n\n[ensemble.mcp]\nurl = \"http://127.0.0.1:9/mcp\"\n",
    );
    outer.write(
        "granted.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"granted\"\n\n[ensemble.mcp]\nurl = \"ftp://x\"\n\n[grants]\nenv = [\"TZ\"]\n",
    );
    let resolved = outer.resolve().await;
    let text: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
    let text = text.join("\n");
    assert!(
        text.contains("either a `component` or an MCP server"),
        "{text}"
    );
    assert!(
        text.contains("[grants] do not apply to an MCP server"),
        "{text}"
    );
    assert!(
        text.contains("\"ftp://x\" is not an http:// or https:// URL"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_list_changed_refreshes_the_catalog() {
    let inner = inner_fixture();
    let outer = Fixture::new();
    outer.write("inner.toml", &import_ensemble(&inner, ""));
    let reloader = Reloader::start(crate::support::runtime(), outer.ensembles()).await;
    assert!(
        reloader.status().refused.is_empty(),
        "{:?}",
        reloader.status().refused
    );
    let mut changes = reloader.subscribe();
    let _watch = reloader.watch(Duration::from_millis(50)).expect("watch");
    assert!(reloader.catalog().snapshot().get("in_echo").is_some());
    assert!(reloader.catalog().snapshot().get("in_fail2").is_none());

    // The inner host reloads and tells its clients; the outer one re-lists and swaps.
    inner.write(
        "more.toml",
        &ensemble(
            "more",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"fail2\", tool = \"fail\" }\n",
        ),
    );
    let wait = async {
        loop {
            match changes.recv().await {
                Ok(change) if change.added.iter().any(|n| n == "in_fail2") => return change,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("the reloader went away"),
            }
        }
    };
    let change: Arc<CatalogChange> = tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the catalog picked up the server's new tool");
    assert!(change.removed.is_empty());
    assert!(reloader.catalog().snapshot().get("in_fail2").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_streamable_http_is_imported_by_url() {
    use std::io::BufRead;
    let inner = inner_fixture();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(serve_args(&inner))
        .args(["--http", "127.0.0.1:0"])
        .env_remove("TOOLHOST_CONFIG")
        .current_dir(inner.root())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("serve --http");
    let mut lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines.next().expect("an address").expect("a line");
        if let Some(url) = line.strip_prefix("toolhost: serving MCP on ") {
            break url.to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let outer = Fixture::new();
    outer.write(
        "remote.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"remote\"\n\n[ensemble.mcp]\nurl = {url:?}\n"
        ),
    );
    let host = outer_host(&outer).await;
    assert_eq!(
        ok(&host
            .invoke(&session(), "echo", json!({"over": "http"}))
            .await),
        r#"{"over":"http"}"#
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn toolhost_call_and_serve_reach_an_imported_tool() {
    let inner = inner_fixture();
    let outer = Fixture::new();
    outer.write("inner.toml", &import_ensemble(&inner, ""));
    let output =
        crate::cli::toolhost_with_stdin(&outer, &["call", "in_echo", r#"{"via": "cli"}"#], None);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::cli::stderr(&output)
    );
    assert_eq!(crate::cli::stdout(&output), "{\"via\":\"cli\"}\n");

    let output = crate::cli::toolhost_with_stdin(&outer, &["list", "--json"], None);
    let listed: serde_json::Value =
        serde_json::from_str(&crate::cli::stdout(&output)).expect("list --json");
    let echo = listed
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "in_echo")
        .expect("in_echo listed")
        .clone();
    assert!(
        echo["component_path"]
            .as_str()
            .is_some_and(|s| s.starts_with("mcp: ")),
        "{echo}"
    );
}

/// Waits until `client`'s tool list names `name`.
async fn wait_for_tool(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, name: &str) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let tools = client.list_all_tools().await.expect("tools/list");
        if tools.iter().any(|t| t.name == name) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{name} never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_initialize_delays_nothing_serve_has() {
    use rmcp::ServiceExt;
    let outer = Fixture::new();
    outer.write_echo();
    // A "server" that reads its stdin and never says a word.
    outer.write(
        "silent.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"silent\"\n\n[ensemble.mcp]\n\
         command = \"sleep\"\nargs = [\"600\"]\nstartup-timeout-ms = 3000\n",
    );
    let status = outer.root().join("status.json");
    let client = ().serve(crate::mcp::stdio_serve(&outer)).await.expect("MCP session");
    // Serving before the silent server's start timeout: what is loaded answers, and the
    // status says what the rest waits for.
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["echo"]);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let published = std::fs::read_to_string(&status).unwrap_or_default();
        if published.contains("\"servers\"") && published.contains("sleep 600") {
            break;
        }
        // Before its 3 s timeout, the status says what the ensemble waits for.
        assert!(
            !published.contains("did not start within"),
            "the start was waited for: {published}"
        );
        assert!(std::time::Instant::now() < deadline, "{published}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // At its timeout the ensemble is refused, with the reason; echo served throughout.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let published = std::fs::read_to_string(&status).unwrap_or_default();
        if published.contains("did not start within 3000 ms") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{published}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = crate::mcp::call(&client, "echo", json!({"still": "here"})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_of_serve_reaches_an_imported_tool() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let inner = inner_fixture();
    let outer = Fixture::new();
    outer.write("inner.toml", &import_ensemble(&inner, ""));
    let client = ().serve(crate::mcp::stdio_serve(&outer)).await.expect("MCP session");
    // The imported server starts in the background: its tools join the list when it is up.
    wait_for_tool(&client, "in_echo").await;
    let serde_json::Value::Object(arguments) = json!({"through": "two hosts"}) else {
        unreachable!()
    };
    let result = client
        .call_tool(CallToolRequestParams::new("in_echo").with_arguments(arguments))
        .await
        .expect("tools/call");
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(text, r#"{"through":"two hosts"}"#);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_more_tools_than_max_tools_is_refused_without_reading_them_all() {
    let inner = Fixture::new();
    inner.write("many.toml", &crate::mcp_list::many_echoes(4_500));
    let outer = Fixture::new();
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "")
            .replace("[ensemble.mcp]\n", "[ensemble.mcp]\nmax-tools = 3000\n"),
    );
    let resolved = outer.resolve().await;
    let message = resolved.refused[0].diagnostics[0].to_string();
    assert!(
        message.contains("offers more than 3000 tools (4000 so far)"),
        "{message}"
    );
    // Within a larger bound, all of them come, each in one step of the import.
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "")
            .replace("[ensemble.mcp]\n", "[ensemble.mcp]\nmax-tools = 5000\n"),
    );
    let resolved = outer.resolve().await;
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    assert_eq!(resolved.catalog.tools().count(), 4_501);
    // A reload that lowers the bound applies it, though the server's command is unchanged.
    let reloader =
        toolhost::reload::Reloader::start(crate::support::runtime(), outer.ensembles()).await;
    assert!(reloader.status().refused.is_empty());
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "")
            .replace("[ensemble.mcp]\n", "[ensemble.mcp]\nmax-tools = 3000\n"),
    );
    let change = reloader.reload().await;
    let errors = change.refused.first().map(|r| r.errors.join("\n"));
    assert!(
        errors
            .as_deref()
            .is_some_and(|e| e.contains("offers more than 3000 tools")),
        "{errors:?}"
    );
}

/// Serves `handler` over streamable HTTP at `http://127.0.0.1:<port>/mcp` until the task is
/// aborted; a session per client, as rmcp's own server makes them.
async fn serve_over_http<H>(handler: H) -> (u16, tokio::task::JoinHandle<()>)
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    use rmcp::transport::streamable_http_server::StreamableHttpService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let server = tokio::spawn(async move {
        let router = axum::Router::new().nest_service("/mcp", service);
        let _ = axum::serve(listener, router).await;
    });
    toolhost::tls::install_provider();
    (port, server)
}

/// A test server's info: tools, whose list may change (and is announced).
fn announces_tool_changes() -> rmcp::model::ServerConfig {
    rmcp::model::ServerConfig::new(
        rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build(),
    )
}

/// An MCP server that announces a new tool list `times` times right after it is initialized.
#[derive(Clone)]
struct Flooder {
    times: usize,
    /// Notifications sent so far, over every session.
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ServerHandler for Flooder {
    /// The handshake revisions, whose notifications reach a session without a subscription.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        announces_tool_changes()
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = serde_json::Map::from_iter([("type".to_string(), json!("object"))]);
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            rmcp::model::Tool::new("steady", "Always here.", Arc::new(schema)),
        ]))
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<rmcp::RoleServer>) {
        let times = self.times;
        let sent = self.sent.clone();
        tokio::spawn(async move {
            for _ in 0..times {
                if context.peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changed_reloads_at_most_once_a_second() {
    let (port, server) = serve_over_http(Flooder {
        times: 20_000,
        sent: Arc::default(),
    })
    .await;

    let outer = Fixture::new();
    outer.write(
        "flood.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"flood\"\n\n[ensemble.mcp]\n\
             url = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    );
    let reloader = Reloader::start(crate::support::runtime(), outer.ensembles()).await;
    assert!(reloader.catalog().snapshot().get("steady").is_some());
    let mut changes = reloader.subscribe();
    let _watch = reloader.watch(Duration::from_millis(50)).expect("watch");
    // Count the reloads of three seconds of flood.
    let mut reloads = 0;
    let window = tokio::time::sleep(Duration::from_secs(3));
    tokio::pin!(window);
    loop {
        tokio::select! {
            change = changes.recv() => {
                if change.is_ok() {
                    reloads += 1;
                }
            }
            () = &mut window => break,
        }
    }
    assert!(reloads >= 1, "the announcements were not heard");
    assert!(reloads <= 5, "{reloads} reloads in three seconds");
    assert!(reloader.catalog().snapshot().get("steady").is_some());
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changed_writes_little_to_the_log_even_at_v() {
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flooder = Flooder {
        times: 200_000,
        sent: sent.clone(),
    };
    let (port, server) = serve_over_http(flooder).await;
    let outer = Fixture::new();
    outer.write(
        "flood.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"flood\"\n\n[ensemble.mcp]\n\
             url = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    );
    for verbosity in ["-v", "-vv"] {
        let before = sent.load(std::sync::atomic::Ordering::Relaxed);
        let host = crate::mcp::HttpServer::start(&outer, &[verbosity], &[]);
        // Six seconds of flood: rmcp logs each notification at info, which at -v used to
        // write 120 to 340 MB.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let written = host.stderr_bytes();
        assert!(
            written < 256 << 10,
            "{verbosity}: {written} bytes of log in six seconds:\n{}",
            &host.stderr()[..host.stderr().len().min(2000)]
        );
        // The flood was real: thousands of notifications reached the host meanwhile.
        let flooded = sent.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(
            flooded > 1000,
            "{verbosity}: only {flooded} notifications were sent"
        );
        eprintln!("{verbosity}: {flooded} notifications, {written} bytes of log");
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_stderr_never_ends_a_line_costs_the_host_no_memory() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    // The imported server first writes 256 MiB without a line end to its stderr, which the
    // host reads into its log, then serves as usual.
    let inner = inner_fixture();
    let quoted: Vec<String> = serve_args(&inner)
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let script = format!(
        "head -c 268435456 /dev/zero >&2; exec '{}' {}",
        env!("CARGO_BIN_EXE_toolhost"),
        quoted.join(" ")
    );
    let outer = Fixture::new();
    outer.write(
        "inner.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"inner\"\nprefix = \"in\"\n\n\
             [ensemble.mcp]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\nstartup-timeout-ms = 60000\n"
        ),
    );
    let server = crate::mcp::HttpServer::start(&outer, &[], &[]);
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            server.url.clone(),
        ))
        .await
        .expect("MCP session");
    let deadline = std::time::Instant::now() + DEADLINE;
    let result = loop {
        let serde_json::Value::Object(arguments) = json!({"still": "here"}) else {
            unreachable!()
        };
        let result = client
            .call_tool(CallToolRequestParams::new("in_echo").with_arguments(arguments))
            .await
            .expect("tools/call");
        if result.is_error != Some(true) || std::time::Instant::now() > deadline {
            break result;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(result.is_error, Some(false), "{result:?}");
    // The line would have been 256 MiB in the host's memory; it was cut at 4 KiB.
    let peak = crate::support::peak_kib(server.child.id());
    assert!(peak < 128 * 1024, "the host peaked at {peak} KiB");
    client.cancel().await.expect("close");
}

/// An MCP server whose tool list never ends: every page holds one tool with a 1 MiB
/// description and points to another page.
#[derive(Clone)]
struct Verbose;

impl rmcp::ServerHandler for Verbose {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let page: u64 = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let schema = serde_json::Map::from_iter([("type".to_string(), json!("object"))]);
        let tool = rmcp::model::Tool::new(
            format!("wordy_{page}"),
            "x".repeat(1 << 20),
            Arc::new(schema),
        );
        let mut result = rmcp::model::ListToolsResult::with_all_items(vec![tool]);
        result.next_cursor = Some((page + 1).to_string());
        Ok(result)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lists_megabytes_page_after_page_is_cut_off_by_size() {
    let (port, server) = serve_over_http(Verbose).await;
    let outer = Fixture::new();
    outer.write(
        "wordy.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"wordy\"\n\n[ensemble.mcp]\n\
             url = \"http://127.0.0.1:{port}/mcp\"\nstartup-timeout-ms = 60000\n"
        ),
    );
    outer.write_echo();
    let resolved = outer.resolve().await;
    let message = resolved.refused[0].diagnostics[0].to_string();
    // Sixteen tools of a little over 1 MiB each pass the 16 MiB bound, far below max-tools.
    assert!(
        message.contains(
            "lists more than 16 MiB of tool names, descriptions and schemas (16 tools so far)"
        ),
        "{message}"
    );
    assert!(resolved.catalog.get("echo").is_some());
    server.abort();
}

/// An MCP server that speaks only `versions`, lists the tools `t0` .. `t<n-1>` (n starts at
/// 1), answers a call with the tool's name, and announces each change of n the way its
/// revision does: `notifications/tools/list_changed` to its sessions, or on the
/// `subscriptions/listen` streams of 2026-07-28 clients.
#[derive(Clone)]
struct Changer {
    versions: &'static [ProtocolVersion],
    tools: tokio::sync::watch::Sender<usize>,
}

impl Changer {
    fn new(versions: &'static [ProtocolVersion]) -> Self {
        Changer {
            versions,
            tools: tokio::sync::watch::channel(1).0,
        }
    }
}

impl rmcp::ServerHandler for Changer {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(self.versions)
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        announces_tool_changes()
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = Arc::new(serde_json::Map::from_iter([(
            "type".to_string(),
            json!("object"),
        )]));
        let n = *self.tools.borrow();
        let tools = (0..n)
            .map(|i| rmcp::model::Tool::new(format!("t{i}"), "A tool.", schema.clone()))
            .collect();
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let text = rmcp::model::ContentBlock::text(format!("ran {}", request.name));
        Ok(rmcp::model::CallToolResult::success(vec![text]).into())
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<rmcp::RoleServer>) {
        let mut tools = self.tools.subscribe();
        tokio::spawn(async move {
            while tools.changed().await.is_ok() {
                if context.peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(
        &self,
        context: rmcp::service::SubscriptionContext,
    ) -> Result<(), rmcp::ErrorData> {
        let mut tools = self.tools.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = tools.changed() => {
                    if changed.is_err() || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_at_either_revision_are_imported_called_and_followed_the_same_way() {
    const MODERN: &[ProtocolVersion] = &[ProtocolVersion::V_2026_07_28];
    const LEGACY: &[ProtocolVersion] = &[ProtocolVersion::V_2025_11_25];
    for versions in [MODERN, LEGACY] {
        let changer = Changer::new(versions);
        let tools = changer.tools.clone();
        let (port, server) = serve_over_http(changer).await;
        let outer = Fixture::new();
        outer.write(
            "changer.toml",
            &format!(
                "schema-version = 1\n\n[ensemble]\nname = \"changer\"\n\n[ensemble.mcp]\n\
                 url = \"http://127.0.0.1:{port}/mcp\"\n"
            ),
        );
        let reloader = Reloader::start(crate::support::runtime(), outer.ensembles()).await;
        let status = reloader.status();
        assert!(
            status.refused.is_empty(),
            "{versions:?}: {:?}",
            status.refused
        );
        let mut changes = reloader.subscribe();
        let _watch = reloader.watch(Duration::from_millis(50)).expect("watch");
        let host = Host::new(reloader.catalog().clone(), None);
        assert_eq!(
            ok(&host.invoke(&session(), "t0", json!({})).await),
            "ran t0"
        );

        // The change is announced again every half second: the host may not hold its
        // subscription (2026-07-28) yet when it is first made, and nothing else makes it
        // list the server's tools again.
        let announce = tokio::spawn(async move {
            loop {
                tools.send_replace(2);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let wait = async {
            loop {
                match changes.recv().await {
                    Ok(change) if change.added.iter().any(|n| n == "t1") => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => panic!("the reloader went away"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("{versions:?}: the new tool was not picked up"));
        announce.abort();
        assert_eq!(
            ok(&host.invoke(&session(), "t1", json!({})).await),
            "ran t1"
        );
        server.abort();
    }
}
