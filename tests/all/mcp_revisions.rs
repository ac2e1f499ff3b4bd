//! `toolhost serve` at MCP 2026-07-28, beside the handshake revisions: `server/discover`,
//! session-less requests over stdio and HTTP (rmcp's client, and plain HTTP requests to see
//! the wire), `subscriptions/listen` after a reload, at its cap and at a shutdown, the cache
//! hints on `tools/list`, the revision's errors, the Python SDK at both revisions, and dedup's
//! scope without sessions (both sides of the rule). The Tasks extension has its own tests
//! (`mcp_tasks`).

use crate::mcp::{HttpServer, configure, stdio_serve};
use crate::support::{Fixture, fail_ensemble};
use rmcp::model::{
    CacheScope, CallToolRequestParams, ClientConfig, PaginatedRequestParams, ProtocolVersion,
    ServerNotification, SubscriptionFilter,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// A failure deadline for waits, not a timing assertion.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

const V2026: &str = "2026-07-28";

const CONVERSATION: &str = "io.toolhost/conversation";

#[derive(Clone, Default)]
pub(crate) struct Client;

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

pub(crate) fn fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture
}

/// The audit records so far, as (session, tool, deduplicated).
fn audit(fixture: &Fixture) -> Vec<(String, String, bool)> {
    let text = std::fs::read_to_string(fixture.root().join("audit.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).expect("an audit line");
            (
                record["session"].as_str().expect("session").to_string(),
                record["tool"].as_str().expect("tool").to_string(),
                record["deduplicated"].as_bool().expect("deduplicated"),
            )
        })
        .collect()
}

fn echo_call(arguments: Value, meta: Option<(&str, &str)>) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("an object")
    };
    let mut params = CallToolRequestParams::new("echo").with_arguments(arguments);
    if let Some((key, value)) = meta {
        let mut object = rmcp::model::RequestMetaObject::new();
        object.insert(key.to_string(), json!(value));
        params.meta = Some(object);
    }
    params
}

