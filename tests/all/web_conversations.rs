//! The web chat's conversations over its HTTP API against scripted providers: a run's events
//! streamed in order, a conversation continued, kept across a restart and deleted, requests held
//! to what `[chat]` permits, a question answered by a message naming it, and 50 conversations at
//! once with no event lost or misrouted.

use crate::scripted::{Scripted, openai};
use crate::web::{Host, base, chat, fixture, get, host, post_json, serve};
use serde_json::{Value, json};

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_its_events_in_order_and_the_conversation_survives_a_restart() {
    let Host {
        model,
        fixture,
        server,
        api,
    } = host(
        vec![
            openai::stream(
                "Computing.",
                &[("c1", "calculate", r#"{"expression": "40 + 2"}"#)],
            ),
            openai::text("It is 42."),
            openai::text("Still 42."),
        ],
        "",
    );
    let events = chat(&api, json!({"message": "What is 40 + 2?"}))
        .await
        .rest()
        .await;
    let kinds = types(&events);
    assert_eq!(kinds[0], "conversation", "{events:#?}");
    let at = |kind: &str| kinds.iter().position(|k| *k == kind).expect(kind);
    assert!(at("tool_call") < at("tool_result") && at("tool_result") < kinds.len() - 1);
    assert_eq!(*kinds.last().expect("events"), "done");
    let result = &events[at("tool_result")];
    assert_eq!(result["id"], "c1");
    assert_eq!(result["outcome"], "ok");
    assert_eq!(result["deduplicated"], false);
    assert!(result["duration_ms"].as_f64().expect("duration") > 0.0);
    assert!(result["content"].as_str().expect("content").contains("42"));
    let done = events.last().expect("done");
    assert_eq!(done["ending"], "answer");
    assert_eq!(done["text"], "It is 42.");
    assert_eq!(done["iterations"], 2);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "text_delta")
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(text, "Computing.It is 42.");
    // tool_choice went out explicitly.
    assert_eq!(model.requests()[0].body["tool_choice"], "auto");

    let id = events[0]["id"].as_str().expect("id").to_string();
    let (status, list) = get(&api).await;
    assert_eq!(status, 200);
    assert_eq!(list["conversations"][0]["id"], id.as_str());
    assert_eq!(list["conversations"][0]["title"], "What is 40 + 2?");
    assert_eq!(list["conversations"][0]["running"], false);

    // Continued by id: the model sees the whole conversation.
    let more = chat(&format!("{api}/{id}/messages"), json!({"message": "Sure?"}))
        .await
        .rest()
        .await;
    assert_eq!(more.last().expect("done")["text"], "Still 42.");
    assert_eq!(
        model.requests()[2].body["messages"]
            .as_array()
            .expect("messages")
            .len(),
        5,
        "user, assistant with call, tool result, assistant, user"
    );

    // A restart keeps it: the log is what the page shows.
    drop(server);
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));
    let (status, kept) = get(&format!("{api}/{id}")).await;
    assert_eq!(status, 200, "{kept}");
    let log: Vec<&str> = kept["log"]
        .as_array()
        .expect("log")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        log,
        [
            "user",
            "text",
            "tool_call",
            "tool_result",
            "text",
            "done",
            "user",
            "text",
            "done"
        ]
    );
    assert_eq!(kept["log"][1]["text"], "Computing.");
    assert_eq!(kept["messages"].as_array().expect("messages").len(), 6);

    let deleted = reqwest::Client::new()
        .delete(format!("{api}/{id}"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(deleted.status(), 204);
    assert_eq!(get(&format!("{api}/{id}")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_held_to_what_chat_permits() {
    let Host {
        model,
        fixture: _fixture,
        server,
        api,
    } = host(vec![], "max-iterations = 4\nmodels = [\"other\"]");
    for (body, expected) in [
        (
            json!({"message": "x", "max_iterations": 5}),
            "/max_iterations: 5 is outside 1 to 4",
        ),
        (json!({"message": "x", "model": "gpt-9"}), "/model: `gpt-9`"),
        (
            json!({"message": "x", "tool_choice": "always"}),
            "/tool_choice: `always`",
        ),
        (
            json!({"message": "x", "max_iterations": "many"}),
            "max_iterations",
        ),
        (
            json!({"message": "x", "colour": 1}),
            "unknown field `colour`",
        ),
        (json!({"message": "  "}), "/message: the message is empty"),
        (json!({"text": "x"}), "unknown field `text`"),
        (json!({}), "missing field `message`"),
        (json!({"message": "x", "reply_to": "q1"}), "/reply_to"),
    ] {
        let (status, answer) = post_json(&api, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer["error"].as_str().expect("error");
        assert!(message.contains(expected), "{body}: {message}");
    }
    assert_eq!(get(&format!("{api}/missing")).await.0, 404);
    let (status, _) = post_json(&format!("{api}/missing/messages"), json!({"message": "x"})).await;
    assert_eq!(status, 404);
    let (status, settings) = get(&format!("{}/api/settings", base(&server))).await;
    assert_eq!(status, 200);
    assert_eq!(settings["chat"], true);
    assert_eq!(settings["model"], "scripted-model");
    assert_eq!(settings["models"], json!(["other"]));
    assert_eq!(settings["tool_choice"], "auto");
    assert!(model.requests().is_empty(), "no model call was made");
}

/// A model that answers each conversation from its own words: a call of `calculate` with the
/// number the user sent, then a text naming the number and the tool's result. Answers whole
/// (not streamed), from any number of connections at once.
struct EchoModel {
    url: String,
    _server: tokio::task::JoinHandle<()>,
}

impl EchoModel {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("address"));
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(|body: axum::Json<Value>| async move {
                let messages = body["messages"].as_array().cloned().unwrap_or_default();
                let number = messages
                    .iter()
                    .find(|m| m["role"] == "user")
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or_default()
                    .to_string();
                let last = messages.last().cloned().unwrap_or_default();
                let message = if last["role"] == "tool" {
                    json!({"role": "assistant", "content": format!("{number} -> {}", last["content"].as_str().unwrap_or_default())})
                } else {
                    json!({"role": "assistant", "content": null, "tool_calls": [{
                        "id": format!("call-{number}"), "type": "function",
                        "function": {"name": "calculate", "arguments": json!({"expression": format!("{number} + 0")}).to_string()}
                    }]})
                };
                axum::Json(json!({
                    "id": "echo", "object": "chat.completion", "created": 1, "model": "echo",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1}
                }))
            }),
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        EchoModel {
            url,
            _server: server,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_conversations_at_once_lose_and_misroute_no_event() {
    let model = EchoModel::start().await;
    let fixture = fixture(&model.url, "stream = false\nmax-runs = 64");
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));
    let runs = (0..50).map(|n| {
        let api = api.clone();
        tokio::spawn(async move {
            let number = 1000 + n;
            let events = chat(&api, json!({"message": number.to_string()}))
                .await
                .rest()
                .await;
            (number, events)
        })
    });
    let mut ids = std::collections::HashSet::new();
    for run in runs {
        let (number, events) = run.await.expect("run");
        assert_eq!(
            types(&events),
            [
                "conversation",
                "tool_call",
                "tool_result",
                "text_delta",
                "done"
            ],
            "{number}: {events:#?}"
        );
        assert!(ids.insert(events[0]["id"].as_str().expect("id").to_string()));
        assert_eq!(events[1]["id"], format!("call-{number}"));
        assert_eq!(events[2]["id"], format!("call-{number}"));
        assert_eq!(events[2]["outcome"], "ok");
        let result = events[2]["content"].as_str().expect("content");
        assert!(result.contains(&number.to_string()), "{number}: {result}");
        let done = events[4]["text"].as_str().expect("text");
        assert!(
            done.starts_with(&format!("{number} -> ")),
            "{number}: {done}"
        );
    }
    let (_, list) = get(&api).await;
    assert_eq!(list["conversations"].as_array().expect("list").len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_by_a_message_naming_it() {
    let model = Scripted::start(vec![
        openai::stream(
            "",
            &[("q1", "ask_question", r#"{"question": "Which number?"}"#)],
        ),
        openai::text("Then 7."),
    ]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));
    let events = chat(&api, json!({"message": "Pick for me"}))
        .await
        .rest()
        .await;
    let question = events
        .iter()
        .find(|e| e["type"] == "question")
        .expect("question");
    assert_eq!(question["id"], "q1");
    assert_eq!(question["text"], "Which number?");
    assert_eq!(events.last().expect("done")["ending"], "question");
    let id = events[0]["id"].as_str().expect("id");
    let (status, _) = get(&format!("{api}/{id}")).await;
    assert_eq!(status, 200);
    let (status, answer) = post_json(
        &format!("{api}/{id}/messages"),
        json!({"message": "7", "reply_to": "q9"}),
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer["error"].as_str().expect("error").contains("`q9`"));
    let events = chat(
        &format!("{api}/{id}/messages"),
        json!({"message": "7", "reply_to": "q1"}),
    )
    .await
    .rest()
    .await;
    assert_eq!(events.last().expect("done")["text"], "Then 7.");
    // Answered: the question is no longer pending.
    let (status, _) = post_json(
        &format!("{api}/{id}/messages"),
        json!({"message": "again", "reply_to": "q1"}),
    )
    .await;
    assert_eq!(status, 409);
}
