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
    tokio::time::sleep(Duration::from_millis(200)).await;
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
