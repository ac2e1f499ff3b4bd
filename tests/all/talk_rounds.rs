//! Tools that ask, at 2026-07-28 (SEP-2322): a call that samples the client's model or asks
//! the person answers `input_required`, parked here, and the client's follow-up (the same
//! `tools/call` with `inputResponses` and the `requestState`) goes on with it. rmcp's client
//! drives the rounds itself; the rest is driven one round at a time: a follow-up without the
//! answer is asked again, one for another call or from another instance is refused, a state
//! used up is refused, a call whose follow-up comes after its timeout ends with its timeout,
//! and a caller's parked calls are bounded. The official Python SDK answers the same tools at
//! both revisions, over stdio and HTTP.

use crate::mcp::{call, stdio_serve};
use crate::support::{Fixture, ensemble};
use crate::talk::{GRANTS, Talker, text, wait_for};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, InputRequest, InputResponses, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// A connection at 2026-07-28, no handshake.
async fn stateless(fixture: &Fixture, talker: Talker) -> RunningService<RoleClient, Talker> {
    let client = talker
        .serve_with_lifecycle(
            stdio_serve(fixture),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 connection");
    assert_eq!(
        client.peer_info().expect("discovered").protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_2026_07_28_a_tool_samples_and_asks_in_rounds_that_rmcps_client_drives() {
    let fixture = crate::talk::fixture(GRANTS);
    let talker = Talker::default();
    let (reports, sampled) = (talker.progress.clone(), talker.sampled.clone());
    let client = stateless(&fixture, talker).await;
    assert_eq!(
        text(&call(&client, "report", json!({"steps": 2})).await),
        "reported 2"
    );
    wait_for(&reports, 2).await;
    let once = call(
        &client,
        "ask_model",
        json!({"prompt": "capital of France?"}),
    )
    .await;
    assert_eq!(text(&once), "answer to capital of France? (test-model)");
    assert_eq!(
        text(&call(&client, "ask_person", json!({})).await),
        r#"accepted: {"name":"Ada"}"#
    );
    // Four questions, four rounds, then the call's own bound.
    let forever = call(&client, "ask_forever", json!({})).await;
    assert!(
        text(&forever).starts_with("asked 4 times, then limit-reached"),
        "{}",
        text(&forever)
    );
    assert_eq!(sampled.load(Ordering::SeqCst), 1);
    client.cancel().await.expect("close");

    // A client that declares neither is never asked.
    let plain = Talker {
        plain: true,
        ..Talker::default()
    };
    let client = stateless(&fixture, plain).await;
    let refused = text(&call(&client, "ask_model", json!({})).await);
    assert!(
        refused.starts_with("unsupported: the client did not declare the sampling capability"),
        "{refused}"
    );
    let refused = text(&call(&client, "ask_person", json!({})).await);
    assert!(
        refused.starts_with("unsupported: the client did not declare the elicitation"),
        "{refused}"
    );
    client.cancel().await.expect("close");
}

/// The talker's `ask_person` with a long timeout (parked calls outlast the test's rounds)
/// and room for more calls at once than a caller may park (a parked call holds its place
/// among the invoker's `max-concurrency`), and a short one for a follow-up that comes too
/// late.
fn fixture() -> Fixture {
    let fixture = Fixture::new();
    std::fs::copy(toolhost_testkit::TALKER, fixture.root().join("talker.wasm")).expect("copy");
    let invokers = "[defaults]\ntimeout-ms = 60000\n\n\
        [[invokers]]\nname = \"ask_person\"\ncapabilities = { elicitation = true }\n\
        limits = { max-concurrency = 16 }\n\n\
        [[invokers]]\nname = \"ask_briefly\"\ntool = \"ask_person\"\n\
        capabilities = { elicitation = true }\nlimits = { timeout-ms = 300 }\n";
    fixture.write(
        "talker.toml",
        &ensemble("talker", "talker", &format!("{GRANTS}\n{invokers}")),
    );
    fixture
}

/// One round of `tools/call` of `tool`, with `answers` under `state`.
async fn round(
    client: &RunningService<RoleClient, Talker>,
    tool: &str,
    arguments: Value,
    state: Option<&str>,
    answers: Option<Value>,
) -> Result<CallToolResponse, String> {
    let mut params = CallToolRequestParams::new(tool.to_string())
        .with_arguments(arguments.as_object().expect("an object").clone());
    if let Some(state) = state {
        params = params.with_request_state(state);
    }
    if let Some(answers) = answers {
        let answers: InputResponses = serde_json::from_value(answers).expect("responses");
        params = params.with_input_responses(answers);
    }
    client
        .peer()
        .call_tool_once(params)
        .await
        .map_err(|e| e.to_string())
}

/// The question and state of an `input_required` answer.
fn asked(response: Result<CallToolResponse, String>) -> (String, InputRequest, String) {
    match response {
        Ok(CallToolResponse::InputRequired(result)) => {
            let requests = result.input_requests.expect("requests");
            let (key, request) = requests.into_iter().next().expect("one request");
            (key, request, result.request_state.expect("a state"))
        }
        other => panic!("not input_required: {other:?}"),
    }
}

fn completed(response: Result<CallToolResponse, String>) -> String {
    match response {
        Ok(CallToolResponse::Complete(result)) => text(&result),
        other => panic!("not complete: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_round_is_checked_and_parked_calls_are_bounded() {
    let fixture = fixture();
    let client = stateless(&fixture, Talker::default()).await;
    let (key, request, state) = asked(round(&client, "ask_person", json!({}), None, None).await);
    assert_eq!(key, "ask-1");
    assert!(
        matches!(request, InputRequest::Elicitation(_)),
        "{request:?}"
    );

    // Without the answer: asked again, under the same state.
    let again = asked(round(&client, "ask_person", json!({}), Some(&state), None).await);
    assert_eq!(
        (again.0.as_str(), again.2.as_str()),
        ("ask-1", state.as_str())
    );
    // Another call's follow-up, or another instance's state, is refused and takes nothing.
    let other = round(&client, "ask_person", json!({"x": 1}), Some(&state), None).await;
    assert!(
        other
            .as_ref()
            .is_err_and(|e| e.contains("belongs to another call")),
        "{other:?}"
    );
    let elsewhere = round(
        &client,
        "ask_person",
        json!({}),
        Some("0badc0de.1234"),
        None,
    )
    .await;
    assert!(
        elsewhere
            .as_ref()
            .is_err_and(|e| e.contains("started on another toolhost instance")),
        "{elsewhere:?}"
    );
    // The answer goes on with the call, to its result.
    let answer = json!({"ask-1": {"action": "accept", "content": {"name": "Grace"}}});
    let done = completed(
        round(
            &client,
            "ask_person",
            json!({}),
            Some(&state),
            Some(answer.clone()),
        )
        .await,
    );
    assert_eq!(done, r#"accepted: {"name":"Grace"}"#);
    // The arguments may come back with their keys in another order.
    let (_, _, ordered) = asked(
        round(
            &client,
            "ask_person",
            json!({"a": 1, "b": [2, {"c": 3, "d": 4}]}),
            None,
            None,
        )
        .await,
    );
    let answer_too = json!({"ask-1": {"action": "decline"}});
    let reordered = json!({"b": [2, {"d": 4, "c": 3}], "a": 1});
    let done_too = completed(
        round(
            &client,
            "ask_person",
            reordered,
            Some(&ordered),
            Some(answer_too),
        )
        .await,
    );
    assert_eq!(done_too, "declined");
    // A state is used once.
    let used = round(
        &client,
        "ask_person",
        json!({}),
        Some(&state),
        Some(answer.clone()),
    )
    .await;
    assert!(
        used.as_ref()
            .is_err_and(|e| e.contains("no call is waiting under this requestState")),
        "{used:?}"
    );

    // A follow-up after the call's own timeout gets the timeout.
    let (_, _, late) = asked(round(&client, "ask_briefly", json!({}), None, None).await);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let answer_late = json!({"ask-1": {"action": "accept", "content": {"name": "Late"}}});
    let ended = completed(
        round(
            &client,
            "ask_briefly",
            json!({}),
            Some(&late),
            Some(answer_late),
        )
        .await,
    );
    assert!(ended.starts_with("timeout:"), "{ended}");

    // One caller parks at most 8 calls; the ninth's question is answered limit-reached.
    let mut states = Vec::new();
    for n in 0..8 {
        let (_, _, state) = asked(round(&client, "ask_person", json!({"n": n}), None, None).await);
        states.push(state);
    }
    let ninth = completed(round(&client, "ask_person", json!({"n": 8}), None, None).await);
    assert!(
        ninth.starts_with("limit-reached: 8 calls are waiting for their clients' answers"),
        "{ninth}"
    );
    // Answering one makes room again.
    let answer = json!({"ask-1": {"action": "decline"}});
    let declined = completed(
        round(
            &client,
            "ask_person",
            json!({"n": 0}),
            Some(&states[0]),
            Some(answer),
        )
        .await,
    );
    assert_eq!(declined, "declined");
    let (_, _, _) = asked(round(&client, "ask_person", json!({"n": 9}), None, None).await);
    client.cancel().await.expect("close");
}

#[test]
fn the_python_sdk_answers_a_tools_questions_at_both_revisions_over_stdio_and_http() {
    use crate::mcp::HttpServer;
    use crate::mcp_revisions::python_client;
    let fixture = crate::talk::fixture(GRANTS);
    let server = HttpServer::start(&fixture, &[], &[]);
    for (mode, expected) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        for target in ["stdio", "http"] {
            let answer = python_client(&fixture, "asks.py", mode, target, &server);
            assert_eq!(
                answer["protocol_version"],
                json!(expected),
                "{mode} {target}"
            );
            assert_eq!(
                answer["model"],
                json!("Paris (python-model)"),
                "{mode} {target}"
            );
            assert_eq!(
                answer["person"],
                json!(r#"accepted: {"name":"python"}"#),
                "{mode} {target}"
            );
        }
    }
}
