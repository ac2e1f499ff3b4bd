//! MCP servers imported as ensembles (`[ensemble.mcp]`): an imported server's tools
//! validated, called, deduplicated and audited; a call it never answers; a server that dies
//! mid-call or cannot start; what does not apply to an import; a server reached over streamable
//! HTTP; `toolhost call`, `list` and an MCP client of `serve` reaching an imported tool. The
//! imported server is a real MCP peer built with rmcp: another `toolhost serve` over its own
//! ensembles (echo and testbed), started as a child process or reached over streamable HTTP.
//! The harness the other `mcp_import_*` tests share lives here.

use crate::support::{Fixture, cache_dir, ensemble, err, ok, session};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toolhost::invoke::{ErrorKind, Host};

/// A failure deadline for waits, not a timing assertion.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

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
pub(crate) fn serve_args(inner: &Fixture) -> Vec<String> {
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
    let mut names: Vec<&str> = catalog.tools().map(|t| t.name()).collect();
    names.sort();
    assert_eq!(names, ["in_echo", "in_fail", "in_sleep", "shout"]);
    let shout = catalog.get("shout").expect("shout");
    assert_eq!(shout.description(), "Echo, strictly");
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
    outer.write_mcp_import(
        "broken",
        "command = \"./no-such-server\"\nargs = [\"--stdio\"]",
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
    outer.write_mcp_import("remote", &format!("url = {url:?}"));
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

/// Serves `handler` over streamable HTTP at `http://127.0.0.1:<port>/mcp` until the task is
/// aborted; a session per client, as rmcp's own server makes them.
pub(crate) async fn serve_over_http<H>(handler: H) -> (u16, tokio::task::JoinHandle<()>)
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
pub(crate) fn announces_tool_changes() -> rmcp::model::ServerConfig {
    rmcp::model::ServerConfig::new(
        rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build(),
    )
}
