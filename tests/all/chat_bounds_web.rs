//! What a model, a web chat client or the file system can make the web chat hold, send or lose
//! (issue #29): 3,000 calls of a megabyte in one answer, a client that never reads its stream,
//! a conversation that only grows, a message or a body past its bound, and the chat database
//! deleted or replaced while the host runs. Each test asserts the bound itself, not only that
//! the host lives.

use crate::chat_bounds::{DEADLINE, big_calls, borrowed, fixture};
use crate::scripted::{Reply, Scripted, openai};
use crate::support::{Fixture, peak_kib, scripted_chat};
use crate::web::{base, chat, get, post_json, serve};
use serde_json::{Value, json};
use std::time::Duration;

/// A web-chat host over [`fixture`]'s tools with `chat` in its `[chat]`.
fn web_host(
    replies: Vec<Reply>,
    chat: &str,
) -> (Scripted, Fixture, crate::mcp::HttpServer, String) {
    let model = Scripted::start(replies);
    let fixture = fixture();
    fixture.write_host_file("chat", &scripted_chat(&model.base_url, chat));
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));
    (model, fixture, server, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_calls_of_a_megabyte_in_one_answer_leave_the_web_chat_small() {
    let calls = big_calls(3000, 1_000_000);
    let (model, _fixture, server, api) = web_host(
        vec![openai::stream("", &borrowed(&calls)), openai::text("done")],
        "",
    );
    let mut events = chat(&api, json!({"message": "go"})).await;
    let all = tokio::time::timeout(DEADLINE, events.rest())
        .await
        .expect("the run ended");
    let results: Vec<&Value> = all.iter().filter(|e| e["type"] == "tool_result").collect();
    assert_eq!(results.len(), 33);
    let kept: usize = results
        .iter()
        .map(|e| e["content"].as_str().unwrap_or_default().len())
        .sum();
    assert!(kept <= (8 << 20) + 33 * 300, "{kept} bytes of results");
    assert_eq!(all.last().expect("done")["ending"], "answer");
    // The request sent back to the model stays within max-request-mib (8), tools included.
    let sent = model.requests()[1].body.to_string().len();
    assert!(
        sent < (8 << 20) + (64 << 10),
        "{sent} bytes sent to the model"
    );
    let peak = peak_kib(server.child.id());
    eprintln!("peak RSS of serve: {} MiB", peak >> 10);
    assert!(peak < 400 << 10, "serve peaked at {} MiB", peak >> 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_stream_ends_its_run_at_the_unread_bound() {
    // Results are not cut here (a generous budget): only the unread bound stops the run.
    let mut replies: Vec<Reply> = (0..6)
        .map(|turn| {
            let calls: Vec<(String, String, String)> = big_calls(24, 1_000_000)
                .into_iter()
                .map(|(id, name, args)| {
                    (
                        format!("{id}_{turn}"),
                        name,
                        args.replace('}', &format!(",\"t\":{turn}}}")),
                    )
                })
                .collect();
            openai::stream("", &borrowed(&calls))
        })
        .collect();
    replies.push(openai::text("done"));
    let (_model, _fixture, server, api) = web_host(
        replies,
        "max-run-result-mib = 1024\nmax-request-mib = 1024\nmax-conversation-mib = 1024",
    );
    let response = reqwest::Client::new()
        .post(&api)
        .json(&json!({"message": "go"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 200);
    // The first event names the conversation; nothing after it is read.
    let mut response = response;
    let first = response
        .chunk()
        .await
        .expect("read")
        .expect("a first chunk");
    let first = String::from_utf8_lossy(&first);
    let id = first
        .split("\"id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the conversation's id")
        .to_string();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let kept = loop {
        let (_, kept) = get(&format!("{api}/{id}")).await;
        if kept["running"] == false && kept["log"].as_array().is_some_and(|l| !l.is_empty()) {
            break kept;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let done = kept["log"]
        .as_array()
        .and_then(|log| log.iter().rev().find(|e| e["type"] == "done"))
        .cloned();
    let ran = kept["log"].as_array().map_or(0, |log| {
        log.iter().filter(|e| e["type"] == "tool_result").count()
    });
    drop(response);
    // Ended long before its 144 calls: the stream held 16 MiB unread at most.
    assert!(ran < 144, "{ran} calls ran");
    let stored_done = done.expect("the stored run has its done event");
    assert_eq!(stored_done["ending"], "cancelled", "{stored_done}");
    let peak = peak_kib(server.child.id());
    eprintln!(
        "peak RSS of serve with a client that never reads: {} MiB",
        peak >> 10
    );
    assert!(peak < 600 << 10, "serve peaked at {} MiB", peak >> 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_past_its_budget_ends_its_run_and_is_not_continued() {
    // Answers of 700 KB of text; the conversation may hold 2 MiB, a request 1 MiB.
    let answer = |n: usize| {
        let mut reply = openai::whole(&format!("{n}").repeat(700_000), &[]);
        reply.headers.push(("x-answer".into(), n.to_string()));
        reply
    };
    let (model, _fixture, _server, api) = web_host(
        (0..6).map(answer).collect(),
        "stream = false\nmax-conversation-mib = 2\nmax-request-mib = 1",
    );
    let mut events = chat(&api, json!({"message": "first"})).await;
    let first = events.rest().await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    let mut statuses = Vec::new();
    for turn in 1..6 {
        let (status, refused) = post_json(
            &format!("{api}/{id}/messages"),
            json!({"message": format!("turn {turn}")}),
        )
        .await;
        if status == 200 || refused.is_null() {
            statuses.push(200);
            continue;
        }
        statuses.push(status);
        assert_eq!(status, 413, "{refused}");
        let message = refused["error"].as_str().expect("error");
        assert!(
            message.contains("more than a conversation may ([chat] max-conversation-mib, 2 MiB)"),
            "{message}"
        );
        break;
    }
    assert_eq!(statuses.last(), Some(&413), "{statuses:?}");
    // No request to the model passed its budget (cut oldest first), and what a GET answers
    // stays within three times what the conversation may hold and one turn (the messages, the
    // log's text events, and each run's final answer in its `done` event).
    for request in model.requests() {
        let sent = request.body.to_string().len();
        assert!(sent < (1 << 20) + (64 << 10), "{sent} bytes sent");
    }
    let response = reqwest::get(format!("{api}/{id}")).await.expect("GET");
    let read = response.bytes().await.expect("body").len();
    assert!(read < 3 * ((2 << 20) + 800_000), "{read} bytes in a GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_database_deleted_or_replaced_while_serving_is_refused_not_pretended() {
    let (_model, fixture, server, api) = web_host(
        vec![
            openai::text("one"),
            openai::text("two"),
            openai::text("three"),
        ],
        "database = \"state/chat.sqlite3\"",
    );
    let mut events = chat(&api, json!({"message": "kept"})).await;
    let first = events.rest().await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    let database = fixture.root().join("state/chat.sqlite3");
    let aside = fixture.root().join("state/aside.sqlite3");

    // Deleted (moved away): nothing is acknowledged that a restart would not find.
    std::fs::rename(&database, &aside).expect("move the database away");
    let refused = reqwest::Client::new()
        .post(&api)
        .json(&json!({"message": "lost?"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(refused.status(), 503);
    let message = refused.text().await.expect("body");
    assert!(
        message.contains("is not the file this host opened: it was deleted or moved away"),
        "{message}"
    );
    let (status, _) = get(&api).await;
    assert_eq!(status, 503, "the list is refused too");
    // A directory in its place: refused the same way.
    std::fs::create_dir(&database).expect("a directory");
    let (status, body) = get(&format!("{api}/{id}")).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("replaced")),
        "{body}"
    );
    // Said once in the log, however many requests were refused (read once the test's reader
    // of the server's stderr has the line).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let said = loop {
        let said = (server.stderr())
            .matches("is not the file this host opened")
            .count();
        if said > 0 || std::time::Instant::now() > deadline {
            break said;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(said, 1, "{}", server.stderr());

    // Put back: the chat serves again, and the conversation is there.
    std::fs::remove_dir(&database).expect("rmdir");
    std::fs::rename(&aside, &database).expect("back");
    let (status, listed) = get(&api).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["conversations"].as_array().map(Vec::len), Some(1));
    let mut events = chat(&api, json!({"message": "after"})).await;
    assert_eq!(
        events.rest().await.last().expect("done")["ending"],
        "answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_or_a_body_past_its_bound_is_refused_before_anything_runs() {
    let (model, _fixture, _server, api) = web_host(vec![openai::text("never")], "");
    let (status, refused) = post_json(&api, json!({"message": "x".repeat(300 << 10)})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("/message: 307200 bytes, more than the 262144")),
        "{refused}"
    );
    // A body past 1 MiB is refused while it is read.
    let response = reqwest::Client::new()
        .post(&api)
        .header("content-type", "application/json")
        .body(format!("{{\"message\": \"{}\"}}", "x".repeat(2 << 20)))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 413);
    assert!(model.requests().is_empty(), "the model was asked");
}
