//! The chat API by identity: a conversation is its starter's (another identity gets `404`
//! reading, continuing or deleting it, and answering its approvals, as for one that does not
//! exist), an approver (`approve = true`) may answer any conversation's approvals, and a
//! run's model is offered only the tools its caller may call.

use crate::scripted::{Scripted, openai};
use crate::web::{Events, base, fixture, say};
use serde_json::{Value, json};

/// A request as the bearer of `token` (none: the local operator, from loopback).
fn request(method: reqwest::Method, url: &str, token: Option<&str>) -> reqwest::RequestBuilder {
    let request = reqwest::Client::new().request(method, url);
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// The HTTP status of a request with a JSON body (or none).
async fn status(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> u16 {
    let mut request = request(method, url, token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("request").status().as_u16()
}

/// A chat run started by the bearer of `token`: its events.
pub(crate) async fn chat(url: &str, token: &str, body: Value) -> Events {
    let response = request(reqwest::Method::POST, url, Some(token))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 200);
    Events {
        response,
        buffer: String::new(),
    }
}

/// The ids of the conversations the bearer of `token` lists.
pub(crate) async fn listed(api: &str, token: Option<&str>) -> Vec<String> {
    let body: Value = request(reqwest::Method::GET, api, token)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    (body["conversations"].as_array().expect("list").iter())
        .map(|c| c["id"].as_str().expect("id").to_string())
        .collect()
}

/// The names of the catalog's tools a model request offered (the chat's built-in tools
/// aside).
fn offered(body: &Value) -> Vec<String> {
    const BUILT_IN: [&str; 3] = ["task_completion", "ask_question", "converse"];
    let mut names: Vec<String> = (body["tools"].as_array().into_iter().flatten())
        .map(|t| t["function"]["name"].as_str().expect("name").to_string())
        .filter(|name| !BUILT_IN.contains(&name.as_str()))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_their_starters_and_approvals_their_starters_or_an_approvers() {
    let model = Scripted::start(vec![
        say("a1", "first"),
        openai::text("Said it."),
        openai::text("Hello, Bob."),
    ]);
    let fixture = fixture(&model.base_url, "");
    let path = fixture.root().join("toolhost.toml");
    let mut text = std::fs::read_to_string(&path).expect("toolhost.toml");
    text.push_str(
        "\n[access]\nrequire-token = false\n\
         [[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
         [[access.tokens]]\nname = \"bob\"\nenv = \"BOB\"\n\n\
         [[access.tokens]]\nname = \"carl\"\nenv = \"CARL\"\ngroups = [\"approvers\"]\n\n\
         [[access.rules]]\nidentities = [\"ann\"]\ntools = [\"*\"]\n\n\
         [[access.rules]]\nidentities = [\"bob\"]\ntools = [\"calculate\"]\n\n\
         [[access.rules]]\ngroups = [\"approvers\"]\napprove = true\n",
    );
    std::fs::write(&path, text).expect("write");
    let server = crate::mcp::HttpServer::start(
        &fixture,
        &["--config", path.to_str().expect("path")],
        &[
            ("SCRIPTED_KEY", "k"),
            ("ANN", "ann-token"),
            ("BOB", "bob-token"),
            ("CARL", "carl-token"),
        ],
    );
    let api = format!("{}/api/conversations", base(&server));
    let (ann, bob, carl) = (Some("ann-token"), Some("bob-token"), Some("carl-token"));
    use reqwest::Method;

    // Ann's run waits for the approval of a destructive call.
    let mut events = chat(&api, "ann-token", json!({"message": "Say hi"})).await;
    let first = events.until("approval_request").await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    assert_eq!(offered(&model.requests()[0].body), ["calculate", "say"]);

    // Bob cannot see it, continue it, delete it or answer for it: it is not there for him.
    let conversation = format!("{api}/{id}");
    assert!(listed(&api, bob).await.is_empty());
    assert_eq!(status(Method::GET, &conversation, bob, None).await, 404);
    let message = Some(json!({"message": "mine now"}));
    assert_eq!(
        status(
            Method::POST,
            &format!("{conversation}/messages"),
            bob,
            message
        )
        .await,
        404
    );
    assert_eq!(status(Method::DELETE, &conversation, bob, None).await, 404);
    let approval = format!("{conversation}/approvals/a1");
    let allow = Some(json!({"decision": "allow"}));
    assert_eq!(
        status(Method::POST, &approval, bob, allow.clone()).await,
        404
    );
    // Nor can the local operator (loopback without a token): another party.
    assert!(listed(&api, None).await.is_empty());
    assert_eq!(status(Method::GET, &conversation, None, None).await, 404);
    // Carl, an approver, may answer it (and still not read it).
    assert_eq!(status(Method::POST, &approval, carl, allow).await, 204);
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(result["outcome"], "ok", "{rest:#?}");
    assert_eq!(status(Method::GET, &conversation, carl, None).await, 404);
    assert_eq!(listed(&api, ann).await, [id.as_str()]);
    assert_eq!(status(Method::GET, &conversation, ann, None).await, 200);

    // Bob's own run: his model is offered only what he may call.
    let mut events = chat(&api, "bob-token", json!({"message": "Hi"})).await;
    let rest = events.rest().await;
    assert!(rest.iter().any(|e| e["type"] == "done"), "{rest:#?}");
    let requests = model.requests();
    assert_eq!(
        offered(&requests.last().expect("bob's").body),
        ["calculate"]
    );
    assert_eq!(listed(&api, bob).await.len(), 1);
    assert_eq!(status(Method::DELETE, &conversation, ann, None).await, 204);
    drop(server);
}
