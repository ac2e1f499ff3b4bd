//! What the MCP layer costs a call: the trivial tool (echo) called through `toolhost serve`
//! over stdio and over streamable HTTP, at both revisions the server speaks (2025-11-25: the
//! `initialize` handshake and a session; 2026-07-28: `server/discover`, no session), against
//! the same calls made with `Host::invoke` directly, in the same run.
//!
//! Each mode is measured at concurrency 1 (one task, calls back to back) and 16 (16 tasks
//! sharing one client: one MCP session over stdio, one client over HTTP), after a warm-up at
//! the same concurrency. Every call is timed on its own (p50, p99); calls/s is the cell's calls
//! over its wall time. The server is the release `toolhost` binary with the ensemble, the
//! compiled-component cache and an audit log in a temporary directory; the direct side is a
//! host over the same ensemble and cache with an audit log and metrics, as `serve` has. The
//! ensemble sets `dedup = "off"` and the arguments are distinct (`{"i": n}`), so no call is a
//! dedup hit and every call runs the tool. The client is rmcp's, on a tokio runtime of 2
//! workers in this process.
//!
//! Two more cells say where a stdio call's time goes: the direct calls again with the worker
//! asleep for 150 µs between them (a server's worker sleeps while each response and the next
//! request travel), and stdio at 2026-07-28 from a client without an MCP library (a line
//! per request, responses matched by id).
//!
//! Prints a Markdown table on stdout; problems the servers logged on stderr are repeated at the
//! end.
//!
//! Run: `cargo bench -p toolhost --bench protocol` (2,000 calls a cell at concurrency 1 and
//! 4,000 at 16); `-- --calls 500 --concurrent-calls 1000 --warm-up 100` for fewer.

use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient};
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{Host, Session};
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

/// The tool every mode calls.
const TOOL: &str = "echo";
/// A tool no ensemble has: its calls are the round trip with the least host work (a failed
/// lookup and its audit record), and no tool runs.
const MISSING: &str = "no_such_tool";
/// A failure deadline for the server's start, not a timing.
const READY_DEADLINE: Duration = Duration::from_secs(120);
const CONCURRENCIES: [usize; 2] = [1, 16];
/// The baseline's name in the table.
const DIRECT: &str = "invoke direct";
/// The baseline again with its worker asleep between calls, [`PAUSE`] each time, as a
/// server's worker is while a response and the next request travel: what a call costs on
/// caches and a core that went idle.
const PAUSE: Duration = Duration::from_micros(150);
const PACED: &str = "invoke direct, 150 µs apart";
/// stdio at 2026-07-28 from [`Lines`], a client without an MCP library.
const LINES: &str = "stdio 2026-07-28, line client";

/// How many calls each cell makes.
struct Counts {
    /// At concurrency 1.
    single: usize,
    /// At concurrency 16, all tasks together.
    concurrent: usize,
    /// Before each cell, at its concurrency; not measured.
    warm_up: usize,
}

impl Counts {
    fn from_args() -> Counts {
        let mut counts = Counts {
            single: 2000,
            concurrent: 4000,
            warm_up: 200,
        };
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(flag) = args.next() {
            let mut value = || -> usize {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{flag} takes a number"))
            };
            match flag.as_str() {
                "--calls" => counts.single = value(),
                "--concurrent-calls" => counts.concurrent = value(),
                "--warm-up" => counts.warm_up = value(),
                other => panic!("unknown argument {other}"),
            }
        }
        counts
    }

    fn at(&self, concurrency: usize) -> usize {
        if concurrency == 1 {
            self.single
        } else {
            self.concurrent
        }
    }
}

/// The MCP revisions `serve` speaks.
#[derive(Clone, Copy)]
enum Revision {
    /// 2025-11-25: `initialize`, then requests in a session.
    Handshake,
    /// 2026-07-28: `server/discover`, then self-contained requests without a session.
    Stateless,
}

