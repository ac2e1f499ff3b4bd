//! MCP logging, per session: a plugin's log lines reach only the session whose call made
//! them, and a quiet session that closes leaves no relay task behind.

use crate::mcp::{Client, DEADLINE, HttpServer, call, fixture, tool_names};
use crate::support::{Fixture, ensemble};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // MCP logging, part of the revisions toolhost serves
async fn a_plugins_log_lines_reach_only_the_session_whose_call_made_them() {
    use rmcp::model::{LoggingLevel, SetLevelRequestParams};
    let fixture = Fixture::new();
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"log\", dedup = \"off\" }\n",
        ),
    );
    let server = HttpServer::start(&fixture, &[], &[]);
    let connect = || async {
        let handler = Client::default();
        let client = handler
            .clone()
            .serve(StreamableHttpClientTransport::from_uri(server.url.clone()))
            .await
            .expect("MCP session");
        client
            .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
            .await
            .expect("logging/setLevel");
        (handler, client)
    };
    let (alice_logs, alice) = connect().await;
    let (bob_logs, bob) = connect().await;

    // Alice's call logs her secret; then Bob's call logs a marker.
    let result = call(&alice, "log", json!({"message": "alice password=hunter2"})).await;
    assert_eq!(result.is_error, Some(false));
    alice_logs.log_containing("hunter2").await;
    let result = call(&bob, "log", json!({"message": "bob was here"})).await;
    assert_eq!(result.is_error, Some(false));
    // Bob sees his own line; by the time he does, Alice's (logged earlier) would have come.
    bob_logs.log_containing("bob was here").await;
    let bob_saw = bob_logs.logs.lock().expect("logs").join("\n");
    assert!(
        !bob_saw.contains("hunter2"),
        "Bob saw Alice's log line: {bob_saw}"
    );
    let alice_saw = alice_logs.logs.lock().expect("logs").join("\n");
    assert!(!alice_saw.contains("bob was here"), "{alice_saw}");
    alice.cancel().await.expect("close");
    bob.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_leaves_no_relay_task_behind() {
    use toolhost::mcp::McpServer;
    use toolhost::mcp::log::LogRelay;
    let fixture = fixture();
    let host = Arc::new(fixture.host().await);
    let logs = LogRelay::default();
    // The host's own watch of its resources (one per host, started by its first session)
    // is not a session's.
    drop(host.resource_events());
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    // Quiet sessions: no reload and no log line ever tells their relays that they are gone.
    for n in 0..5 {
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        let server = McpServer::new(host.clone(), format!("quiet-{n}")).with_logs(logs.clone());
        let serving = tokio::spawn(async move {
            let running = server.serve(server_end).await.expect("server");
            let _ = running.waiting().await;
        });
        let client = Client::default().serve(client_end).await.expect("client");
        assert!(!tool_names(&client).await.is_empty());
        client.cancel().await.expect("close");
        serving.await.expect("the session ends");
    }
    let settled = async {
        while metrics.num_alive_tasks() > before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert!(
        tokio::time::timeout(DEADLINE, settled).await.is_ok(),
        "{} tasks outlive their sessions",
        metrics.num_alive_tasks() - before
    );
}
