//! The HTTP chat API of `serve --http` against scripted providers: a run's events streamed in
//! order, conversations kept across a restart, approvals answered by a request naming the
//! call, a dropped connection ending its run, requests checked against `[chat]`, a corrupt
//! database answered with 503 while MCP serves, the guard, and 50 conversations at once.

use crate::mcp::{HttpServer, post};
use crate::scripted::{Reply, Scripted, openai};
use crate::support::{Fixture, ensemble};
use serde_json::{Value, json};
use std::time::Duration;

/// How long anything here may take before the test fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(60);

/// A fixture with `calculate` and a destructive `say`, and `[chat]` over `model_url`.
pub(crate) fn fixture(model_url: &str, chat: &str) -> Fixture {
    let fixture = Fixture::new();
    fixture.write(
        "calculator.toml",
        &ensemble(
            "calculator",
            "calculator",
            "[[invokers]]\ninvoker = { name = \"calculate\" }\n",
        ),
    );
    fixture.write(
        "danger.toml",
        &ensemble(
            "danger",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"say\", destructive = true }\n",
        ),
    );
    let config = format!(
        "schema-version = 1\n\n[chat]\nmodel = \"scripted-model\"\nbase-url = \"{model_url}\"\n\
         api-key-env = \"SCRIPTED_KEY\"\n{chat}\n"
    );
    std::fs::write(fixture.root().join("toolhost.toml"), config).expect("config");
    fixture
}

pub(crate) fn serve(fixture: &Fixture, extra: &[&str]) -> HttpServer {
    let config = fixture.root().join("toolhost.toml");
    let mut args = vec!["--config", config.to_str().expect("path")];
    args.extend_from_slice(extra);
    HttpServer::start(fixture, &args, &[("SCRIPTED_KEY", "k")])
}

/// A host with a scripted model, serving HTTP.
pub(crate) struct Host {
    pub(crate) model: Scripted,
    pub(crate) fixture: Fixture,
    pub(crate) server: HttpServer,
    /// `http://127.0.0.1:PORT/api/conversations`.
    pub(crate) api: String,
}

/// A host whose model answers with `replies`, and `chat` added to its `[chat]`.
pub(crate) fn host(replies: Vec<Reply>, chat: &str) -> Host {
    let model = Scripted::start(replies);
    let fixture = fixture(&model.base_url, chat);
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));
    Host {
        model,
        fixture,
        server,
        api,
    }
}

/// `http://127.0.0.1:PORT` of a server.
pub(crate) fn base(server: &HttpServer) -> String {
    server.url.trim_end_matches("/mcp").to_string()
}

/// An event stream being read: events as JSON, in order.
pub(crate) struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The next event, or `None` when the stream ended.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .collect();
                if data.is_empty() {
                    continue; // a comment
                }
                let event: Value = serde_json::from_str(&data.join("\n")).expect("event JSON");
                let named = block
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .expect("event: line");
                assert_eq!(event["type"], named, "{block}");
                return Some(event);
            }
            let chunk = tokio::time::timeout(DEADLINE, self.response.chunk())
                .await
                .expect("the stream stalled")
                .expect("the stream broke")?;
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        }
    }

    /// Every event up to the end of the stream.
    pub(crate) async fn rest(&mut self) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }

    /// Events up to the first of `kind` (included).
    pub(crate) async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            let done = event["type"] == kind;
            events.push(event);
            if done {
                return events;
            }
        }
        panic!("the stream ended before a `{kind}` event: {events:#?}");
    }
}

/// Posts a chat request; panics unless the answer is an event stream.
pub(crate) async fn chat(url: &str, body: Value) -> Events {
    let response = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "an event stream"
    );
    Events {
        response,
        buffer: String::new(),
    }
}

