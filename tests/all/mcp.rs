//! `toolhost serve` driven by the official MCP client (rmcp) over stdio: list, call, errors as
//! results, list_changed after a reload, status, typed tools' output schemas and structured
//! results, and a clean exit when stdin closes. The harness the other MCP tests share lives here
//! too: the environment of a `toolhost` child, `serve` over stdio and over HTTP, a call, and a
//! raw `initialize` request.

use crate::support::{Fixture, cache_dir, ensemble, fail_ensemble};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// A failure deadline for waits, not a timing assertion.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// An MCP client that remembers `tools/list_changed` and log messages.
#[derive(Clone, Default)]
pub(crate) struct Client {
    pub(crate) changed: Arc<Notify>,
    pub(crate) logs: Arc<std::sync::Mutex<Vec<String>>>,
    logged: Arc<Notify>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    #[allow(deprecated)] // MCP logging, part of the revisions toolhost serves
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = params
            .data
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| params.data.to_string());
        self.logs.lock().expect("logs").push(text);
        self.logged.notify_one();
    }
}

impl Client {
    /// Waits until a log message containing `needle` arrives.
    pub(crate) async fn log_containing(&self, needle: &str) -> String {
        let wait = async {
            loop {
                let notified = self.logged.notified();
                if let Some(found) = self
                    .logs
                    .lock()
                    .expect("logs")
                    .iter()
                    .find(|l| l.contains(needle))
                {
                    return found.clone();
                }
                notified.await;
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .expect("log message")
    }
}

pub(crate) fn fixture() -> Fixture {
    let fixture = Fixture::new();
    let testbed = "[defaults]\ntimeout-ms = 300\n\n[[invokers]]\ninvoker = { name = \"spin\" }\n\n\
        [[invokers]]\ninvoker = { name = \"flood_stdout\" }\nlimits = { timeout-ms = 20000 }\n";
    fixture.write("testbed.toml", &ensemble("testbed", "testbed", testbed));
    fixture.write_echo();
    fixture
}

/// How many unused components a `serve` on the tests' shared cache keeps: all of them.
pub(crate) const SHARED_CACHE_KEEP: &str = "100000";

/// The environment every `toolhost` started by these tests gets.
pub(crate) fn configure(command: &mut Command, fixture: &Fixture) {
    crate::support::warm_cache();
    command
        .current_dir(fixture.root())
        .env_remove("TOOLHOST_CONFIG")
        .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        // The tests share one cache: no `serve` may prune what the others use.
        .env("TOOLHOST_CACHE_KEEP", SHARED_CACHE_KEEP)
        .env("TOOLHOST_STATUS_FILE", fixture.root().join("status.json"))
        // The chat database's default place: the fixture's, never the user's.
        .env("XDG_STATE_HOME", fixture.root().join("state"))
        .env("TOOLHOST_AUDIT", fixture.root().join("audit.jsonl"));
}

/// `toolhost serve` over stdio on the fixture's ensembles, as an rmcp transport; the server
/// ends when the transport is dropped.
pub(crate) fn stdio_serve(fixture: &Fixture) -> TokioChildProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, fixture);
    command.arg("serve");
    TokioChildProcess::builder(tokio::process::Command::from(command))
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts")
        .0
}

pub(crate) fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// Calls `tool` with `arguments` (a JSON object) through any test client.
pub(crate) async fn call<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
        .await
        .expect("tools/call")
}

