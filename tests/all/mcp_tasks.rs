//! The Tasks extension of MCP 2026-07-28: a long call becomes a task, polled to its result or
//! cancelled (and audited as cancelled), and a task is seen or cancelled only with the
//! credentials that made it.

use crate::mcp::{HttpServer, stdio_serve};
use crate::mcp_revisions::{DEADLINE, fixture, modern_post};
use crate::support::Fixture;
use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};
use std::time::Duration;

/// A client that declares the Tasks extension.
#[derive(Clone, Default)]
struct TaskClient;

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.capabilities = rmcp::model::ClientCapabilities::builder()
            .enable_tasks()
            .build();
        config
    }
}

fn sleeper() -> Fixture {
    let fixture = fixture();
    fixture.write(
        "testbed.toml",
        &crate::support::ensemble(
            "testbed",
            "testbed",
            "[defaults]\ntimeout-ms = 30000\ndedup = \"off\"\n\n[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    );
    fixture
}

fn sleep_call(ms: u64) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({"ms": ms}) else {
        unreachable!()
    };
    CallToolRequestParams::new("sleep").with_arguments(arguments)
}

/// Polls a task until it is no longer working.
async fn settled(
    client: &RunningService<RoleClient, TaskClient>,
    id: &str,
) -> rmcp::model::GetTaskResult {
    let wait = async {
        loop {
            let task = client
                .peer()
                .get_task(rmcp::model::GetTaskParams::new(id))
                .await
                .expect("tasks/get");
            if !matches!(task.task.payload, rmcp::model::TaskPayload::Working) {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the task settled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_becomes_a_task_that_is_polled_or_cancelled() {
    let fixture = sleeper();
    let client = TaskClient
        .serve_with_lifecycle(
            stdio_serve(&fixture),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connected");
    let peer = client.peer();

    // A short call is answered as usual.
    let quick = peer
        .call_tool_once(sleep_call(0))
        .await
        .expect("tools/call");
    assert!(
        matches!(quick, rmcp::model::CallToolResponse::Complete(_)),
        "{quick:?}"
    );

    // A long one becomes a task, polled to its result.
    let long = peer
        .call_tool_once(sleep_call(2500))
        .await
        .expect("tools/call");
    let rmcp::model::CallToolResponse::Task(created) = long else {
        panic!("not a task: {long:?}")
    };
    let done = settled(&client, &created.task.task_id).await;
    let rmcp::model::TaskPayload::Completed { result } = &done.task.payload else {
        panic!("{done:?}")
    };
    assert_eq!(
        result["content"][0]["text"],
        json!(r#"{"slept_ms":2500}"#),
        "{result:?}"
    );

    // Another is cancelled: its call ends at once, audited as cancelled.
    let long = peer
        .call_tool_once(sleep_call(25_000))
        .await
        .expect("tools/call");
    let rmcp::model::CallToolResponse::Task(created) = long else {
        panic!("not a task: {long:?}")
    };
    peer.cancel_task(rmcp::model::CancelTaskParams::new(&created.task.task_id))
        .await
        .expect("tasks/cancel");
    let done = settled(&client, &created.task.task_id).await;
    assert!(
        matches!(done.task.payload, rmcp::model::TaskPayload::Cancelled),
        "{done:?}"
    );
    let unknown = peer
        .get_task(rmcp::model::GetTaskParams::new("no-such-task"))
        .await
        .expect_err("an unknown task");
    assert!(unknown.to_string().contains("unknown task"), "{unknown}");
    client.cancel().await.expect("close");

    let text = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    let outcomes: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("record")["outcome"].to_string())
        .collect();
    assert_eq!(outcomes, [r#""ok""#, r#""ok""#, r#""cancelled""#], "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_seen_only_with_the_credentials_that_made_it() {
    let fixture = sleeper();
    let server = HttpServer::start(&fixture, &[], &[]);
    let url = server.url.as_str();
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mine = [("authorization", "Bearer mine")];
    let theirs = [("authorization", "Bearer theirs")];
    let meta = |extra: Value| {
        let mut params = extra;
        params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": tasks});
        params
    };
    let call = meta(json!({"name": "sleep", "arguments": {"ms": 3000}}));
    let (status, _, created) = modern_post(url, "tools/call", Some("sleep"), call, &mine).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["result"]["resultType"], json!("task"), "{created}");
    let id = created["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string();

    let get = meta(json!({"taskId": id}));
    let (_, _, seen) = modern_post(url, "tasks/get", Some(&id), get.clone(), &mine).await;
    assert!(seen["result"]["status"].is_string(), "{seen}");
    let (_, _, hidden) = modern_post(url, "tasks/get", Some(&id), get.clone(), &theirs).await;
    assert_eq!(hidden["error"]["code"], json!(-32602), "{hidden}");
    let (_, _, refused) = modern_post(url, "tasks/cancel", Some(&id), get.clone(), &theirs).await;
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");
    // The other party's cancel did nothing: the task completes.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let (_, _, seen) = modern_post(url, "tasks/get", Some(&id), get.clone(), &mine).await;
        if seen["result"]["status"] == json!("completed") {
            break;
        }
        assert_eq!(seen["result"]["status"], json!("working"), "{seen}");
        assert!(
            std::time::Instant::now() < deadline,
            "the task never completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
