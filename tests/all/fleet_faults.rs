//! The fleet under faults of the engines it shares: three replicas (`[fleet] advertise`,
//! Redis, the chat on PostgreSQL) behind the shipped haproxy configuration, round robin, under
//! a steady load of calls, `tools/list`, chat reads and probes. Redis stalled (SIGSTOP) and
//! then killed and restarted empty, PostgreSQL stopped and restarted: nothing that does not
//! need the engine fails, a call under a quota is a `503` with `Retry-After` while Redis does
//! not answer, and afterwards the quota counts exactly the calls that ran (a script queued
//! behind the stall takes nothing; a call refused before it runs gives its token back).
//! Also: a Redis that answers with replies past every bound leaves the replica's memory
//! where it was; a NUL in a chat id or message on either store.

use crate::fleet::Haproxy;
use crate::fleet_chat::PostgresServer;
use crate::fleet_quotas::RedisServer;
use crate::mcp::HttpServer;
use crate::scripted::{Scripted, openai};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TOKENS: &str = "[[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
    [[access.tokens]]\nname = \"carol\"\nenv = \"CAROL\"\n\n\
    [[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 10\n";

/// ann is under 10 calls a minute (a token every 6 s); carol under no quota.
const PER_MINUTE: f64 = 10.0;

/// A request without a session (2026-07-28) by the bearer of `token` on a shared client:
/// `method` with `params` (an object; `name`, if any, is also sent as `Mcp-Name`). The status,
/// the `Retry-After` header and the answer.
async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    method: &str,
    mut params: Value,
) -> (u16, Option<String>, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let mut request = client
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    match request.json(&body).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry = (response.headers().get("retry-after"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let text = response.text().await.unwrap_or_default();
            let answer = crate::support::answer_of(&text)
                .or_else(|| serde_json::from_str(&text).ok())
                .unwrap_or(Value::String(text));
            (status, retry, answer)
        }
        Err(e) => (0, None, Value::String(e.to_string())),
    }
}

/// Whether a call ran and succeeded.
fn ran(status: u16, answer: &Value) -> bool {
    status == 200 && answer["result"]["isError"] == json!(false)
}

