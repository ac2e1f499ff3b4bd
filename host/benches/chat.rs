//! How late the chat API's events reach a client: a scripted OpenAI-compatible model streams
//! its answer a piece every 5 ms, each piece stamped when it is handed to the connection;
//! the client reading `POST /api/conversations` stamps each `text_delta` event as it arrives.
//! The difference is the event's latency through the host (the provider's stream parsed, the
//! loop's event, the SSE frame written), an upper bound on "from the loop to the client".
//! Baseline, in the same run: the same client reading the model's own stream directly (the
//! latency the network stack and the client add by themselves).
//!
//! Measured with one conversation at a time and with 50 at once (each streams its own answer;
//! an event is matched to its stamp by its text, which is unique).
//!
//! Everything runs in this process (host, model, client; tokio, 2 workers), over loopback.
//! Prints a Markdown table. Run: `cargo bench -p toolhost --bench chat`
//! (`-- --pieces 200 --rounds 5` to change the work).

use axum::response::IntoResponse;
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost::invoke::Host;
use toolhost::reload::Reloader;
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};
use toolhost::web::{ChatSettings, Store, Web};

/// When each piece of text left the model, by its text.
type Stamps = Arc<Mutex<HashMap<String, Instant>>>;

/// The gap between two pieces of the model's answer.
const GAP: Duration = Duration::from_millis(5);