pub(crate) async fn tool_names(client: &RunningService<RoleClient, Client>) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_serves_lists_calls_and_announces_reloads() {
    let fixture = fixture();
    let handler = Client::default();
    let changed = handler.changed.clone();
    let observer = handler.clone();
    let client = handler
        .serve(stdio_serve(&fixture))
        .await
        .expect("MCP session");

    assert_eq!(tool_names(&client).await, ["echo", "flood_stdout", "spin"]);
    let info = client.peer_info().expect("initialized");
    assert!(
        info.capabilities.logging.is_some(),
        "logging is not advertised"
    );
    assert!(
        info.capabilities
            .tools
            .as_ref()
            .and_then(|t| t.list_changed)
            == Some(true)
    );
    let schema = client
        .list_all_tools()
        .await
        .expect("list")
        .into_iter()
        .find(|t| t.name == "echo")
        .expect("echo")
        .input_schema;
    assert_eq!(schema.get("type"), Some(&json!("object")));

    let ok = call(&client, "echo", json!({"text": "hi"})).await;
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(text(&ok), r#"{"text":"hi"}"#);

    let timeout = call(&client, "spin", json!({})).await;
    assert_eq!(timeout.is_error, Some(true));
    assert!(
        text(&timeout).starts_with("timeout: tool `spin` did not finish within 300 ms"),
        "{}",
        text(&timeout)
    );
    let invalid = call(&client, "nope", json!({})).await;
    assert_eq!(invalid.is_error, Some(true));
    assert!(text(&invalid).starts_with("unknown-tool:"));

    // A plugin that floods its stdout cannot corrupt the protocol on the host's stdout.
    let flood = call(&client, "flood_stdout", json!({"bytes": 8 << 20})).await;
    assert_eq!(text(&flood), "done");
    assert_eq!(tool_names(&client).await.len(), 3);

    // A new ensemble file: the session is told, and the list has the new tool.
    fixture.write("more.toml", &fail_ensemble("more"));
    tokio::time::timeout(DEADLINE, changed.notified())
        .await
        .expect("notifications/tools/list_changed");
    assert_eq!(
        tool_names(&client).await,
        ["echo", "fail", "flood_stdout", "spin"]
    );

    // `toolhost status` reads what this host published (it publishes after each reload, so
    // the reload just announced may take a moment to appear).
    let status = || {
        let mut status = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut status, &fixture);
        let output = status
            .args(["status", "--json"])
            .output()
            .expect("status runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    };
    let published = |report: &Value| {
        report["status"]["ensembles"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["name"] == "more"))
    };
    let started = std::time::Instant::now();
    let mut report = status();
    while !published(&report) && started.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(20));
        report = status();
    }
    assert_eq!(report["running"], true);
    assert!(report["status"]["generation"].as_u64() >= Some(1));
    assert!(published(&report), "{report:#}");

    // A broken edit keeps the last good version; the session hears why, with file and line.
    std::fs::write(
        fixture.ensembles().join("more.toml"),
        "schema-version = 1\n[ensemble\n",
    )
    .expect("write");
    let message = observer.log_containing("more.toml:2").await;
    assert!(
        message.contains("previous version keeps serving"),
        "{message}"
    );
    assert!(tool_names(&client).await.contains(&"fail".to_string()));
    // Another ensemble changes: the broken one is not logged again (it is not new).
    fixture.write(
        "third.toml",
        &ensemble(
            "third",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"say\" }\n",
        ),
    );
    tokio::time::timeout(DEADLINE, changed.notified())
        .await
        .expect("notifications/tools/list_changed");
    assert!(tool_names(&client).await.len() == 5);
    let logs = observer.logs.lock().expect("logs").clone();
    assert_eq!(
        logs.iter().filter(|l| l.contains("more.toml:2")).count(),
        1,
        "{logs:#?}"
    );

    client.cancel().await.expect("close");
    // The audit log names the MCP session.
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    assert!(
        audit
            .lines()
            .all(|l| l.contains("\"session\":\"mcp-stdio-")),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_tools_advertise_their_output_schema_and_return_structured_content() {
    let fixture = Fixture::new();
    fixture.write("typed.toml", &ensemble("typed", "typed", ""));
    let client = Client::default()
        .serve(stdio_serve(&fixture))
        .await
        .expect("MCP session");
    let tools = client.list_all_tools().await.expect("tools/list");
    let schema_of = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).expect(name);
        tool.output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone()))
    };
    // A record is the object itself; anything else is wrapped as {"result": ...}.
    let forecast = schema_of("get_forecast").expect("get_forecast has an output schema");
    assert_eq!(forecast["properties"]["place"], json!({"type": "string"}));
    assert_eq!(
        schema_of("add").expect("add")["properties"]["result"]["type"],
        json!("integer")
    );
    assert_eq!(schema_of("crash"), None, "a function returning nothing");

    let report = call(
        &client,
        "get_forecast",
        json!({"where_to": "here", "extras": []}),
    )
    .await;
    let structured = report
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(structured["place"], json!("here"));
    assert_eq!(
        serde_json::from_str::<Value>(&text(&report)).expect("JSON"),
        structured
    );
    let sum = call(&client, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(sum.structured_content, Some(json!({"result": 3})));
    let hello = call(&client, "greet", json!({"name": "Ada", "initial": "A"})).await;
    assert_eq!(
        hello.structured_content,
        Some(json!({"result": "hello Ada (A)"}))
    );
    assert_eq!(text(&hello), "hello Ada (A)");
    let failed = call(
        &client,
        "get_forecast",
        json!({"where_to": {"named": "nowhere"}, "extras": []}),
    )
    .await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(failed.structured_content, None);
    client.cancel().await.expect("close");
}

