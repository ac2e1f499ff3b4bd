//! A hostile compile dropped into a running `serve`: every other tool answers throughout,
//! the ensemble shows as loading and a call of its tool is told what it waits for, the
//! compile is cut at its bound, and `check` reports the refusal with the bound named.

use crate::hostile::register_hog;
use crate::support::{Fixture, ensemble};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_compile_dropped_into_a_running_serve_takes_nothing_down() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let fixture = Fixture::new();
    fixture.write_echo();
    // Cranelift's compile, the slow one: Winch compiles this hog in a fraction of a second
    // (`tiers.rs` holds the bounds of both tiers).
    let config = fixture.write_host_file("host", "compile-cpu-seconds = 3\ntiered-compile = false");
    let server =
        crate::mcp::HttpServer::start(&fixture, &["--config", config.to_str().expect("path")], &[]);
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            server.url.clone(),
        ))
        .await
        .expect("MCP session");
    let echo = || async {
        let mut arguments = serde_json::Map::new();
        arguments.insert("text".into(), "still here".into());
        let result = client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
            .await
            .expect("tools/call");
        assert_eq!(result.is_error, Some(false), "{result:?}");
    };
    echo().await;
    let before = crate::support::peak_kib(server.child.id());

    // 20,000 values live across 20,000 calls: about 23 CPU-seconds to compile, here bounded
    // at 3.
    std::fs::write(
        fixture.root().join("hog.wasm"),
        register_hog(20_000, 20_000),
    )
    .expect("hog");
    fixture.write(
        "hog.toml",
        &ensemble("hog", "hog", "[[invokers]]\ninvoker = { name = \"hog\" }\n"),
    );
    let status = fixture.root().join("status.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut saw_loading = false;
    let mut told_loading = false;
    let refused = {
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the hostile ensemble was never refused: {}",
                std::fs::read_to_string(&status).unwrap_or_default()
            );
            // Every other tool answers throughout.
            echo().await;
            let text = std::fs::read_to_string(&status).unwrap_or_default();
            let published: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let report = &published["status"];
            if report["loading"].as_array().is_some_and(|l| !l.is_empty()) {
                saw_loading = true;
                // A call of its tool meanwhile says what it waits for (unless the compile
                // ended in between).
                let mut arguments = serde_json::Map::new();
                arguments.insert("text".into(), "x".into());
                let result = client
                    .call_tool(CallToolRequestParams::new("hog").with_arguments(arguments))
                    .await
                    .expect("tools/call");
                let text = format!("{:?}", result.content);
                if text.contains("there is no tool named `hog` yet: ") {
                    assert!(
                        text.contains("`hog` yet: hog.toml is loading (compiling hog.wasm for ")
                            && text.contains("(`toolhost status` and /readyz say when)"),
                        "{text}"
                    );
                    told_loading = true;
                }
            }
            if let Some(refused) = report["refused"].as_array().and_then(|r| {
                r.iter()
                    .find(|r| r["file"].as_str().is_some_and(|f| f.ends_with("hog.toml")))
            }) {
                break refused.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let errors = refused["errors"].to_string();
    assert!(
        errors.contains("compiling took more than 3 s of CPU (compile-cpu-seconds)"),
        "{errors}"
    );
    let grown = crate::support::peak_kib(server.child.id()).saturating_sub(before);
    assert!(
        grown < 40 * 1024,
        "the host's peak memory grew by {grown} KiB"
    );
    echo().await;
    assert!(saw_loading, "status never showed the ensemble loading");
    assert!(told_loading, "a call while it loaded was never told so");
    client.cancel().await.expect("close");

    // `check` reports the refusal, with the bound.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command
        .args(["--config", config.to_str().expect("path"), "check"])
        .output()
        .expect("check runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("hog.wasm was refused: compiling took more than 3 s of CPU"),
        "{stdout}"
    );
    // While it compiled, `check` said so.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("hog.wasm (") && stderr.contains(" s so far; once"),
        "{stderr}"
    );
}

/// With JSON logs, the line that says a compile is still running is a JSON object like every
/// other line on stderr: a log collector parses every line (the fourth hostile suite found
/// it written as plain text).
#[test]
fn json_logs_stay_json_while_a_slow_compile_is_shown() {
    let fixture = Fixture::new();
    // Cranelift's compile, the slow one: Winch compiles this hog in a fraction of a second
    // (`tiers.rs` holds the bounds of both tiers).
    let config = fixture.write_host_file("host", "compile-cpu-seconds = 3\ntiered-compile = false");
    std::fs::write(
        fixture.root().join("hog.wasm"),
        register_hog(20_000, 20_000),
    )
    .expect("hog");
    fixture.write(
        "hog.toml",
        &ensemble("hog", "hog", "[[invokers]]\ninvoker = { name = \"hog\" }\n"),
    );
    let output = crate::cli::toolhost_with_stdin(
        &fixture,
        &[
            "--config",
            config.to_str().expect("path"),
            "--log-format",
            "json",
            "-v",
            "--no-cache",
            "check",
        ],
        None,
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "the hog is refused at its bound"
    );
    let stderr = crate::cli::stderr(&output);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["target"] == "toolhost"
            && l["level"] == "INFO"
            && (l["message"].as_str()).is_some_and(|m| m.starts_with("still compiling "))),
        "{stderr}"
    );
}
