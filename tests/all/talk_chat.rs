//! Tools that talk back inside a chat: sampling uses the chat's own model and elicitation asks
//! the person, in process and in the web chat, where a tool's question is answered by a request
//! naming it.

use crate::talk::{GRANTS, add_ask_person, fixture};
use serde_json::{Value, json};
use std::sync::Arc;

/// Answers every elicitation of a chat with a fixed name.
struct Person;

impl toolhost::agent::Approver for Person {
    fn approve<'a>(
        &'a self,
        _request: &'a toolhost::agent::ApprovalRequest,
    ) -> toolhost::contract::BoxFuture<'a, toolhost::agent::Approval> {
        Box::pin(std::future::ready(toolhost::agent::Approval::Approved))
    }

    fn elicit<'a>(
        &'a self,
        request: &'a toolhost::agent::ElicitRequest,
    ) -> toolhost::contract::BoxFuture<
        'a,
        Result<toolhost::contract::ElicitAnswer, toolhost::contract::AskError>,
    > {
        assert_eq!(request.tool, "ask_person");
        assert_eq!(request.schema["required"], json!(["name"]));
        Box::pin(std::future::ready(Ok(
            toolhost::contract::ElicitAnswer::Accept(json!({"name": "Grace"})),
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_chat_sampling_uses_the_chats_model_and_elicitation_asks_the_person() {
    use crate::scripted::{Scripted, openai};
    use toolhost::agent::{Agent, AgentOptions};
    use toolhost::provider::conversation::{Conversation, Message};
    use toolhost::provider::{ProviderKind, ProviderSettings};

    let fixture = fixture(GRANTS);
    let server = Scripted::start(vec![
        openai::stream("", &[("m", "ask_model", r#"{"prompt": "a haiku"}"#)]),
        // The tool's own request: the chat's model, asked without tools.
        openai::text("five seven five"),
        openai::stream("", &[("p", "ask_person", "{}")]),
        openai::text("all done"),
    ]);
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "scripted-model");
    settings.base_url = server.base_url.clone();
    settings.api_key = Some("test-key".into());
    let provider = settings.build().expect("provider");
    let host = Arc::new(fixture.host().await);
    let agent = Agent::new(
        host,
        Arc::from(provider),
        Arc::new(Person),
        AgentOptions::default(),
    );
    let session = Arc::new(toolhost::invoke::Session::new("chat-talk"));
    let mut conversation = Conversation::new(Some("You are a test.".into()));
    conversation.push_user("go");
    let outcome = agent
        .run(&mut conversation, &session, &|_| {})
        .await
        .expect("the run ends");
    assert_eq!(outcome.text, "all done");

    let results: Vec<String> = conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Results { results } => Some(results[0].content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        ["five seven five (openai)", r#"accepted: {"name":"Grace"}"#]
    );
    let requests = server.requests();
    let sampled = &requests[1].body;
    assert!(sampled.get("tools").is_none(), "{sampled}");
    assert_eq!(sampled["messages"][0]["content"], "Answer briefly.");
    assert_eq!(sampled["messages"][1]["content"], "a haiku");
}

/// The web chat asks the person on the page: an `elicitation_request` event in the run's
/// stream, answered by a request naming it; content the form's schema refuses is a 400 that
/// names the property and leaves the question pending; the log keeps question and answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_web_chat_a_tools_question_is_answered_by_a_request_naming_it() {
    use crate::scripted::{Scripted, openai};
    use crate::web::{base, chat, get, post_json, serve};

    let ask = |id: &str| openai::stream("", &[(id, "ask_person", "{}")]);
    let model = Scripted::start(vec![
        ask("p1"),
        openai::text("Hello, Grace."),
        ask("p2"),
        openai::text("As you wish."),
        ask("p3"),
        openai::text("Nobody there."),
    ]);
    let fixture = crate::web::fixture(&model.base_url, "approval-timeout-s = 2");
    add_ask_person(&fixture);
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));

    // Accepted, after one answer the schema refuses.
    let mut events = chat(&api, json!({"message": "Who am I?"})).await;
    let first = events.until("elicitation_request").await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    let question = first.last().expect("question");
    assert_eq!(question["id"], "p1-ask-1");
    assert_eq!(question["call_id"], "p1");
    assert_eq!(question["tool"], "ask_person");
    assert_eq!(question["message"], "What is your name?");
    assert_eq!(question["schema"]["required"], json!(["name"]));
    let answer = |question: &str, body: Value| {
        let url = format!("{api}/{id}/elicitations/{question}");
        async move { post_json(&url, body).await }
    };
    let (status, refused) = answer(
        "p1-ask-1",
        json!({"action": "accept", "content": {"name": 7}}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let refused = refused["error"].as_str().expect("error");
    assert!(refused.starts_with("/content/name: "), "{refused}");
    for extra in ["extra", "isAdmin", "__proto__"] {
        let mut content = json!({"name": "Grace"});
        content[extra] = json!(true);
        let (status, refused) =
            answer("p1-ask-1", json!({"action": "accept", "content": content})).await;
        assert_eq!(status, 400, "{extra}: {refused}");
        assert_eq!(
            refused["error"],
            format!("/content/{extra}: the form did not ask for this property"),
        );
    }
    assert_eq!(answer("p1-ask-1", json!({"action": "maybe"})).await.0, 400);
    assert_eq!(
        answer("p1-ask-1", json!({"action": "accept"})).await.0,
        400,
        "no content"
    );
    assert_eq!(answer("nope", json!({"action": "decline"})).await.0, 404);
    let accept = json!({"action": "accept", "content": {"name": "Grace"}});
    assert_eq!(answer("p1-ask-1", accept.clone()).await.0, 204);
    assert_eq!(answer("p1-ask-1", accept).await.0, 404, "answered already");
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(
        result["content"], r#"accepted: {"name":"Grace"}"#,
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|e| e["type"] == "elicitation" && e["action"] == "accept"),
        "{rest:#?}"
    );

    // Declined.
    let mut events = chat(&format!("{api}/{id}/messages"), json!({"message": "Again"})).await;
    events.until("elicitation_request").await;
    assert_eq!(
        answer("p2-ask-1", json!({"action": "decline"})).await.0,
        204
    );
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(result["content"], "declined", "{rest:#?}");

    // Nobody answers: the tool is told so after approval-timeout-s, and the model goes on.
    let mut events = chat(
        &format!("{api}/{id}/messages"),
        json!({"message": "Once more"}),
    )
    .await;
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(
        result["content"], "failed: nobody answered within 2 s ([chat] approval-timeout-s)",
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|e| e["type"] == "elicitation" && e["action"] == "timeout"),
        "{rest:#?}"
    );

    // The log keeps each question and how it ended.
    let (_, kept) = get(&format!("{api}/{id}")).await;
    let log = kept["log"].as_array().expect("log");
    let actions: Vec<&Value> = log
        .iter()
        .filter(|e| e["type"] == "elicitation")
        .map(|e| &e["action"])
        .collect();
    assert_eq!(
        actions,
        [&json!("accept"), &json!("decline"), &json!("timeout")]
    );
    assert_eq!(
        log.iter()
            .filter(|e| e["type"] == "elicitation_request")
            .count(),
        3
    );
    assert_eq!(
        model.requests().len(),
        6,
        "every scripted answer was asked for"
    );
    // As docs/chat-api.openapi.yaml describes them.
    let validator = crate::web_docs::event_validator();
    for event in log {
        let errors: Vec<String> = validator
            .iter_errors(event)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{event}: {errors:?}");
    }
}