#[test]
fn stdio_serve_exits_cleanly_when_stdin_closes() {
    let fixture = fixture();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let mut child = command
        .args(["serve", "--no-watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    drop(child.stdin.take());
    let status = child.wait().expect("exits");
    assert!(status.success(), "{status:?}");
}

/// A `toolhost serve --http` on a port the OS picks; killed when dropped.
pub(crate) struct HttpServer {
    pub(crate) child: Child,
    pub(crate) url: String,
    /// What the server wrote to stderr but its address line (the last 1 MiB of it), and how
    /// many bytes in all.
    stderr: std::sync::Arc<std::sync::Mutex<(String, usize)>>,
}

impl HttpServer {
    pub(crate) fn start(fixture: &Fixture, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_at("127.0.0.1:0", fixture, extra, env)
    }

    /// [`HttpServer::start`] at `address` (for a server that must know its URL beforehand:
    /// an OAuth resource is named by it).
    pub(crate) fn start_at(
        address: &str,
        fixture: &Fixture,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        command.args(["serve", "--http", address]);
        Self::started(command, fixture, extra, env)
    }

    /// [`HttpServer::start`] with a command of the caller's that runs `toolhost` (under
    /// `prlimit`, say).
    pub(crate) fn start_command(
        mut command: Command,
        fixture: &Fixture,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        command.args(["serve", "--http", "127.0.0.1:0"]);
        Self::started(command, fixture, extra, env)
    }

    /// Starts `command`, which names `serve --http ADDRESS` already.
    fn started(
        mut command: Command,
        fixture: &Fixture,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        // The tests' own HTTP clients (rmcp over reqwest) need the host's TLS provider.
        toolhost::tls::install_provider();
        configure(&mut command, fixture);
        // After `configure`, so that a test's own settings win.
        for (key, value) in env {
            command.env(key, value);
        }
        command
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        let mut child = command.spawn().expect("serve --http");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut before = String::new();
        let url = loop {
            let line = lines
                .next()
                .expect("serve printed its address")
                .expect("stderr line");
            if let Some(url) = line.strip_prefix("toolhost: serving MCP on ") {
                break url.to_string();
            }
            before.push_str(&line);
            before.push('\n');
        };
        // Keep draining stderr so the server never blocks on a full pipe; keep its tail.
        let written = before.len();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new((before, written)));
        let kept = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut kept = kept.lock().expect("stderr");
                let (text, total) = &mut *kept;
                *total += line.len() + 1;
                text.push_str(&line);
                text.push('\n');
                if text.len() > 1 << 20 {
                    let cut = text.ceil_char_boundary(text.len() - (1 << 19));
                    text.drain(..cut);
                }
            }
        });
        HttpServer { child, url, stderr }
    }

    /// What the server wrote to stderr so far (its last 1 MiB).
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr").0.clone()
    }

    /// How many bytes the server wrote to stderr so far.
    pub(crate) fn stderr_bytes(&self) -> usize {
        self.stderr.lock().expect("stderr").1
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
}

pub(crate) async fn post(url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize_body().to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("request").status().as_u16()
}
