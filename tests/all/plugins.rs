//! The example plugins, through the shipped ensembles (`ensembles/`) exactly as they are in
//! the repository, with the components where those files expect them (`plugins/dist/`).

use crate::support::{err, ok, runtime, session};
use serde_json::{Value, json};
use std::sync::Arc;
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{ErrorKind, Host};

/// A copy of the repository's ensembles, sample data and built plugins, and a host over it.
async fn shipped() -> (tempfile::TempDir, Host) {
    let root = tempfile::tempdir().expect("temp dir");
    crate::support::copy_shipped(root.path());
    let resolved = toolhost::resolve::Resolver::new(runtime())
        .resolve_dir(&root.path().join("ensembles"))
        .await;
    let errors: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
    assert!(
        errors.is_empty(),
        "the shipped ensembles do not load:\n{}",
        errors.join("\n")
    );
    let host = Host::new(Arc::new(LiveCatalog::new(resolved.catalog)), None);
    (root, host)
}

async fn call_json(host: &Host, tool: &str, args: Value) -> Value {
    let text = ok(&host.invoke(&session(), tool, args).await);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{tool} returned non-JSON {text}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calculator_evaluates_with_precedence_and_functions() {
    let (_root, host) = shipped().await;
    for (expression, expected) in [
        ("2 + 3 * 4", 14.0),
        ("2 ^ 3 ^ 2", 512.0),
        ("-(2 + 3) % 4", -1.0),
        ("sqrt(16) + abs(-2) + max(1, 7, 3) - min(4, 2)", 11.0),
        ("round(pi * 100, 1)", 314.2),
        ("ln(e) + log10(1000)", 4.0),
        ("round(sin(0) + cos(0) + tan(0), 6)", 1.0),
    ] {
        let value = call_json(&host, "calculate", json!({ "expression": expression })).await;
        assert_eq!(value["result"].as_f64(), Some(expected), "{expression}");
    }
    for (expression, message) in [
        ("1 / 0", "division by zero"),
        ("2 +", "position 4"),
        ("system(1)", "unknown name"),
    ] {
        let error = err(&host
            .invoke(&session(), "calculate", json!({ "expression": expression }))
            .await);
        assert_eq!(error.kind, ErrorKind::InvalidArguments);
        assert!(
            error.message.contains(message),
            "{expression}: {}",
            error.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_toolkit_counts_converts_finds_and_slugs() {
    let (_root, host) = shipped().await;
    let stats = call_json(
        &host,
        "text_stats",
        json!({"text": "Hello, wörld. Two lines!\nYes."}),
    )
    .await;
    assert_eq!(stats["words"], 5);
    assert_eq!(stats["characters"], 29);
    assert_eq!(stats["bytes"], 30);
    assert_eq!(stats["lines"], 2);
    assert_eq!(stats["sentences"], 3);
    let snake = ok(&host
        .invoke(
            &session(),
            "text_case",
            json!({"text": "parseHTTPResponse now", "to": "snake"}),
        )
        .await);
    assert_eq!(snake, "parse_http_response_now");
    let error = err(&host
        .invoke(
            &session(),
            "text_case",
            json!({"text": "x", "to": "shouty"}),
        )
        .await);
    assert_eq!(
        error.kind,
        ErrorKind::InvalidArguments,
        "the schema's enum refuses unknown cases"
    );
    let found = call_json(
        &host,
        "regex_find",
        json!({"pattern": "(?P<key>\\w+)=(\\d+)", "text": "a=1 b=22 c=x", "max_matches": 5}),
    )
    .await;
    assert_eq!(found["count"], 2);
    assert_eq!(found["matches"][1]["text"], "b=22");
    assert_eq!(found["matches"][1]["groups"][0]["name"], "key");
    assert_eq!(found["matches"][1]["groups"][1]["text"], "22");
    let error = err(&host
        .invoke(
            &session(),
            "regex_find",
            json!({"pattern": "(", "text": "x"}),
        )
        .await);
    assert!(error.message.contains("bad pattern"), "{}", error.message);
    assert_eq!(
        ok(&host
            .invoke(
                &session(),
                "slugify",
                json!({"text": "Crème Brûlée: 2 Ways!"})
            )
            .await),
        "creme-brulee-2-ways"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_tool_queries_pretty_prints_and_validates() {
    let (_root, host) = shipped().await;
    let document = r#"{"items": [{"name": "a"}, {"name": "b"}], "z": 1, "a": 2}"#;
    let name = ok(&host
        .invoke(
            &session(),
            "json_query",
            json!({"document": document, "pointer": "/items/1/name"}),
        )
        .await);
    assert_eq!(name, "\"b\"");
    let error = err(&host
        .invoke(
            &session(),
            "json_query",
            json!({"document": document, "pointer": "/items/5"}),
        )
        .await);
    assert!(
        error.message.contains("array of 2 items"),
        "{}",
        error.message
    );
    let pretty = ok(&host
        .invoke(
            &session(),
            "json_pretty",
            json!({"document": "{\"b\":1,\"a\":[1]}", "sort_keys": true, "indent": 2}),
        )
        .await);
    assert_eq!(pretty, "{\n  \"a\": [\n    1\n  ],\n  \"b\": 1\n}");
    let valid = call_json(&host, "json_validate", json!({"document": "[1, 2]"})).await;
    assert_eq!(valid, json!({"valid": true, "type": "array", "bytes": 6}));
    let invalid = call_json(
        &host,
        "json_validate",
        json!({"document": "{\n  \"a\": 1,\n}"}),
    )
    .await;
    assert_eq!(invalid["valid"], false);
    assert_eq!(invalid["line"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_tool_lists_reads_and_searches_only_the_granted_directory() {
    let (_root, host) = shipped().await;
    let listing = call_json(
        &host,
        "list_files",
        json!({"path": "/data", "recursive": true}),
    )
    .await;
    let paths: Vec<&str> = listing["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/data/notes",
            "/data/notes/shopping.txt",
            "/data/welcome.md"
        ]
    );
    let text = ok(&host
        .invoke(
            &session(),
            "read_file",
            json!({"path": "/data/notes/shopping.txt", "max_bytes": 10}),
        )
        .await);
    assert!(
        text.starts_with("apples: 6\n") && text.contains("[cut at 10 of"),
        "{text}"
    );
    let found = call_json(
        &host,
        "search_files",
        json!({"path": "/data", "pattern": "eggs"}),
    )
    .await;
    assert_eq!(found["count"], 1);
    assert_eq!(found["matches"][0]["file"], "/data/notes/shopping.txt");
    assert_eq!(found["matches"][0]["line"], 3);
    for path in ["/etc/passwd", "/data/../../ensembles/files.toml"] {
        let error = err(&host
            .invoke(&session(), "read_file", json!({ "path": path }))
            .await);
        assert_eq!(error.kind, ErrorKind::ToolError, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_fetch_ensemble_reaches_only_wikipedia_over_https() {
    let (_root, host) = shipped().await;
    for url in [
        "https://example.org/",
        "http://en.wikipedia.org/wiki/WebAssembly",
        "https://en.wikipedia.org:8443/",
    ] {
        let outcome = host
            .invoke(&session(), "fetch_wikipedia", json!({ "url": url }))
            .await;
        let error = err(&outcome);
        assert_eq!(error.kind, ErrorKind::CapabilityDenied, "{url}: {error}");
        assert!(
            error
                .message
                .contains("(granted: https://en.wikipedia.org:443)"),
            "{}",
            error.message
        );
    }
    let error = err(&host
        .invoke(&session(), "fetch_wikipedia", json!({ "url": "ftp://x" }))
        .await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
}
