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
async fn call_in(
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
fn runs_of(fixture: &Fixture, identity: &str, tool: &str) -> (usize, usize) {
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .filter(|r: &Value| r["tool"] == tool && r["identity"]["name"] == identity)
        .collect();
    let deduplicated = records.iter().filter(|r| r["deduplicated"] == true).count();
    (records.len() - deduplicated, deduplicated)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_identical_call_runs_once_across_the_fleet() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut redis = RedisServer::start(scratch.path());
    let fixture = Fixture::new();
    fixture.write_slow(20000);
    let config = fixture.root().join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "schema-version = 1\n\n[fleet]\nredis = \"{}\"\nredis-timeout-ms = 300\n\n\
             [[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
             [[access.tokens]]\nname = \"bob\"\nenv = \"BOB\"\n",
            redis.url()
        ),
    )
    .expect("toolhost.toml");
    let config = config.to_str().expect("utf-8");
    let env = [("ANN", "ann-token"), ("BOB", "bob-token")];
    let replicas: Vec<HttpServer> = (0..3)
        .map(|_| HttpServer::start(&fixture, &["--config", config, "--no-watch"], &env))
        .collect();
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
        tokio::time::sleep(Duration::from_millis(400)).await;
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
