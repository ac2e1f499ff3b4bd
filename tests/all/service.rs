//! `toolhost serve` run as a service, with real processes and real signals: the drain on
//! SIGTERM / SIGINT over stdio (stdin held open) and HTTP, the deadline that cancels, a second
//! signal, `toolhost chat` stopped by SIGTERM, and a client that closes stdin mid-call. The
//! harness the other `service_*` tests share lives here: a `serve` child spoken to over stdio,
//! its stderr in a file, and its audit log.

use crate::mcp::configure;
use crate::support::{Fixture, ensemble};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rustix::process::{Pid, Signal, kill_process};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A failure deadline for waits, not a timing assertion.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// A host with `count` (appends a line to /data/runs, then sleeps `sleep_ms`) and echo, and
/// these `[host]` settings.
pub(crate) fn fixture(host: &str) -> Fixture {
    let fixture = Fixture::new();
    fixture.mkdir("data");
    let slow = "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read-write\" }]\n\n\
        [[invokers]]\ninvoker = { name = \"count\", dedup = \"off\" }\nlimits = { timeout-ms = 120000 }\n\
        capabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n";
    fixture.write("slow.toml", &ensemble("slow", "testbed", slow));
    fixture.write_echo();
    fixture.write_host_file("host", host);
    fixture
}

/// Calls of `count` that have started running (each appends a line first).
fn runs(fixture: &Fixture) -> usize {
    std::fs::read_to_string(fixture.root().join("data/runs")).map_or(0, |t| t.lines().count())
}

pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn audit(fixture: &Fixture) -> Vec<Value> {
    audit_at(&fixture.root().join("audit.jsonl"))
}

pub(crate) fn audit_at(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

/// A `toolhost serve` child: stderr goes to a file the test reads; over stdio, its stdout
/// lines come through a channel and its stdin stays open until the test drops it.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    lines: Option<mpsc::Receiver<Value>>,
    stderr: PathBuf,
    next_id: u64,
}

impl Served {
    pub(crate) fn start(fixture: &Fixture, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut command, fixture);
        let stderr = fixture.root().join(format!("stderr-{}.log", rand_suffix()));
        command
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("serve");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(value) = serde_json::from_str(&line) else {
                    continue;
                };
                if send.send(value).is_err() {
                    return;
                }
            }
        });
        Served {
            stdin: child.stdin.take(),
            child,
            lines: Some(lines),
            stderr,
            next_id: 1,
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32).expect("pid")
    }

    pub(crate) fn signal(&self, signal: Signal) {
        kill_process(self.pid(), signal).expect("kill");
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The URL `serve --http` printed.
    fn url(&self) -> String {
        let mut url = None;
        wait_until("the HTTP address", || {
            // Only a whole line: stderr may be read while the line is being written.
            url = self.stderr().lines().find_map(|l| {
                l.strip_prefix("toolhost: serving MCP on ")
                    .filter(|rest| rest.ends_with("/mcp"))
                    .map(str::to_string)
            });
            url.is_some()
        });
        url.expect("url")
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write to serve");
        stdin.flush().expect("flush");
    }

    /// Sends a request and returns its id.
    pub(crate) fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The response to request `id`.
    pub(crate) fn response(&self, id: u64) -> Value {
        let lines = self.lines.as_ref().expect("stdio");
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = lines
                .recv_timeout(left)
                .expect("a response before the deadline");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    pub(crate) fn initialize(&mut self) {
        let id = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "service-test", "version": "1"}}),
        );
        assert!(self.response(id)["result"].is_object());
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    pub(crate) fn call(&mut self, tool: &str, arguments: Value) -> u64 {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Waits for the process to end; stdin stays open meanwhile.
    pub(crate) fn exit(&mut self) -> ExitStatus {
        exit_status(&mut self.child, &self.stderr)
    }
}

/// Waits for `child` to end, up to the deadline; the failure shows its stderr file.
fn exit_status(child: &mut Child, stderr: &Path) -> ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the process did not exit; stderr:\n{}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// The text of a tools/call response, and whether it is an error.
pub(crate) fn result_text(response: &Value) -> (String, bool) {
    let result = &response["result"];
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (text, result["isError"] == json!(true))
}