pub(crate) async fn modern_stdio(fixture: &Fixture) -> RunningService<RoleClient, Client> {
    Client
        .serve_with_lifecycle(
            stdio_serve(fixture),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_at_2026_07_28_lists_calls_and_announces_reloads_without_a_handshake() {
    let fixture = fixture();
    let client = modern_stdio(&fixture).await;
    let info = client.peer_info().expect("discovered");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);

    let page = client
        .list_tools(Some(PaginatedRequestParams::default()))
        .await
        .expect("tools/list");
    assert_eq!(page.tools.len(), 1);
    assert_eq!(page.ttl_ms, Some(1000));
    assert_eq!(page.cache_scope, Some(CacheScope::Private));

    let result = client
        .call_tool(echo_call(json!({"n": 1}), None))
        .await
        .expect("tools/call");
    assert_eq!(
        result.content[0].as_text().map(|t| t.text.as_str()),
        Some(r#"{"n":1}"#)
    );

    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = client.peer().listen(filter).await.expect("listen");
    fixture.write("more.toml", &fail_ensemble("more"));
    let notification = tokio::time::timeout(DEADLINE, subscription.next())
        .await
        .expect("a notification before the deadline")
        .expect("a well-formed stream")
        .expect("not ended");
    assert!(
        matches!(
            notification,
            ServerNotification::ToolListChangedNotification(_)
        ),
        "{notification:?}"
    );
    let names: Vec<String> = (client.list_all_tools().await.expect("tools/list"))
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"fail".to_string()), "{names:?}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_the_connection_or_a_named_conversation_is_the_dedup_scope() {
    let fixture = fixture();
    let client = modern_stdio(&fixture).await;
    let call = |arguments: Value, meta: Option<(&'static str, &'static str)>| {
        client.call_tool(echo_call(arguments, meta))
    };
    call(json!({"a": 1}), None).await.expect("call");
    call(json!({"a": 1}), None).await.expect("call");
    let a = Some((CONVERSATION, "conversation-0000000000a"));
    let b = Some((CONVERSATION, "conversation-0000000000b"));
    call(json!({"a": 1}), a).await.expect("call");
    call(json!({"a": 1}), a).await.expect("call");
    call(json!({"a": 1}), b).await.expect("call");
    let refused = call(json!({"a": 1}), Some((CONVERSATION, "short")))
        .await
        .expect_err("a short conversation id is refused");
    assert!(refused.to_string().contains(CONVERSATION), "{refused}");
    client.cancel().await.expect("close");

    let records = audit(&fixture);
    let deduplicated: Vec<bool> = records.iter().map(|r| r.2).collect();
    assert_eq!(
        deduplicated,
        [false, true, false, true, false],
        "{records:?}"
    );
    assert_eq!(records[0].0, records[1].0, "one session for the connection");
    assert_eq!(records[2].0, records[3].0);
    assert_ne!(records[2].0, records[4].0, "conversations are apart");
    assert!(records.iter().all(|r| !r.0.contains("conversation-")));
}

/// One JSON-RPC request at 2026-07-28 over plain HTTP, with the revision's headers and
/// `_meta`: the HTTP status, the response headers, and the JSON-RPC message (read from the
/// SSE stream or the JSON body).
pub(crate) async fn modern_post(
    url: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let meta = params
        .as_object_mut()
        .expect("params object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    let meta = meta.as_object_mut().expect("_meta object");
    meta.entry("io.modelcontextprotocol/protocolVersion")
        .or_insert(json!(V2026));
    meta.entry("io.modelcontextprotocol/clientInfo")
        .or_insert(json!({"name": "raw", "version": "1"}));
    meta.entry("io.modelcontextprotocol/clientCapabilities")
        .or_insert(json!({}));
    // The header says what `_meta` says, as a client must.
    let version = meta["io.modelcontextprotocol/protocolVersion"]
        .as_str()
        .unwrap_or(V2026)
        .to_string();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    for (key, value) in headers {
        request = request.header(*key, *value);
    }
    let response = request.body(body.to_string()).send().await.expect("POST");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let message = crate::support::answer_of(&text).unwrap_or(Value::Null);
    (status, headers, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_2026_07_28_requests_without_a_session() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    let url = server.url.as_str();

    let (status, headers, discovered) =
        modern_post(url, "server/discover", None, json!({}), &[]).await;
    assert_eq!(status, 200, "{discovered}");
    assert!(!headers.contains_key("mcp-session-id"), "{headers:?}");
    let versions = &discovered["result"]["supportedVersions"];
    assert!(
        versions
            .as_array()
            .is_some_and(|v| v.contains(&json!(V2026)) && v.contains(&json!("2025-11-25"))),
        "{discovered}"
    );
    assert!(discovered["result"]["capabilities"]["tools"]["listChanged"] == json!(true));

    let (status, headers, listed) = modern_post(url, "tools/list", None, json!({}), &[]).await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("mcp-session-id"));
    assert_eq!(listed["result"]["ttlMs"], json!(1000), "{listed}");
    assert_eq!(listed["result"]["cacheScope"], json!("private"));

    let call = json!({"name": "echo", "arguments": {"over": "2026"}});
    let (status, _, called) = modern_post(url, "tools/call", Some("echo"), call, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        called["result"]["content"][0]["text"],
        json!(r#"{"over":"2026"}"#),
        "{called}"
    );

    // The revision's errors: an unknown version, a header that contradicts the body, a
    // request without its per-request metadata.
    let old = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}});
    let (_, _, refused) = modern_post(url, "tools/list", None, old, &[]).await;
    assert_eq!(refused["error"]["code"], json!(-32022), "{refused}");
    assert!(
        refused["error"]["data"]["supported"]
            .as_array()
            .is_some_and(|v| v.contains(&json!(V2026))),
        "{refused}"
    );
    let call = json!({"name": "echo", "arguments": {}});
    let (status, _, mismatch) = modern_post(url, "tools/call", Some("other"), call, &[]).await;
    assert_eq!(
        mismatch["error"]["code"],
        json!(-32020),
        "{status} {mismatch}"
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let bare = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V2026)
        .header("mcp-method", "tools/list")
        .body(body.to_string())
        .send()
        .await
        .expect("POST");
    let text = bare.text().await.expect("body");
    assert!(
        text.contains("-32602") && text.contains("_meta"),
        "a request without _meta is refused: {text}"
    );

    // The handshake revisions still work on the same endpoint.
    let legacy = rmcp::ServiceExt::serve(
        Client,
        rmcp::transport::StreamableHttpClientTransport::from_uri(server.url.clone()),
    )
    .await
    .expect("a 2025-11-25 session");
    assert!(
        legacy
            .peer_info()
            .expect("initialized")
            .protocol_version
            .has_initialize()
    );
    assert_eq!(legacy.list_all_tools().await.expect("tools/list").len(), 1);
    legacy.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_only_a_named_conversation_with_the_same_credentials_shares_results() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    let url = server.url.as_str();
    let call = |conversation: Option<&str>| {
        let mut params = json!({"name": "echo", "arguments": {"same": true}});
        if let Some(id) = conversation {
            params["_meta"] = json!({CONVERSATION: id});
        }
        params
    };
    let id = "4f1c2a9e-7d3b-4c55-a0e1-9b8f6d2c3e10";
    let other = "0a7e3d21-95c4-4b8e-b6f2-1c9d8e7a6b54";
    /// A conversation id, and the request's extra headers.
    type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)]);
    let cases: [Case; 6] = [
        (None, &[]),
        (None, &[]),
        (Some(id), &[]),
        (Some(id), &[]),
        (Some(other), &[]),
        (Some(id), &[("authorization", "Bearer someone-else")]),
    ];
    for (conversation, headers) in cases {
        let (status, _, answer) =
            modern_post(url, "tools/call", Some("echo"), call(conversation), headers).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    let (_, _, refused) = modern_post(
        url,
        "tools/call",
        Some("echo"),
        call(Some("not-secret")),
        &[],
    )
    .await;
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");

    let records = audit(&fixture);
    let deduplicated: Vec<bool> = records.iter().map(|r| r.2).collect();
    // Without a conversation, each request is its own scope; with one, the second call is
    // answered from the first; another id, or the same id with other credentials, is not.
    assert_eq!(
        deduplicated,
        [false, false, false, true, false, false],
        "{records:?}"
    );
    assert_ne!(records[0].0, records[1].0);
    assert_eq!(records[2].0, records[3].0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_less_requests_do_not_count_as_sessions_but_a_disguised_initialize_is_refused() {
    let fixture = fixture();
    let config = fixture.write_host_file("host", "max-mcp-sessions = 1");
    let server = HttpServer::start(&fixture, &["--config", config.to_str().expect("path")], &[]);
    let url = server.url.as_str();
    let first = crate::mcp::post(url, &[]).await;
    assert_eq!(first, 200, "the one session opens");
    assert_eq!(crate::mcp::post(url, &[]).await, 503, "a second is refused");
    for n in 0..5 {
        let call = json!({"name": "echo", "arguments": {"n": n}});
        let (status, _, answer) = modern_post(url, "tools/call", Some("echo"), call, &[]).await;
        assert_eq!(status, 200, "{answer}");
    }
    // An initialize that claims to be a 2026-07-28 tools/call in its headers.
    let disguised = crate::mcp::post(
        url,
        &[
            ("mcp-protocol-version", V2026),
            ("mcp-method", "tools/call"),
        ],
    )
    .await;
    assert_ne!(disguised, 200, "the disguised initialize opened a session");
}

/// Runs `tests/clients/<script>` (an official Python SDK client) at revision `mode` against
/// `target`: a `toolhost serve` over stdio on `fixture`, or `server` over HTTP. The one JSON
/// line it prints; a failed run fails the test with its output.
pub(crate) fn python_client(
    fixture: &Fixture,
    script: &str,
    mode: &str,
    target: &str,
    server: &HttpServer,
) -> Value {
    python_client_at(fixture, script, mode, target, &server.url)
}

/// [`python_client`] against `url` over HTTP (a balancer's, say), unless `target` is `stdio`.
pub(crate) fn python_client_at(
    fixture: &Fixture,
    script: &str,
    mode: &str,
    target: &str,
    url: &str,
) -> Value {
    let python = crate::mcp_list::test_tools().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/clients")
        .join(script);
    let mut command = std::process::Command::new(&python);
    configure(&mut command, fixture);
    command.arg(&script).arg(mode);
    match target {
        "stdio" => command.args([env!("CARGO_BIN_EXE_toolhost"), "serve"]),
        _ => command.arg(url),
    };
    let output = command.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{mode} over {target}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

#[test]
fn the_python_sdk_speaks_both_revisions_over_stdio_and_http_tools_prompts_and_resources() {
    let fixture = fixture();
    std::fs::write(
        fixture.mkdir("docs").join("hello.txt"),
        "Hello from a file.",
    )
    .expect("write");
    fixture.write(
        "greetings.toml",
        "schema-version = 1\n[ensemble]\nname = \"greetings\"\n\n[[prompts]]\nname = \"greet\"\n\
         description = \"Greets\"\narguments = [{ name = \"name\", required = true }]\n\
         messages = [{ text = \"Hello, {{ name }}!\" }]\n\n[[resources]]\nname = \"docs\"\n\
         directory = \"../docs\"\nuri-prefix = \"docs://\"\n",
    );
    let server = HttpServer::start(&fixture, &[], &[]);
    for (mode, expected) in [
        ("legacy", "2025-11-25"),
        ("2026-07-28", V2026),
        ("auto", V2026),
    ] {
        for target in ["stdio", "http"] {
            let answer = python_client(&fixture, "revisions.py", mode, target, &server);
            assert_eq!(
                answer["protocol_version"],
                json!(expected),
                "{mode} {target}"
            );
            assert_eq!(answer["tools"], json!(["echo"]), "{mode} {target}");
            assert_eq!(
                answer["text"],
                json!(r#"{"from":"python"}"#),
                "{mode} {target}"
            );
            assert_eq!(answer["prompts"], json!(["greet"]), "{mode} {target}");
            assert_eq!(answer["prompt"], json!("Hello, python!"), "{mode} {target}");
            assert_eq!(
                answer["resources"],
                json!(["docs://hello.txt"]),
                "{mode} {target}"
            );
            assert_eq!(
                answer["resource"],
                json!("Hello from a file."),
                "{mode} {target}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_subscription_does_not_hold_up_a_shutdown() {
    let fixture = fixture();
    let mut server = HttpServer::start(&fixture, &[], &[]);
    let client = Client
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(server.url.clone()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 client over HTTP");
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = client.peer().listen(filter).await.expect("listen");
    let started = std::time::Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    // The stream ends with the host's final result, and the host exits without waiting
    // out its answer grace for the open stream.
    let end = tokio::time::timeout(DEADLINE, subscription.next())
        .await
        .expect("the stream ended");
    assert!(matches!(end, Ok(None)), "{end:?}");
    let status = tokio::task::block_in_place(|| server.child.wait()).expect("exit");
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < DEADLINE,
        "the host took {:?} to stop",
        started.elapsed()
    );
    assert!(
        matches!(
            subscription.end(),
            Some(rmcp::service::SubscriptionEnd::Graceful(_))
        ),
        "{:?}",
        subscription.end()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_past_the_cap_of_a_connection_end_with_an_error() {
    let fixture = fixture();
    let client = modern_stdio(&fixture).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    // rmcp acknowledges a listen before the host's handler counts it, so which of the
    // streams past the cap is refused depends on scheduling: exactly one ends, with the error.
    let mut open = Vec::new();
    for _ in 0..=toolhost::mcp::MAX_LISTENERS_PER_CONNECTION {
        open.push(client.peer().listen(filter.clone()).await.expect("listen"));
    }
    let (end, refused) = {
        let nexts = open.iter_mut().map(|stream| Box::pin(stream.next()));
        let (end, index, _) =
            tokio::time::timeout(DEADLINE, futures_util::future::select_all(nexts))
                .await
                .expect("the stream ended");
        (end, index)
    };
    open.remove(refused);
    let error = end.expect_err("ended with an error");
    assert!(
        error
            .to_string()
            .contains("subscriptions/listen streams are open"),
        "{error}"
    );
    // One closes: a new one is taken.
    let mut first = open.remove(0);
    first.cancel().await.expect("cancel");
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let mut again = client.peer().listen(filter.clone()).await.expect("listen");
        let ended = tokio::time::timeout(Duration::from_millis(300), again.next()).await;
        if ended.is_err() {
            break; // Still open: taken.
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stream was taken after one closed"
        );
    }
    client.cancel().await.expect("close");
}
