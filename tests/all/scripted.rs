//! Scripted LLM provider servers: an HTTP server on 127.0.0.1 that answers each request with
//! the next recorded reply, in the real wire format (OpenAI chat completions or Anthropic
//! messages, streamed as server-sent events or whole), and records what the host sent.
//!
//! The server runs on its own thread and runtime, so a test may drive it from async code or
//! from a `toolhost chat` child process; it stops when dropped.

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One reply: a status, headers and a body (which, with `endless`, repeats for ever).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub endless: bool,
}

/// A body that repeats one chunk for ever, as a hostile endpoint streams.
struct Endless(bytes::Bytes);

impl http_body::Body for Endless {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(self.0.clone()))))
    }
}

/// A streamed OpenAI answer whose text never ends.
pub fn endless_openai_stream() -> Reply {
    let chunk = json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1,
        "model": "scripted",
        "choices": [{ "index": 0, "delta": {"content": "x".repeat(4000)}, "finish_reason": null }],
    });
    Reply {
        endless: true,
        ..Reply::sse(format!("data: {chunk}\n\n"))
    }
}

impl Reply {
    fn sse(body: String) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body,
            endless: false,
        }
    }

    pub(crate) fn json(value: Value) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: value.to_string(),
            endless: false,
        }
    }
}

/// An error status with a JSON error body, and `Retry-After` if given.
pub fn status(code: u16, retry_after: Option<&str>) -> Reply {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(seconds) = retry_after {
        headers.push(("retry-after".into(), seconds.into()));
    }
    Reply {
        status: code,
        headers,
        body: json!({"error": {"type": "scripted", "message": format!("scripted status {code}")}})
            .to_string(),
        endless: false,
    }
}

/// A request the host sent.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A running scripted server.
pub struct Scripted {
    /// `http://127.0.0.1:PORT/v1`, the base URL to give the provider.
    pub base_url: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Scripted {
    /// Starts a server that answers with `replies`, in order; past the end it answers 500.
    pub fn start(replies: Vec<Reply>) -> Self {
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            requests: Mutex::default(),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("address").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = axum::Router::new().fallback(answer).with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("scripted server");
            });
        });
        Scripted {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The requests received so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().expect("requests").clone()
    }

    /// Replies not yet used.
    pub fn unused(&self) -> usize {
        self.shared.replies.lock().expect("replies").len()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn answer(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let path = request.uri().path().to_string();
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    shared.requests.lock().expect("requests").push(Recorded {
        path,
        headers,
        body,
    });
    let reply = shared
        .replies
        .lock()
        .expect("replies")
        .pop_front()
        .unwrap_or_else(|| Reply {
            status: 500,
            headers: Vec::new(),
            body: "the script has no more replies".into(),
            endless: false,
        });
    let mut response = axum::response::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        response = response.header(name, value);
    }
    let body = if reply.endless {
        axum::body::Body::new(Endless(bytes::Bytes::from(reply.body)))
    } else {
        axum::body::Body::from(reply.body)
    };
    response.body(body).expect("response")
}

/// `text` in pieces of a few characters, as models stream it.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// OpenAI chat completions replies.
pub mod openai {
    use super::*;

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        let chunk = json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1,
            "model": "scripted",
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        format!("data: {chunk}\n\n")
    }

    /// A streamed answer: `text`, then `calls` (id, name, arguments text), with each call's
    /// arguments split over several deltas and its id in the first one only. An empty id is
    /// left out, as some servers do.
    pub fn stream(text: &str, calls: &[(&str, &str, &str)]) -> Reply {
        let mut body = chunk(json!({"role": "assistant", "content": ""}), None);
        for piece in pieces(text, 4) {
            body.push_str(&chunk(json!({ "content": piece }), None));
        }
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            let mut first = json!({
                "index": index, "type": "function",
                "function": { "name": name, "arguments": "" },
            });
            if !id.is_empty() {
                first["id"] = json!(id);
            }
            body.push_str(&chunk(json!({ "tool_calls": [first] }), None));
            for piece in pieces(arguments, 5) {
                body.push_str(&chunk(
                    json!({ "tool_calls": [{ "index": index, "function": { "arguments": piece } }] }),
                    None,
                ));
            }
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        body.push_str(&chunk(json!({}), Some(finish)));
        let usage = json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "choices": [],
            "usage": { "prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110 },
        });
        body.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
        Reply::sse(body)
    }

    /// A streamed text answer.
    pub fn text(text: &str) -> Reply {
        stream(text, &[])
    }

    /// A 200 whose stream stops part-way through `text`: no `finish_reason`, no `[DONE]`
    /// (llama-cpp-python's server does this when its handler fails mid-answer).
    pub fn cut_short(text: &str) -> Reply {
        let mut body = chunk(json!({"role": "assistant", "content": ""}), None);
        for piece in pieces(text, 4) {
            body.push_str(&chunk(json!({ "content": piece }), None));
        }
        Reply::sse(body)
    }

    /// A whole (non-streamed) answer with `calls` (id, name, arguments as given: a string
    /// or an object).
    pub fn whole(text: &str, calls: &[(&str, &str, Value)]) -> Reply {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
            })
            .collect();
        let mut message = json!({ "role": "assistant", "content": text });
        if !tool_calls.is_empty() {
            message["tool_calls"] = json!(tool_calls);
        }
        Reply::json(json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "model": "scripted",
            "choices": [{ "index": 0, "message": message,
                          "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" } }],
            "usage": { "prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55 },
        }))
    }
}

/// Anthropic messages replies.
pub mod anthropic {
    use super::*;

    fn event(name: &str, data: Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    /// A streamed answer: a text block (if `text` is not empty), then a `tool_use` block per
    /// call (id, name, input JSON text, sent in `input_json_delta` pieces).
    pub fn stream(text: &str, calls: &[(&str, &str, &str)]) -> Reply {
        let mut body = event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_scripted", "type": "message", "role": "assistant", "content": [],
                "model": "scripted", "stop_reason": null,
                "usage": {"input_tokens": 200, "output_tokens": 1}}}),
        );
        body.push_str(&event("ping", json!({"type": "ping"})));
        let mut index = 0;
        if !text.is_empty() {
            body.push_str(&event(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in pieces(text, 4) {
                body.push_str(&event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": piece}}),
                ));
            }
            body.push_str(&event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            index = 1;
        }
        for (id, name, input) in calls {
            body.push_str(&event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                       "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            ));
            for piece in pieces(input, 6) {
                body.push_str(&event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
            body.push_str(&event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
            index += 1;
        }
        let stop = if calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        body.push_str(&event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": 20}}),
        ));
        body.push_str(&event("message_stop", json!({"type": "message_stop"})));
        Reply::sse(body)
    }

    /// A streamed text answer.
    pub fn text(text: &str) -> Reply {
        stream(text, &[])
    }

    /// A 200 whose stream stops part-way through `text`, without `message_stop`.
    pub fn cut_short(text: &str) -> Reply {
        let Reply { body, .. } = stream(text, &[]);
        let end = body.find("event: content_block_stop").unwrap_or(body.len());
        Reply::sse(body[..end].to_string())
    }
}