impl Revision {
    fn version(self) -> ProtocolVersion {
        match self {
            Revision::Handshake => ProtocolVersion::V_2025_11_25,
            Revision::Stateless => ProtocolVersion::V_2026_07_28,
        }
    }

    fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Revision::Handshake => ClientLifecycleMode::Initialize,
            Revision::Stateless => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        }
    }
}

/// Something that makes one call with distinct arguments: of the echo tool, which must
/// succeed, or of [`MISSING`], which must fail.
trait Caller: Send + Sync + 'static {
    fn call(&self, tool: &'static str, n: u64) -> impl Future<Output = ()> + Send;
}

/// `Host::invoke` in this process, as `serve` calls it for an MCP request.
struct Direct {
    host: Host,
    session: Session,
}

impl Caller for Direct {
    async fn call(&self, tool: &'static str, n: u64) {
        let outcome = self
            .host
            .invoke(&self.session, tool, json!({ "i": n }))
            .await;
        match &outcome.result {
            Ok(_) => assert!(tool == TOOL, "a call of {tool} succeeded"),
            Err(e) => assert!(tool == MISSING, "direct call {n} failed: {e}"),
        }
        assert!(!outcome.deduplicated, "call {n} was a dedup hit");
    }
}

#[derive(Clone, Default)]
struct Client {
    version: ProtocolVersion,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(self.version.clone())
    }
}

/// An rmcp client of a `toolhost serve`.
struct Mcp(RunningService<RoleClient, Client>);

impl Caller for Mcp {
    async fn call(&self, tool: &'static str, n: u64) {
        let serde_json::Value::Object(arguments) = json!({ "i": n }) else {
            unreachable!("an object literal")
        };
        let params = CallToolRequestParams::new(tool).with_arguments(arguments);
        // An unknown tool may be a JSON-RPC error or an error result.
        let failed = match self.0.call_tool(params).await {
            Ok(result) => result.is_error == Some(true),
            Err(e) if tool == MISSING => {
                drop(e);
                true
            }
            Err(e) => panic!("MCP call {n} failed: {e}"),
        };
        assert_eq!(failed, tool == MISSING, "MCP call {n} of {tool}");
    }
}

