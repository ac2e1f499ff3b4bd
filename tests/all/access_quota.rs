//! Quotas per identity (`[[access.quotas]]`): calls a minute and calls at once, answered by
//! `429` with `Retry-After` for a call without a session, by an `isError` result inside one;
//! and `/metrics` naming identities up to `metrics-identities`, the rest as `other`.

use crate::mcp::{Client, HttpServer, call, text};
use crate::mcp_revisions::modern_post;
use crate::support::Fixture;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

/// A `tools/call` without a session by the bearer of `token`: the status, headers and message.
async fn call_as(
    url: &str,
    token: &str,
    tool: &str,
    arguments: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let auth = format!("Bearer {token}");
    let params = json!({"name": tool, "arguments": arguments});
    modern_post(
        url,
        "tools/call",
        Some(tool),
        params,
        &[("authorization", &auth)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_hold_each_identity_to_its_calls_a_minute_and_at_once() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write_slow(20000);
    let host_file = fixture.write_host_file(
        "access",
        "metrics-identities = 1\n\n\
         [[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
         [[access.tokens]]\nname = \"bob\"\nenv = \"BOB\"\n\n\
         [[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 3\n\n\
         [[access.quotas]]\nconcurrent-calls = 1\n",
    );
    let config = host_file.to_str().expect("path");
    let env = [("ANN", "ann-token"), ("BOB", "bob-token")];
    let server = HttpServer::start(&fixture, &["--config", config], &env);
    let url = server.url.as_str();

    // Ann: three calls a minute; the fourth without a session is a 429 saying when.
    for n in 0..3 {
        let (status, _, answer) = call_as(url, "ann-token", "echo", json!({"n": n})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    let (status, headers, _) = call_as(url, "ann-token", "echo", json!({"n": 3})).await;
    assert_eq!(status, 429);
    let retry: u64 = headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=20).contains(&retry), "{retry}");
    // Inside a session the call's result says so.
    let transport = StreamableHttpClientTransportConfig::with_uri(url).auth_header("ann-token");
    let client = Client::default()
        .serve(StreamableHttpClientTransport::from_config(transport))
        .await
        .expect("a session");
    let limited = call(&client, "echo", json!({"n": 4})).await;
    assert_eq!(limited.is_error, Some(true));
    let said = text(&limited);
    assert!(
        said.starts_with("rate-limited: this identity's quota is 3 calls a minute"),
        "{said}"
    );
    client.cancel().await.expect("close");

    // Bob (everyone else's quota): one call at a time.
    let slow = call_as(url, "bob-token", "sleep", json!({"ms": 1500}));
    let quick = async {
        crate::metrics::until_running(url, Some("ann-token"), 1).await;
        call_as(url, "bob-token", "echo", json!({"while": "sleeping"})).await
    };
    let ((slow_status, _, slept), (status, _, refused)) = tokio::join!(slow, quick);
    assert_eq!(slow_status, 200);
    assert_eq!(slept["result"]["isError"], json!(false), "{slept}");
    let refused_in_result = refused["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("rate-limited:"));
    assert!(status == 429 || refused_in_result, "{status} {refused}");
    let (status, _, answer) = call_as(url, "bob-token", "echo", json!({"after": true})).await;
    assert_eq!(status, 200, "{answer}");

    // Metrics name the first identity; the second is `other`.
    let metrics = reqwest::Client::new()
        .get(url.replace("/mcp", "/metrics"))
        .bearer_auth("ann-token")
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    let series = |labels: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("toolhost_identity_calls_total{{{labels}}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(
        series("identity=\"ann\",outcome=\"ok\""),
        Some(3),
        "{metrics}"
    );
    assert_eq!(
        series("identity=\"ann\",outcome=\"rate-limited\""),
        Some(1),
        "{metrics}"
    );
    assert!(
        series("identity=\"other\",outcome=\"ok\"").is_some_and(|n| n >= 2),
        "{metrics}"
    );
    assert!(!metrics.contains("identity=\"bob\""), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_before_it_runs_gives_its_admission_back() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = fixture.write_host_file(
        "access",
        "[[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
         [[access.quotas]]\ncalls-per-minute = 1\nconcurrent-calls = 1\n",
    );
    let config = host_file.to_str().expect("path");
    let server = HttpServer::start(&fixture, &["--config", config], &[("ANN", "ann-token")]);
    let auth = [("authorization", "Bearer ann-token")];
    // In one conversation (whose session outlives each request): calls of an unknown tool
    // run nothing, so they hold no admission and spend no token.
    let meta = json!({"io.toolhost/conversation": "ann-conversation-0001"});
    for tool in ["no-such-tool", "not-a-tool-either"] {
        let arguments = json!({});
        let params = json!({"name": tool, "arguments": arguments, "_meta": meta});
        let (status, _, answer) =
            modern_post(&server.url, "tools/call", Some(tool), params, &auth).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    }
    let params = json!({"name": "echo", "arguments": {"n": 1}, "_meta": meta});
    let (status, _, answer) =
        modern_post(&server.url, "tools/call", Some("echo"), params, &auth).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    // That one ran: the minute's call is spent.
    let (status, _, _) = call_as(&server.url, "ann-token", "echo", json!({"n": 2})).await;
    assert_eq!(status, 429);
}

/// A tool that asks, under `concurrent-calls = 1`, session-less: its follow-up is not a
/// second call (it answers the one that waits), so it completes; another call meanwhile is
/// refused. In this process, and counted in a fleet's Redis.
async fn a_follow_up_is_not_counted_as_a_second_call(
    fleet: Option<&crate::fleet_quotas::RedisServer>,
) {
    use crate::fleet_rounds::{ask, state};
    let fixture = crate::talk::fixture(crate::talk::GRANTS);
    let redis = fleet.map_or(String::new(), |r| {
        format!("[fleet]\nredis = \"{}\"\n\n", r.url())
    });
    let config = fixture.root().join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "schema-version = 1\n\n{redis}[[access.tokens]]\nname = \"alice\"\nenv = \"ALICE\"\n\n\
             [[access.quotas]]\nidentities = [\"alice\"]\nconcurrent-calls = 1\n"
        ),
    )
    .expect("toolhost.toml");
    let config = config.to_str().expect("utf-8");
    let server = HttpServer::start(&fixture, &["--config", config], &[("ALICE", "alice-token")]);
    let client = reqwest::Client::new();
    let first = ask(&client, &server.url, "alice-token", json!({})).await;
    let waiting = state(&first);
    // The waiting call holds the one call at once: another call is refused.
    let (status, _, answer) = crate::mcp_revisions::modern_post(
        &server.url,
        "tools/call",
        Some("ask_person"),
        json!({"name": "ask_person", "arguments": {"n": 1}}),
        &[("authorization", "Bearer alice-token")],
    )
    .await;
    assert_eq!(status, 429, "{answer}");
    let answer = json!({
        "requestState": waiting,
        "inputResponses": {"ask-1": {"action": "accept", "content": {"name": "Quota"}}},
    });
    let done = ask(&client, &server.url, "alice-token", answer).await;
    assert_eq!(
        done["result"]["content"][0]["text"], r#"accepted: {"name":"Quota"}"#,
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_under_calls_at_once_reaches_its_call_here_and_in_a_fleet() {
    a_follow_up_is_not_counted_as_a_second_call(None).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let redis = crate::fleet_quotas::RedisServer::start(scratch.path());
    a_follow_up_is_not_counted_as_a_second_call(Some(&redis)).await;
}
