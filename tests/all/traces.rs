//! Traces (issue #57) through a test OTLP/HTTP receiver that decodes what it gets with the
//! official protobuf definitions (`tests/clients/otlp_collector.py`, `opentelemetry-proto`):
//! a `tools/call` carrying a W3C `traceparent` (in `_meta`, or as the HTTP header) is a
//! server span of that trace, named `tools/call <tool>` with the MCP conventions' attributes,
//! its children the call's steps, its ids in the audit record and the JSON log; over stdio
//! too. A failing tool is `error.type = tool_error`. A `traceparent` of 10 KB, a `baggage` of
//! 10,000 members and a `traceparent` that is no string are ignored. A collector that hangs
//! costs no call anything, and the spans it has no room for are counted on `/metrics`.

use crate::mcp::HttpServer;
use crate::mcp_revisions::modern_post;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub(crate) const PARENT: &str = "00f067aa0ba902b7";
const REJECTED: &str = "99990000999900009999000099990000";

pub(crate) fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

/// The test receiver on a free loopback port, writing spans to its file; killed when dropped.
pub(crate) struct Collector {
    child: Child,
    port: u16,
    pub(crate) spans: PathBuf,
}

impl Collector {
    pub(crate) fn start(dir: &Path, mode: &str) -> Self {
        let spans = dir.join(format!("spans-{mode}.jsonl"));
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/otlp_collector.py");
        let mut child = Command::new(crate::mcp_list::test_tools().join("venv/bin/python"))
            .arg(script)
            .arg(&spans)
            .args(["--mode", mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the test collector (./scripts/test-tools.sh installs opentelemetry-proto)");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("listening");
        let port = (line.trim().strip_prefix("listening "))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("collector said {line:?}"));
        Collector { child, port, spans }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans received so far.
    pub(crate) fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.spans).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until a span named `name` of `trace` arrived; all the spans of that trace.
    pub(crate) async fn until(&self, trace: &str, name: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans: Vec<Value> = (self.spans().into_iter())
                .filter(|s| s["trace_id"] == trace)
                .collect();
            if spans.iter().any(|s| s["name"] == name) {
                // Its children are sent in the same batch or before it (they end first).
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "no span {name} of trace {trace}: {:#?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment of a host exporting to `collector`, a batch sent every 100 ms.
pub(crate) fn exporting(collector: &Collector) -> Vec<(String, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), collector.endpoint()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
    ]
}

pub(crate) fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A `tools/call` of `tool` at 2026-07-28 with `meta` in its `_meta` and `headers`.
pub(crate) async fn call(url: &str, tool: &str, meta: Value, headers: &[(&str, &str)]) -> Value {
    let params = json!({"name": tool, "arguments": {"text": "hi"}, "_meta": meta});
    let (status, _, answer) = modern_post(url, "tools/call", Some(tool), params, headers).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

pub(crate) fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    (spans.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no span {name}: {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carrying_a_traceparent_is_a_server_span_of_that_trace_with_its_steps() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "ok");
    let env = exporting(&collector);
    let server = HttpServer::start(&fixture, &[], &pairs(&env));

    // In `_meta` (SEP-414).
    let meta = json!({"traceparent": traceparent(TRACE, PARENT), "tracestate": "k=v"});
    let answer = call(&server.url, "echo", meta, &[]).await;
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let spans = collector.until(TRACE, "tools/call echo").await;
    let server_span = one(&spans, "tools/call echo");
    assert_eq!(server_span["parent_span_id"], PARENT, "{server_span}");
    assert_eq!(server_span["kind"], 2, "SPAN_KIND_SERVER: {server_span}");
    assert_eq!(server_span["service"], "toolhost");
    let attributes = &server_span["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["gen_ai.tool.name"], "echo");
    assert_eq!(attributes["network.transport"], "tcp");
    assert_eq!(attributes["mcp.protocol.version"], "2026-07-28");
    assert_eq!(attributes["jsonrpc.request.id"], "7");
    assert!(attributes.get("error.type").is_none(), "{attributes}");
    // Its steps, under it: validation, then the run on the backend.
    let server_id = server_span["span_id"].as_str().expect("id");
    for step in ["validate", "run echo"] {
        let child = one(&spans, step);
        assert_eq!(child["parent_span_id"], server_id, "{step}: {child}");
    }
    // The call's audit record names the trace.
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    let record: Value =
        serde_json::from_str(audit.lines().last().expect("a record")).expect("json");
    assert_eq!(record["trace_id"], TRACE, "{record}");
    assert_eq!(
        record["span_id"].as_str().map(str::len),
        Some(16),
        "{record}"
    );

    // As the HTTP header, and a failing tool: `error.type = tool_error`.
    let other = "0af7651916cd43dd8448eb211c80319c";
    let header = traceparent(other, "b7ad6b7169203331");
    let answer = call(
        &server.url,
        "no-such-tool",
        json!({}),
        &[("traceparent", &header)],
    )
    .await;
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    let spans = collector.until(other, "tools/call no-such-tool").await;
    let failed = one(&spans, "tools/call no-such-tool");
    assert_eq!(failed["parent_span_id"], "b7ad6b7169203331");
    assert_eq!(failed["attributes"]["error.type"], "tool_error", "{failed}");

    // Hostile values are ignored: the call runs, in a trace of its own.
    for meta in [
        json!({"traceparent": format!("00-{}-{PARENT}-01", "a".repeat(10_000))}),
        json!({"traceparent": 12, "baggage": "k=v,".repeat(10_000)}),
        json!({"traceparent": "00-zz-yy-01"}),
    ] {
        let answer = call(&server.url, "echo", meta, &[]).await;
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while (collector.spans().iter())
        .filter(|s| s["name"] == "tools/call echo" && s["parent_span_id"] == "")
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "{:#?}", collector.spans());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The JSON log's lines inside a traced call carry its ids.
    let logged = server.stderr();
    assert!(!logged.contains("panicked"), "{logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_stdio_continues_the_trace_its_meta_names() {
    let fixture = crate::support::Fixture::new();
    fixture.write(
        "echo.toml",
        &crate::support::ensemble(
            "echo",
            "echo",
            "[[invokers]]\ninvoker = { name = \"echo\" }\n\n[[invokers]]\ninvoker = { name = \"reject\" }\n",
        ),
    );
    let collector = Collector::start(fixture.root(), "ok");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    for (key, value) in exporting(&collector) {
        command.env(key, value);
    }
    let log = std::fs::File::create(fixture.root().join("stderr.jsonl")).expect("log");
    let mut child = command
        .args(["--log-format", "json", "-v", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let trace = "11112222333344445555666677778888";
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hi"},
            "_meta": {"traceparent": traceparent(trace, PARENT)}}}),
        // A tool that logs, then refuses: its log line carries the trace's ids.
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "reject", "arguments": {},
            "_meta": {"traceparent": traceparent(REJECTED, PARENT)}}}),
    ];
    for message in &messages {
        writeln!(stdin, "{message}").expect("write");
    }
    let mut answered = 0;
    while answered < 3 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "serve ended"
        );
        if serde_json::from_str::<Value>(&line).is_ok_and(|m| m.get("id").is_some()) {
            answered += 1;
        }
    }
    let spans = collector.until(trace, "tools/call echo").await;
    let server_span = one(&spans, "tools/call echo");
    assert_eq!(server_span["parent_span_id"], PARENT);
    assert_eq!(server_span["attributes"]["network.transport"], "pipe");
    assert_eq!(
        server_span["attributes"]["mcp.protocol.version"],
        "2025-11-25"
    );
    let spans = collector.until(REJECTED, "tools/call reject").await;
    let rejected = one(&spans, "tools/call reject");
    assert_eq!(
        rejected["attributes"]["error.type"], "tool_error",
        "{rejected}"
    );
    drop(stdin);
    let _ = child.wait();
    // The plugin's own log line, written during the call, names the call's trace and span.
    let log = std::fs::read_to_string(fixture.root().join("stderr.jsonl")).expect("log");
    let line: Value = (log.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "reject was called")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(line["trace_id"], REJECTED, "{line}");
    let run = one(&spans, "run reject");
    assert_eq!(line["span_id"], run["span_id"], "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_hangs_costs_no_call_anything_and_dropped_spans_are_counted() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "hang");
    let mut env = exporting(&collector);
    env.push(("OTEL_BSP_MAX_QUEUE_SIZE".into(), "8".into()));
    env.push(("OTEL_EXPORTER_OTLP_TIMEOUT".into(), "60000".into()));
    let server = HttpServer::start(&fixture, &[], &pairs(&env));
    for n in 0..40 {
        let meta = json!({"traceparent": traceparent(TRACE, PARENT), "n": n});
        let answer = call(&server.url, "echo", meta, &[]).await;
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    let (_, metrics) = crate::metrics::scrape(&server.url, None).await;
    let dropped = crate::metrics::sample(&metrics, "toolhost_trace_spans_dropped")
        .unwrap_or_else(|| panic!("{metrics}"));
    // 40 calls of 3 spans each, 8 queued and one batch held by the hanging export at most.
    assert!(dropped >= 40.0, "{dropped} dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_an_imported_server_is_one_trace_across_both_hosts() {
    let inner = crate::support::Fixture::new();
    inner.write_echo();
    let collector = Collector::start(inner.root(), "ok");
    let mut env = exporting(&collector);
    env.push(("OTEL_SERVICE_NAME".into(), "inner".into()));
    let inner_server = HttpServer::start(&inner, &[], &pairs(&env));
    let outer = crate::support::Fixture::new();
    // Through a proxy that keeps what it is sent, to see the headers.
    let (proxy, sent) = crate::traces_export::tee(&inner_server.url).await;
    outer.write_mcp_import("remote", &format!("url = {proxy:?}"));
    env.pop();
    env.push(("OTEL_SERVICE_NAME".into(), "outer".into()));
    let outer_server = HttpServer::start(&outer, &[], &pairs(&env));
    // The import starts in the background: until it has, `echo` is not there yet.
    let trace = "abcdef0123456789abcdef0123456789";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let meta = json!({"traceparent": traceparent(trace, PARENT)});
        let answer = call(&outer_server.url, "echo", meta, &[]).await;
        if answer["result"]["isError"] == json!(false) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{answer}\n{}\n{}",
            inner_server.stderr(),
            outer_server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // outer's server span -> its run -> its client span -> inner's server span, one trace.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans: Vec<Value> = (collector.spans().into_iter())
            .filter(|s| s["trace_id"] == trace)
            .collect();
        let child_of = |parent: &Value, name: &str, service: &str| {
            (spans.iter())
                .find(|s| {
                    s["parent_span_id"] == parent["span_id"]
                        && s["name"] == name
                        && s["service"] == service
                })
                .cloned()
        };
        let run = (spans.iter()).find(|s| s["name"] == "run echo" && s["service"] == "outer");
        let server =
            run.and_then(|run| (spans.iter()).find(|s| s["span_id"] == run["parent_span_id"]));
        let client = run.and_then(|run| child_of(run, "tools/call echo", "outer"));
        let inner = (client.as_ref()).and_then(|c| child_of(c, "tools/call echo", "inner"));
        if let (Some(server), Some(client), Some(inner)) = (server, client, inner) {
            // SPAN_KIND_SERVER = 2, SPAN_KIND_CLIENT = 3.
            assert_eq!(
                (server["kind"].as_u64(), &server["parent_span_id"]),
                (Some(2), &json!(PARENT))
            );
            assert_eq!(client["kind"], 3, "{client}");
            assert_eq!(inner["kind"], 2, "{inner}");
            // The request carried the client span's context in its header too, as in `_meta`.
            let sent = sent.lock().expect("sent").join("\n");
            let expected = traceparent(trace, client["span_id"].as_str().expect("id"));
            let header = format!("traceparent: {expected}\r\n");
            assert!(sent.contains(&header), "no {header:?} in {sent}");
            break;
        }
        assert!(Instant::now() < deadline, "{spans:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_is_one_trace_from_the_api_request_through_the_model_to_the_tool() {
    use crate::scripted::{Scripted, openai};
    let model = Scripted::start(vec![
        openai::stream(
            "Computing.",
            &[("c1", "calculate", r#"{"expression": "40 + 2"}"#)],
        ),
        openai::text("It is 42."),
    ]);
    let fixture = crate::web::fixture(&model.base_url, "");
    let collector = Collector::start(fixture.root(), "ok");
    let mut env = exporting(&collector);
    env.push(("SCRIPTED_KEY".into(), "k".into()));
    let config = fixture.root().join("toolhost.toml");
    let args = ["--config", config.to_str().expect("path")];
    let server = HttpServer::start(&fixture, &args, &pairs(&env));
    let trace = "0123456789abcdef0123456789abcdef";
    let response = reqwest::Client::new()
        .post(format!("{}/api/conversations", crate::web::base(&server)))
        .header("traceparent", traceparent(trace, PARENT))
        .json(&json!({"message": "What is 40 + 2?"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 200);
    let events = crate::web::Events::of(response).rest().await;
    assert_eq!(
        events.last().expect("done")["text"],
        "It is 42.",
        "{events:#?}"
    );
    // The model was asked within the trace.
    for request in model.requests() {
        let header = request.header("traceparent").unwrap_or_default();
        assert!(header.contains(trace), "{header:?}");
    }
    let spans = collector.until(trace, "POST /api/conversations").await;
    let server_span = one(&spans, "POST /api/conversations");
    assert_eq!(server_span["parent_span_id"], PARENT);
    let agent = one(&spans, "invoke_agent toolhost");
    assert_eq!(agent["parent_span_id"], server_span["span_id"]);
    let model_calls: Vec<&Value> = (spans.iter())
        .filter(|s| s["name"] == "chat scripted-model")
        .collect();
    assert_eq!(model_calls.len(), 2, "{spans:#?}");
    for call in &model_calls {
        assert_eq!(call["parent_span_id"], agent["span_id"], "{call}");
        assert_eq!(call["kind"], 3, "SPAN_KIND_CLIENT: {call}");
        assert_eq!(call["attributes"]["gen_ai.request.model"], "scripted-model");
    }
    let run = one(&spans, "run calculate");
    assert_eq!(run["parent_span_id"], agent["span_id"], "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_outgoing_request_carries_the_calls_trace() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A loopback server that keeps the head of each request it gets.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let kept = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = vec![0u8; 16 << 10];
            let read = socket.read(&mut buffer).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buffer[..read]).into_owned();
            kept.lock().expect("heads").push(head);
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
        }
    });
    let fixture = crate::support::Fixture::new();
    let grant = format!("127.0.0.1:{port}");
    fixture.write(
        "web.toml",
        &crate::support::ensemble(
            "web",
            "fetch",
            &format!(
                "[defaults]\ndedup = \"off\"\n\n[grants]\nnetwork = [{grant:?}]\n\n\
                 [[invokers]]\ninvoker = {{ name = \"fetch\" }}\n\
                 capabilities = {{ network = [{grant:?}] }}\n"
            ),
        ),
    );
    let collector = Collector::start(fixture.root(), "ok");
    let server = HttpServer::start(&fixture, &[], &pairs(&exporting(&collector)));
    let trace = "fedcba9876543210fedcba9876543210";
    let params = json!({
        "name": "fetch",
        "arguments": {"url": format!("http://127.0.0.1:{port}/hello")},
        "_meta": {"traceparent": traceparent(trace, PARENT)},
    });
    let (status, _, answer) =
        modern_post(&server.url, "tools/call", Some("fetch"), params, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let spans = collector.until(trace, "tools/call fetch").await;
    let run = one(&spans, "run fetch");
    let head = heads
        .lock()
        .expect("heads")
        .first()
        .cloned()
        .expect("a request");
    let sent = (head.lines())
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("{head}"));
    // The request's parent is the run's span: the server's own spans join the call's trace.
    assert_eq!(
        sent.trim(),
        traceparent(trace, run["span_id"].as_str().expect("id"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_forwarded_to_the_replica_holding_its_session_is_a_hop_of_its_trace() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "ok");
    let redis = crate::fleet_quotas::RedisServer::start(fixture.root());
    let config = fixture.write_host_file(
        "fleet",
        &format!(
            "redis = \"{}\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"",
            redis.url()
        ),
    );
    let env = exporting(&collector);
    let replicas: Vec<HttpServer> = (0..2)
        .map(|_| crate::fleet_routes::advertising(&fixture, &config, &pairs(&env)))
        .collect();
    let client = reqwest::Client::new();
    let post = |url: &str, session: Option<&str>, body: Value| {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    // A session opened on the first replica...
    let session = crate::mcp_http::open_session(&replicas[0].url, None).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = post(&replicas[0].url, Some(&session), initialized)
        .await
        .expect("initialized");
    assert!(sent.status().is_success(), "{}", sent.status());
    // ...and its call sent to the second, which forwards it to the first.
    let trace = "5555aaaa5555aaaa5555aaaa5555aaaa";
    let called = post(
        &replicas[1].url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"via": "the other replica"},
            "_meta": {"traceparent": traceparent(trace, PARENT)}}}),
    )
    .await
    .expect("tools/call");
    assert_eq!(called.status().as_u16(), 200);
    let text = called.text().await.expect("text");
    assert!(text.contains("the other replica"), "{text}");
    // The hop is a client span of the caller's trace, and the replica that holds the
    // session served it as the hop's child.
    let spans = collector.until(trace, "tools/call echo").await;
    let spans = match spans.iter().any(|s| s["name"] == "forward") {
        true => spans,
        false => collector.until(trace, "forward").await,
    };
    let hop = one(&spans, "forward");
    assert_eq!(hop["parent_span_id"], PARENT);
    assert_eq!(hop["kind"], 3, "a client span: {hop}");
    assert_eq!(hop["attributes"]["http.request.method"], "POST");
    let served = one(&spans, "tools/call echo");
    assert_eq!(served["parent_span_id"], hop["span_id"]);
    assert_eq!(served["attributes"]["mcp.session.id"], session.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_measured_as_the_mcp_conventions_say_labelled_only_by_known_tools() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "ok");
    let mut env = exporting(&collector);
    env.push(("OTEL_METRIC_EXPORT_INTERVAL".into(), "200".into()));
    let server = HttpServer::start(&fixture, &[], &pairs(&env));
    for _ in 0..3 {
        call(&server.url, "echo", json!({}), &[]).await;
    }
    // A name a client made up is no label: measured, but by its error alone.
    call(&server.url, "made-up-name-1234", json!({}), &[]).await;
    let metrics = collector.spans.with_extension("jsonl.metrics");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&metrics).unwrap_or_default();
        let points: Vec<Value> = (text.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|p| p["name"] == "mcp.server.operation.duration")
            .collect();
        let echo = points.iter().rev().find(|p| {
            p["attributes"]["gen_ai.tool.name"] == "echo"
                && p["attributes"].get("error.type").is_none()
        });
        let refused = (points.iter().rev()).find(|p| p["attributes"]["error.type"] == "tool_error");
        // Cumulative: the last export after the calls counts all three.
        if let (Some(echo), Some(refused)) = (echo, refused)
            && echo["count"] == 3
        {
            assert_eq!(echo["attributes"]["mcp.method.name"], "tools/call");
            // Buckets in seconds, as the conventions advise (not the SDK's, for milliseconds).
            assert_eq!(
                echo["bounds"],
                json!(toolhost::trace::DURATION_BOUNDS),
                "{echo}"
            );
            assert!(
                refused["attributes"].get("gen_ai.tool.name").is_none(),
                "{refused}"
            );
            assert!(!text.contains("made-up-name"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
