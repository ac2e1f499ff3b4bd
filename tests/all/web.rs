//! The harness of the web chat tests (the `web_*` modules, and the chat's bounds and
//! questions): a `serve --http` whose `[chat]` asks a scripted model, with `calculate` and a
//! destructive `say`; a run's event stream read as JSON, in order; and the API's requests.

use crate::mcp::HttpServer;
use crate::scripted::{Reply, Scripted, openai};
use crate::support::{Fixture, ensemble, scripted_chat};
use serde_json::{Value, json};
use std::time::Duration;

/// How long anything here may take before the test fails (not a timing assertion).
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

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
    fixture.write_host_file("chat", &scripted_chat(model_url, chat));
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
    pub(crate) response: reqwest::Response,
    pub(crate) buffer: String,
}

impl Events {
    /// The events of `response`.
    pub(crate) fn of(response: reqwest::Response) -> Self {
        Events {
            response,
            buffer: String::new(),
        }
    }

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
    Events::of(response)
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

pub(crate) fn say(id: &str, text: &str) -> Reply {
    openai::stream("", &[(id, "say", &json!({ "text": text }).to_string())])
}
