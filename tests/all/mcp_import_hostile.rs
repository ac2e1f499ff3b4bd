//! Imported MCP servers that misbehave, and the bounds that hold them: one that never answers
//! `initialize`, one with more tools than `max-tools`, a flood of `list_changed` (reloads and
//! log lines), a stderr line that never ends, and tool lists of megabytes page after page.

use crate::mcp_import::{
    DEADLINE, announces_tool_changes, import_ensemble, inner_fixture, serve_args, serve_over_http,
};
use crate::support::Fixture;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_initialize_delays_nothing_serve_has() {
    use rmcp::ServiceExt;
    let outer = Fixture::new();
    outer.write_echo();
    // A "server" that reads its stdin and never says a word.
    outer.write_mcp_import(
        "silent",
        "command = \"sleep\"\nargs = [\"600\"]\nstartup-timeout-ms = 3000",
    );
    let status = outer.root().join("status.json");
    let client = ().serve(crate::mcp::stdio_serve(&outer)).await.expect("MCP session");
    // Before the silent server's start timeout: the status says what the ensemble waits
    // for, and what is loaded answers calls at once.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let published = std::fs::read_to_string(&status).unwrap_or_default();
        if published.contains("\"servers\"") && published.contains("sleep 600") {
            break;
        }
        assert!(
            !published.contains("did not start within"),
            "the start was waited for: {published}"
        );
        assert!(std::time::Instant::now() < deadline, "{published}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let result = crate::mcp::call(&client, "echo", json!({"while": "starting"})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    // The first list waits for the first load, which this server's start is part of: it
    // ends at the start's timeout (3 s, within the list's 30 s), and the list has echo.
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["echo"]);
    // At its timeout the ensemble is refused, with the reason; echo served throughout.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let published = std::fs::read_to_string(&status).unwrap_or_default();
        if published.contains("did not start within 3000 ms") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{published}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = crate::mcp::call(&client, "echo", json!({"still": "here"})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_more_tools_than_max_tools_is_refused_without_reading_them_all() {
    let inner = Fixture::new();
    inner.write("many.toml", &crate::mcp_list::many_echoes(4_500));
    let outer = Fixture::new();
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "")
            .replace("[ensemble.mcp]\n", "[ensemble.mcp]\nmax-tools = 3000\n"),
    );
    let resolved = outer.resolve().await;
    let message = resolved.refused[0].diagnostics[0].to_string();
    assert!(
        message.contains("offers more than 3000 tools (4000 so far)"),
        "{message}"
    );
    // Within a larger bound, all of them come, each in one step of the import.
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "")
            .replace("[ensemble.mcp]\n", "[ensemble.mcp]\nmax-tools = 5000\n"),
    );
    let resolved = outer.resolve().await;
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    assert_eq!(resolved.catalog.tools().count(), 4_501);
    // A reload that lowers the bound applies it, though the server's command is unchanged.
    let reloader = crate::support::reloader_with_imports(outer.ensembles()).await;
    assert!(reloader.status().refused.is_empty());
    outer.write(
        "inner.toml",
        &import_ensemble(&inner, "")
            .replace("[ensemble.mcp]\n", "[ensemble.mcp]\nmax-tools = 3000\n"),
    );
    let change = reloader.reload().await;
    let errors = change.refused.first().map(|r| r.errors.join("\n"));
    assert!(
        errors
            .as_deref()
            .is_some_and(|e| e.contains("offers more than 3000 tools")),
        "{errors:?}"
    );
}

