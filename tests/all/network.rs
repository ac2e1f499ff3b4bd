//! Granted network access: the `fetch` plugin against an HTTP server the test starts on
//! 127.0.0.1, and every way a request can reach for what was not granted.

use crate::support::{Fixture, ensemble, err, ok, session};
use serde_json::{Value, json};
use std::time::Duration;
use toolhost::invoke::{ErrorKind, Host};

/// An HTTP server on 127.0.0.1 with a few routes; it stops with the test's runtime.
async fn server() -> u16 {
    use axum::response::{IntoResponse, Redirect};
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/hello", get(|| async { "hello from the test server" }))
        .route(
            "/redirect-in",
            get(|| async { Redirect::temporary("/hello") }),
        )
        .route(
            "/redirect-out",
            get(|| async { Redirect::temporary("http://example.org/") }),
        )
        .route(
            "/redirect-loopback",
            get(|| async { Redirect::temporary("http://localhost:9/") }),
        )
        .route("/big", get(|| async { "x".repeat(2 << 20) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late".into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// A host with `fetch` granted `grants` (and the same capabilities), and `testbed`'s
/// `connect` with the same network capability.
async fn web_host(grants: &[String], limits: &str) -> (Fixture, Host) {
    let fixture = Fixture::new();
    let list = grants
        .iter()
        .map(|g| format!("{g:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    fixture.write(
        "web.toml",
        &ensemble(
            "web",
            "fetch",
            &format!(
                "[defaults]\ndedup = \"off\"\n{limits}\n\n[grants]\nnetwork = [{list}]\n\n\
                 [[invokers]]\ninvoker = {{ name = \"fetch\" }}\ncapabilities = {{ network = [{list}] }}\n"
            ),
        ),
    );
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            &format!(
                "[grants]\nnetwork = [{list}]\n\n[[invokers]]\ninvoker = {{ name = \"connect\" }}\n\
                 capabilities = {{ network = [{list}] }}\n"
            ),
        ),
    );
    let audit = fixture.root().join("audit.jsonl");
    let host = fixture.host_with_audit(Some(&audit)).await;
    (fixture, host)
}

/// Writes an ensemble of `component` (`testbed` or `fetch`) with `network` granted to one
/// invoker, `invoker` (its table, and any lines after it).
fn one_granted(fixture: &Fixture, component: &str, network: &str, invoker: &str) {
    fixture.write(
        &format!("{component}.toml"),
        &ensemble(
            component,
            component,
            &format!(
                "[grants]\nnetwork = [\"{network}\"]\n\n[[invokers]]\ninvoker = {invoker}\n\
                 capabilities = {{ network = [\"{network}\"] }}\n"
            ),
        ),
    );
}

async fn fetch(host: &Host, url: &str) -> toolhost::invoke::CallOutcome {
    host.invoke(&session(), "fetch", json!({ "url": url }))
        .await
}

fn body(outcome: &toolhost::invoke::CallOutcome) -> Value {
    serde_json::from_str(&ok(outcome)).expect("fetch returns JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_local_server_answers() {
    let port = server().await;
    let (_fixture, host) = web_host(&[format!("127.0.0.1:{port}")], "").await;
    let answer = body(&fetch(&host, &format!("http://127.0.0.1:{port}/hello")).await);
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["text"], "hello from the test server");
    assert!(
        answer["content_type"]
            .as_str()
            .is_some_and(|c| c.starts_with("text/plain"))
    );
    // A redirect within the grant is followed.
    let answer = body(&fetch(&host, &format!("http://127.0.0.1:{port}/redirect-in")).await);
    assert_eq!(answer["text"], "hello from the test server");
    assert_eq!(answer["url"], format!("http://127.0.0.1:{port}/hello"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_not_granted_is_capability_denied_and_audited() {
    let port = server().await;
    let (fixture, host) = web_host(&[format!("http://127.0.0.1:{port}")], "").await;
    for (url, refused) in [
        (
            "http://example.org/".to_string(),
            "http://example.org:80 is not granted",
        ),
        (
            format!("http://127.0.0.1:{}/hello", port.wrapping_add(1).max(1)),
            "is not granted",
        ),
        // The grant names http: https to the same host and port is another capability.
        (
            format!("https://127.0.0.1:{port}/hello"),
            "https://127.0.0.1",
        ),
    ] {
        let error = err(&fetch(&host, &url).await);
        assert_eq!(error.kind, ErrorKind::CapabilityDenied, "{url}: {error}");
        assert!(error.message.contains(refused), "{url}: {}", error.message);
    }
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    let last: Value = serde_json::from_str(audit.lines().last().expect("a record")).expect("JSON");
    assert_eq!(last["outcome"], "capability-denied");
    assert_eq!(last["tool"], "fetch");
    // The host still serves.
    assert_eq!(
        body(&fetch(&host, &format!("http://127.0.0.1:{port}/hello")).await)["status"],
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_refused_in_a_loop_is_told_about_the_first_refusals_and_the_count() {
    let port = server().await;
    let fixture = Fixture::new();
    one_granted(
        &fixture,
        "testbed",
        &format!("http://127.0.0.1:{port}"),
        "{ name = \"http_flood\", dedup = \"off\" }\nlimits = { timeout-ms = 60000 }",
    );
    let host = fixture.host().await;
    let arguments = json!({"authority": "example.org", "count": 20_000});
    let error = err(&host.invoke(&session(), "http_flood", arguments).await);
    assert_eq!(error.kind, ErrorKind::CapabilityDenied, "{error}");
    // Eight refusals are named, the other 19,992 counted: the message (and the host's memory
    // and log) do not grow with the loop.
    assert_eq!(
        error
            .message
            .matches("http://example.org:80 is not granted")
            .count(),
        toolhost::sandbox::REMEMBERED_REFUSALS,
        "{}",
        error.message
    );
    assert!(
        error
            .message
            .ends_with("and 19992 more requests were refused"),
        "{}",
        error.message
    );
    // Requests the grant covers still go through, one after another.
    let arguments = json!({"authority": format!("127.0.0.1:{port}"), "count": 40});
    ok(&host.invoke(&session(), "http_flood", arguments).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_host_that_redirects_elsewhere_is_refused_at_the_redirect() {
    let port = server().await;
    let (_fixture, host) = web_host(&[format!("127.0.0.1:{port}")], "").await;
    let error = err(&fetch(&host, &format!("http://127.0.0.1:{port}/redirect-out")).await);
    assert_eq!(error.kind, ErrorKind::CapabilityDenied);
    assert!(
        error
            .message
            .contains("http://example.org:80 is not granted"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_name_that_resolves_to_loopback_is_refused() {
    let port = server().await;
    let (_fixture, host) = web_host(&[format!("localhost:{port}")], "").await;
    let error = err(&fetch(&host, &format!("http://localhost:{port}/hello")).await);
    assert_eq!(error.kind, ErrorKind::CapabilityDenied);
    assert!(
        error
            .message
            .contains("a loopback address, which is not granted"),
        "{}",
        error.message
    );
    // Granting the loopback range itself allows it.
    let (_fixture, host) = web_host(
        &[format!("localhost:{port}"), format!("127.0.0.0/8:{port}")],
        "",
    )
    .await;
    let answer = body(&fetch(&host, &format!("http://localhost:{port}/hello")).await);
    assert_eq!(answer["status"], 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_past_max_response_bytes_is_cut_off() {
    let port = server().await;
    let (_fixture, host) =
        web_host(&[format!("127.0.0.1:{port}")], "max-response-bytes = 65536").await;
    let outcome = host
        .invoke(
            &session(),
            "fetch",
            json!({ "url": format!("http://127.0.0.1:{port}/big"), "max_bytes": 1000000 }),
        )
        .await;
    let error = err(&outcome);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert!(
        error
            .message
            .contains("body size exceeds limit: 65536 bytes"),
        "{}",
        error.message
    );
    assert_eq!(
        body(&fetch(&host, &format!("http://127.0.0.1:{port}/hello")).await)["status"],
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_ends_at_the_call_timeout() {
    let port = server().await;
    let (_fixture, host) = web_host(&[format!("127.0.0.1:{port}")], "timeout-ms = 300").await;
    let error = err(&fetch(&host, &format!("http://127.0.0.1:{port}/slow")).await);
    assert!(
        matches!(error.kind, ErrorKind::Timeout | ErrorKind::ToolError),
        "{error}"
    );
    assert!(
        error.kind == ErrorKind::Timeout || error.message.contains("Timeout"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_grant_does_not_open_raw_sockets() {
    let port = server().await;
    let (_fixture, host) = web_host(&[format!("127.0.0.1:{port}")], "").await;
    let outcome = host
        .invoke(
            &session(),
            "connect",
            json!({ "address": format!("127.0.0.1:{port}") }),
        )
        .await;
    let error = err(&outcome);
    assert_eq!(error.kind, ErrorKind::ToolError, "{error}");
    assert!(
        error.message.to_lowercase().contains("denied")
            || error.message.to_lowercase().contains("not permitted")
            || error.message.to_lowercase().contains("unsupported"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_granted_host_speaks_tls() {
    // The grant has no scheme, so https is allowed; the server speaks plain HTTP, so the
    // host's TLS handshake (not a plain request) is what fails.
    let port = server().await;
    let (_fixture, host) = web_host(&[format!("127.0.0.1:{port}")], "").await;
    let error = err(&fetch(&host, &format!("https://127.0.0.1:{port}/hello")).await);
    assert_eq!(error.kind, ErrorKind::ToolError, "{error}");
    assert!(error.message.contains("Tls"), "{}", error.message);
}

#[test]
fn a_failed_outgoing_request_is_said_in_the_hosts_debug_log_with_its_invoker() {
    // A port nothing listens on: granted, so the request is sent, and the connection fails.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let fixture = Fixture::new();
    one_granted(
        &fixture,
        "fetch",
        &format!("127.0.0.1:{port}"),
        "{ name = \"fetch\" }",
    );
    let url = format!("http://127.0.0.1:{port}/status?token=never-logged");
    let arguments = json!({ "url": url }).to_string();
    let output =
        crate::cli::toolhost_with_stdin(&fixture, &["-vv", "call", "fetch", &arguments], None);
    let said = crate::cli::stderr(&output);
    let line = (said.lines())
        .find(|l| l.contains("outgoing request to"))
        .unwrap_or_else(|| panic!("no line says the request failed:\n{said}"));
    assert!(
        line.contains(&format!(
            "outgoing request to http://127.0.0.1:{port}/status failed: "
        )),
        "{line}"
    );
    assert!(line.contains("fetch"), "the invoker: {line}");
    // (The tool's own error, which its caller reads, may say its URL whole.)
    assert!(
        !line.contains("never-logged"),
        "the query stays out of the log: {line}"
    );
}
