//! A web chat that cannot serve says why, at start and on each request, and MCP serves on:
//! without a model, with a corrupt chat database, and with the database locked by another
//! program.

use crate::mcp::HttpServer;
use crate::mcp::post;
use crate::scripted::Scripted;
use crate::support::Fixture;
use crate::web::{base, fixture, get, post_json, serve};
use serde_json::json;

/// The line `serve` printed at start about the page and the chat (waiting a moment for the
/// test's reader of its stderr).
fn page_line(server: &HttpServer) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let stderr = server.stderr();
        if let Some(line) = stderr
            .lines()
            .find(|l| l.contains("toolhost: the page is at"))
        {
            return line.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no page line: {stderr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_or_with_a_corrupt_database_the_chat_says_why_and_mcp_serves() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write_host_file("chat", "database = \"chat.db\"");
    let server = serve(&fixture, &[]);
    let (status, settings) = get(&format!("{}/api/settings", base(&server))).await;
    assert_eq!(status, 200);
    // Said at start, without -v.
    let line = page_line(&server);
    assert!(
        line.contains("with the catalog only: the chat is off (the chat has no model: set [chat] model in toolhost.toml)"),
        "{line}"
    );
    assert_eq!(settings["chat"], false);
    assert!(
        settings["problem"]
            .as_str()
            .expect("problem")
            .contains("[chat] model")
    );
    let (status, answer) = post_json(
        &format!("{}/api/conversations", base(&server)),
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!(status, 503);
    assert!(
        answer["error"]
            .as_str()
            .expect("error")
            .contains("[chat] model")
    );
    drop(server);

    // Its write-ahead log too: SQLite would read the pages it holds.
    for file in ["chat.db-wal", "chat.db-shm"] {
        let _ = std::fs::remove_file(fixture.root().join(file));
    }
    std::fs::write(fixture.root().join("chat.db"), vec![b'x'; 8192]).expect("garbage");
    let model = Scripted::start(vec![]);
    std::fs::write(
        fixture.root().join("toolhost.toml"),
        format!(
            "schema-version = 1\n[chat]\ndatabase = \"chat.db\"\nmodel = \"m\"\n\
             base-url = \"{}\"\n",
            model.base_url
        ),
    )
    .expect("config");
    let server = serve(&fixture, &[]);
    let (status, answer) = get(&format!("{}/api/conversations", base(&server))).await;
    assert_eq!(status, 503);
    let error = answer["error"].as_str().expect("error");
    assert!(
        error.contains("chat.db") && error.contains("not a database"),
        "{error}"
    );
    let line = page_line(&server);
    assert!(line.contains("not a database"), "{line}");
    // Everything else serves.
    assert_eq!(post(&server.url, &[]).await, 200, "MCP initialize");
    let (status, catalog) = get(&format!("{}/api/catalog", base(&server))).await;
    assert_eq!(status, 200);
    assert_eq!(catalog["ensembles"][0]["name"], "echo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_locked_by_another_program_is_a_clear_503_and_mcp_serves() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "database = \"chat.db\"");
    // Another program holds an exclusive lock on the database for the whole test.
    let other = rusqlite::Connection::open(fixture.root().join("chat.db")).expect("open");
    other
        .execute_batch("CREATE TABLE other (x); BEGIN EXCLUSIVE; INSERT INTO other VALUES (1);")
        .expect("lock");
    let server = serve(&fixture, &[]);
    let (status, answer) = get(&format!("{}/api/conversations", base(&server))).await;
    assert_eq!(status, 503, "{answer}");
    let error = answer["error"].as_str().expect("error");
    assert!(
        error.contains("chat.db") && error.contains("locked"),
        "{error}"
    );
    assert_eq!(post(&server.url, &[]).await, 200, "MCP initialize");
    drop(other);
}
