//! What a hostile tool can make the host itself hold, bounded: measured as the peak resident
//! memory of a running `toolhost serve` before and after the attack.

use crate::mcp::HttpServer;
use crate::support::{Fixture, ensemble, peak_kib};
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;

/// A running serve over these ensembles, and an MCP client of it.
pub(crate) async fn serve(fixture: &Fixture) -> (HttpServer, RunningService<RoleClient, ()>) {
    let server = HttpServer::start(fixture, &[], &[]);
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            server.url.clone(),
        ))
        .await
        .expect("MCP session");
    (server, client)
}

pub(crate) async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: serde_json::Value,
) -> CallToolResult {
    let serde_json::Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
        .await
        .expect("tools/call")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_fields_a_guest_piles_up_stay_within_its_memory_limit() {
    let fixture = Fixture::new();
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"header_flood\", dedup = \"off\" }\n\
             limits = { memory-mib = 16, timeout-ms = 10000 }\n",
        ),
    );
    let (server, client) = serve(&fixture).await;
    let before = peak_kib(server.child.id());
    for _ in 0..4 {
        // Each call ends (refused, or trapped at the resource limit) rather than growing.
        let result = call(&client, "header_flood", serde_json::json!({"bytes": 8000})).await;
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        assert!(
            text.starts_with("resource-limit: ") && text.contains("1024 resources"),
            "{text}"
        );
    }
    let grown = peak_kib(server.child.id()).saturating_sub(before);
    // 16 MiB of memory limit: the host may hold about twice that for the guest, once.
    assert!(grown < 48 * 1024, "the host grew by {grown} KiB");
    client.cancel().await.expect("close");
}
