//! A tool that asks, at 2026-07-28, behind a load balancer: the call waits on the replica
//! that runs it, under a `requestState` that names that replica. With affinity by the
//! client's `Authorization` header (haproxy `balance hdr(Authorization)`) every follow-up
//! reaches it and the rounds complete; with round robin a follow-up that reaches the other
//! replica is answered with an error that says so, and the waiting call is untouched, as it
//! is by another caller's follow-up with its state. One transport parks at most 32 calls,
//! whoever asks.

use crate::fleet::Haproxy;
use crate::mcp::HttpServer;
use crate::talk::GRANTS;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// One 2026-07-28 `tools/call` of the talker's `ask_person` (arguments `{"n": 0}` unless
/// `more` says others) by the client `who` (its `Authorization`), declaring elicitation,
/// with `more` params (a state, answers).
pub(crate) async fn ask(client: &reqwest::Client, url: &str, who: &str, more: Value) -> Value {
    try_ask(client, url, who, more)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`ask`], or why there is no answer (the balancer not listening yet, say).
pub(crate) async fn try_ask(
    client: &reqwest::Client,
    url: &str,
    who: &str,
    more: Value,
) -> Result<Value, String> {
    try_ask_with(client, url, who, more, &[]).await
}

/// [`try_ask`] with more `headers`.
pub(crate) async fn try_ask_with(
    client: &reqwest::Client,
    url: &str,
    who: &str,
    more: Value,
    headers: &[(&str, &str)],
) -> Result<Value, String> {
    let mut params = json!({
        "name": "ask_person",
        "arguments": {"n": 0},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "fleet", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        },
    });
    for (key, value) in more.as_object().expect("an object") {
        params[key] = value.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let mut request = client.post(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let text = request
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "ask_person")
        .header("authorization", format!("Bearer {who}"))
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("POST /mcp: {e}"))?
        .text()
        .await
        .map_err(|e| format!("the answer: {e}"))?;
    crate::support::answer_of(&text).ok_or_else(|| format!("no JSON-RPC answer in {text}"))
}

/// The first round of `who`'s call through `url`, once the balancer passes requests (its
/// first health checks take a moment).
pub(crate) async fn first_round(client: &reqwest::Client, url: &str, who: &str, n: u32) -> Value {
    let started = Instant::now();
    loop {
        match try_ask(client, url, who, json!({"arguments": {"n": n}})).await {
            Ok(first) if first.get("result").is_some() => return first,
            other => assert!(
                started.elapsed() < Duration::from_secs(60),
                "the balancer never passed a call: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `requestState` of an `input_required` answer.
pub(crate) fn state(answer: &Value) -> String {
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    answer["result"]["requestState"]
        .as_str()
        .expect("a state")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_reaches_its_call_with_affinity_and_is_told_plainly_without() {
    let fixture = crate::talk::fixture(GRANTS);
    let replicas: Vec<HttpServer> = (0..2)
        .map(|n| {
            let status = fixture.root().join(format!("status-{n}.json"));
            let status = status.display().to_string();
            HttpServer::start(&fixture, &[], &[("TOOLHOST_STATUS_FILE", &status)])
        })
        .collect();
    let addresses = crate::fleet::addresses(&replicas);
    let client = reqwest::Client::new();
    let answer =
        json!({"inputResponses": {"ask-1": {"action": "accept", "content": {"name": "Fleet"}}}});

    // Affinity by the Authorization header: each client's rounds reach its replica.
    let sticky = Haproxy::balancing(fixture.root(), &addresses, "hdr(Authorization)");
    for who in ["alice", "bob", "carol"] {
        let first = first_round(&client, &sticky.url, who, 0).await;
        let mut more = answer.clone();
        more["requestState"] = json!(state(&first));
        let done = ask(&client, &sticky.url, who, more).await;
        assert_eq!(
            done["result"]["content"][0]["text"], r#"accepted: {"name":"Fleet"}"#,
            "{who}: {done}"
        );
    }

    // Round robin: the follow-ups alternate between the replicas. The one that holds the call
    // asks again (no answer was sent); the other says where the call is, and takes nothing.
    let rotating = Haproxy::balancing(fixture.root(), &addresses, "roundrobin");
    let first = first_round(&client, &rotating.url, "dave", 0).await;
    let waiting = state(&first);
    let mut told = Vec::new();
    for _ in 0..2 {
        let again = ask(
            &client,
            &rotating.url,
            "dave",
            json!({"requestState": waiting}),
        )
        .await;
        told.push(match again.get("error") {
            Some(error) => error["message"].as_str().unwrap_or_default().to_string(),
            None => format!("asked again under {}", state(&again)),
        });
    }
    told.sort();
    assert_eq!(told[0], format!("asked again under {waiting}"), "{told:?}");
    assert!(
        told[1].contains("names a call started on another toolhost instance"),
        "{told:?}"
    );

    // Another caller with the state, straight to each replica: the one that holds the call
    // refuses it to them (the call waits on for dave), the other says it is not there.
    let mut refusals = Vec::new();
    for replica in &replicas {
        let stolen = ask(
            &client,
            &replica.url,
            "eve",
            json!({"requestState": waiting}),
        )
        .await;
        refusals.push(
            stolen["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    refusals.sort();
    assert!(
        refusals[0].contains("belongs to another call"),
        "{refusals:?}"
    );
    assert!(
        refusals[1].contains("another toolhost instance"),
        "{refusals:?}"
    );
    let mut more = answer.clone();
    more["requestState"] = json!(waiting);
    for replica in &replicas {
        let done = ask(&client, &replica.url, "dave", more.clone()).await;
        if done.get("result").is_some() {
            assert_eq!(
                done["result"]["content"][0]["text"],
                r#"accepted: {"name":"Fleet"}"#
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transport_parks_at_most_32_calls_whoever_asks() {
    let fixture = crate::support::Fixture::new();
    std::fs::copy(toolhost_testkit::TALKER, fixture.root().join("talker.wasm")).expect("copy");
    let invokers = "[defaults]\ntimeout-ms = 60000\n\n[[invokers]]\nname = \"ask_person\"\n\
        capabilities = { elicitation = true }\nlimits = { max-concurrency = 64 }\n";
    fixture.write(
        "talker.toml",
        &crate::support::ensemble("talker", "talker", &format!("{GRANTS}\n{invokers}")),
    );
    let server = HttpServer::start(&fixture, &[], &[]);
    let client = reqwest::Client::new();
    // Four callers park 8 calls each: the transport's 32.
    for caller in 0..4 {
        for n in 0..8 {
            let first = first_round(&client, &server.url, &format!("caller-{caller}"), n).await;
            state(&first);
        }
    }
    // A fifth caller's question is answered `limit-reached`, and its call goes on to its end.
    let fifth = first_round(&client, &server.url, "caller-4", 0).await;
    let text = fifth["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("limit-reached: 32 calls are waiting for their clients' answers"),
        "{fifth}"
    );
}
