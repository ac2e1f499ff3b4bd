//! `tools/list` of `toolhost serve` on a large catalog: every tool reaches a client that
//! follows `nextCursor`, pages are bounded, and each tool says whether it is destructive.

use crate::mcp::{configure, stdio_serve};
use crate::support::{Fixture, ensemble};
use rmcp::ServiceExt;
use rmcp::model::PaginatedRequestParams;
use std::collections::HashSet;
use std::process::{Command, Stdio};

/// An ensemble of `count` echo invokers named `echo_00000`... plus `wipe`, destructive.
pub(crate) fn many_echoes(count: usize) -> String {
    let mut rest = String::with_capacity(count * 60);
    for i in 0..count {
        rest.push_str(&format!(
            "[[invokers]]\ninvoker = {{ name = \"echo_{i:05}\", tool = \"echo\" }}\n"
        ));
    }
    rest.push_str(
        "[[invokers]]\ninvoker = { name = \"wipe\", tool = \"echo\", destructive = true }\n",
    );
    ensemble("many", "echo", &rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_catalog_is_listed_in_pages_with_destructive_hints() {
    let fixture = Fixture::new();
    fixture.write("many.toml", &many_echoes(4_500));
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");

    let first = client
        .list_tools(Some(PaginatedRequestParams::default()))
        .await
        .expect("first page");
    assert_eq!(first.tools.len(), toolhost::mcp::tools::PAGE_TOOLS);
    let cursor = first.next_cursor.clone().expect("a next page");

    let all = client.list_all_tools().await.expect("every page");
    assert_eq!(all.len(), 4_501);
    let names: HashSet<&str> = all.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names.len(), 4_501, "a tool came twice");
    assert!(
        all.windows(2).all(|w| w[0].name < w[1].name),
        "pages are in name order"
    );
    assert_eq!(cursor, first.tools.last().expect("a tool").name.as_ref());

    let hint = |name: &str| {
        all.iter()
            .find(|t| t.name == name)
            .and_then(|t| t.annotations.as_ref())
            .and_then(|a| a.destructive_hint)
    };
    assert_eq!(hint("wipe"), Some(true));
    assert_eq!(hint("echo_00042"), Some(false));

    // A cursor past the last tool gives an empty last page.
    let past = client
        .list_tools(Some(
            PaginatedRequestParams::default().with_cursor(Some("zzz".into())),
        ))
        .await
        .expect("a page past the end");
    assert!(past.tools.is_empty() && past.next_cursor.is_none());
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_stops_at_its_byte_budget() {
    let fixture = Fixture::new();
    let long = "x".repeat(100_000);
    let mut rest = String::new();
    for i in 0..25 {
        rest.push_str(&format!(
            "[[invokers]]\ninvoker = {{ name = \"big_{i:02}\", tool = \"echo\", description = \"{long}\" }}\n"
        ));
    }
    fixture.write("big.toml", &ensemble("big", "echo", &rest));
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");
    let first = client
        .list_tools(Some(PaginatedRequestParams::default()))
        .await
        .expect("first page");
    let bytes: usize = first
        .tools
        .iter()
        .map(|t| serde_json::to_vec(t).expect("json").len())
        .sum();
    assert!(first.tools.len() < 25, "one page held every big tool");
    assert!(
        bytes <= toolhost::mcp::tools::PAGE_BYTES,
        "{bytes} bytes in one page"
    );
    assert_eq!(client.list_all_tools().await.expect("all").len(), 25);
    client.cancel().await.expect("close");
}

/// Where `scripts/test-tools.sh` installed the official MCP clients.
pub(crate) fn test_tools() -> std::path::PathBuf {
    let dir = std::env::var_os("TOOLHOST_TEST_TOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-tools")
        });
    assert!(
        dir.join("pins").is_file(),
        "the official MCP clients are not installed in {}: run ./scripts/test-tools.sh \
         (./scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// Runs a client program against `toolhost serve` over stdio and returns its stdout.
fn run_client(
    program: &std::path::Path,
    args: &[&str],
    fixture: &Fixture,
    env: &[(&str, &std::path::Path)],
) -> String {
    let mut command = Command::new(program);
    configure(&mut command, fixture);
    command.envs(env.iter().copied());
    let tools = test_tools();
    command
        .args(args)
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg("serve")
        .env("MCP_CLIENTS_NODE", tools.join("node"))
        .env("LIST_TOOLS_TIMEOUT", "120")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let output = command.output().expect("the client runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{} failed ({}): {stdout}",
        program.display(),
        output.status
    );
    stdout
}

#[test]
fn the_official_python_and_typescript_clients_and_the_inspector_get_every_tool() {
    let fixture = Fixture::new();
    fixture.write("many.toml", &many_echoes(4_500));
    let tools = test_tools();
    let clients = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients");
    let node = tools.join("node/node_modules/.bin/node");
    let expected = serde_json::json!({"count": 4_501, "pages": 3, "names_unique": true});

    let python = run_client(
        &tools.join("venv/bin/python"),
        &[clients.join("list_tools.py").to_str().expect("path")],
        &fixture,
        &[],
    );
    let python: serde_json::Value = serde_json::from_str(python.trim()).expect("JSON line");
    assert_eq!(python, expected, "Python SDK");

    let typescript = run_client(
        &node,
        &[clients.join("list_tools.mjs").to_str().expect("path")],
        &fixture,
        &[],
    );
    let typescript: serde_json::Value = serde_json::from_str(typescript.trim()).expect("JSON");
    assert_eq!(typescript, expected, "TypeScript SDK");

    let inspector = tools
        .join("node/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    // The Inspector starts the server with a minimal environment of its own: the fixture's
    // settings go through `-e` (with the warm cache, so that its first list does not wait for a
    // compile).
    let ensembles = format!("TOOLHOST_ENSEMBLES={}", fixture.ensembles().display());
    let cache = format!(
        "TOOLHOST_CACHE_DIR={}",
        crate::support::cache_dir().display()
    );
    let listed = run_client(
        &node,
        &[
            inspector.to_str().expect("path"),
            "--cli",
            "-e",
            &ensembles,
            "-e",
            &cache,
            "-e",
            &format!("TOOLHOST_CACHE_KEEP={}", crate::mcp::SHARED_CACHE_KEEP),
            "--format",
            "json",
            "--method",
            "tools/list",
            "--",
        ],
        &fixture,
        &[],
    );
    let listed: serde_json::Value = serde_json::from_str(listed.trim()).expect("Inspector JSON");
    let names: HashSet<&str> = listed["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names.len(), 4_501, "MCP Inspector CLI");
}

/// Writes an ensemble whose component (the testbed) takes a while to compile: long enough,
/// in a fresh cache, for a client to list before it is ready.
fn write_slow_to_compile(fixture: &Fixture) {
    fixture.write(
        "bed.toml",
        &ensemble(
            "bed",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    );
}

/// The official Python SDK lists right after `initialize`, on a host whose cache is empty:
/// the list waits for the first load's compiles and has every tool (it was empty before,
/// until `notifications/tools/list_changed`).
#[test]
fn a_list_right_after_initialize_waits_for_the_first_load() {
    let fixture = Fixture::new();
    fixture.write_echo();
    write_slow_to_compile(&fixture);
    let fresh = tempfile::tempdir().expect("an empty cache");
    let clients = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients");
    let stdout = run_client(
        &test_tools().join("venv/bin/python"),
        &[clients.join("list_tools.py").to_str().expect("path")],
        &fixture,
        &[("TOOLHOST_CACHE_DIR", fresh.path())],
    );
    let listed: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON line");
    assert_eq!(listed["count"], 2, "{listed}");
}

/// While a list waits for the first load, `ping` (and any other request) answers at once.
#[test]
fn a_ping_answers_while_the_first_list_waits() {
    use std::io::{BufRead, BufReader, Write};
    let fixture = Fixture::new();
    write_slow_to_compile(&fixture);
    let fresh = tempfile::tempdir().expect("an empty cache");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let mut child = command
        .arg("serve")
        .env("TOOLHOST_CACHE_DIR", fresh.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    for message in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
    ] {
        writeln!(stdin, "{message}").expect("write");
    }
    let mut answered = Vec::new();
    while answered.len() < 3 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "serve ended"
        );
        let message: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        if let Some(id) = message["id"].as_u64() {
            answered.push((id, message));
        }
    }
    let order: Vec<u64> = answered.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        order,
        [1, 3, 2],
        "the ping answered before the waiting list"
    );
    let tools = answered[2].1["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 1, "{}", answered[2].1);
    drop(stdin);
    let _ = child.wait();
}
