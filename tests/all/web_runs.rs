//! A web chat run that waits on the person or loses its client: approvals come back by a
//! request naming the call (allowed, denied, allowed for all), an approval nobody answers times
//! out, and a dropped connection ends its run and cancels the call in flight, audited.

use crate::scripted::openai;
use crate::support::ensemble;
use crate::web::{DEADLINE, Events, Host, chat, get, host, post_json, say};
use serde_json::{Value, json};
use std::time::Duration;

/// Drops a run's stream (the client goes away), then waits until the run ended and was kept;
/// answers the stored conversation.
async fn drop_and_wait(events: Events, api: &str, id: &str) -> Value {
    drop(events);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (_, kept) = get(&format!("{api}/{id}")).await;
        if kept["running"] == false && kept["log"].as_array().is_some_and(|l| !l.is_empty()) {
            return kept;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_come_back_by_a_request_naming_the_call() {
    let Host {
        model,
        fixture: _fixture,
        server: _server,
        api,
    } = host(
        vec![
            say("a1", "first"),
            openai::text("Said it."),
            say("d1", "second"),
            openai::text("Not allowed."),
            say("all1", "third"),
            say("all2", "fourth"),
            openai::text("Said both."),
        ],
        "",
    );

    // Allowed: it runs.
    let mut events = chat(&api, json!({"message": "Say hi"})).await;
    let first = events.until("approval_request").await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    let request = first.last().expect("request");
    assert_eq!(request["id"], "a1");
    assert_eq!(request["tool"], "say");
    assert_eq!(request["ensemble"], "danger");
    assert_eq!(request["arguments"], json!({"text": "first"}));
    let decide = |call: &str, decision: &str| {
        let url = format!("{api}/{id}/approvals/{call}");
        let body = json!({ "decision": decision });
        async move { post_json(&url, body).await }
    };
    assert_eq!(decide("nope", "allow").await.0, 404, "no such call");
    assert_eq!(decide("a1", "maybe").await.0, 400, "no such decision");
    assert_eq!(decide("a1", "allow").await.0, 204);
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(result["outcome"], "ok", "{rest:#?}");
    assert_eq!(result["content"], "first");
    assert!(
        rest.iter()
            .any(|e| e["type"] == "approval" && e["decision"] == "allow")
    );

    // Denied: the model reads that it was refused.
    let mut events = chat(&format!("{api}/{id}/messages"), json!({"message": "Again"})).await;
    events.until("approval_request").await;
    assert_eq!(decide("d1", "deny").await.0, 204);
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(result["outcome"], "denied");
    assert_eq!(result["is_error"], true);
    let sent = model.requests()[3].body.to_string();
    assert!(sent.contains("refused to run"), "{sent}");

    // Allowed for all: the next call of the tool runs without asking.
    let mut events = chat(&format!("{api}/{id}/messages"), json!({"message": "Twice"})).await;
    events.until("approval_request").await;
    assert_eq!(decide("all1", "allow-all").await.0, 204);
    let rest = events.rest().await;
    let asked = rest
        .iter()
        .filter(|e| e["type"] == "approval_request")
        .count();
    assert_eq!(asked, 0, "the second call was asked about: {rest:#?}");
    let results: Vec<&Value> = rest.iter().filter(|e| e["type"] == "tool_result").collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["outcome"] == "ok"), "{rest:#?}");
    let (_, kept) = get(&format!("{api}/{id}")).await;
    assert_eq!(kept["allowed_tools"], json!(["say"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_ends_its_run_and_an_unanswered_approval_times_out() {
    let Host {
        model: _model,
        fixture,
        server: _server,
        api,
    } = host(
        vec![
            say("gone1", "never"),
            say("late1", "never either"),
            openai::text("Understood."),
        ],
        "approval-timeout-s = 1",
    );

    let mut events = chat(&api, json!({"message": "Say it"})).await;
    let first = events.until("approval_request").await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    // The run ends as cancelled, its approval refused as `gone`, and the conversation kept.
    let kept = drop_and_wait(events, &api, &id).await;
    let log = kept["log"].as_array().expect("log");
    assert!(
        log.iter()
            .any(|e| e["type"] == "approval" && e["decision"] == "gone"),
        "{log:#?}"
    );
    assert_eq!(log.last().expect("done")["ending"], "cancelled");
    assert!(
        std::fs::read_to_string(fixture.root().join("audit.jsonl"))
            .expect("audit")
            .contains("\"denied\"")
    );

    // Nobody answers: refused after approval-timeout-s, and the model goes on.
    let events = chat(&format!("{api}/{id}/messages"), json!({"message": "Again"}))
        .await
        .rest()
        .await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "approval" && e["decision"] == "timeout"),
        "{events:#?}"
    );
    let done = events.last().expect("done");
    assert_eq!(done["text"], "Understood.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_cancels_the_call_in_flight() {
    let Host {
        model: _model,
        fixture,
        server: _server,
        api,
    } = host(
        vec![openai::stream("", &[("s1", "sleep", r#"{"ms": 600000}"#)])],
        "",
    );
    fixture.write(
        "slow.toml",
        &ensemble(
            "slow",
            "testbed",
            "[defaults]\ntimeout-ms = 3600000\n\n[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    );
    // The new ensemble is in the catalog before the model asks for it.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !get(&api.replace("conversations", "catalog"))
        .await
        .1
        .to_string()
        .contains("\"sleep\"")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "slow.toml never loaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut events = chat(&api, json!({"message": "Wait"})).await;
    let first = events.until("tool_call").await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    // Long before the tool's ten minutes: the call ended as cancelled, audited, and kept.
    let kept = drop_and_wait(events, &api, &id).await;
    let log = kept["log"].as_array().expect("log");
    let result = log
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a result");
    assert_eq!(result["outcome"], "cancelled", "{log:#?}");
    assert_eq!(log.last().expect("done")["ending"], "cancelled");
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"sleep\"") && l.contains("cancelled")),
        "{audit}"
    );
}