impl Mcp {
    async fn connect<T, E, A>(transport: T, revision: Revision) -> Mcp
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let client = Client {
            version: revision.version(),
        }
        .serve_with_lifecycle(transport, revision.lifecycle())
        .await
        .expect("an MCP client connects");
        let spoken = client
            .peer_info()
            .expect("the server's info")
            .protocol_version
            .clone();
        assert_eq!(spoken, revision.version(), "the revision asked for");
        let mcp = Mcp(client);
        mcp.wait_for_echo().await;
        mcp
    }

    /// Waits until the tool is in the server's catalog: a component the server finds
    /// uncompiled joins it when its compile ends.
    async fn wait_for_echo(&self) {
        let started = Instant::now();
        loop {
            let tools = self.0.list_all_tools().await.expect("tools/list");
            if tools.iter().any(|t| t.name == TOOL) {
                return;
            }
            assert!(
                started.elapsed() < READY_DEADLINE,
                "the server never listed {TOOL}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn close(self) {
        self.0.cancel().await.expect("the client closes");
    }
}

/// Responses a [`Lines`] client waits for, by request id.
type Waiting = Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<serde_json::Value>>>>;

/// A JSON-RPC client of `toolhost serve` over stdio at 2026-07-28 without an MCP library:
/// each request one line out, and one task matching each response line to its request by id.
/// Its cells beside rmcp's show what the client's side costs.
struct Lines {
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    waiting: Waiting,
    /// Killed when the client is dropped.
    _server: tokio::process::Child,
}

impl Caller for Lines {
    async fn call(&self, tool: &'static str, n: u64) {
        let params = json!({"name": tool, "arguments": {"i": n}});
        let response = self.request(n, "tools/call", params).await;
        let failed =
            response.get("error").is_some() || response["result"]["isError"] == json!(true);
        assert_eq!(failed, tool == MISSING, "call {n} of {tool}: {response}");
    }
}

impl Lines {
    async fn start(setup: &Setup, label: &str) -> Lines {
        let stderr = std::fs::File::create(setup.path(&format!("stderr-{label}.txt")))
            .expect("a file for the server's stderr");
        let mut server = tokio::process::Command::from(setup.serve(label))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("serve starts");
        let stdout = server.stdout.take().expect("the server's stdout");
        let waiting = Waiting::default();
        let pending = waiting.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let message: serde_json::Value = serde_json::from_str(&line).expect("JSON");
                let sender = (message["id"].as_u64())
                    .and_then(|id| pending.lock().expect("waiting").remove(&id));
                if let Some(sender) = sender {
                    let _ = sender.send(message);
                }
            }
        });
        let stdin = server.stdin.take().expect("the server's stdin");
        let lines = Lines {
            stdin: tokio::sync::Mutex::new(stdin),
            waiting,
            _server: server,
        };
        // Until the tool is listed (a component the server finds uncompiled joins later).
        let started = Instant::now();
        // Ids past any call's `n` (JSON-RPC ids are i64 to rmcp).
        for attempt in 1 << 40.. {
            let listed = lines.request(attempt, "tools/list", json!({})).await;
            if (listed["result"]["tools"].as_array().into_iter().flatten())
                .any(|t| t["name"] == TOOL)
            {
                return lines;
            }
            assert!(started.elapsed() < READY_DEADLINE, "never listed: {listed}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        unreachable!("the deadline ends the loop first")
    }

    /// Sends request `id` with the `_meta` a 2026-07-28 request carries, and waits for its
    /// response.
    async fn request(
        &self,
        id: u64,
        method: &str,
        mut params: serde_json::Value,
    ) -> serde_json::Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "protocol-bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = serde_json::to_vec(&request).expect("a request");
        line.push(b'\n');
        let (sender, response) = oneshot::channel();
        self.waiting.lock().expect("waiting").insert(id, sender);
        (self.stdin.lock().await.write_all(&line).await).expect("a request written");
        response.await.expect("a response")
    }
}

