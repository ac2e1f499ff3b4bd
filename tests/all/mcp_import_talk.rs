//! An imported MCP server talking back while its tool runs: its progress, its log lines,
//! its sampling requests and its questions for the person reach whoever called the tool,
//! through the host, within the grants of `[ensemble.mcp]` and a component call's bounds; an
//! answer that does not fit the form is refused as it is for a component. The imported
//! server is another `toolhost serve` running the talker component.

use crate::mcp::call;
use crate::mcp_import::import_ensemble;
use crate::support::Fixture;
use crate::talk::{Answer, GRANTS, Talker, fixture, start, text, wait_for};
use serde_json::json;
use std::sync::atomic::Ordering;

/// An outer host importing the talker host (prefix `in`), with `asks` in `[ensemble.mcp]`.
fn outer(inner: &Fixture, asks: &str) -> Fixture {
    let outer = Fixture::new();
    outer.write("inner.toml", &import_ensemble(inner, asks));
    outer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_servers_progress_and_questions_reach_the_caller() {
    let inner = fixture(GRANTS);
    let outer = outer(&inner, "sampling = true\nelicitation = true\n");
    let talker = Talker::default();
    let (reports, sampled) = (talker.progress.clone(), talker.sampled.clone());
    let client = start(&outer, talker).await;
    // The first list waits for the first load (the imported server's start).
    client.list_all_tools().await.expect("tools/list");

    let result = call(&client, "in_report", json!({"steps": 3})).await;
    assert_eq!(text(&result), "reported 3");
    // rmcp hands each notification to the host on a task of its own: a report handled after
    // the server's answer is dropped, so on a busy machine fewer than 3 may come.
    wait_for(&reports, 1).await;
    for report in reports.lock().expect("reports").iter() {
        assert!([1.0, 2.0, 3.0].contains(&report.progress), "{report:?}");
        assert_eq!(report.total, Some(3.0));
    }

    let answered = call(
        &client,
        "in_ask_model",
        json!({"prompt": "capital of France?"}),
    )
    .await;
    assert_eq!(text(&answered), "answer to capital of France? (test-model)");
    assert_eq!(sampled.load(Ordering::SeqCst), 1);
    let asked = call(&client, "in_ask_person", json!({})).await;
    assert!(text(&asked).contains("Ada"), "{}", text(&asked));
    client.cancel().await.expect("close");

    // An answer that does not fit the form is refused here, before the server sees it.
    let misfit = Talker {
        answer: Answer::Misfit,
        ..Talker::default()
    };
    let client = start(&outer, misfit).await;
    client.list_all_tools().await.expect("tools/list");
    let refused = call(&client, "in_ask_person", json!({})).await;
    assert!(
        text(&refused).contains("does not fit the requested schema at /name"),
        "{}",
        text(&refused)
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_without_the_grant_asks_nobody() {
    let inner = fixture(GRANTS);
    let outer = outer(&inner, "");
    let talker = Talker::default();
    let sampled = talker.sampled.clone();
    let client = start(&outer, talker).await;
    // The first list waits for the first load (the imported server's start).
    client.list_all_tools().await.expect("tools/list");
    // The host does not offer the server a way to ask (it says so, at either revision), and
    // the caller is never asked.
    for tool in ["in_ask_model", "in_ask_person"] {
        let refused = call(&client, tool, json!({})).await;
        assert!(
            text(&refused).starts_with("unsupported: "),
            "{tool}: {}",
            text(&refused)
        );
    }
    assert_eq!(sampled.load(Ordering::SeqCst), 0);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_servers_log_lines_reach_the_session_whose_call_made_them() {
    use rmcp::ServiceExt;
    let inner = crate::mcp_import::inner_fixture();
    inner.write(
        "logger.toml",
        &crate::support::ensemble(
            "logger",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"log\", dedup = \"off\" }\n",
        ),
    );
    // MCP logging belongs to the handshake revisions (2026-07-28 deprecates it): an import
    // that may ask meets its server with the handshake.
    let outer = outer(&inner, "elicitation = true\n");
    let handler = crate::mcp::Client::default();
    let client = handler
        .clone()
        .serve(crate::mcp::stdio_serve(&outer))
        .await
        .expect("MCP session");
    client.list_all_tools().await.expect("tools/list");
    let result = call(&client, "in_log", json!({"message": "hello from inside"})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    handler.log_containing("hello from inside").await;
    client.cancel().await.expect("close");
}
