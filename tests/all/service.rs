//! `toolhost serve` run as a service, with real processes and real signals: the drain on
//! SIGTERM / SIGINT over stdio (stdin held open) and HTTP, the deadline that cancels, a second
//! signal, SIGHUP (reload without watching, the audit log reopened after a move or logrotate),
//! the audit log on a full device, systemd's readiness messages, JSON log lines, and the
//! shipped systemd unit.

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
const DEADLINE: Duration = Duration::from_secs(60);

/// A host with `count` (appends a line to /data/runs, then sleeps `sleep_ms`) and echo, and
/// these `[host]` settings.
fn fixture(host: &str) -> Fixture {
    let fixture = Fixture::new();
    fixture.mkdir("data");
    let slow = "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read-write\" }]\n\n\
        [[invokers]]\ninvoker = { name = \"count\", dedup = \"off\" }\nlimits = { timeout-ms = 120000 }\n\
        capabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n";
    fixture.write("slow.toml", &ensemble("slow", "testbed", slow));
    fixture.write_echo();
    std::fs::write(
        fixture.root().join("toolhost.toml"),
        format!("schema-version = 1\n[host]\n{host}\n"),
    )
    .expect("toolhost.toml");
    fixture
}

/// Calls of `count` that have started running (each appends a line first).
fn runs(fixture: &Fixture) -> usize {
    std::fs::read_to_string(fixture.root().join("data/runs")).map_or(0, |t| t.lines().count())
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn audit(fixture: &Fixture) -> Vec<Value> {
    audit_at(&fixture.root().join("audit.jsonl"))
}

fn audit_at(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

/// A `toolhost serve` child: stderr goes to a file the test reads; over stdio, its stdout
/// lines come through a channel and its stdin stays open until the test drops it.
struct Served {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<mpsc::Receiver<Value>>,
    stderr: PathBuf,
    next_id: u64,
}

impl Served {
    fn start(fixture: &Fixture, args: &[&str], env: &[(&str, &str)]) -> Self {
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

    fn signal(&self, signal: Signal) {
        kill_process(self.pid(), signal).expect("kill");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The URL `serve --http` printed.
    fn url(&self) -> String {
        let mut url = None;
        wait_until("the HTTP address", || {
            url = self.stderr().lines().find_map(|l| {
                l.strip_prefix("toolhost: serving MCP on ")
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
    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The response to request `id`.
    fn response(&self, id: u64) -> Value {
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

    fn initialize(&mut self) {
        let id = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "service-test", "version": "1"}}),
        );
        assert!(self.response(id)["result"].is_object());
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, tool: &str, arguments: Value) -> u64 {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Waits for the process to end; stdin stays open meanwhile.
    fn exit(&mut self) -> ExitStatus {
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
fn result_text(response: &Value) -> (String, bool) {
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
fn sighup_reloads_without_watching_and_reopens_the_moved_audit_log() {
    let fixture = fixture("");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    let first = served.call("echo", json!({"n": 1}));
    assert!(!result_text(&served.response(first)).1);
    let log = fixture.root().join("audit.jsonl");
    let moved = fixture.root().join("audit.jsonl.1");
    std::fs::rename(&log, &moved).expect("move the audit log");
    fixture.write("more.toml", &crate::support::fail_ensemble("more"));
    served.signal(Signal::HUP);
    // The new tool appears without a watcher: SIGHUP reloaded.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let list = served.request("tools/list", json!({}));
        let tools = served.response(list)["result"]["tools"].to_string();
        if tools.contains("\"fail\"") {
            break;
        }
        assert!(Instant::now() < deadline, "SIGHUP did not reload: {tools}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = served.call("echo", json!({"n": 2}));
    assert!(!result_text(&served.response(second)).1);
    assert_eq!(audit_at(&moved).len(), 1, "a record went to the moved file");
    let records = audit_at(&log);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["arguments"], json!({"n": 2}));
    drop(served.stdin.take());
    assert_eq!(served.exit().code(), Some(0));
}

/// Waits until `tools/list` names `tool`: a reload happened.
fn wait_for_tool(served: &mut Served, tool: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let list = served.request("tools/list", json!({}));
        let tools = served.response(list)["result"]["tools"].to_string();
        if tools.contains(&format!("\"{tool}\"")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no reload brought {tool}: {tools}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_fifo_or_a_link_at_the_audit_path_is_refused_at_reopen_and_sighup_keeps_reloading() {
    use std::os::unix::fs::PermissionsExt;
    let fixture = fixture("");
    let mut served = Served::start(&fixture, &["--no-watch", "-v"], &[]);
    served.initialize();
    let log = fixture.root().join("audit.jsonl");
    let moved = fixture.root().join("audit.jsonl.1");
    let first = served.call("echo", json!({"n": 1}));
    assert!(!result_text(&served.response(first)).1);
    std::fs::rename(&log, &moved).expect("move the audit log");

    // A FIFO where the log was: the reopen fails at once (a blocking open would wait for a
    // reader for ever, and every later SIGHUP with it), the reload still happens.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &log,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    fixture.write("more.toml", &crate::support::fail_ensemble("more"));
    served.signal(Signal::HUP);
    wait_for_tool(&mut served, "fail");
    wait_until("the refused reopen", || {
        served.stderr().contains("cannot reopen the audit log")
    });
    assert!(served.stderr().contains("FIFO"), "{}", served.stderr());
    let second = served.call("echo", json!({"n": 2}));
    assert!(!result_text(&served.response(second)).1);

    // A link to another file: never followed; its target is neither written nor narrowed.
    std::fs::remove_file(&log).expect("remove the FIFO");
    let target = fixture.root().join("elsewhere.txt");
    std::fs::write(&target, "").expect("target");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).expect("mode");
    std::os::unix::fs::symlink(&target, &log).expect("link");
    fixture.write(
        "again.toml",
        &ensemble(
            "again",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"again\", tool = \"fail\" }\n",
        ),
    );
    served.signal(Signal::HUP);
    wait_for_tool(&mut served, "again");
    wait_until("the second refused reopen", || {
        served
            .stderr()
            .matches("cannot reopen the audit log")
            .count()
            == 2
    });
    assert!(
        served.stderr().contains("symbolic link"),
        "{}",
        served.stderr()
    );
    let third = served.call("echo", json!({"n": 3}));
    assert!(!result_text(&served.response(third)).1);
    let target_meta = std::fs::metadata(&target).expect("target");
    assert_eq!(target_meta.len(), 0, "a record went through the link");
    assert_eq!(target_meta.permissions().mode() & 0o777, 0o644);
    // Every record is in the file that was open all along, none lost.
    let kept: Vec<Value> = audit_at(&moved)
        .into_iter()
        .filter(|r| r["tool"] == "echo")
        .map(|r| r["arguments"]["n"].clone())
        .collect();
    assert_eq!(kept, [json!(1), json!(2), json!(3)]);
    // `status` says the last reopen failed, and how often.
    wait_until("the status to show the failed reopen", || {
        std::fs::read_to_string(fixture.root().join("status.json"))
            .is_ok_and(|s| s.contains("\"reopen_failures\": 2") && s.contains("symbolic link"))
    });

    // A regular file again: taken at the next SIGHUP.
    std::fs::remove_file(&log).expect("remove the link");
    served.signal(Signal::HUP);
    wait_until("the reopen", || {
        served.stderr().contains("reopened the audit log")
    });
    let fourth = served.call("echo", json!({"n": 4}));
    assert!(!result_text(&served.response(fourth)).1);
    assert_eq!(audit_at(&log).len(), 1);
    drop(served.stdin.take());
    assert_eq!(served.exit().code(), Some(0));
}

/// Debian's logrotate, which `scripts/test-tools.sh` installs.
fn logrotate() -> PathBuf {
    let found = [
        "/usr/sbin/logrotate",
        "/sbin/logrotate",
        "/usr/bin/logrotate",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file());
    found.expect("logrotate is not installed: run ./scripts/test-tools.sh (./scripts/test.sh does)")
}

#[test]
fn logrotate_with_postrotate_sighup_loses_no_record() {
    let logrotate = logrotate();
    let fixture = fixture("");
    let mut served = Served::start(&fixture, &["--no-watch", "-v"], &[]);
    served.initialize();
    let log = fixture.root().join("audit.jsonl");
    let config = fixture.root().join("logrotate.conf");
    std::fs::write(
        &config,
        format!(
            "{} {{\n  rotate 3\n  create 0600\n  missingok\n  sharedscripts\n  postrotate\n    kill -HUP {}\n  endscript\n}}\n",
            log.display(),
            served.child.id()
        ),
    )
    .expect("logrotate.conf");
    let mut sent = 0;
    for round in 0..3 {
        for _ in 0..5 {
            sent += 1;
            let id = served.call("echo", json!({"n": sent}));
            assert!(!result_text(&served.response(id)).1);
        }
        let status = Command::new(&logrotate)
            .arg("--force")
            .arg("--state")
            .arg(fixture.root().join("logrotate.state"))
            .arg(&config)
            .status()
            .expect("logrotate runs");
        assert!(status.success(), "logrotate round {round}: {status:?}");
        // The reopen happens on the host's own time: the next records may go either way
        // until it has, so wait for it to say so.
        let reopened = round + 1;
        wait_until("the reopen", || {
            served.stderr().matches("reopened the audit log").count() >= reopened
        });
    }
    for _ in 0..5 {
        sent += 1;
        let id = served.call("echo", json!({"n": sent}));
        assert!(!result_text(&served.response(id)).1);
    }
    let mut numbers: Vec<u64> = [
        "audit.jsonl",
        "audit.jsonl.1",
        "audit.jsonl.2",
        "audit.jsonl.3",
    ]
    .iter()
    .flat_map(|name| audit_at(&fixture.root().join(name)))
    .map(|r| r["arguments"]["n"].as_u64().expect("n"))
    .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=sent).collect::<Vec<_>>());
    // Each file holds one round: nothing was written to a moved file after the reopen.
    assert_eq!(audit_at(&log).len(), 5);
    assert_eq!(audit_at(&fixture.root().join("audit.jsonl.1")).len(), 5);
}

#[test]
fn a_full_audit_log_refuses_calls_until_it_takes_writes_again() {
    let fixture = fixture("");
    let log = fixture.root().join("audit.jsonl");
    std::os::unix::fs::symlink("/dev/full", &log).expect("link to /dev/full");
    let mut served = Served::start(&fixture, &["--no-watch", "-v"], &[]);
    served.initialize();
    // The first write shows the file refuses: the call that made it had run (its result is
    // answered, its record held); the calls after it are refused without running.
    let first = served.call("echo", json!({"n": "first"}));
    assert!(!result_text(&served.response(first)).1);
    for n in 0..3 {
        let id = served.call("echo", json!({"n": n}));
        let (text, is_error) = result_text(&served.response(id));
        assert!(
            is_error && text.starts_with("unavailable:") && text.contains("audit log"),
            "{text}"
        );
    }
    // One error line for the failure, not one per record.
    assert_eq!(
        served.stderr().matches("cannot be written").count(),
        1,
        "{}",
        served.stderr()
    );
    // Space comes back: the path is a real file again, and the host reopens it.
    std::fs::remove_file(&log).expect("unlink");
    served.signal(Signal::HUP);
    wait_until("the reopen", || {
        served.stderr().contains("reopened the audit log")
    });
    let id = served.call("echo", json!({"n": "after"}));
    let (text, is_error) = result_text(&served.response(id));
    assert!(!is_error, "{text}");
    // The refusals were held and written first, in order.
    let outcomes: Vec<String> = audit_at(&log)
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        outcomes,
        ["ok", "unavailable", "unavailable", "unavailable", "ok"],
        "{}",
        served.stderr()
    );
}

#[test]
fn with_continue_calls_go_on_and_the_unwritten_records_reach_stderr_at_exit() {
    let fixture = fixture("on-audit-error = \"continue\"");
    let log = fixture.root().join("audit.jsonl");
    std::os::unix::fs::symlink("/dev/full", &log).expect("link to /dev/full");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    let id = served.call("echo", json!({"n": "kept"}));
    let (text, is_error) = result_text(&served.response(id));
    assert!(!is_error, "{text}");
    // `status` shows the held record while the host runs.
    wait_until("the status to show the held record", || {
        std::fs::read_to_string(fixture.root().join("status.json"))
            .is_ok_and(|s| s.contains("\"held\": 1"))
    });
    served.signal(Signal::TERM);
    assert_eq!(served.exit().code(), Some(0));
    let stderr = served.stderr();
    assert!(
        stderr.contains("1 audit record(s) could not be written")
            && stderr.contains(r#""arguments":{"n":"kept"}"#),
        "{stderr}"
    );
    // A device is never fsynced: no error from the sync every second or at exit.
    assert!(!stderr.contains("Invalid argument"), "{stderr}");
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let fixture = fixture("");
    let socket_path = fixture.root().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind NOTIFY_SOCKET");
    socket.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let next = || {
        let mut buffer = [0u8; 512];
        let n = socket.recv(&mut buffer).expect("a notification");
        String::from_utf8_lossy(&buffer[..n]).to_string()
    };
    let served = Served::start(
        &fixture,
        &["--http", "127.0.0.1:0"],
        &[("NOTIFY_SOCKET", socket_path.to_str().expect("path"))],
    );
    assert_eq!(next(), "READY=1\n");
    served.signal(Signal::HUP);
    let reloading = next();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert_eq!(next(), "READY=1\n");
    served.signal(Signal::TERM);
    assert_eq!(next(), "STOPPING=1\n");
}

#[test]
fn json_log_lines_parse_and_carry_the_call() {
    let fixture = fixture("");
    let testbed = "[[invokers]]\ninvoker = { name = \"log\" }\n";
    fixture.write("talk.toml", &ensemble("talk", "testbed", testbed));
    // At the default level: the call's fields come with every line, whatever its level.
    let mut served = Served::start(&fixture, &["--no-watch", "--log-format", "json"], &[]);
    served.initialize();
    let id = served.call("log", json!({"message": "hello from the plugin"}));
    assert!(!result_text(&served.response(id)).1);
    served.signal(Signal::TERM);
    assert_eq!(served.exit().code(), Some(0));
    let stderr = served.stderr();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for line in &lines {
        for field in ["time", "level", "target", "message"] {
            assert!(line.get(field).is_some(), "{field} missing: {line}");
        }
    }
    let plugin = lines
        .iter()
        .find(|l| l["message"] == "hello from the plugin")
        .unwrap_or_else(|| panic!("the plugin's line: {stderr}"));
    assert_eq!(plugin["level"], "WARN");
    assert_eq!(plugin["target"], "plugin");
    assert_eq!(plugin["tool"], "log");
    assert_eq!(plugin["ensemble"], "talk");
    assert!(
        plugin["session"]
            .as_str()
            .is_some_and(|s| s.starts_with("mcp-stdio-"))
    );
    assert!(lines.iter().any(|l| {
        l["level"] == "WARN"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("SIGTERM"))
    }));
}

#[test]
fn the_shipped_systemd_unit_verifies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let unit = std::fs::read_to_string(root.join("deploy/systemd/toolhost.service"))
        .expect("deploy/systemd/toolhost.service");
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // The unit names /usr/local/bin/toolhost; verify it against the binary built here.
    let dir = tempfile::tempdir().expect("dir");
    let local = dir.path().join("toolhost.service");
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/toolhost", env!("CARGO_BIN_EXE_toolhost")),
    )
    .expect("unit");
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .expect("systemd-analyze (Debian's systemd, which scripts/test-tools.sh installs)");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && said.trim().is_empty(), "{said}");
    // The example toolhost.toml it points at is one this host accepts (its ensembles
    // directory and cache replaced by a fixture's).
    let fixture = Fixture::new();
    fixture.write_echo();
    let example = root.join("deploy/systemd/toolhost.toml");
    let check = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--config")
        .arg(&example)
        .arg("--ensembles")
        .arg(fixture.ensembles())
        .arg("--cache-dir")
        .arg(crate::support::cache_dir())
        .arg("check")
        .output()
        .expect("check");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The codes of the README's exit-code table, as written in its first column.
fn readme_exit_codes() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let table = readme
        .split("**Exit codes**")
        .nth(1)
        .expect("the README has an exit-code table");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn exit_codes_are_those_the_readme_lists() {
    assert_eq!(readme_exit_codes(), ["0", "1", "2", "3", "4", "130, 143"]);
    let fixture = fixture("");
    let run = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut command, &fixture);
        let output = command.args(args).output().expect("toolhost runs");
        output.status.code()
    };
    assert_eq!(run(&["check"]), Some(0));
    assert_eq!(run(&["call", "echo", "{}"]), Some(0));
    // A refused call (an unknown tool) and a failed check.
    assert_eq!(run(&["call", "no_such_tool", "{}"]), Some(1));
    fixture.write("broken.toml", "schema-version = 1\n[ensemble]\nname = 3\n");
    assert_eq!(run(&["check"]), Some(1));
    assert_eq!(run(&["--no-such-flag", "check"]), Some(2));
    std::fs::write(
        fixture.root().join("toolhost.toml"),
        "schema-version = 1\n[host]\ndrain-timeout-s = -1\n",
    )
    .expect("toolhost.toml");
    assert_eq!(run(&["list"]), Some(3));
    // 4 and 130 / 143: `the_drain_deadline_cancels_what_is_left_audits_it_and_exits_4` and
    // `a_second_signal_cancels_at_once_and_exits_with_its_number`.
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
