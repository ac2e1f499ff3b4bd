//! Dedup a fleet shares (`[fleet] redis`): a conversation's identical call runs once whichever
//! replicas its requests reach, in flight at once or one after the other; another identity
//! with the same conversation id shares nothing; with Redis gone each replica answers from
//! its own memory and every call still runs.

use crate::fleet_quotas::RedisServer;
use crate::mcp::HttpServer;
use crate::mcp_revisions::modern_post;
use crate::support::Fixture;
use serde_json::{Value, json};
use std::time::Duration;

/// A `tools/call` of `tool` in the conversation `conversation`, by the bearer of `token`.
pub(crate) async fn call_in(
    url: String,
    token: &str,
    conversation: &str,
    tool: &str,
    arguments: Value,
) -> Value {
    let params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {"io.toolhost/conversation": conversation},
    });
    let auth = format!("Bearer {token}");
    let (status, _, answer) = modern_post(
        &url,
        "tools/call",
        Some(tool),
        params,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    answer
}

/// The audit records of `tool` calls by `identity` (the replicas share the fixture's log):
/// how many ran and how many were answered by dedup.
pub(crate) fn runs_of(fixture: &Fixture, identity: &str, tool: &str) -> (usize, usize) {
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .filter(|r: &Value| r["tool"] == tool && r["identity"]["name"] == identity)
        // A call its quota refused is recorded with whose it was, but it did not run.
        .filter(|r| {
            !r["outcome"]
                .as_str()
                .unwrap_or_default()
                .starts_with("refused-")
        })
        .collect();
    let deduplicated = records.iter().filter(|r| r["deduplicated"] == true).count();
    (records.len() - deduplicated, deduplicated)
}