pub(crate) async fn get(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn post_json(url: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("POST");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

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

fn say(id: &str, text: &str) -> Reply {
    openai::stream("", &[(id, "say", &json!({ "text": text }).to_string())])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_or_with_a_corrupt_database_the_chat_says_why_and_mcp_serves() {
    let fixture = Fixture::new();
    fixture.write_echo();
    std::fs::write(
        fixture.root().join("toolhost.toml"),
        "schema-version = 1\n[chat]\ndatabase = \"chat.db\"\n",
    )
    .expect("config");
    let server = serve(&fixture, &[]);
    let (status, settings) = get(&format!("{}/api/settings", base(&server))).await;
    assert_eq!(status, 200);
    assert_eq!(settings["chat"], false);
    assert!(
        settings["problem"]
            .as_str()
            .expect("problem")
            .contains("[chat] model")
    );
    let (status, answer) = post_json(
        &format!("{}/api/conversations", base(&server)),
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!(status, 503);
    assert!(
        answer["error"]
            .as_str()
            .expect("error")
            .contains("[chat] model")
    );
    drop(server);

    // Its write-ahead log too: SQLite would read the pages it holds.
    for file in ["chat.db-wal", "chat.db-shm"] {
        let _ = std::fs::remove_file(fixture.root().join(file));
    }
    std::fs::write(fixture.root().join("chat.db"), vec![b'x'; 8192]).expect("garbage");
    let model = Scripted::start(vec![]);
    std::fs::write(
        fixture.root().join("toolhost.toml"),
        format!(
            "schema-version = 1\n[chat]\ndatabase = \"chat.db\"\nmodel = \"m\"\n\
             base-url = \"{}\"\n",
            model.base_url
        ),
    )
    .expect("config");
    let server = serve(&fixture, &[]);
    let (status, answer) = get(&format!("{}/api/conversations", base(&server))).await;
    assert_eq!(status, 503);
    let error = answer["error"].as_str().expect("error");
    assert!(
        error.contains("chat.db") && error.contains("not a database"),
        "{error}"
    );
    // Everything else serves.
    assert_eq!(post(&server.url, &[]).await, 200, "MCP initialize");
    let (status, catalog) = get(&format!("{}/api/catalog", base(&server))).await;
    assert_eq!(status, 200);
    assert_eq!(catalog["ensembles"][0]["name"], "echo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_page_keep_the_guard_of_mcp() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let base = base(&server);
    let authority = base.trim_start_matches("http://").to_string();
    let client = reqwest::Client::new();
    let status = |request: reqwest::RequestBuilder| async move {
        request.send().await.expect("request").status().as_u16()
    };
    let page = format!("{base}/");
    assert_eq!(status(client.get(&page)).await, 200);
    let (_, _) = get(&format!("{base}/api/catalog")).await;
    // Another site's page: refused; this host's own page: served.
    let api = format!("{base}/api/conversations");
    assert_eq!(
        status(client.get(&api).header("origin", "https://evil.example")).await,
        403
    );
    assert_eq!(
        status(
            client
                .get(&api)
                .header("origin", format!("http://{authority}"))
        )
        .await,
        200
    );
    // A DNS-rebinding page: its own name in Host (and Origin).
    let port = authority.rsplit(':').next().expect("port");
    let rebound = format!("evil.example:{port}");
    assert_eq!(
        status(
            client
                .get(&api)
                .header("host", &rebound)
                .header("origin", format!("http://{rebound}"))
        )
        .await,
        403
    );
    // Same-origin passes only where the Host header is checked: not on /metrics.
    assert_eq!(
        status(
            client
                .get(format!("{base}/metrics"))
                .header("host", &rebound)
                .header("origin", format!("http://{rebound}"))
        )
        .await,
        403
    );
    // The page's headers keep it from being framed and from loading anything elsewhere.
    let response = client.get(&page).send().await.expect("page");
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    drop(server);

    // With a token, everything but the probes needs it; `--no-ui` leaves the API alone.
    let server = HttpServer::start(
        &fixture,
        &[
            "--config",
            fixture.root().join("toolhost.toml").to_str().expect("path"),
            "--token-env",
            "WEB_TOKEN",
            "--no-ui",
        ],
        &[("WEB_TOKEN", "sesame"), ("SCRIPTED_KEY", "k")],
    );
    let base = crate::web::base(&server);
    assert_eq!(status(client.get(format!("{base}/api/catalog"))).await, 401);
    assert_eq!(
        status(
            client
                .get(format!("{base}/api/catalog"))
                .bearer_auth("sesame")
        )
        .await,
        200
    );
    assert_eq!(
        status(client.get(format!("{base}/")).bearer_auth("sesame")).await,
        404,
        "--no-ui"
    );
    drop(server);

    // The page's own files load without the token (the page asks for it); nothing else does.
    let server = HttpServer::start(
        &fixture,
        &[
            "--config",
            fixture.root().join("toolhost.toml").to_str().expect("path"),
            "--token-env",
            "WEB_TOKEN",
        ],
        &[("WEB_TOKEN", "sesame"), ("SCRIPTED_KEY", "k")],
    );
    let base = crate::web::base(&server);
    for path in ["/", "/app.js", "/app.css"] {
        assert_eq!(
            status(client.get(format!("{base}{path}"))).await,
            200,
            "{path}"
        );
    }
    for path in [
        "/api/settings",
        "/api/conversations",
        "/metrics",
        "/app.js/../api/catalog",
    ] {
        assert_eq!(
            status(client.get(format!("{base}{path}"))).await,
            401,
            "{path}"
        );
    }
    assert_eq!(status(client.post(format!("{base}/"))).await, 401, "POST /");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_stream_follows_reloads() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let response = reqwest::get(format!("{}/api/catalog/events", base(&server)))
        .await
        .expect("GET");
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let first = events.next().await.expect("the catalog");
    assert_eq!(first["type"], "catalog");
    let tools: Vec<&str> = first["ensembles"]
        .as_array()
        .expect("ensembles")
        .iter()
        .flat_map(|e| e["tools"].as_array().expect("tools"))
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"calculate") && tools.contains(&"say"),
        "{tools:?}"
    );
    let say = &first["ensembles"]
        .as_array()
        .expect("ensembles")
        .iter()
        .find(|e| e["name"] == "danger")
        .expect("danger")["tools"][0];
    assert_eq!(say["destructive"], true);
    assert_eq!(say["input_schema"]["type"], "object");

    fixture.write(
        "broken.toml",
        "schema-version = 1\n[ensemble]\nnmae = \"x\"\n",
    );
    let refused = loop {
        let event = events.next().await.expect("a catalog after the reload");
        if let Some(refused) = event["refused"].as_array().filter(|r| !r.is_empty()) {
            break refused.clone();
        }
    };
    let errors = refused[0]["errors"].to_string();
    assert!(errors.contains("broken.toml:3:1"), "{errors}");
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

/// The page in headless Chromium (Debian's, through its chromedriver, driven by
/// `tests/clients/webchat.py`): two tool calls and their results inline in order with the final
/// text; an approval granted on the page runs the call; a denied one reaches the model as
/// refused; a tool's question is answered in a form on the page; a stored conversation reads
/// back; the catalog view follows a reload (a new tool,
/// a refused file with its file:line) without the page reloading. The screenshot of the chat
/// with its tool calls expanded is left in `target/test-artifacts/webchat.png`.
#[test]
fn the_page_shows_tool_calls_approvals_and_the_live_catalog_in_a_real_browser() {
    let Host {
        model,
        fixture,
        server: _server,
        api: _api,
    } = host(
        vec![
            openai::stream("", &[("c1", "calculate", r#"{"expression": "40 + 2"}"#)]),
            openai::stream("", &[("c2", "calculate", r#"{"expression": "2 * 21"}"#)]),
            openai::text("Both are 42."),
            say("a1", "hello from say"),
            openai::text("Said it."),
            say("d1", "second"),
            openai::text("Not allowed."),
            openai::stream("", &[("p1", "ask_person", "{}")]),
            openai::text("Hello, Grace."),
        ],
        "",
    );
    crate::talk::add_ask_person(&fixture);
    let pending = fixture.root().join("pending");
    std::fs::create_dir_all(&pending).expect("pending dir");
    std::fs::write(
        pending.join("extra.toml"),
        ensemble(
            "extra",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    )
    .expect("extra");
    std::fs::write(
        pending.join("broken.toml"),
        "schema-version = 1\n[ensemble]\nnmae = \"broken\"\n",
    )
    .expect("broken");
    let server = serve(&fixture, &[]);
    let artifacts =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let screenshot = artifacts.join("webchat.png");
    let _ = std::fs::remove_file(&screenshot);
    let python = crate::mcp_list::test_tools().join("venv/bin/python");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/webchat.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg("--url")
        .arg(format!("{}/", base(&server)))
        .arg("--ensembles")
        .arg(fixture.ensembles())
        .arg("--pending")
        .arg(&pending)
        .arg("--screenshot")
        .arg(&screenshot)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The page's timings, for the record (not asserted: the machine is shared).
    for timing in stdout.lines().filter(|l| l.starts_with("timing: ")) {
        eprintln!("{timing}");
    }
    assert!(screenshot.is_file(), "no screenshot");
    // The denied call reached the model as a refusal.
    let requests = model.requests();
    assert_eq!(requests.len(), 9, "every scripted answer was asked for");
    let denied = requests[6].body.to_string();
    assert!(denied.contains("refused to run `say`"), "{denied}");
}

/// The `curl` example of docs/chat-api.md, run as written (but for the port) against a host
/// whose model is scripted: it prints the events the document shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_curl_example_works_as_written() {
    let model = Scripted::start(vec![
        openai::stream(
            "",
            &[("call_1", "calculate", r#"{"expression": "40 + 2"}"#)],
        ),
        openai::text("It is 42."),
    ]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let document = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/chat-api.md"),
    )
    .expect("docs/chat-api.md");
    let example = document
        .split("## Example")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("a sh block under ## Example");
    assert!(example.contains("http://127.0.0.1:8750"), "{example}");
    let command = example.replace("http://127.0.0.1:8750", &base(&server));
    let output = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .output()
        .await
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{command}\n{stdout}");
    for expected in [
        "event: conversation\n",
        "event: tool_call\ndata: {\"type\":\"tool_call\",\"id\":\"call_1\",\"name\":\"calculate\"",
        "event: tool_result\n",
        "\"outcome\":\"ok\"",
        "event: text_delta\ndata: {\"type\":\"text_delta\",\"text\":\"It i",
        "event: done\ndata: {\"type\":\"done\",\"ending\":\"answer\",\"text\":\"It is 42.\",\"iterations\":2",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
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

/// YAML as JSON (the OpenAPI description is YAML).
fn json_of(yaml: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match yaml {
        Yaml::Hash(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.as_str().expect("string key").to_string(), json_of(v)))
                .collect(),
        ),
        Yaml::Array(items) => Value::Array(items.iter().map(json_of).collect()),
        Yaml::String(text) => json!(text),
        Yaml::Integer(n) => json!(n),
        Yaml::Real(text) => json!(text.parse::<f64>().expect("number")),
        Yaml::Boolean(b) => json!(b),
        Yaml::Null => Value::Null,
        other => panic!("unexpected YAML {other:?}"),
    }
}

/// docs/chat-api.openapi.yaml describes every route the chat API has, and the events a real
/// run streams match its `Event` schema.
/// The `Event` schema of docs/chat-api.openapi.yaml, compiled.
pub(crate) fn event_validator() -> jsonschema::Validator {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/chat-api.openapi.yaml")).expect("yaml");
    let document = json_of(&yaml_rust2::YamlLoader::load_from_str(&text).expect("YAML")[0]);
    jsonschema::validator_for(&document["components"]["schemas"]["Event"])
        .expect("the Event schema compiles")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_description_covers_every_route_and_every_event() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/chat-api.openapi.yaml")).expect("yaml");
    let document = json_of(&yaml_rust2::YamlLoader::load_from_str(&text).expect("YAML")[0]);
    let documented: std::collections::BTreeSet<&str> = document["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    let source = std::fs::read_to_string(root.join("crates/web/src/lib.rs")).expect("source");
    let routed: std::collections::BTreeSet<&str> = source
        .split(".route(")
        .skip(1)
        .filter_map(|rest| rest.trim_start().strip_prefix('"')?.split('"').next())
        .collect();
    assert_eq!(documented, routed);

    let Host {
        model: _model,
        fixture: _fixture,
        server: _server,
        api,
    } = host(
        vec![
            openai::stream(
                "Computing.",
                &[("c1", "calculate", r#"{"expression": "1 + 1"}"#)],
            ),
            openai::text("2."),
        ],
        "",
    );
    let events = chat(&api, json!({"message": "1 + 1?"})).await.rest().await;
    let id = events[0]["id"].as_str().expect("id");
    let (_, kept) = get(&format!("{api}/{id}")).await;
    let validator = event_validator();
    for event in events.iter().chain(kept["log"].as_array().expect("log")) {
        let errors: Vec<String> = validator
            .iter_errors(event)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{event}: {errors:?}");
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_locked_by_another_program_is_a_clear_503_and_mcp_serves() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "database = \"chat.db\"");
    // Another program holds an exclusive lock on the database for the whole test.
    let other = rusqlite::Connection::open(fixture.root().join("chat.db")).expect("open");
    other
        .execute_batch("CREATE TABLE other (x); BEGIN EXCLUSIVE; INSERT INTO other VALUES (1);")
        .expect("lock");
    let server = serve(&fixture, &[]);
    let (status, answer) = get(&format!("{}/api/conversations", base(&server))).await;
    assert_eq!(status, 503, "{answer}");
    let error = answer["error"].as_str().expect("error");
    assert!(
        error.contains("chat.db") && error.contains("locked"),
        "{error}"
    );
    assert_eq!(post(&server.url, &[]).await, 200, "MCP initialize");
    drop(other);
}