/// The temporary directory the direct host and every server share: the ensemble, the
/// compiled-component cache, the audit logs and what each server wrote on stderr.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let ensembles = dir.path().join("ensembles");
        std::fs::create_dir_all(&ensembles).expect("ensembles dir");
        let text = format!(
            "schema-version = 1\n\n[ensemble]\nname = \"echo\"\ncomponent = \"{}\"\n\n\
             [defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = {{ name = \"{TOOL}\" }}\n",
            toolhost_testkit::ECHO
        );
        std::fs::write(ensembles.join("echo.toml"), text).expect("write the ensemble");
        Setup { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The host `serve` would build, in this process: the same ensemble and cache (its
    /// resolve fills the cache the servers then read), an audit log, metrics.
    async fn direct(&self) -> Direct {
        let runtime = Arc::new(
            Runtime::new(&RuntimeSettings {
                cache_dir: Some(self.path("cache")),
                // Cranelift's code alone: what is measured or counted here is not the tiers.
                tiering: Tiering::Off,
                ..RuntimeSettings::default()
            })
            .expect("runtime"),
        );
        let resolved = toolhost::resolve::Resolver::new(runtime)
            .resolve_dir(&self.path("ensembles"))
            .await;
        let errors: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        let audit =
            toolhost::audit::AuditLog::open(&self.path("audit-direct.jsonl"), Default::default())
                .expect("audit log");
        let metrics = Arc::new(toolhost::metrics::Metrics::new().expect("metrics"));
        Direct {
            host: Host::new(Arc::new(LiveCatalog::new(resolved.catalog)), Some(audit))
                .with_metrics(metrics),
            session: Session::new("bench"),
        }
    }

    /// `toolhost serve` configured by environment only, as the test suite starts it.
    fn serve(&self, label: &str) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        command
            .current_dir(self.dir.path())
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_LOG")
            .env("TOOLHOST_ENSEMBLES", self.path("ensembles"))
            .env("TOOLHOST_CACHE_DIR", self.path("cache"))
            .env(
                "TOOLHOST_STATUS_FILE",
                self.path(&format!("status-{label}.json")),
            )
            .env("TOOLHOST_AUDIT", self.path(&format!("audit-{label}.jsonl")))
            .arg("serve");
        command
    }

    async fn stdio(&self, label: &str, revision: Revision) -> Mcp {
        let stderr = std::fs::File::create(self.path(&format!("stderr-{label}.txt")))
            .expect("a file for the server's stderr");
        let (transport, _) =
            TokioChildProcess::builder(tokio::process::Command::from(self.serve(label)))
                .stderr(stderr)
                .spawn()
                .expect("serve starts");
        Mcp::connect(transport, revision).await
    }

    fn http(&self, label: &str) -> HttpServer {
        let mut command = self.serve(label);
        command
            .args(["--http", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("serve --http starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = loop {
            let line = (lines.next())
                .expect("serve printed its address")
                .expect("a line of stderr");
            if let Some(url) = line.strip_prefix("toolhost: serving MCP on ") {
                break url.to_string();
            }
        };
        // Keep reading so that the server never blocks on a full pipe; kept for the report.
        let log = self.path(&format!("stderr-{label}.txt"));
        std::thread::spawn(move || {
            let text: Vec<String> = lines.map_while(Result::ok).collect();
            let _ = std::fs::write(log, text.join("\n"));
        });
        HttpServer { child, url }
    }

    /// `(n, milliseconds)` of each call in the audit log of `label`: the `n` of its arguments
    /// and the time the host took.
    fn host_times(&self, label: &str) -> Vec<(u64, f64)> {
        let path = self.path(&format!("audit-{label}.jsonl"));
        let text = std::fs::read_to_string(path).expect("an audit log");
        text.lines()
            .map(|line| {
                let record: serde_json::Value = serde_json::from_str(line).expect("a record");
                let n = record["arguments"]["i"].as_u64().expect("the call's n");
                let ms = record["duration_ms"].as_f64().expect("duration_ms");
                (n, ms)
            })
            .collect()
    }

    /// Each cell's median time in the host, from the audit logs.
    fn fill_host_times(&self, cells: &mut [Cell]) {
        let mut logs = std::collections::HashMap::new();
        for cell in cells {
            let times = logs
                .entry(cell.label)
                .or_insert_with(|| self.host_times(cell.label));
            let mut ms: Vec<f64> = (times.iter())
                .filter(|(n, _)| cell.numbers.contains(n))
                .map(|(_, ms)| *ms)
                .collect();
            assert_eq!(ms.len(), cell.calls, "every call of {} audited", cell.mode);
            ms.sort_unstable_by(f64::total_cmp);
            cell.in_host = ms
                .get(ms.len().div_ceil(2).saturating_sub(1))
                .map(|ms| Duration::from_secs_f64(ms / 1000.0));
        }
    }

    /// Lines the servers wrote on stderr that look like trouble.
    fn server_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else {
            return problems;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !name.starts_with("stderr-") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            problems.extend(
                text.lines()
                    .filter(|l| {
                        let l = l.to_ascii_lowercase();
                        l.contains("warn") || l.contains("error") || l.contains("panic")
                    })
                    .map(|l| format!("{name}: {l}")),
            );
        }
        problems
    }
}

struct HttpServer {
    child: Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One cell of the table.
struct Cell {
    mode: &'static str,
    /// Names the server's files (its audit log).
    label: &'static str,
    /// [`TOOL`] or [`MISSING`].
    tool: &'static str,
    concurrency: usize,
    calls: usize,
    wall: Duration,
    /// Sorted.
    latencies: Vec<Duration>,
    /// The `n` of the measured calls' arguments, to find their audit records.
    numbers: std::ops::Range<u64>,
    /// The median time the host itself took (from `prepare` to the end of `run`), as its
    /// audit records say.
    in_host: Option<Duration>,
}

impl Cell {
    fn calls_per_second(&self) -> f64 {
        self.calls as f64 / self.wall.as_secs_f64()
    }

    /// The nearest-rank percentile `p` (0 to 100).
    fn percentile(&self, p: usize) -> Duration {
        let rank = (self.latencies.len() * p).div_ceil(100).max(1);
        self.latencies[rank - 1]
    }
}

/// `calls` calls from `concurrency` tasks sharing `caller`, each call timed on its own.
async fn run<C: Caller>(
    caller: &Arc<C>,
    next: &Arc<AtomicU64>,
    tool: &'static str,
    concurrency: usize,
    calls: usize,
    pause: Duration,
) -> (Duration, Vec<Duration>) {
    let per_task = calls.div_ceil(concurrency);
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (caller, next) = (caller.clone(), next.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_task);
                for _ in 0..per_task {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let call = Instant::now();
                    caller.call(tool, n).await;
                    latencies.push(call.elapsed());
                    if !pause.is_zero() {
                        // Blocks the worker on purpose: it sleeps between calls, as a server's
                        // worker does while the next request is on its way.
                        std::thread::sleep(pause);
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(per_task * concurrency);
    for task in tasks {
        latencies.extend(task.await.expect("a calling task"));
    }
    let wall = started.elapsed();
    latencies.sort_unstable();
    (wall, latencies)
}

/// Both concurrencies of one mode, each after its warm-up; then calls of [`MISSING`] at
/// concurrency 1.
async fn measure<C: Caller>(
    mode: (&'static str, &'static str),
    caller: &Arc<C>,
    counts: &Counts,
    next: &Arc<AtomicU64>,
) -> Vec<Cell> {
    let plan = CONCURRENCIES
        .iter()
        .map(|&c| (TOOL, c, counts.at(c)))
        .chain([(MISSING, 1, counts.single)]);
    measure_plan(mode, caller, plan, counts.warm_up, Duration::ZERO, next).await
}

/// One cell for each `(tool, concurrency, calls)` of `plan`, each after a warm-up of
/// `warm_up` calls, every calling task sleeping `pause` after each of its calls.
async fn measure_plan<C: Caller>(
    (mode, label): (&'static str, &'static str),
    caller: &Arc<C>,
    plan: impl IntoIterator<Item = (&'static str, usize, usize)>,
    warm_up: usize,
    pause: Duration,
    next: &Arc<AtomicU64>,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (tool, concurrency, calls) in plan {
        run(
            caller,
            next,
            tool,
            concurrency,
            warm_up.max(concurrency),
            pause,
        )
        .await;
        let first = next.load(Ordering::Relaxed);
        let (wall, latencies) = run(caller, next, tool, concurrency, calls, pause).await;
        let cell = Cell {
            mode,
            label,
            numbers: first..next.load(Ordering::Relaxed),
            in_host: None,
            tool,
            concurrency,
            calls: latencies.len(),
            wall,
            latencies,
        };
        eprintln!(
            "{mode}, {tool}, concurrency {concurrency}: {:.0} calls/s, p50 {}, p99 {}",
            cell.calls_per_second(),
            show(cell.percentile(50)),
            show(cell.percentile(99))
        );
        cells.push(cell);
    }
    cells
}

fn show(duration: Duration) -> String {
    let micros = duration.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.1} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

fn table(cells: &[Cell]) -> String {
    let echo = |mode: &str, concurrency: usize| {
        cells
            .iter()
            .find(|c| c.tool == TOOL && c.mode == mode && c.concurrency == concurrency)
            .map(|c| c.percentile(50).as_secs_f64())
    };
    let in_host = |cell: &Cell| cell.in_host.map_or("—".into(), show);
    let mut text = String::from(
        "| mode | concurrency | calls | calls/s | p50 | p99 | p50 ÷ direct | p50 in the host |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for concurrency in CONCURRENCIES {
        let direct = echo(DIRECT, concurrency);
        for cell in cells
            .iter()
            .filter(|c| c.tool == TOOL && c.concurrency == concurrency)
        {
            let p50 = cell.percentile(50).as_secs_f64();
            text.push_str(&format!(
                "| {} | {} | {} | {:.0} | {} | {} | {} | {} |\n",
                cell.mode,
                cell.concurrency,
                cell.calls,
                cell.calls_per_second(),
                show(cell.percentile(50)),
                show(cell.percentile(99)),
                direct.map_or("—".into(), |d| format!("{:.1}×", p50 / d)),
                in_host(cell),
            ));
        }
    }
    text.push_str(&format!(
        "\nA call of an unknown tool ({MISSING}, concurrency 1): the round trip without running \
         a tool.\n\n| mode | calls | p50 | p99 | p50 ÷ the echo call's | p50 in the host |\n\
         |---|---|---|---|---|---|\n"
    ));
    for cell in cells.iter().filter(|c| c.tool == MISSING) {
        let p50 = cell.percentile(50).as_secs_f64();
        text.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            cell.mode,
            cell.calls,
            show(cell.percentile(50)),
            show(cell.percentile(99)),
            echo(cell.mode, 1).map_or("—".into(), |e| format!("{:.2}", p50 / e)),
            in_host(cell),
        ));
    }
    text
}

fn main() {
    let counts = Counts::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    // rmcp's HTTP client (reqwest) needs the host's TLS provider, even for plain HTTP.
    toolhost::tls::install_provider();
    let setup = Setup::new();
    let next = Arc::new(AtomicU64::new(0));
    let mut cells = rt.block_on(async {
        let direct = Arc::new(setup.direct().await);
        let mut cells = measure((DIRECT, "direct"), &direct, &counts, &next).await;
        let paced = [(TOOL, 1, counts.single)];
        cells.extend(
            measure_plan(
                (PACED, "direct"),
                &direct,
                paced,
                counts.warm_up,
                PAUSE,
                &next,
            )
            .await,
        );
        let stdio = [
            ("stdio 2025-11-25", "stdio-2025", Revision::Handshake),
            ("stdio 2026-07-28", "stdio-2026", Revision::Stateless),
        ];
        for (mode, label, revision) in stdio {
            let caller = Arc::new(setup.stdio(label, revision).await);
            cells.extend(measure((mode, label), &caller, &counts, &next).await);
            Arc::into_inner(caller)
                .expect("the calls are done")
                .close()
                .await;
        }
        let lines = Arc::new(Lines::start(&setup, "stdio-lines").await);
        cells.extend(measure((LINES, "stdio-lines"), &lines, &counts, &next).await);
        drop(lines);
        let http = [
            ("HTTP 2025-11-25", "http-2025", Revision::Handshake),
            ("HTTP 2026-07-28", "http-2026", Revision::Stateless),
        ];
        for (mode, label, revision) in http {
            let server = setup.http(label);
            let transport = StreamableHttpClientTransport::from_uri(server.url.clone());
            let caller = Arc::new(Mcp::connect(transport, revision).await);
            cells.extend(measure((mode, label), &caller, &counts, &next).await);
            Arc::into_inner(caller)
                .expect("the calls are done")
                .close()
                .await;
            drop(server);
        }
        cells
    });
    setup.fill_host_times(&mut cells);
    println!("{}", table(&cells));
    let problems = setup.server_problems();
    if !problems.is_empty() {
        eprintln!("the servers logged:");
        for line in problems.iter().take(40) {
            eprintln!("  {line}");
        }
    }
}