/// An MCP server that announces a new tool list `times` times right after it is initialized.
#[derive(Clone)]
struct Flooder {
    times: usize,
    /// Notifications sent so far, over every session.
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ServerHandler for Flooder {
    /// The handshake revisions, whose notifications reach a session without a subscription.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        announces_tool_changes()
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = serde_json::Map::from_iter([("type".to_string(), json!("object"))]);
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            rmcp::model::Tool::new("steady", "Always here.", Arc::new(schema)),
        ]))
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<rmcp::RoleServer>) {
        let times = self.times;
        let sent = self.sent.clone();
        tokio::spawn(async move {
            for _ in 0..times {
                if context.peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changed_reloads_at_most_once_a_second() {
    let (port, server) = serve_over_http(Flooder {
        times: 20_000,
        sent: Arc::default(),
    })
    .await;

    let outer = Fixture::new();
    outer.write_mcp_import("flood", &format!("url = \"http://127.0.0.1:{port}/mcp\""));
    let reloader = crate::support::reloader_with_imports(outer.ensembles()).await;
    assert!(reloader.catalog().snapshot().get("steady").is_some());
    let mut changes = reloader.subscribe();
    let _watch = reloader.watch(Duration::from_millis(50)).expect("watch");
    // Count the reloads of three seconds of flood.
    let mut reloads = 0;
    let window = tokio::time::sleep(Duration::from_secs(3));
    tokio::pin!(window);
    loop {
        tokio::select! {
            change = changes.recv() => {
                if change.is_ok() {
                    reloads += 1;
                }
            }
            () = &mut window => break,
        }
    }
    assert!(reloads >= 1, "the announcements were not heard");
    assert!(reloads <= 5, "{reloads} reloads in three seconds");
    assert!(reloader.catalog().snapshot().get("steady").is_some());
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changed_writes_little_to_the_log_even_at_v() {
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flooder = Flooder {
        times: 200_000,
        sent: sent.clone(),
    };
    let (port, server) = serve_over_http(flooder).await;
    let outer = Fixture::new();
    outer.write_mcp_import("flood", &format!("url = \"http://127.0.0.1:{port}/mcp\""));
    for verbosity in ["-v", "-vv"] {
        let before = sent.load(std::sync::atomic::Ordering::Relaxed);
        let host = crate::mcp::HttpServer::start(&outer, &[verbosity], &[]);
        // Six seconds of flood: rmcp logs each notification at info, which at -v used to
        // write 120 to 340 MB.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let written = host.stderr_bytes();
        assert!(
            written < 256 << 10,
            "{verbosity}: {written} bytes of log in six seconds:\n{}",
            &host.stderr()[..host.stderr().len().min(2000)]
        );
        // The flood was real: thousands of notifications reached the host meanwhile.
        let flooded = sent.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(
            flooded > 1000,
            "{verbosity}: only {flooded} notifications were sent"
        );
        eprintln!("{verbosity}: {flooded} notifications, {written} bytes of log");
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_stderr_never_ends_a_line_costs_the_host_no_memory() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    // The imported server first writes 256 MiB without a line end to its stderr, which the
    // host reads into its log, then serves as usual.
    let inner = inner_fixture();
    let quoted: Vec<String> = serve_args(&inner)
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let script = format!(
        "head -c 268435456 /dev/zero >&2; exec '{}' {}",
        env!("CARGO_BIN_EXE_toolhost"),
        quoted.join(" ")
    );
    let outer = Fixture::new();
    outer.write(
        "inner.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"inner\"\nprefix = \"in\"\n\n\
             [ensemble.mcp]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\nstartup-timeout-ms = 60000\n"
        ),
    );
    let server = crate::mcp::HttpServer::start(&outer, &[], &[]);
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            server.url.clone(),
        ))
        .await
        .expect("MCP session");
    let deadline = std::time::Instant::now() + DEADLINE;
    let result = loop {
        let serde_json::Value::Object(arguments) = json!({"still": "here"}) else {
            unreachable!()
        };
        let result = client
            .call_tool(CallToolRequestParams::new("in_echo").with_arguments(arguments))
            .await
            .expect("tools/call");
        if result.is_error != Some(true) || std::time::Instant::now() > deadline {
            break result;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(result.is_error, Some(false), "{result:?}");
    // The line would have been 256 MiB in the host's memory; it was cut at 4 KiB.
    let peak = crate::support::peak_kib(server.child.id());
    assert!(peak < 128 * 1024, "the host peaked at {peak} KiB");
    client.cancel().await.expect("close");
}

/// An MCP server whose tool list never ends: every page holds one tool with a 1 MiB
/// description and points to another page.
#[derive(Clone)]
struct Verbose;

impl rmcp::ServerHandler for Verbose {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let page: u64 = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let schema = serde_json::Map::from_iter([("type".to_string(), json!("object"))]);
        let tool = rmcp::model::Tool::new(
            format!("wordy_{page}"),
            "x".repeat(1 << 20),
            Arc::new(schema),
        );
        let mut result = rmcp::model::ListToolsResult::with_all_items(vec![tool]);
        result.next_cursor = Some((page + 1).to_string());
        Ok(result)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lists_megabytes_page_after_page_is_cut_off_by_size() {
    let (port, server) = serve_over_http(Verbose).await;
    let outer = Fixture::new();
    outer.write_mcp_import(
        "wordy",
        &format!("url = \"http://127.0.0.1:{port}/mcp\"\nstartup-timeout-ms = 60000"),
    );
    outer.write_echo();
    let resolved = outer.resolve().await;
    let message = resolved.refused[0].diagnostics[0].to_string();
    // Sixteen tools of a little over 1 MiB each pass the 16 MiB bound, far below max-tools.
    assert!(
        message.contains(
            "lists more than 16 MiB of tool names, descriptions and schemas (16 tools so far)"
        ),
        "{message}"
    );
    assert!(resolved.catalog.get("echo").is_some());
    server.abort();
}