#[test]
fn sigterm_over_stdio_with_stdin_open_lets_the_call_in_flight_finish() {
    let fixture = fixture("drain-timeout-s = 60");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    let slow = served.call("count", json!({"path": "/data/runs", "sleep_ms": 1500}));
    wait_until("the call to start", || runs(&fixture) == 1);
    served.signal(Signal::TERM);
    // A call that comes after the signal is refused, not run.
    wait_until("the drain to begin", || served.stderr().contains("SIGTERM"));
    let late = served.call("echo", json!({"late": true}));
    let (text, is_error) = result_text(&served.response(late));
    assert!(is_error && text.contains("shutting down"), "{text}");
    let (text, is_error) = result_text(&served.response(slow));
    assert!(!is_error && text.contains("\"runs\":1"), "{text}");
    let status = served.exit();
    assert_eq!(status.code(), Some(0), "{}", served.stderr());
    let records = audit(&fixture);
    let outcomes: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap_or(""),
                r["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(outcomes.contains(&("count", "ok")), "{outcomes:?}");
    assert!(outcomes.contains(&("echo", "unavailable")), "{outcomes:?}");
}

#[test]
fn the_drain_deadline_cancels_what_is_left_audits_it_and_exits_4() {
    let fixture = fixture("drain-timeout-s = 1");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    let slow = served.call("count", json!({"path": "/data/runs", "sleep_ms": 100000}));
    wait_until("the call to start", || runs(&fixture) == 1);
    let signalled = Instant::now();
    served.signal(Signal::INT);
    let (text, is_error) = result_text(&served.response(slow));
    assert!(is_error && text.starts_with("cancelled:"), "{text}");
    let status = served.exit();
    assert_eq!(status.code(), Some(4), "{}", served.stderr());
    // Bounded by the deadline, far below the call's 100 s (a failure bound, not a timing
    // assertion).
    assert!(signalled.elapsed() < Duration::from_secs(30));
    let records = audit(&fixture);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "cancelled");
}

#[test]
fn a_second_signal_cancels_at_once_and_exits_with_its_number() {
    let fixture = fixture("drain-timeout-s = 3600");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    served.call("count", json!({"path": "/data/runs", "sleep_ms": 100000}));
    wait_until("the call to start", || runs(&fixture) == 1);
    served.signal(Signal::TERM);
    wait_until("the drain to begin", || served.stderr().contains("SIGTERM"));
    served.signal(Signal::INT);
    let status = served.exit();
    assert_eq!(status.code(), Some(130), "{}", served.stderr());
    // The call was cancelled, and audited, before the exit.
    let records = audit(&fixture);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_over_http_drains_and_readiness_turns_unready() {
    toolhost::tls::install_provider();
    let fixture = fixture("drain-timeout-s = 60");
    let mut served = Served::start(&fixture, &["--http", "127.0.0.1:0"], &[]);
    let url = served.url();
    let base = url.trim_end_matches("/mcp").to_string();
    let http = reqwest::Client::new();
    let probe = |path: &'static str| {
        let request = http.get(format!("{base}{path}"));
        async move { request.send().await.expect("probe").status().as_u16() }
    };
    assert_eq!(probe("/healthz").await, 200);
    assert_eq!(probe("/readyz").await, 200);
    let client = std::sync::Arc::new(
        ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url,
        ))
        .await
        .expect("MCP session"),
    );
    // Long enough for the probes below to see the drain on a loaded machine.
    let arguments = json!({"path": "/data/runs", "sleep_ms": 5000});
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    let slow = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call_tool(CallToolRequestParams::new("count").with_arguments(arguments))
                .await
        }
    });
    tokio::task::spawn_blocking({
        let data = fixture.root().join("data/runs");
        move || wait_until("the call to start", || data.exists())
    })
    .await
    .expect("waited");
    served.signal(Signal::INT);
    let deadline = Instant::now() + DEADLINE;
    while probe("/readyz").await != 503 {
        assert!(Instant::now() < deadline, "readyz never turned unready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(probe("/healthz").await, 200);
    let result = tokio::time::timeout(DEADLINE, slow)
        .await
        .expect("the answer of the call in flight arrived")
        .expect("joined")
        .expect("tools/call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let status = tokio::task::spawn_blocking(move || {
        let status = served.exit();
        (status, served.stderr())
    })
    .await
    .expect("exit");
    assert_eq!(status.0.code(), Some(0), "{}", status.1);
    assert_eq!(audit(&fixture)[0]["outcome"], "ok");
}

#[test]
fn sigterm_during_chat_lets_the_tool_call_finish_and_stops_the_run() {
    use crate::scripted::{Scripted, openai};
    let fixture = fixture("drain-timeout-s = 60");
    // The model calls the slow tool, then would go on; the signal ends the run after the call.
    let server = Scripted::start(vec![
        openai::stream(
            "Counting.",
            &[("c1", "count", r#"{"path": "/data/runs", "sleep_ms": 1500}"#)],
        ),
        openai::text("Done."),
    ]);
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let stderr = fixture.root().join("chat-stderr.log");
    let mut child = command
        .args([
            "chat",
            "Count once.",
            "--model",
            "scripted-model",
            "--yes",
            "--base-url",
        ])
        .arg(&server.base_url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("chat");
    wait_until("the call to start", || runs(&fixture) == 1);
    kill_process(Pid::from_raw(child.id() as i32).expect("pid"), Signal::TERM).expect("kill");
    let status = exit_status(&mut child, &stderr);
    let said = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{said}");
    let records = audit(&fixture);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "ok");
    // The run stopped: the model was not asked again after the call.
    assert_eq!(server.requests().len(), 1, "{said}");
}

#[test]
fn a_client_that_closes_stdin_mid_call_ends_the_host_and_the_call_is_audited() {
    let fixture = fixture("drain-timeout-s = 3600");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    served.call("count", json!({"path": "/data/runs", "sleep_ms": 100000}));
    wait_until("the call to start", || runs(&fixture) == 1);
    drop(served.stdin.take());
    assert_eq!(served.exit().code(), Some(0), "{}", served.stderr());
    let records = audit(&fixture);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "cancelled");
}
