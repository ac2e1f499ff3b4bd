//! The providers under the agent loop: Anthropic's wire format, whole (unstreamed) answers,
//! the prompted provider's tool blocks, busy and failing providers retried with backoff, the
//! error after the last try, a client error not retried, and answers past the size bound.

use crate::agent::{Run, number, tool_messages};
use crate::scripted::{self, anthropic, openai};
use serde_json::json;
use std::sync::Arc;
use toolhost::agent::{AgentOptions, ApprovalPolicy, Ending, Event};
use toolhost::invoke::CallPolicy;
use toolhost::provider::ProviderKind;
use toolhost::provider::conversation::{Conversation, Message};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gets_all_results_of_a_turn_in_one_user_message_first() {
    let run = Run::new(
        ProviderKind::Anthropic,
        vec![
            anthropic::stream(
                "Two at once.",
                &[
                    ("tu_1", "calculate", r#"{"expression": "2 + 2"}"#),
                    ("tu_2", "calculate", r#"{"expression": "nope("}"#),
                ],
            ),
            anthropic::text("4, and one error."),
        ],
    )
    .await;
    let (_, outcome) = run.prompt("calculate").await;
    assert_eq!(outcome.ending, Ending::Answer);
    assert_eq!(outcome.usage.input_tokens, 400);
    let requests = run.server.requests();
    let first = &requests[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("x-api-key"), Some("test-key"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(first.body["system"], "You are a test.");
    assert_eq!(first.body["stream"], true);
    assert!(first.body["max_tokens"].as_u64().is_some());
    let calculate = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "calculate")
        .expect("offered");
    assert_eq!(calculate["input_schema"]["type"], "object");

    let messages = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(messages.len(), 3);
    let assistant = &messages[1];
    assert_eq!(
        assistant["content"][0],
        json!({"type": "text", "text": "Two at once."})
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    assert_eq!(
        assistant["content"][1]["input"],
        json!({"expression": "2 + 2"})
    );
    let results = messages[2]["content"].as_array().expect("blocks");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_use_id"], "tu_1");
    assert_eq!(number(results[0]["content"].as_str().expect("text")), 4.0);
    assert_eq!(results[0]["is_error"], false);
    assert_eq!(results[1]["tool_use_id"], "tu_2");
    assert_eq!(results[1]["is_error"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_failing_providers_are_retried_with_backoff() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![
            scripted::status(429, Some("0")),
            scripted::status(500, None),
            openai::text("made it"),
        ],
    )
    .await;
    let (_, outcome) = run.prompt("hello").await;
    assert_eq!(outcome.text, "made it");
    assert_eq!(run.server.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_failed_try_is_a_clear_error_and_the_conversation_is_kept() {
    let run = Run::new(
        ProviderKind::Anthropic,
        vec![
            scripted::status(529, None),
            scripted::status(503, None),
            scripted::status(500, None),
            anthropic::text("too late"),
        ],
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("hello");
    let error = run.ask(&mut conversation).await.expect_err("fails");
    let message = error.to_string();
    assert!(
        message.contains("anthropic: HTTP 500 after 3 attempt(s)")
            && message.contains("scripted status 500"),
        "{message}"
    );
    assert_eq!(run.server.requests().len(), 3);
    assert_eq!(conversation.messages.len(), 1);
    match run.events.all().last() {
        Some(Event::Done {
            ending: Ending::Error,
            ..
        }) => {}
        other => panic!("the last event is {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_error_is_not_retried() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![scripted::status(401, None), openai::text("unused")],
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("hello");
    let error = run.ask(&mut conversation).await.expect_err("fails");
    assert!(
        error.to_string().contains("HTTP 401 after 1 attempt(s)"),
        "{error}"
    );
    assert_eq!(run.server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_with_object_arguments_work_without_streaming() {
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![
            openai::whole("", &[("x", "calculate", json!({"expression": "3 * 3"}))]),
            openai::whole("nine", &[]),
        ],
        |s| s.stream = false,
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let (_, outcome) = run.prompt("square").await;
    assert_eq!(outcome.text, "nine");
    assert_eq!(run.events.text(), "nine");
    let requests = run.server.requests();
    assert!(requests[0].body.get("stream").is_none());
    let back = tool_messages(&requests[1]);
    assert_eq!(back[0].0, "x");
    assert_eq!(number(&back[0].1), 9.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompted_provider_calls_tools_written_as_blocks() {
    let first = "Let me compute.\n<tool>{\"name\": \"calculate\", \"arguments\": {\"expression\": \"5 * 5\"}}</tool>\n<tool>{\"name\": calculate}</tool>";
    let run = Run::new(
        ProviderKind::Prompted,
        vec![openai::text(first), openai::text("It is 25.")],
    )
    .await;
    let (conversation, outcome) = run.prompt("five squared").await;
    assert_eq!(outcome.text, "It is 25.");
    // The blocks never reach the person's screen.
    assert_eq!(run.events.text(), "Let me compute.\n\nIt is 25.");
    let requests = run.server.requests();
    assert!(requests[0].body.get("tools").is_none());
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system prompt")
        .to_string();
    assert!(system.starts_with("You are a test."));
    assert!(system.contains("<tool>{\"name\": \"TOOL_NAME\""));
    assert!(system.contains("- calculate: Evaluate an arithmetic expression"));
    let Message::Results { results } = &conversation.messages[2] else {
        panic!("results expected");
    };
    assert_eq!(number(&results[0].content), 25.0);
    assert!(results[1].is_error);
    assert!(
        results[1].content.contains("not valid JSON"),
        "{}",
        results[1].content
    );
    let back = requests[1].body["messages"].as_array().expect("messages");
    let assistant = back[2]["content"].as_str().expect("assistant text");
    assert!(
        assistant.contains("<tool>{\"name\":\"calculate\""),
        "{assistant}"
    );
    let user = back[3]["content"].as_str().expect("results text");
    assert!(
        user.starts_with("<tool_result name=\"calculate\" status=\"ok\">\n{\"expression\":\"5 * 5\",\"result\":25.0}\n</tool_result>"),
        "{user}"
    );
    assert!(user.contains("status=\"error\""), "{user}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_stream_ends_at_the_answer_size_bound() {
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![scripted::endless_openai_stream()],
        |settings| settings.max_response_bytes = 1 << 20,
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("talk");
    let error = run
        .ask(&mut conversation)
        .await
        .expect_err("the answer never ends");
    let message = error.to_string();
    assert!(
        message.contains("the answer is longer than 1 MiB (max-response-mib)"),
        "{message}"
    );
    // What streamed before the bound is at most the bound.
    assert!(run.events.text().len() <= 1 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_past_the_size_bound_is_not_read() {
    let huge = serde_json::json!({"choices": [{"message": {"content": "x".repeat(3 << 20)}}]});
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![scripted::Reply::json(huge)],
        |settings| {
            settings.stream = false;
            settings.max_response_bytes = 1 << 20;
        },
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("talk");
    let error = run.ask(&mut conversation).await.expect_err("too long");
    assert!(error.to_string().contains("longer than 1 MiB"), "{error}");
}
