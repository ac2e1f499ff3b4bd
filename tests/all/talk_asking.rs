//! Tools that ask the MCP client: sampling the client's model and asking the person for a form,
//! each only when granted (an ungranted capability is a file:line error), bounded per call, the
//! answer checked against the form, and a silent person ended at the call's timeout. At
//! 2026-07-28 the same tools ask in rounds: `talk_rounds`.

use crate::mcp::{call, configure};
use crate::talk::{Answer, GRANTS, Talker, fixture, start, text};
use serde_json::json;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_asks_the_clients_model_only_when_granted_and_bounded() {
    let fixture = fixture(GRANTS);
    let talker = Talker::default();
    let sampled = talker.sampled.clone();
    let client = start(&fixture, talker).await;
    let once = call(
        &client,
        "ask_model",
        json!({"prompt": "capital of France?"}),
    )
    .await;
    assert_eq!(text(&once), "answer to capital of France? (test-model)");

    let ungranted = call(&client, "ask_model_ungranted", json!({})).await;
    assert!(
        text(&ungranted).starts_with("not-granted: sampling is not granted"),
        "{}",
        text(&ungranted)
    );

    sampled.store(0, Ordering::SeqCst);
    let looping = call(&client, "ask_model", json!({"times": 50})).await;
    let lines: Vec<String> = text(&looping).lines().map(str::to_string).collect();
    let limit = toolhost::contract::SAMPLES_PER_CALL as usize;
    assert_eq!(lines.len(), limit + 1, "{lines:?}");
    assert!(lines[limit].starts_with("limit-reached: a call may sample at most 8 times"));
    assert_eq!(sampled.load(Ordering::SeqCst), limit);
    client.cancel().await.expect("close");

    // A client that did not declare sampling is never sent the request.
    let plain = Talker {
        plain: true,
        ..Talker::default()
    };
    let sampled = plain.sampled.clone();
    let client = start(&fixture, plain).await;
    let refused = call(&client, "ask_model", json!({})).await;
    assert!(
        text(&refused)
            .starts_with("unsupported: the client did not declare the sampling capability"),
        "{}",
        text(&refused)
    );
    let person = call(&client, "ask_person", json!({})).await;
    assert!(text(&person).starts_with("unsupported: the client did not declare the elicitation"));
    assert_eq!(sampled.load(Ordering::SeqCst), 0);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_asks_the_person_with_a_form_and_a_silent_person_ends_at_the_timeout() {
    let fixture = fixture(GRANTS);
    let client = start(&fixture, Talker::default()).await;
    let accepted = call(&client, "ask_person", json!({})).await;
    assert_eq!(text(&accepted), r#"accepted: {"name":"Ada"}"#);
    let bad = call(&client, "ask_badly", json!({})).await;
    assert!(
        text(&bad).starts_with("failed: the requested schema is not one MCP elicitation allows"),
        "{}",
        text(&bad)
    );
    let forever = call(&client, "ask_forever", json!({})).await;
    assert!(
        text(&forever).starts_with("asked 4 times, then limit-reached"),
        "{}",
        text(&forever)
    );
    client.cancel().await.expect("close");

    let declining = Talker {
        answer: Answer::Decline,
        ..Talker::default()
    };
    let client = start(&fixture, declining).await;
    assert_eq!(
        text(&call(&client, "ask_person", json!({})).await),
        "declined"
    );
    client.cancel().await.expect("close");

    // A client's answer is checked against the form it was sent: the tool gets `failed`.
    let misfit = Talker {
        answer: Answer::Misfit,
        ..Talker::default()
    };
    let client = start(&fixture, misfit).await;
    let refused = text(&call(&client, "ask_person", json!({})).await);
    assert!(
        refused.starts_with("failed: the answer does not fit the requested schema at /name:"),
        "{refused}"
    );
    client.cancel().await.expect("close");

    // Properties the form did not ask for never reach the tool, named in the failure.
    let extra = Talker {
        answer: Answer::Extra,
        ..Talker::default()
    };
    let client = start(&fixture, extra).await;
    let refused = text(&call(&client, "ask_person", json!({})).await);
    assert!(
        refused.starts_with(
            "failed: the answer does not fit the requested schema at /isAdmin: the form did not ask"
        ),
        "{refused}"
    );
    client.cancel().await.expect("close");

    let silent = Talker {
        answer: Answer::Never,
        ..Talker::default()
    };
    let client = start(&fixture, silent).await;
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        call(&client, "ask_person", json!({})),
    )
    .await
    .expect("the call ends by itself");
    assert_eq!(waited.is_error, Some(true));
    assert!(text(&waited).starts_with("timeout:"), "{}", text(&waited));
    // The question the timeout abandoned is withdrawn at the client, not left open.
    let withdrawn = async {
        loop {
            if let Some(param) = client
                .service()
                .cancelled
                .lock()
                .expect("cancelled")
                .first()
            {
                return param.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let param = tokio::time::timeout(Duration::from_secs(30), withdrawn)
        .await
        .expect("notifications/cancelled for the abandoned question");
    assert!(param.request_id.is_some(), "{param:?}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_sampling_or_elicitation_the_ensemble_does_not_grant_is_a_file_line_error() {
    let fixture = fixture("");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let out = command.arg("check").output().expect("check");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stdout);
    assert!(
        stderr.contains(
            "invoker `ask_model` asks for sampling, which ensemble `talker` does not grant"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("talker.toml:"), "{stderr}");
    assert!(stderr.contains("asks for elicitation"), "{stderr}");
}