/// A model that streams `pieces` unique pieces of text, one every [`GAP`].
async fn model(stamps: Stamps, pieces: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("address"));
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: Bytes| {
            let stamps = stamps.clone();
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap_or_default();
                let tag = request["messages"]
                    .as_array()
                    .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or("direct")
                    .to_string();
                let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
                tokio::spawn(async move {
                    for n in 0..pieces {
                        tokio::time::sleep(GAP).await;
                        let text = format!("<{tag}:{n}>");
                        let chunk = json!({"id": "b", "object": "chat.completion.chunk", "created": 1, "model": "b",
                            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
                        if let Ok(mut stamps) = stamps.lock() {
                            stamps.insert(text, Instant::now());
                        }
                        if sender.send(Bytes::from(format!("data: {chunk}\n\n"))).await.is_err() {
                            return;
                        }
                    }
                    let end = json!({"id": "b", "object": "chat.completion.chunk", "created": 1, "model": "b",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                    let _ = sender.send(Bytes::from(format!("data: {end}\n\ndata: [DONE]\n\n"))).await;
                });
                (
                    [("content-type", "text/event-stream")],
                    axum::body::Body::new(ChannelBody(receiver)),
                )
                    .into_response()
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// A body of the chunks sent on a channel.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(context)
            .map(|chunk| chunk.map(|c| Ok(http_body::Frame::data(c))))
    }
}

/// Reads an SSE response, stamping every piece of text (`<tag:n>`) as it arrives.
async fn read(
    mut response: reqwest::Response,
    field: fn(&Value) -> Option<&str>,
) -> Vec<(String, Instant)> {
    let mut seen = Vec::new();
    let mut buffer = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let now = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for data in block.lines().filter_map(|l| l.strip_prefix("data: ")) {
                if let Ok(value) = serde_json::from_str::<Value>(data)
                    && let Some(text) = field(&value)
                    && text.starts_with('<')
                {
                    seen.push((text.to_string(), now));
                }
            }
        }
    }
    seen
}

fn latencies(seen: &[(String, Instant)], stamps: &Stamps) -> Vec<Duration> {
    let stamps = stamps.lock().expect("stamps");
    seen.iter()
        .filter_map(|(text, at)| {
            stamps
                .get(text)
                .map(|sent| at.saturating_duration_since(*sent))
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn row(name: &str, mut all: Vec<Duration>, expected: usize) -> String {
    all.sort();
    assert_eq!(all.len(), expected, "{name}: events lost");
    format!(
        "| {name} | {} | {:.2} | {:.2} | {:.2} |",
        all.len(),
        percentile(&all, 50).as_secs_f64() * 1000.0,
        percentile(&all, 99).as_secs_f64() * 1000.0,
        all.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
    )
}

fn main() {
    let mut pieces = 100;
    let mut rounds = 3;
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--pieces" => pieces = pair[1].parse().expect("--pieces N"),
            "--rounds" => rounds = pair[1].parse().expect("--rounds N"),
            _ => {}
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    toolhost::tls::install_provider();
    runtime.block_on(async move {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("ensembles")).expect("ensembles");
        let stamps: Stamps = Arc::default();
        let model_url = model(stamps.clone(), pieces).await;
        let engine = Arc::new(
            Runtime::new(&RuntimeSettings {
                // Cranelift's code alone: what is measured here is not the tiers.
                tiering: Tiering::Off,
                ..RuntimeSettings::default()
            })
            .expect("runtime"),
        );
        let reloader = Reloader::builder(toolhost::resolve::Resolver::new(engine))
            .serving()
            .start(dir.path().join("ensembles"))
            .await;
        let host = Arc::new(Host::new(reloader.catalog().clone(), None));
        let mut provider = toolhost::provider::ProviderSettings::new(
            toolhost::provider::ProviderKind::OpenAi,
            "b",
        );
        provider.base_url = model_url.clone();
        let chat = ChatSettings {
            provider: Ok(provider),
            max_runs: 64,
            ..ChatSettings::default()
        };
        let limits = toolhost::web::StoreLimits {
            max_conversations: 100_000,
            ..Default::default()
        };
        let store = Store::open(&dir.path().join("chat.sqlite3"), limits);
        let web = Web::new(host, reloader, chat, store);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let api = format!(
            "http://{}/api/conversations",
            listener.local_addr().expect("address")
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, toolhost::web::router(web, false)).await;
        });
        let client = reqwest::Client::new();
        let direct_field: fn(&Value) -> Option<&str> =
            |v| v["choices"][0]["delta"]["content"].as_str();
        let event_field: fn(&Value) -> Option<&str> = |v| {
            (v["type"] == "text_delta")
                .then(|| v["text"].as_str())
                .flatten()
        };

        println!("| Path | Events | p50 ms | p99 ms | max ms |");
        println!("|---|---|---|---|---|");
        for concurrency in [1usize, 50] {
            let mut direct = Vec::new();
            let mut relayed = Vec::new();
            for round in 0..rounds {
                // Baseline: the model's own stream, read directly.
                let reads = (0..concurrency).map(|c| {
                    let (client, url) = (client.clone(), model_url.clone());
                    tokio::spawn(async move {
                        let body = json!({"model": "b", "stream": true,
                            "messages": [{"role": "user", "content": format!("d{round}-{c}")}]});
                        let response = client
                            .post(format!("{url}/chat/completions"))
                            .json(&body)
                            .send()
                            .await
                            .expect("model");
                        read(response, direct_field).await
                    })
                });
                for seen in futures_join(reads).await {
                    direct.extend(latencies(&seen, &stamps));
                }
                // Through the host: a conversation's event stream.
                let reads = (0..concurrency).map(|c| {
                    let (client, api) = (client.clone(), api.clone());
                    tokio::spawn(async move {
                        let body = json!({"message": format!("h{round}-{c}"), "tools": false});
                        let response = client.post(&api).json(&body).send().await.expect("chat");
                        assert_eq!(response.status(), 200);
                        read(response, event_field).await
                    })
                });
                for seen in futures_join(reads).await {
                    relayed.extend(latencies(&seen, &stamps));
                }
            }
            let expected = pieces * concurrency * rounds;
            println!(
                "{}",
                row(
                    &format!("model stream read directly, {concurrency} at once"),
                    direct,
                    expected
                )
            );
            println!(
                "{}",
                row(
                    &format!("chat API text_delta events, {concurrency} at once"),
                    relayed,
                    expected
                )
            );
        }
    });
}

async fn futures_join<T: Send + 'static>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.expect("task"));
    }
    out
}
