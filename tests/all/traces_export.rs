//! Where telemetry goes (issue #57): each signal only to the endpoint that names it (a traces
//! endpoint exports no metrics, a metrics endpoint no spans); a collector that refuses every
//! connection costs no call anything, writes next to nothing to the log and is said on
//! `/readyz` and `/metrics`; the sampler decides once where a request enters; `[telemetry]`
//! in `toolhost.toml`, checked, with the variables winning over it; each round of a tool that
//! asks linked to the request that started its call.

use crate::mcp::HttpServer;
use crate::traces::{Collector, PARENT, TRACE, call, exporting, one, pairs, traceparent};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The metric points `collector` received so far.
fn points(collector: &Collector) -> Vec<Value> {
    let text = std::fs::read_to_string(collector.spans.with_extension("jsonl.metrics"))
        .unwrap_or_default();
    (text.lines())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signal_goes_only_where_its_own_endpoint_says() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let quick = [
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
    ];

    // A traces endpoint alone (the signal's own variable names the whole URL): spans, and no
    // metric after several intervals.
    let dir = |name: &str| {
        let dir = fixture.root().join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    };
    let traces = Collector::start(&dir("traces"), "ok");
    let url = format!("{}/v1/traces", traces.endpoint());
    let mut env = vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url.as_str())];
    env.extend(quick);
    let server = HttpServer::start(&fixture, &[], &env);
    let meta = json!({"traceparent": traceparent(TRACE, PARENT)});
    call(&server.url, "echo", meta.clone(), &[]).await;
    traces.until(TRACE, "tools/call echo").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(points(&traces), Vec::<Value>::new(), "no metrics asked for");
    drop(server);

    // A metrics endpoint alone: the calls measured, and no span.
    let metrics = Collector::start(&dir("metrics"), "ok");
    let url = format!("{}/v1/metrics", metrics.endpoint());
    let mut env = vec![("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", url.as_str())];
    env.extend(quick);
    let server = HttpServer::start(&fixture, &[], &env);
    call(&server.url, "echo", meta, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(points(&metrics).iter()).any(|p| p["name"] == "mcp.server.operation.duration") {
        assert!(Instant::now() < deadline, "no metric arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metrics.spans(), Vec::<Value>::new(), "no traces asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_refuses_connections_costs_no_call_anything_and_says_little() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    // A port nothing listens on: every export is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
    ];
    let server = HttpServer::start(&fixture, &[], &env);
    let before = server.stderr_bytes();
    for n in 0..60 {
        let meta = json!({"traceparent": traceparent(TRACE, PARENT), "n": n});
        let answer = call(&server.url, "echo", meta, &[]).await;
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        if n % 10 == 0 {
            // Several batches and metric exports fail meanwhile.
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
    }
    // Ready, like every replica sharing that collector, and saying it once an export failed.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = reqwest::get(server.url.replace("/mcp", "/readyz"))
            .await
            .expect("readyz");
        assert_eq!(ready.status().as_u16(), 200);
        let said = ready.text().await.expect("text");
        if said.contains("the OTLP collector does not take spans: no call") {
            break;
        }
        assert!(Instant::now() < deadline, "{said}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, metrics) = crate::metrics::scrape(&server.url, None).await;
    let up = r#"toolhost_shared_engine_up{engine="otlp-collector"}"#;
    assert_eq!(crate::metrics::sample(&metrics, up), Some(0.0), "{metrics}");
    // `status` names it, with why and what it stops.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command.arg("status").output().expect("status");
        let said = String::from_utf8_lossy(&output.stdout).to_string();
        if said.contains("OTLP collector: does not answer (") {
            assert!(
                said.contains("no call: spans wait in a bounded queue"),
                "{said}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "{said}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each failed export is not a line of the log.
    let written = server.stderr_bytes() - before;
    assert!(written < 2048, "{written} bytes: {}", server.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_decides_once_where_a_request_enters_and_a_dropped_trace_has_no_span() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    // Ann's calls are counted by a quota; Bob's are not.
    fixture.write_host_file(
        "access",
        "[[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
         [[access.tokens]]\nname = \"bob\"\nenv = \"BOB\"\n\n\
         [[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 1000\n",
    );
    let collector = Collector::start(fixture.root(), "ok");
    // No new trace is kept; a caller's choice is followed.
    let mut env = exporting(&collector);
    env.push((
        "OTEL_TRACES_SAMPLER".into(),
        "parentbased_traceidratio".into(),
    ));
    env.push(("OTEL_TRACES_SAMPLER_ARG".into(), "0".into()));
    env.push(("ANN".into(), "ann-token".into()));
    env.push(("BOB".into(), "bob-token".into()));
    let server = HttpServer::start(&fixture, &[], &pairs(&env));
    let bob = [("authorization", "Bearer bob-token")];
    let dropped = "77770000777700007777000077770000";
    let unsampled = format!("00-{dropped}-{PARENT}-00");
    call(&server.url, "echo", json!({"traceparent": unsampled}), &bob).await;
    for n in 0..5 {
        call(&server.url, "echo", json!({"n": n}), &bob).await;
    }
    let ann = [("authorization", "Bearer ann-token")];
    let meta = json!({"traceparent": traceparent(TRACE, PARENT)});
    call(&server.url, "echo", meta, &ann).await;
    let kept = collector.until(TRACE, "tools/call echo").await;
    for step in ["validate", "dedup", "quota", "run echo"] {
        assert!(kept.iter().any(|s| s["name"] == step), "{step}: {kept:#?}");
    }
    // No quota counts Bob's calls: no `quota` span says one was asked.
    let local = "99990000999900009999000099990000";
    let meta = json!({"traceparent": traceparent(local, PARENT)});
    call(&server.url, "echo", meta, &bob).await;
    let kept = collector.until(local, "tools/call echo").await;
    let names: Vec<&Value> = kept.iter().map(|s| &s["name"]).collect();
    for step in ["validate", "dedup", "run echo"] {
        assert!(names.contains(&&json!(step)), "{step}: {kept:#?}");
    }
    assert!(!names.contains(&&json!("quota")), "{kept:#?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let others: Vec<Value> = (collector.spans().into_iter())
        .filter(|s| s["trace_id"] != TRACE && s["trace_id"] != local)
        .collect();
    assert_eq!(
        others,
        Vec::<Value>::new(),
        "only the caller's sampled trace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_trace_kept_by_a_ratio_is_the_one_the_ratio_decided_on() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "ok");
    let mut env = exporting(&collector);
    env.push(("OTEL_TRACES_SAMPLER".into(), "traceidratio".into()));
    env.push(("OTEL_TRACES_SAMPLER_ARG".into(), "0.5".into()));
    let server = HttpServer::start(&fixture, &[], &pairs(&env));
    for n in 0..30 {
        call(&server.url, "echo", json!({"n": n}), &[]).await;
    }
    // OpenTelemetry's rule: kept when the id's low 8 bytes, shifted right once, are under
    // ratio x 2^63; a service sampling by the same ratio keeps the same traces.
    let kept_by_the_ratio = |id: &str| {
        let low = u64::from_str_radix(&id[16..], 16).expect("hex");
        (low >> 1) < (0.5 * (1u64 << 63) as f64) as u64
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let roots: Vec<String> = (collector.spans().into_iter())
            .filter(|s| s["name"] == "tools/call echo")
            .map(|s| s["trace_id"].as_str().expect("id").to_string())
            .collect();
        // Thirty new traces at one half: none kept is a chance of one in a billion.
        if !roots.is_empty() {
            let other: Vec<&String> = roots.iter().filter(|id| !kept_by_the_ratio(id)).collect();
            assert!(other.is_empty(), "kept, but not by the ratio: {other:?}");
            assert!(roots.len() < 30, "every trace kept at one half: {roots:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no trace kept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_in_toolhost_toml_exports_and_a_variable_wins_over_it() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "ok");
    fixture.write_host_file(
        "telemetry",
        &format!(
            "endpoint = \"{}/\"\nservice-name = \"from-the-file\"\nsampler = \"always_off\"\n\
             record-sizes = true\nheaders-env = \"COLLECTOR_HEADERS\"",
            collector.endpoint()
        ),
    );
    let headers = [
        ("COLLECTOR_HEADERS", "x-collector-key=k1"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    // The file's sampler keeps nothing...
    let server = HttpServer::start(&fixture, &[], &headers);
    call(&server.url, "echo", json!({}), &[]).await;
    drop(server);
    // ...and the environment's keeps everything, its service name over the file's.
    let mut env = headers.to_vec();
    env.extend([
        ("OTEL_TRACES_SAMPLER", "always_on"),
        ("OTEL_SERVICE_NAME", "from-the-environment"),
    ]);
    let server = HttpServer::start(&fixture, &[], &env);
    let meta = json!({"traceparent": traceparent(TRACE, PARENT)});
    call(&server.url, "echo", meta, &[]).await;
    let spans = collector.until(TRACE, "tools/call echo").await;
    assert!(
        spans.iter().all(|s| s["service"] == "from-the-environment"),
        "{spans:#?}"
    );
    let run = (spans.iter().find(|s| s["name"] == "run echo")).expect("the run");
    // `{"text":"hi"}` went in, and echo gives it back.
    assert_eq!(run["attributes"]["toolhost.arguments.size"], 13, "{run}");
    assert_eq!(run["attributes"]["toolhost.result.size"], 13, "{run}");
    assert_eq!(
        collector.spans().len(),
        spans.len(),
        "the first server sent none"
    );
}

#[test]
fn check_says_where_a_telemetry_setting_is_wrong() {
    let check = |lines: &str| {
        let fixture = crate::support::Fixture::new();
        fixture.write_echo();
        fixture.write_host_file("telemetry", lines);
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command
            .arg("check")
            .env_remove("NOT_SET_ANYWHERE")
            .env("BAD_HEADERS", "no pairs here")
            .output()
            .expect("check");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), said)
    };
    let (passed, said) = check("endpoint = \"ftp://collector:4318\"");
    assert!(!passed && said.contains("toolhost.toml:4:12"), "{said}");
    assert!(said.contains("is no collector's address"), "{said}");
    let (passed, said) = check("sampler = \"traceidratio\"\nsampler-ratio = 1.5");
    assert!(!passed && said.contains("toolhost.toml:5:"), "{said}");
    assert!(said.contains("0 to 1; got 1.5"), "{said}");
    let (passed, said) = check("sampler-ratio = 0.5");
    assert!(
        !passed && said.contains("set `sampler` to one of them"),
        "{said}"
    );
    let (passed, said) = check("sampler = \"sometimes\"");
    assert!(!passed && said.contains("toolhost.toml:4:"), "{said}");
    let (passed, said) = check("headers-env = \"BAD_HEADERS\"");
    assert!(!passed && said.contains("key=value pairs"), "{said}");
    assert!(
        !said.contains("no pairs here"),
        "a secret is never shown: {said}"
    );
    let (passed, said) = check("headers-env = \"NOT_SET_ANYWHERE\"");
    assert!(passed, "{said}");
    assert!(
        said.contains("$NOT_SET_ANYWHERE (`headers-env`) is not set"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_and_each_reload_has_its_span() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let collector = Collector::start(fixture.root(), "ok");
    let server = HttpServer::start(&fixture, &[], &pairs(&exporting(&collector)));
    let post = |method: &'static str, params: Value, trace: &'static str| {
        let url = server.url.clone();
        async move {
            let mut params = params;
            params["_meta"] = json!({"traceparent": traceparent(trace, PARENT)});
            // What 2026-07-28 names in the `Mcp-Name` header.
            let named = (params.get("name").or(params.get("uri")))
                .and_then(|n| n.as_str())
                .map(str::to_string);
            crate::mcp_revisions::modern_post(&url, method, named.as_deref(), params, &[]).await
        }
    };
    let listed = "1111000011110000111100001111aaaa";
    let (status, _, _) = post("tools/list", json!({}), listed).await;
    assert_eq!(status, 200);
    let spans = collector.until(listed, "tools/list").await;
    let span = &spans[0];
    assert_eq!(span["parent_span_id"], PARENT);
    assert_eq!(span["attributes"]["mcp.method.name"], "tools/list");
    assert!(
        span["attributes"].get("gen_ai.tool.name").is_none(),
        "{span}"
    );
    // A prompt that is not there: the span says which (a name cut at 128 bytes), and the
    // error's code.
    let missing = "2222000022220000222200002222bbbb";
    post("prompts/get", json!({"name": "p".repeat(1000)}), missing).await;
    let name = format!("prompts/get {}", "p".repeat(128));
    let spans = collector.until(missing, &name).await;
    let span = &spans[0];
    assert_eq!(span["attributes"]["gen_ai.prompt.name"], "p".repeat(128));
    assert!(
        span["attributes"]["error.type"].as_str().is_some(),
        "{span}"
    );
    // A resource's URI is an attribute, never the span's name.
    let read = "3333000033330000333300003333cccc";
    post(
        "resources/read",
        json!({"uri": "docs://nothing/here"}),
        read,
    )
    .await;
    let spans = collector.until(read, "resources/read").await;
    assert_eq!(
        spans[0]["attributes"]["mcp.resource.uri"],
        "docs://nothing/here"
    );
    // A reload is a trace of its own.
    fixture.write_slow(10);
    let deadline = Instant::now() + Duration::from_secs(30);
    let reload = loop {
        let found = (collector.spans().into_iter()).find(|s| {
            s["name"] == "reload"
                && s["attributes"]["toolhost.tools.added"] == 1
                && s["attributes"]["toolhost.generation"].as_i64() > Some(1)
        });
        if let Some(reload) = found {
            break reload;
        }
        assert!(Instant::now() < deadline, "{:#?}", collector.spans());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(reload["parent_span_id"], "", "{reload}");
    assert_eq!(
        reload["attributes"]["toolhost.ensembles.refused"], 0,
        "{reload}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_waited_for_is_a_span_of_the_chats_trace() {
    use crate::scripted::{Scripted, openai};
    let model = Scripted::start(vec![
        crate::web::say("a1", "first"),
        openai::text("Said it."),
    ]);
    let fixture = crate::web::fixture(&model.base_url, "");
    let collector = Collector::start(fixture.root(), "ok");
    let mut env = exporting(&collector);
    env.push(("SCRIPTED_KEY".into(), "k".into()));
    let config = fixture.root().join("toolhost.toml");
    let args = ["--config", config.to_str().expect("path")];
    let server = HttpServer::start(&fixture, &args, &pairs(&env));
    let api = format!("{}/api/conversations", crate::web::base(&server));
    let trace = "4444000044440000444400004444dddd";
    let response = reqwest::Client::new()
        .post(&api)
        .header("traceparent", traceparent(trace, PARENT))
        .json(&json!({"message": "Say hi"}))
        .send()
        .await
        .expect("POST");
    let mut events = crate::web::Events::of(response);
    let asked = events.until("approval_request").await;
    let id = asked[0]["id"].as_str().expect("id");
    let url = format!("{api}/{id}/approvals/a1");
    let (status, _) = crate::web::post_json(&url, json!({"decision": "allow"})).await;
    assert_eq!(status, 204);
    events.rest().await;
    let spans = collector.until(trace, "POST /api/conversations").await;
    let agent = crate::traces::one(&spans, "invoke_agent toolhost");
    let approval = crate::traces::one(&spans, "approval");
    assert_eq!(approval["parent_span_id"], agent["span_id"], "{approval}");
    assert_eq!(approval["attributes"]["gen_ai.tool.name"], "say");
    assert_eq!(approval["attributes"]["toolhost.approved"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_round_of_a_tool_that_asks_links_to_the_request_that_started_it() {
    use crate::fleet_rounds::{state, try_ask_with};
    let fixture = crate::talk::fixture(crate::talk::GRANTS);
    let collector = Collector::start(fixture.root(), "ok");
    let server = HttpServer::start(&fixture, &[], &pairs(&exporting(&collector)));
    let client = reqwest::Client::new();
    // Each round in a trace of its own (as a client that starts a trace per request sends).
    let started = "5555000055550000555500005555dddd";
    let header = traceparent(started, PARENT);
    let first = try_ask_with(
        &client,
        &server.url,
        "alice",
        json!({}),
        &[("traceparent", &header)],
    )
    .await
    .expect("the first round");
    let waiting = state(&first);
    let answered = "6666000066660000666600006666eeee";
    let header = traceparent(answered, PARENT);
    let more = json!({
        "requestState": waiting,
        "inputResponses": {"ask-1": {"action": "accept", "content": {"name": "Trace"}}},
    });
    let done = try_ask_with(
        &client,
        &server.url,
        "alice",
        more,
        &[("traceparent", &header)],
    )
    .await
    .expect("the second round");
    assert_eq!(
        done["result"]["content"][0]["text"], r#"accepted: {"name":"Trace"}"#,
        "{done}"
    );
    let origin = collector.until(started, "tools/call ask_person").await;
    let origin = one(&origin, "tools/call ask_person");
    assert_eq!(origin["links"], json!([]), "{origin}");
    let follow_up = collector.until(answered, "tools/call ask_person").await;
    let follow_up = one(&follow_up, "tools/call ask_person");
    assert_eq!(follow_up["parent_span_id"], PARENT);
    assert_eq!(follow_up["attributes"]["toolhost.round"], 2, "{follow_up}");
    assert_eq!(
        follow_up["links"],
        json!([{
            "trace_id": started,
            "span_id": origin["span_id"],
            "attributes": {"toolhost.link": "started-by"},
        }]),
        "{follow_up}"
    );
}

/// A loopback proxy to `url`'s host that keeps what each connection sends (a string each, as
/// it arrives); its URL (with `url`'s path), and what was sent.
pub(crate) async fn tee(url: &str) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let listener = (tokio::net::TcpListener::bind("127.0.0.1:0").await).expect("bind");
    let proxy = format!("http://{}{path}", listener.local_addr().expect("addr"));
    let (sent, authority) = (Arc::new(Mutex::new(Vec::new())), authority.to_string());
    let kept = sent.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&authority).await else {
                continue;
            };
            let kept = kept.clone();
            tokio::spawn(async move {
                let ((mut from_client, mut to_client), (mut from_server, mut to_server)) =
                    (client.into_split(), server.into_split());
                tokio::spawn(
                    async move { tokio::io::copy(&mut from_server, &mut to_client).await },
                );
                let connection = {
                    let mut kept = kept.lock().expect("sent");
                    kept.push(String::new());
                    kept.len() - 1
                };
                let mut buffer = vec![0u8; 16 << 10];
                while let Ok(read @ 1..) = from_client.read(&mut buffer).await {
                    let text = String::from_utf8_lossy(&buffer[..read]);
                    kept.lock().expect("sent")[connection].push_str(&text);
                    if to_server.write_all(&buffer[..read]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (proxy, sent)
}
