//! `toolhost serve --http` driven by rmcp over streamable HTTP and by plain requests: list,
//! call and list_changed after a reload, foreign hosts and origins refused, the bearer token,
//! no address beyond loopback without one, and a clean stop on SIGTERM.

use crate::mcp::{Client, DEADLINE, HttpServer, call, configure, fixture, post, text, tool_names};
use crate::support::fail_ensemble;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_lists_calls_and_announces_reloads() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    let handler = Client::default();
    let changed = handler.changed.clone();
    let client = handler
        .serve(StreamableHttpClientTransport::from_uri(server.url.clone()))
        .await
        .expect("MCP session");
    assert_eq!(tool_names(&client).await, ["echo", "flood_stdout", "spin"]);
    let result = call(&client, "echo", json!({"via": "http"})).await;
    assert_eq!(text(&result), r#"{"via":"http"}"#);

    fixture.write("more.toml", &fail_ensemble("more"));
    tokio::time::timeout(DEADLINE, changed.notified())
        .await
        .expect("notifications/tools/list_changed");
    assert!(tool_names(&client).await.contains(&"fail".to_string()));
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_refuses_foreign_hosts_and_origins() {
    let fixture = fixture();
    let server = HttpServer::start(&fixture, &[], &[]);
    assert_eq!(post(&server.url, &[]).await, 200);
    assert_eq!(
        post(&server.url, &[("origin", "https://evil.example")]).await,
        403
    );
    assert_eq!(
        post(&server.url, &[("origin", "http://localhost:5173")]).await,
        200
    );
    assert_eq!(post(&server.url, &[("host", "evil.example")]).await, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_with_a_token_refuses_requests_without_it() {
    let fixture = fixture();
    let server = HttpServer::start(
        &fixture,
        &["--token-env", "TOOLHOST_TEST_TOKEN"],
        &[("TOOLHOST_TEST_TOKEN", "s3cret")],
    );
    assert_eq!(post(&server.url, &[]).await, 401);
    assert_eq!(
        post(&server.url, &[("authorization", "Bearer wrong")]).await,
        401
    );
    assert_eq!(
        post(&server.url, &[("authorization", "Bearer s3cret")]).await,
        200
    );
    // The scheme is case-insensitive (RFC 9110); the token is not.
    assert_eq!(
        post(&server.url, &[("authorization", "bearer s3cret")]).await,
        200
    );
    assert_eq!(
        post(&server.url, &[("authorization", "bearer S3CRET")]).await,
        401
    );
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            server.url.clone(),
        )
        .auth_header("s3cret");
    let client = Client::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("MCP session");
    assert_eq!(tool_names(&client).await.len(), 3);
    client.cancel().await.expect("close");
}

#[test]
fn http_beyond_loopback_needs_a_token() {
    let fixture = fixture();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let output = command
        .args(["serve", "--http", "0.0.0.0:0"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--token-env"));
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let fixture = fixture();
    let mut server = HttpServer::start(&fixture, &[], &[]);
    let pid = server.child.id().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = server.child.wait().expect("serve exits");
    assert!(
        status.success(),
        "serve did not exit cleanly on SIGTERM: {status:?}"
    );
}

/// A 2025-11-25 session opened at `url` by a raw `initialize` (as the bearer of `token`, if
/// any): its `Mcp-Session-Id`.
pub(crate) async fn open_session(url: &str, token: Option<&str>) -> String {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let opened = request.send().await.expect("initialize");
    assert_eq!(opened.status().as_u16(), 200);
    opened.headers()["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_is_answered_204_and_the_session_is_gone() {
    let server = HttpServer::start(&fixture(), &[], &[]);
    let client = reqwest::Client::new();
    let session = open_session(&server.url, None).await;
    let end = || {
        client
            .delete(&server.url)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
    };
    let ended = end().await.expect("DELETE");
    // Done, not accepted for later: what clients (the Python SDK) expect.
    assert_eq!(ended.status().as_u16(), 204);
    assert!(ended.bytes().await.expect("body").is_empty());
    // Gone: a request of the session finds none.
    let after = client
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(after.status().as_u16(), 404);
    let said = after.text().await.expect("text");
    assert!(
        said.contains("no such MCP session: it ended or the host restarted"),
        "{said}"
    );
}
