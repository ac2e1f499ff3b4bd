//! Routing between replicas (`[fleet] advertise`): three replicas on one Redis behind haproxy,
//! round robin, no affinity, so that each request lands on another replica than the one
//! before. The official Python SDK with a session (2025-11-25) and without (2026-07-28)
//! answers a tool's questions (sampling, elicitation); a tool that asks is answered by
//! follow-ups through the balancer; a task is polled through it until it completes; a
//! session is told of a reload through it; a replica killed holding a waiting call is said
//! to be gone.

use crate::fleet::Haproxy;
use crate::fleet_quotas::RedisServer;
use crate::fleet_rounds::{ask, first_round, state, try_ask, try_ask_with};
use crate::mcp::HttpServer;
use crate::mcp_revisions::{modern_post, python_client_at};
use crate::support::Fixture;
use crate::talk::GRANTS;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Three replicas of `fixture` (with a `toolhost.toml` naming Redis and the address each
/// advertises) behind a round-robin haproxy, once it passes requests.
async fn fleet(fixture: &Fixture, redis: &RedisServer) -> (Vec<HttpServer>, Haproxy) {
    let config = fixture.write_host_file(
        "fleet",
        "redis-env = \"TOOLHOST_REDIS_URL\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"",
    );
    let redis_url = redis.url();
    let replicas: Vec<HttpServer> = (0..3)
        .map(|n| {
            let status = fixture.root().join(format!("status-{n}.json"));
            let status = status.display().to_string();
            let env = [
                ("TOOLHOST_REDIS_URL", redis_url.as_str()),
                ("TOOLHOST_STATUS_FILE", &status),
            ];
            advertising(fixture, &config, &env)
        })
        .collect();
    let balancer = Haproxy::over(fixture.root(), &replicas);
    balancer.wait_passing(crate::fleet::DEADLINE).await;
    (replicas, balancer)
}

/// `serve --http` on a free loopback port with `config`, `env` and `$TOOLHOST_ADVERTISE`
/// naming that port (for a `[fleet]` with `advertise-env = "TOOLHOST_ADVERTISE"`).
pub(crate) fn advertising(
    fixture: &Fixture,
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> HttpServer {
    let port = crate::access::free_port();
    let advertise = format!("http://127.0.0.1:{port}");
    let mut env = env.to_vec();
    env.push(("TOOLHOST_ADVERTISE", &advertise));
    let config = config.to_str().expect("path");
    HttpServer::start_at(
        &format!("127.0.0.1:{port}"),
        fixture,
        &["--config", config],
        &env,
    )
}

fn fixture() -> Fixture {
    let fixture = crate::talk::fixture(GRANTS);
    fixture.write_slow(60000);
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_follow_ups_and_tasks_reach_their_replica_through_round_robin() {
    let fixture = fixture();
    let redis = RedisServer::start(fixture.root());
    let (replicas, balancer) = fleet(&fixture, &redis).await;

    // The official Python SDK, with a session and without, through the balancer: its
    // requests (and its answers to the tool's questions) land on every replica in turn.
    for (mode, expected) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        // A blocking run of the client: the replicas and the balancer are processes of
        // their own.
        let answer = python_client_at(&fixture, "asks.py", mode, "http", &balancer.url);
        assert_eq!(answer["protocol_version"], json!(expected), "{mode}");
        assert_eq!(answer["model"], json!("Paris (python-model)"), "{mode}");
        assert_eq!(
            answer["person"],
            json!(r#"accepted: {"name":"python"}"#),
            "{mode}"
        );
    }

    // A tool that asks: each follow-up reaches another replica, which forwards it to the one
    // that holds the call.
    let client = reqwest::Client::new();
    let answer =
        json!({"inputResponses": {"ask-1": {"action": "accept", "content": {"name": "Fleet"}}}});
    for who in ["alice", "bob", "carol"] {
        let first = first_round(&client, &balancer.url, who, 0).await;
        let mut more = answer.clone();
        more["requestState"] = json!(state(&first));
        let done = ask(&client, &balancer.url, who, more).await;
        assert_eq!(
            done["result"]["content"][0]["text"], r#"accepted: {"name":"Fleet"}"#,
            "{who}: {done}"
        );
    }

    // A task, polled through the balancer until it completes; another caller's poll is told
    // it does not exist, on whichever replica it lands.
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let meta = |mut params: Value| {
        params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": tasks});
        params
    };
    let mine = [("authorization", "Bearer mine")];
    let call = meta(json!({"name": "sleep", "arguments": {"ms": 1500}}));
    let url = balancer.url.as_str();
    let (status, _, created) = modern_post(url, "tools/call", Some("sleep"), call, &mine).await;
    assert_eq!(status, 200, "{created}");
    let id = created["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string();
    let get = meta(json!({"taskId": id}));
    let theirs = [("authorization", "Bearer theirs")];
    for _ in 0..3 {
        let (_, _, hidden) = modern_post(url, "tasks/get", Some(&id), get.clone(), &theirs).await;
        assert_eq!(hidden["error"]["code"], json!(-32602), "{hidden}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut polls = 0;
    loop {
        let (_, _, seen) = modern_post(url, "tasks/get", Some(&id), get.clone(), &mine).await;
        polls += 1;
        if seen["result"]["status"] == json!("completed") {
            break;
        }
        assert_eq!(seen["result"]["status"], json!("working"), "{seen}");
        assert!(Instant::now() < deadline, "the task never completed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(polls >= 3, "polls reached every replica: {polls}");
    drop(replicas);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_on_a_replica_that_died_is_said_to_be_gone() {
    let fixture = fixture();
    let redis = RedisServer::start(fixture.root());
    let (mut replicas, balancer) = fleet(&fixture, &redis).await;
    let client = reqwest::Client::new();
    let first = first_round(&client, &balancer.url, "dave", 0).await;
    let waiting = state(&first);
    // Which replica holds it: the one that asks again when the follow-up is not forwarded (a
    // request marked as forwarded already is answered where it lands).
    let mut holder = None;
    let unforwarded = [("toolhost-forwarded-by", "the-test")];
    for (n, replica) in replicas.iter().enumerate() {
        let again = json!({"requestState": waiting});
        let again = try_ask_with(&client, &replica.url, "dave", again, &unforwarded).await;
        if again.is_ok_and(|a| a["result"]["resultType"] == "input_required") {
            holder = Some(n);
        }
    }
    let holder = holder.expect("one replica holds the call");
    // SIGKILL: nothing said to Redis; its address lapses.
    drop(replicas.remove(holder));
    // Its address expires from Redis within 15 s; until then, forwards fail to connect.
    let other = &replicas[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let told = try_ask(
            &client,
            &other.url,
            "dave",
            json!({"requestState": waiting}),
        )
        .await;
        let text = match told {
            Ok(answer) => answer.to_string(),
            Err(text) => text,
        };
        if text.contains("which is gone") {
            break;
        }
        assert!(text.contains("did not answer"), "{text}");
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_notifications_reach_it_through_round_robin() {
    use rmcp::ServiceExt;
    let fixture = fixture();
    let redis = RedisServer::start(fixture.root());
    let (_replicas, balancer) = fleet(&fixture, &redis).await;
    // rmcp's client with a session (2025-11-25): its stream for notifications and each of its
    // requests land on the replicas in turn.
    let handler = crate::mcp::Client::default();
    let changed = handler.changed.clone();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(balancer.url.clone());
    let client = handler.serve(transport).await.expect("an MCP session");
    for _ in 0..3 {
        let names = crate::mcp::tool_names(&client).await;
        assert!(names.contains(&"sleep".to_string()), "{names:?}");
    }
    // Every replica reloads; the one that holds the session tells it.
    fixture.write("more.toml", &crate::support::fail_ensemble("more"));
    tokio::time::timeout(crate::mcp::DEADLINE, changed.notified())
        .await
        .expect("notifications/tools/list_changed through the balancer");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !crate::mcp::tool_names(&client)
        .await
        .contains(&"fail".to_string())
    {
        assert!(Instant::now() < deadline, "the new tool never listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_in_redis_past_its_bound_or_not_an_address_is_never_used() {
    let fixture = fixture();
    let redis = RedisServer::start(fixture.root());
    let (replicas, _balancer) = fleet(&fixture, &redis).await;
    let client = reqwest::Client::new();
    for (replica, value) in [
        ("0123456789abcdef", "h".repeat(1 << 20)),
        (
            "fedcba9876543210",
            "http://evil.example:80/steal".to_string(),
        ),
        ("00000000000000ff", "https://evil.example:443".to_string()),
    ] {
        let mut set = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port.to_string(), "-x", "SET"])
            .arg(format!("toolhost:replica:{replica}"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-cli (Debian's redis-tools, with redis-server)");
        use std::io::Write;
        let mut stdin = set.stdin.take().expect("stdin");
        stdin.write_all(value.as_bytes()).expect("value");
        drop(stdin);
        assert!(set.wait().expect("redis-cli").success());
        // A follow-up naming that replica is not sent anywhere: the replica is gone for us.
        let state = json!({"requestState": format!("{replica}.0123")});
        let told = try_ask(&client, &replicas[0].url, "dave", state).await;
        let text = told.map_or_else(|text| text, |answer| answer.to_string());
        assert!(
            text.contains(&format!("replica {replica}, which is gone")),
            "{text}"
        );
    }
}