/// The load a fleet serves all through the faults: what failed, by kind.
struct Load {
    stop: Arc<AtomicBool>,
    /// Whether chat reads may fail now (PostgreSQL is down on purpose).
    chat_may_fail: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl Load {
    /// `workers` loops through the balancer at `front`, each sending in turn: carol's call
    /// of `calculate`, `tools/list`, a read of carol's conversation `chat`, and `/readyz`.
    fn start(front: &str, chat: &str, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let chat_may_fail = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let client = reqwest::Client::new();
        let workers = (0..workers)
            .map(|n| {
                let (stop, chat_may_fail) = (Arc::clone(&stop), Arc::clone(&chat_may_fail));
                let (sent, failures, client) =
                    (Arc::clone(&sent), Arc::clone(&failures), client.clone());
                let (mcp, readyz) = (format!("{front}/mcp"), format!("{front}/readyz"));
                let read = format!("{front}/api/conversations/{chat}");
                tokio::spawn(async move {
                    let mut turn = n;
                    while !stop.load(Ordering::Relaxed) {
                        turn += 1;
                        let failed = match turn % 4 {
                            0 => {
                                let arguments = json!({"expression": format!("{turn} + 1")});
                                let params = json!({"name": "calculate", "arguments": arguments});
                                let (status, _, answer) =
                                    post(&client, &mcp, "carol-token", "tools/call", params).await;
                                (!ran(status, &answer)).then(|| format!("call: {status} {answer}"))
                            }
                            1 => {
                                let (status, _, answer) =
                                    post(&client, &mcp, "carol-token", "tools/list", json!({}))
                                        .await;
                                let listed = answer["result"]["tools"].as_array().is_some();
                                (status != 200 || !listed)
                                    .then(|| format!("tools/list: {status} {answer}"))
                            }
                            2 => {
                                // A read that began or ended while PostgreSQL was down on
                                // purpose may fail.
                                let excused = chat_may_fail.load(Ordering::Relaxed);
                                let response =
                                    client.get(&read).bearer_auth("carol-token").send().await;
                                let status = response.map_or(0, |r| r.status().as_u16());
                                let excused = excused || chat_may_fail.load(Ordering::Relaxed);
                                (status != 200 && !excused).then(|| format!("chat read: {status}"))
                            }
                            _ => {
                                let response = client.get(&readyz).send().await;
                                let status = response.map_or(0, |r| r.status().as_u16());
                                (status != 200).then(|| format!("readyz: {status}"))
                            }
                        };
                        sent.fetch_add(1, Ordering::Relaxed);
                        if let Some(failure) = failed {
                            failures.lock().expect("failures").push(failure);
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            chat_may_fail,
            sent,
            failures,
            workers,
            started: Instant::now(),
        }
    }

    /// No failure so far.
    fn assert_none_failed(&self, during: &str) {
        let failures = self.failures.lock().expect("failures");
        let sent = self.sent.load(Ordering::Relaxed);
        assert!(
            failures.is_empty(),
            "{} of {sent} requests failed {during}; the first: {:#?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
    }

    async fn stop(self) -> (u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            worker.await.expect("a load worker");
        }
        (self.sent.load(Ordering::Relaxed), self.started.elapsed())
    }
}

/// ann's call of `calculate` through the balancer.
async fn anns_call(client: &reqwest::Client, mcp: &str) -> (u16, Option<String>, Value) {
    let params = json!({"name": "calculate", "arguments": {"expression": "2 + 2"}});
    post(client, mcp, "ann-token", "tools/call", params).await
}

/// ann's calls in a row until one is refused with 429: how many ran. Every answer is a run
/// or a 429.
async fn anns_calls_until_limited(client: &reqwest::Client, mcp: &str) -> u32 {
    for ran_now in 0..40 {
        let (status, _, answer) = anns_call(client, mcp).await;
        if status == 429 {
            return ran_now;
        }
        assert!(ran(status, &answer), "{status} {answer}");
    }
    panic!("ann's quota never refused a call");
}

/// Waits until every replica says it reaches its engines again (`/readyz` is `ready` and
/// nothing more): after a fault each replica makes its connection again on its own.
async fn until_every_replica_answers(replicas: &[HttpServer]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for replica in replicas {
        let readyz = replica.url.replace("/mcp", "/readyz");
        loop {
            let said = match reqwest::get(&readyz).await {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            if said == "ready\n" {
                break;
            }
            assert!(Instant::now() < deadline, "{readyz}: {said}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The calls ann's bucket may have allowed `since` a moment it held `tokens`.
fn allowed(tokens: f64, since: Instant) -> u32 {
    (tokens + since.elapsed().as_secs_f64() * PER_MINUTE / 60.0).floor() as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_restarted_redis_and_a_stopped_postgres_fail_only_what_needs_them() {
    let postgres = PostgresServer::start();
    let model = Scripted::start(vec![openai::text("Kept.")]);
    let fixture = crate::web::fixture(&model.base_url, "");
    let mut redis = RedisServer::start(fixture.root());
    let config = fixture.write_host_file(
        "chat",
        &format!(
            "{}\ndatabase-env = \"TOOLHOST_DATABASE_URL\"\n\n[fleet]\n\
             redis-env = \"TOOLHOST_REDIS_URL\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"\n\n\
             {TOKENS}",
            crate::support::scripted_chat(&model.base_url, "")
        ),
    );
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let env = [
        ("SCRIPTED_KEY", "k"),
        ("ANN", "ann-token"),
        ("CAROL", "carol-token"),
        ("TOOLHOST_REDIS_URL", redis_url.as_str()),
        ("TOOLHOST_DATABASE_URL", database_url.as_str()),
    ];
    let replicas: Vec<HttpServer> = (0..3)
        .map(|_| crate::fleet_routes::advertising(&fixture, &config, &env))
        .collect();
    let balancer = Haproxy::over(fixture.root(), &replicas);
    balancer.wait_passing(Duration::from_secs(120)).await;
    let front = balancer.front();
    let mcp = balancer.url.clone();
    let client = reqwest::Client::new();

    // carol's conversation, read all through.
    let started = crate::access_chat::chat(
        &format!("{front}/api/conversations"),
        "carol-token",
        json!({"message": "Keep this"}),
    )
    .await
    .rest()
    .await;
    let chat = started[0]["id"].as_str().expect("an id").to_string();
    let load = Load::start(&front, &chat, 8);

    // Redis stalled for 7 s. Before: one call of ann's ran (9 tokens left).
    let (status, _, answer) = anns_call(&client, &mcp).await;
    assert!(ran(status, &answer), "{status} {answer}");
    let first = Instant::now();
    redis.pause(true);
    let stalled = Instant::now();
    let mut refused = 0;
    while stalled.elapsed() < Duration::from_secs(7) {
        let (status, retry, answer) = anns_call(&client, &mcp).await;
        assert_eq!(status, 503, "{answer}");
        assert_eq!(retry.as_deref(), Some("1"), "{answer}");
        let said = answer["error_description"].as_str().unwrap_or_default();
        assert!(said.contains("Redis at redis://127.0.0.1:"), "{said}");
        refused += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused >= 5, "{refused}");
    redis.pause(false);
    load.assert_none_failed("while Redis was stalled");
    // The scripts sent during the stall reached Redis after their callers gave up: they
    // took nothing. ann has the 9 tokens left and what the minute refilled since.
    until_every_replica_answers(&replicas).await;
    let ran_after = anns_calls_until_limited(&client, &mcp).await;
    let most = allowed(9.0, first);
    assert!(
        (9..=most).contains(&ran_after),
        "after the stall {ran_after} of ann's calls ran; 9 to {most} were left"
    );

    // Redis killed, then back empty (no persistence): every bucket full again.
    redis.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, retry, answer) = anns_call(&client, &mcp).await;
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{answer}");
    redis.restart();
    until_every_replica_answers(&replicas).await;
    let refilled = Instant::now();
    load.assert_none_failed("while Redis was down and restarted");
    // Calls refused before they run give their token back, on a fleet as on one host: six of
    // an unknown tool, six whose arguments fail the schema.
    for n in 0..12 {
        let params = if n % 2 == 0 {
            json!({"name": "no_such_tool", "arguments": {}})
        } else {
            json!({"name": "calculate", "arguments": {"expresion": "1"}})
        };
        let (status, _, answer) = post(&client, &mcp, "ann-token", "tools/call", params).await;
        assert_eq!(status, 200, "{answer}");
        assert!(!ran(status, &answer), "{answer}");
    }
    let ran_after = anns_calls_until_limited(&client, &mcp).await;
    let most = allowed(10.0, refilled);
    assert!(
        (10..=most).contains(&ran_after),
        "after 12 refused calls {ran_after} of ann's calls ran; 10 to {most} were left"
    );
    // A 429 says whose and which tool (the audit log all replicas append to).
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    let limited: Vec<Value> = (audit.lines())
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["outcome"] == "refused-429")
        .collect();
    assert!(!limited.is_empty());
    for record in &limited {
        assert_eq!(record["identity"]["name"], "ann", "{record}");
        assert_eq!(record["tool"], "calculate", "{record}");
    }

    // PostgreSQL stopped: the chat answers 503, tools and tools/list lose nothing.
    load.chat_may_fail.store(true, Ordering::Relaxed);
    postgres.stop();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let read = format!("{front}/api/conversations/{chat}");
    let response = client.get(&read).bearer_auth("carol-token").send().await;
    assert_eq!(response.expect("GET").status().as_u16(), 503);
    postgres.restart();
    // Back on every replica (each one's pool finds it again on its own), not only on the one
    // the balancer picked.
    let deadline = Instant::now() + Duration::from_secs(30);
    for replica in &replicas {
        let read = format!(
            "{}/{chat}",
            crate::web::base(replica) + "/api/conversations"
        );
        loop {
            let response = client.get(&read).bearer_auth("carol-token").send().await;
            if response.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(Instant::now() < deadline, "the chat never came back");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    load.chat_may_fail.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.assert_none_failed("while PostgreSQL was stopped and restarted");
    let (sent, took) = load.stop().await;
    eprintln!(
        "the load: {sent} requests in {:.1} s ({:.0} a second), none failed",
        took.as_secs_f64(),
        sent as f64 / took.as_secs_f64()
    );
}

/// What a hostile Redis answers every command with but the handshake's.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    /// `$2147483647` and endless bytes.
    Bulk,
    /// `+` and endless bytes, no CRLF.
    Line,
    /// `*100000000` and endless small values.
    Array,
}

/// A Redis on loopback that answers the handshake (`CLIENT SETINFO`, `SELECT`) with `+OK`
/// and any other command as `hostile` says, as fast as the socket takes it, until the
/// connection ends. Its `redis://` URL.
async fn hostile_redis(hostile: Hostile) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                loop {
                    let Ok(read) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if read == 0 {
                        return;
                    }
                    let text = String::from_utf8_lossy(&buffer[..read]).to_uppercase();
                    let polite = text.matches("SETINFO").count() + text.matches("SELECT").count();
                    let commands = text.matches("\r\n*").count() + 1;
                    let ok = "+OK\r\n".repeat(polite);
                    if socket.write_all(ok.as_bytes()).await.is_err() {
                        return;
                    }
                    if commands <= polite {
                        continue;
                    }
                    let (head, body): (&[u8], Vec<u8>) = match hostile {
                        Hostile::Bulk => (b"$2147483647\r\n", vec![b'x'; 65536]),
                        Hostile::Line => (b"+", vec![b'y'; 65536]),
                        Hostile::Array => (b"*100000000\r\n", b":1\r\n".repeat(16384)),
                    };
                    if socket.write_all(head).await.is_err() {
                        return;
                    }
                    while socket.write_all(&body).await.is_ok() {}
                    return;
                }
            });
        }
    });
    format!("redis://127.0.0.1:{port}/0")
}

/// The resident memory of process `pid` now, in KiB.
fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_reply_past_its_bound_is_refused_and_the_replicas_memory_stays_put() {
    for hostile in [Hostile::Bulk, Hostile::Line, Hostile::Array] {
        let fixture = crate::support::Fixture::new();
        fixture.write_echo();
        let url = hostile_redis(hostile).await;
        let config = fixture.write_host_file(
            "fleet",
            &format!("redis = \"{url}\"\nredis-timeout-ms = 2000\n\n{TOKENS}"),
        );
        let env = [("ANN", "ann-token"), ("CAROL", "carol-token")];
        let config = config.to_str().expect("path");
        let server = HttpServer::start(&fixture, &["--config", config, "--no-watch"], &env);
        let pid = server.child.id();
        let client = reqwest::Client::new();
        // Settled: the first load done, a call made.
        let params = json!({"name": "echo", "arguments": {"warm": true}});
        let (status, _, answer) =
            post(&client, &server.url, "carol-token", "tools/call", params).await;
        assert!(ran(status, &answer), "{hostile:?}: {answer}");
        let before = resident_kib(pid);
        // ann's calls wait on the hostile Redis (and so does each second's ping), for about
        // four seconds of replies as fast as loopback carries them.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(4) {
            let params = json!({"name": "echo", "arguments": {}});
            let (status, _, answer) =
                post(&client, &server.url, "ann-token", "tools/call", params).await;
            assert_eq!(status, 503, "{hostile:?}: {answer}");
            let said = answer["error_description"].as_str().unwrap_or_default();
            assert!(
                said.contains("sent a reply refused") || said.contains("cannot be reached"),
                "{hostile:?}: {said}"
            );
        }
        let peak = crate::support::peak_kib(pid);
        let grown = peak.saturating_sub(before);
        eprintln!("{hostile:?}: resident {before} KiB before, peak {peak} KiB");
        assert!(
            grown < 48 * 1024,
            "{hostile:?}: the replica grew by {grown} KiB (from {before} to a peak of {peak})"
        );
        // The rest serves.
        let params = json!({"name": "echo", "arguments": {"after": true}});
        let (status, _, answer) =
            post(&client, &server.url, "carol-token", "tools/call", params).await;
        assert!(ran(status, &answer), "{hostile:?}: {answer}");
    }
}

/// A NUL in a chat id is a 404 and one in a message is kept as sent, on SQLite and on
/// PostgreSQL alike, and neither is an error line in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_chat_id_or_message_is_a_404_or_kept_on_either_store() {
    let postgres = PostgresServer::start();
    for database in ["sqlite", "postgres"] {
        let model = Scripted::start(vec![openai::text("Read it.")]);
        let extra = if database == "postgres" {
            "database-env = \"TOOLHOST_DATABASE_URL\"\n"
        } else {
            ""
        };
        let fixture = crate::web::fixture(&model.base_url, extra);
        let config = fixture.root().join("toolhost.toml");
        let database_url = postgres.url();
        let env = [
            ("SCRIPTED_KEY", "k"),
            ("TOOLHOST_DATABASE_URL", database_url.as_str()),
        ];
        let server = HttpServer::start(
            &fixture,
            &["--config", config.to_str().expect("path")],
            &env,
        );
        let api = format!("{}/api/conversations", crate::web::base(&server));
        let (status, said) = crate::web::get(&format!("{api}/%00")).await;
        assert_eq!(status, 404, "{database}: {said}");
        let (status, said) =
            crate::web::post_json(&format!("{api}/%00/messages"), json!({"message": "hi"})).await;
        assert_eq!(status, 404, "{database}: {said}");
        let (status, _) = crate::web::get(&format!("{api}/a%00b")).await;
        assert_eq!(status, 404, "{database}");
        let events = crate::web::chat(&api, json!({"message": "nul \u{0} here\nmore"}))
            .await
            .rest()
            .await;
        assert_eq!(
            events.last().expect("done")["text"],
            "Read it.",
            "{events:#?}"
        );
        let id = events[0]["id"].as_str().expect("id");
        let (status, read) = crate::web::get(&format!("{api}/{id}")).await;
        assert_eq!(status, 200, "{database}: {read}");
        assert_eq!(read["title"], "nul   here", "{database}: {read}");
        let kept = read["messages"].to_string();
        assert!(kept.contains("nul \\u0000 here"), "{database}: {kept}");
        let logged = server.stderr();
        assert!(!logged.contains("ERROR"), "{database}: {logged}");
    }
}