/// Three replicas of the `sleep` tool on `redis`, each token of `tokens` (name, variable)
/// set to `<name>-token`, and `more` of `toolhost.toml`.
fn three_replicas(
    redis: &RedisServer,
    tokens: &[(&str, &str)],
    more: &str,
) -> (Fixture, Vec<HttpServer>) {
    let fixture = Fixture::new();
    fixture.write_slow(20000);
    let mut text = format!(
        "schema-version = 1\n\n[fleet]\nredis = \"{}\"\nredis-timeout-ms = 300\n\n",
        redis.url()
    );
    for (name, var) in tokens {
        text.push_str(&format!(
            "[[access.tokens]]\nname = \"{name}\"\nenv = \"{var}\"\n\n"
        ));
    }
    text.push_str(more);
    let config = fixture.root().join("toolhost.toml");
    std::fs::write(&config, text).expect("toolhost.toml");
    let config = config.to_str().expect("utf-8");
    let values: Vec<(String, String)> = (tokens.iter())
        .map(|(name, var)| (var.to_string(), format!("{name}-token")))
        .collect();
    let env: Vec<(&str, &str)> = (values.iter())
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let replicas = (0..3)
        .map(|_| HttpServer::start(&fixture, &["--config", config, "--no-watch"], &env))
        .collect();
    (fixture, replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_identical_call_runs_once_across_the_fleet() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut redis = RedisServer::start(scratch.path());
    let (fixture, replicas) = three_replicas(&redis, &[("ann", "ANN"), ("bob", "BOB")], "");
    let url = |n: usize| replicas[n].url.clone();
    let conversation = "a-conversation-of-anns-0001";
    let arguments = json!({"ms": 1500, "n": 1});

    // In flight at once on two replicas: one runs, the other waits for its result.
    let first = call_in(
        url(0),
        "ann-token",
        conversation,
        "sleep",
        arguments.clone(),
    );
    let second = async {
        crate::metrics::until_running(&url(0), Some("ann-token"), 1).await;
        call_in(
            url(1),
            "ann-token",
            conversation,
            "sleep",
            arguments.clone(),
        )
        .await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first["result"]["content"], second["result"]["content"]);
    assert_eq!(runs_of(&fixture, "ann", "sleep"), (1, 1));
    // Later, on a third replica: answered from the fleet's result.
    let third = call_in(
        url(2),
        "ann-token",
        conversation,
        "sleep",
        arguments.clone(),
    )
    .await;
    assert_eq!(first["result"]["content"], third["result"]["content"]);
    assert_eq!(runs_of(&fixture, "ann", "sleep"), (1, 2));
    // Another identity that knows the conversation id shares nothing of it.
    call_in(
        url(2),
        "bob-token",
        conversation,
        "sleep",
        arguments.clone(),
    )
    .await;
    assert_eq!(runs_of(&fixture, "bob", "sleep"), (1, 0));
    // Nor does another conversation of the same identity.
    let other = "another-conversation-0002";
    call_in(url(1), "ann-token", other, "sleep", arguments.clone()).await;
    assert_eq!(runs_of(&fixture, "ann", "sleep"), (2, 2));

    // Redis gone: each replica answers from its own memory; new calls run, none fails.
    redis.stop();
    let gone = json!({"ms": 1, "n": 2});
    call_in(url(0), "ann-token", conversation, "sleep", gone.clone()).await;
    call_in(url(1), "ann-token", conversation, "sleep", gone.clone()).await;
    call_in(url(1), "ann-token", conversation, "sleep", gone.clone()).await;
    assert_eq!(runs_of(&fixture, "ann", "sleep"), (4, 3));
}

/// The claims to run a call that the fleet's Redis holds now.
fn claims(redis: &RedisServer) -> Vec<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "--scan", "--pattern"])
        .arg("toolhost:dedup:*:claim")
        .output()
        .expect("redis-cli (Debian's redis-tools, beside redis-server)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_its_quota_refuses_in_a_conversation_claims_nothing_and_counts_nothing() {
    // The quota's admission and the fleet's dedup are asked together (one round trip): a
    // refusal must leave no claim that would hold the conversation's next identical call, and
    // take no token; a call answered from the fleet's result counts as a call.
    let scratch = tempfile::tempdir().expect("tempdir");
    let redis = RedisServer::start(scratch.path());
    let (fixture, replicas) = three_replicas(
        &redis,
        &[("dave", "DAVE"), ("carol", "CAROL")],
        "[[access.quotas]]\nidentities = [\"dave\"]\ncalls-per-minute = 3\nconcurrent-calls = 1\n",
    );
    let url = |n: usize| replicas[n].url.clone();
    let conversation = "a-conversation-of-daves-0001";
    let post = |n: usize, arguments: Value| {
        let url = url(n);
        async move {
            let params = json!({
                "name": "sleep",
                "arguments": arguments,
                "_meta": {"io.toolhost/conversation": conversation},
            });
            modern_post(
                &url,
                "tools/call",
                Some("sleep"),
                params,
                &[("authorization", "Bearer dave-token")],
            )
            .await
        }
    };
    let long = json!({"ms": 2500, "n": 1});
    let short = json!({"ms": 1, "n": 2});

    let running = tokio::spawn(post(0, long.clone()));
    crate::fleet_quotas::running_one_call(&url(0)).await;
    assert_eq!(claims(&redis).len(), 1, "the running call's claim");
    let (status, headers, answer) = post(1, short.clone()).await;
    assert_eq!(status, 429, "{answer}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    let said = answer["error_description"].as_str().unwrap_or_default();
    assert!(said.contains("1 calls at once"), "{answer}");
    let (status, _, answer) = running.await.expect("the long call");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    // Claims are given up in the background, just after the answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !claims(&redis).is_empty() {
        assert!(std::time::Instant::now() < deadline, "{:?}", claims(&redis));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The refused call now runs; the long one again is answered from the fleet: three calls
    // a minute, and the refused one was not counted.
    let (status, _, answer) = post(2, short.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let (status, _, answer) = post(1, long.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(runs_of(&fixture, "dave", "sleep"), (2, 1));
    let (status, _, answer) = post(2, json!({"ms": 1, "n": 3})).await;
    assert_eq!(status, 429, "{answer}");
    let said = answer["error_description"].as_str().unwrap_or_default();
    assert!(said.contains("3 calls a minute"), "{answer}");
    assert_eq!(
        runs_of(&fixture, "dave", "sleep"),
        (2, 1),
        "refusals are not runs"
    );
}
