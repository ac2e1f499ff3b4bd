//! Session-less requests at 2026-07-28 that need one answer, answered in their own HTTP
//! request (toolhost-mcp's `direct`, issue #44): with a JSON body, through every check a call
//! has (identity, rules, validation, audit), and only when nothing else is needed: a request
//! with a contradicting or missing header, another revision's `_meta` or a progress token
//! goes on to rmcp, which answers it as before. `toolhost_mcp_http_requests_total` says which
//! path answered, so each case here is seen to take the one it should.

use crate::mcp::HttpServer;
use crate::mcp_revisions::modern_post;
use crate::support::{Fixture, ensemble};
use serde_json::{Value, json};
use std::time::Duration;

/// `toolhost_mcp_http_requests_total` by path: (direct, service).
async fn paths(url: &str) -> (u64, u64) {
    let metrics = url.replace("/mcp", "/metrics");
    let text = reqwest::get(&metrics)
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics");
    let count = |path: &str| {
        let prefix = format!("toolhost_mcp_http_requests_total{{path=\"{path}\"}} ");
        (text.lines())
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().expect("a count"))
    };
    (count("direct"), count("service"))
}

fn fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[defaults]\ndedup = \"off\"\ntimeout-ms = 10000\n\n[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    );
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_less_request_that_needs_one_answer_is_answered_in_its_own_request() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    let url = server.url.as_str();
    let call = json!({"name": "echo", "arguments": {"text": "direct"}});
    let (status, headers, answer) = modern_post(url, "tools/call", Some("echo"), call, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("direct"))
    );
    let (status, _, listed) = modern_post(url, "tools/list", None, json!({}), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(listed["result"]["ttlMs"], json!(1000), "{listed}");
    // The arguments are checked as on every path: a violation is the tool's result.
    let bad = json!({"name": "echo", "arguments": {"text": 5}});
    let (status, _, refused) = modern_post(url, "tools/call", Some("echo"), bad, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(paths(url).await, (3, 0));
    // Each call is audited as any other (a session of its own).
    let records: Vec<Value> = std::fs::read_to_string(fixture.root().join("audit.jsonl"))
        .expect("audit")
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    let outcomes: Vec<(&str, &str)> = (records.iter())
        .map(|r| {
            (
                r["tool"].as_str().unwrap_or(""),
                r["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(outcomes, [("echo", "ok"), ("echo", "invalid-arguments")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_direct_path_cannot_take_goes_to_rmcp_which_answers_as_before() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    let url = server.url.as_str();
    let call = || json!({"name": "echo", "arguments": {"text": "x"}});
    // A name in the header that is not the body's, or none: rmcp's 400 (header mismatch,
    // -32020).
    for name in [Some("reject"), None] {
        let (status, _, answer) = modern_post(url, "tools/call", name, call(), &[]).await;
        assert_eq!(status, 400, "{name:?}: {answer}");
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
    }
    // A header method that is not the body's.
    let (status, _, answer) = modern_post(
        url,
        "tools/call",
        Some("echo"),
        call(),
        &[("mcp-method", "tools/list")],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    // A progress token: reports go on the request's stream, which rmcp opens.
    let mut with_progress = call();
    with_progress["_meta"] = json!({"progressToken": "p1"});
    let (status, _, answer) =
        modern_post(url, "tools/call", Some("echo"), with_progress, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // `_meta` without the client's capabilities: rmcp says what is missing.
    let mut incomplete = call();
    incomplete["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": null});
    let (status, _, answer) = modern_post(url, "tools/call", Some("echo"), incomplete, &[]).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(paths(url).await, (0, 5));
    // A foreign Host is refused on the direct path too (DNS rebinding), as rmcp does.
    let (status, _, _) = modern_post(
        url,
        "tools/call",
        Some("echo"),
        call(),
        &[("host", "evil.example")],
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(paths(url).await, (0, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_went_away_still_ends_and_is_audited() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    let call = json!({"name": "sleep", "arguments": {"ms": 600}});
    let url = server.url.clone();
    let gone = tokio::spawn(async move {
        modern_post(&url, "tools/call", Some("sleep"), call, &[]).await;
    });
    crate::metrics::until_running(&server.url, None, 1).await;
    gone.abort();
    let audit = fixture.root().join("audit.jsonl");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        if text.contains("\"tool\":\"sleep\"") {
            assert!(text.contains("\"outcome\":\"ok\""), "{text}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never audited: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(paths(&server.url).await.0, 1);
}

/// One JSON-RPC message (`id` set: a request) posted at 2025-11-25 in `session` (none: the
/// handshake): the status, the headers and the answer (JSON or the event stream's message).
async fn in_session(
    url: &str,
    session: Option<&str>,
    message: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request
        .body(message.to_string())
        .send()
        .await
        .expect("POST");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let answer = crate::support::answer_of(&text).unwrap_or(Value::Null);
    (status, headers, answer)
}

/// Opens a session at 2025-11-25 (`initialize`, `notifications/initialized`): its id.
async fn open_session(url: &str) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let (status, headers, answer) = in_session(url, None, initialize).await;
    assert_eq!(status, 200, "{answer}");
    let id = headers["mcp-session-id"].to_str().expect("id").to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = in_session(url, Some(&id), initialized).await;
    assert!(status == 202 || status == 204, "{status}");
    id
}

fn call_message(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_an_open_session_is_answered_in_its_own_request_with_the_sessions_state() {
    let fixture = fixture();
    fixture.write(
        "asking.toml",
        &ensemble(
            "asking",
            "echo",
            "[grants]\nelicitation = true\n\n[[invokers]]\nname = \"asking_echo\"\n\
             tool = \"echo\"\ncapabilities = { elicitation = true }\n",
        ),
    );
    let server = HttpServer::start(&fixture, &[], &[]);
    let url = server.url.as_str();
    let session = open_session(url).await;
    let (before_direct, before_service) = paths(url).await;
    assert_eq!(before_direct, 0);

    let (status, headers, answer) = in_session(
        url,
        Some(&session),
        call_message(2, "echo", json!({"text": "in a session"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(answer["id"], 2);
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("in a session")),
        "{answer}"
    );
    assert_eq!(paths(url).await, (1, before_service));

    // A tool that may ask its caller mid-call, and a progress token, go to rmcp: what they
    // send goes on the request's own stream.
    let (status, headers, answer) = in_session(
        url,
        Some(&session),
        call_message(3, "asking_echo", json!({"text": "asks"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let mut with_progress = call_message(4, "echo", json!({"text": "p"}));
    with_progress["params"]["_meta"] = json!({"progressToken": "p1"});
    let (status, _, answer) = in_session(url, Some(&session), with_progress).await;
    assert_eq!((status, &answer["result"]["isError"]), (200, &json!(false)));
    assert_eq!(paths(url).await, (1, before_service + 2));

    // A session that is not open: rmcp's 404, on either path.
    let (status, _, _) = in_session(
        url,
        Some("no-such-session"),
        call_message(5, "echo", json!({"text": "x"})),
    )
    .await;
    assert_eq!(status, 404);

    // Every call is audited under the session's one id, as rmcp's path audits it.
    let records: Vec<Value> = std::fs::read_to_string(fixture.root().join("audit.jsonl"))
        .expect("audit")
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    let sessions: std::collections::BTreeSet<&str> = (records.iter())
        .filter_map(|r| r["session"].as_str())
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    assert_eq!(sessions.len(), 1, "{records:?}");

    // Ended by its client: the next request is rmcp's 404, not answered by a twin.
    let deleted = reqwest::Client::new()
        .delete(url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .expect("DELETE");
    assert_eq!(deleted.status().as_u16(), 204);
    let (status, _, _) = in_session(
        url,
        Some(&session),
        call_message(6, "echo", json!({"text": "x"})),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_answered_directly_is_cancelled_by_its_client_and_keeps_its_session_open() {
    let fixture = fixture();
    // Sessions idle after 2 s: a twin answers within 1 s of rmcp's last sight of its session.
    let config = fixture.write_host_file("host", "mcp-session-idle-s = 2");
    let server = HttpServer::start(&fixture, &["--config", config.to_str().expect("path")], &[]);
    let url = server.url.clone();
    let session = open_session(&url).await;
    let (url2, session2) = (url.clone(), session.clone());
    let sleeping = tokio::spawn(async move {
        in_session(
            &url2,
            Some(&session2),
            call_message(9, "sleep", json!({"ms": 8000})),
        )
        .await
    });
    // Wait until the call runs (it is direct: rmcp saw the session a moment ago).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while paths(&url).await.0 < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 9, "reason": "the user gave up"}});
    let (status, _, _) = in_session(&url, Some(&session), cancelled).await;
    assert!(status == 202 || status == 204, "{status}");
    let started = std::time::Instant::now();
    let (status, _, answer) = sleeping.await.expect("the call's request");
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cancelled")),
        "{answer}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "not cancelled: it ran its 8 s"
    );

    // Calls for longer than the session's idle time, each within half of it: the session
    // stays open (rmcp sees one of its requests whenever the twin's time is up).
    for n in 0..8 {
        let (status, _, answer) = in_session(
            &url,
            Some(&session),
            call_message(20 + n, "echo", json!({"text": "x"})),
        )
        .await;
        assert_eq!(status, 200, "call {n}: {answer}");
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let (direct, _) = paths(&url).await;
    assert!(direct >= 2, "the twin answered {direct} calls");
}
