//! `GET /metrics` of `serve --http`: the Prometheus text format, calls counted by tool and
//! outcome as MCP clients make them, the gauges of the pool, the catalog and the audit log,
//! and the same token rule as `/mcp`; `/readyz` while the first load compiles.

use crate::mcp::HttpServer;
use crate::support::{Fixture, ensemble};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

fn fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "calc.toml",
        &ensemble(
            "calc",
            "calculator",
            "[[invokers]]\ninvoker = { name = \"calculate\" }\n",
        ),
    );
    fixture
}

/// The value of the sample `name{labels}` in a Prometheus text page.
pub(crate) fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `/metrics` of the server at `url` (its `/mcp`), with `token` if it needs one.
pub(crate) async fn scrape(url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new().get(url.replace("/mcp", "/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET /metrics");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_counted_by_tool_and_outcome_and_gauges_are_current() {
    let fixture = fixture();
    // Without the watch's first reload, the generation is the first load's.
    let server = HttpServer::start(&fixture, &["--no-watch"], &[]);
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            server.url.clone(),
        ))
        .await
        .expect("MCP session");
    let call = |tool: &'static str, arguments: Value| {
        let Value::Object(arguments) = arguments else {
            unreachable!()
        };
        client.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
    };
    call("echo", json!({"n": 1})).await.expect("call");
    // The same call again: a dedup hit.
    call("echo", json!({"n": 1})).await.expect("call");
    call("calculate", json!({"expression": 5}))
        .await
        .expect("call");
    for n in 0..3 {
        call("no_such_tool", json!({"n": n})).await.expect("call");
    }
    let (status, page) = scrape(&server.url, None).await;
    assert_eq!(status, 200);
    let value = |series: &str| sample(&page, series).unwrap_or_else(|| panic!("{series}:\n{page}"));
    assert_eq!(
        value("toolhost_calls_total{outcome=\"ok\",tool=\"echo\"}"),
        2.0
    );
    assert_eq!(value("toolhost_dedup_hits_total{tool=\"echo\"}"), 1.0);
    assert_eq!(
        value("toolhost_calls_total{outcome=\"invalid-arguments\",tool=\"calculate\"}"),
        1.0
    );
    assert_eq!(
        value("toolhost_validation_failures_total{tool=\"calculate\"}"),
        1.0
    );
    // Made-up names share one label: callers cannot grow the page.
    assert_eq!(
        value("toolhost_calls_total{outcome=\"unknown-tool\",tool=\"\"}"),
        3.0
    );
    assert!(!page.contains("no_such_tool"));
    assert_eq!(
        value("toolhost_call_duration_seconds_count{tool=\"echo\"}"),
        2.0
    );
    assert_eq!(value("toolhost_catalog_tools"), 2.0);
    assert_eq!(value("toolhost_catalog_generation"), 0.0);
    assert_eq!(value("toolhost_refused_ensembles"), 0.0);
    assert_eq!(value("toolhost_instances_in_use"), 0.0);
    assert!(value("toolhost_instances_capacity") >= 1.0);
    assert_eq!(value("toolhost_audit_records_lost"), 0.0);
    assert_eq!(value("toolhost_draining"), 0.0);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_token_when_mcp_does() {
    let fixture = fixture();
    let server = HttpServer::start(
        &fixture,
        &["--token-env", "METRICS_TEST_TOKEN"],
        &[("METRICS_TEST_TOKEN", "s3cret-token")],
    );
    assert_eq!(scrape(&server.url, None).await.0, 401);
    assert_eq!(scrape(&server.url, Some("wrong")).await.0, 401);
    let (status, page) = scrape(&server.url, Some("s3cret-token")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("# TYPE toolhost_catalog_tools gauge"),
        "{page}"
    );
    // Probes stay open: kubelets carry no token.
    let health = reqwest::get(server.url.replace("/mcp", "/healthz"))
        .await
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_the_audit_file_refuses_show_as_held() {
    let fixture = fixture();
    fixture.write_host_file("host", "on-audit-error = \"continue\"");
    let audit = fixture.root().join("full.jsonl");
    std::os::unix::fs::symlink("/dev/full", &audit).expect("link");
    let server = HttpServer::start(
        &fixture,
        &[],
        &[("TOOLHOST_AUDIT", audit.to_str().expect("path"))],
    );
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            server.url.clone(),
        ))
        .await
        .expect("MCP session");
    let Value::Object(arguments) = json!({"n": 1}) else {
        unreachable!()
    };
    let result = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
        .await
        .expect("call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let (_, page) = scrape(&server.url, None).await;
    assert_eq!(
        sample(&page, "toolhost_audit_records_held"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "toolhost_audit_records_lost"),
        Some(0.0),
        "{page}"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_the_first_load_compiles_then_ready() {
    let fixture = fixture();
    // A component whose compile runs for its whole CPU bound (2 s), then is refused.
    std::fs::write(
        fixture.root().join("hog.wasm"),
        crate::hostile::register_hog(20_000, 20_000),
    )
    .expect("hog");
    fixture.write(
        "hog.toml",
        &ensemble("hog", "hog", "[[invokers]]\ninvoker = { name = \"hog\" }\n"),
    );
    // Cranelift's compile, the slow one: Winch compiles this hog in a fraction of a second.
    fixture.write_host_file("host", "compile-cpu-seconds = 2\ntiered-compile = false");
    let server = HttpServer::start(&fixture, &[], &[]);
    let probe = |path: &str| {
        let url = server.url.replace("/mcp", path);
        async move { reqwest::get(url).await.expect("probe").status().as_u16() }
    };
    assert_eq!(
        probe("/readyz").await,
        503,
        "ready before the first load ended"
    );
    assert_eq!(probe("/healthz").await, 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while probe("/readyz").await != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, page) = scrape(&server.url, None).await;
    assert_eq!(
        sample(&page, "toolhost_refused_ensembles"),
        Some(1.0),
        "{page}"
    );
}

/// Waits until the host at `url` runs `n` calls, as its `/metrics` say
/// (`toolhost_instances_in_use`), read with `token` where the host has an `[access]`: what a
/// test waits for instead of sleeping while a call gets under way.
pub(crate) async fn until_running(url: &str, token: Option<&str>, n: u32) {
    let wanted = f64::from(n);
    until_value(url, token, "toolhost_instances_in_use", |v| v == wanted).await;
}

/// Scrapes (with `token`, if any) until `series` has a value that `wanted` takes, within a
/// minute, and returns it.
async fn until_value(
    url: &str,
    token: Option<&str>,
    series: &str,
    wanted: impl Fn(f64) -> bool,
) -> f64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, page) = scrape(url, token).await;
        if let Some(value) = sample(&page, series).filter(|v| wanted(*v)) {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} never came as wanted at {url}:\n{page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Scrapes until `series` has `value`.
async fn until(url: &str, series: &str, value: f64) {
    until_value(url, None, series, |v| v == value).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_are_counted_by_outcome_and_imported_servers_show_up_or_down() {
    let inner = crate::mcp_import::inner_fixture();
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "inner.toml",
        &crate::mcp_import::import_ensemble(&inner, ""),
    );
    let server = HttpServer::start(&fixture, &[], &[]);
    until(
        &server.url,
        "toolhost_mcp_server_up{ensemble=\"inner\"}",
        1.0,
    )
    .await;

    fixture.write("broken.toml", "schema-version = 1\n[ensemble]\n");
    until(
        &server.url,
        "toolhost_reloads_total{outcome=\"refused\"}",
        1.0,
    )
    .await;
    // Reloads that end well (the watch's first, the import's start) may have come before:
    // the one after the removal is counted on top of them.
    let ok = "toolhost_reloads_total{outcome=\"ok\"}";
    let before = sample(&scrape(&server.url, None).await.1, ok).unwrap_or(0.0);
    std::fs::remove_file(fixture.ensembles().join("broken.toml")).expect("remove");
    until_value(&server.url, None, ok, |after| after > before).await;
    until(&server.url, "toolhost_refused_ensembles", 0.0).await;

    let pid = crate::mcp_import::inner_pid(&inner.root().join("status.json")).await;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    until(
        &server.url,
        "toolhost_mcp_server_up{ensemble=\"inner\"}",
        0.0,
    )
    .await;
}
