//! Quotas a fleet shares (`[fleet] redis`): three replicas of `serve --http` with one
//! `toolhost.toml` and Debian's `redis-server` (started here on loopback), behind haproxy
//! round robin or called in turn, hold an identity to its calls a minute and calls at once
//! exactly, whichever replica each call reaches;
//! what a client sees while Redis is down and after it is back; the running calls of a
//! replica killed mid-call given back within the lease; `check` on a wrong `[fleet]`.

use crate::fleet::Haproxy;
use crate::mcp::HttpServer;
use crate::mcp_revisions::modern_post;
use crate::support::Fixture;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's redis-server on a free loopback port, with no disk; stopped when dropped.
pub(crate) struct RedisServer {
    child: Option<Child>,
    pub(crate) port: u16,
    dir: std::path::PathBuf,
}

impl RedisServer {
    pub(crate) fn start(root: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = root.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).expect("redis dir");
        let mut redis = RedisServer {
            child: None,
            port,
            dir,
        };
        redis.restart();
        redis
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts it (again, on the same port: empty, as a Redis without persistence comes back).
    pub(crate) fn restart(&mut self) {
        let binary = ["/usr/bin/redis-server", "redis-server"]
            .into_iter()
            .find(|p| Command::new(p).arg("--version").output().is_ok())
            .expect("redis-server is installed (./scripts/test-tools.sh installs it)");
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) it: a Redis that holds connections open and
    /// answers nothing, as a stalled one does.
    pub(crate) fn pause(&self, paused: bool) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let signal = if paused { "-STOP" } else { "-CONT" };
        let status = Command::new("kill").args([signal, &pid]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pid}");
    }

    /// Kills it (SIGKILL: nothing saved).
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `tools/call` without a session by the bearer of `token`: the status and the answer.
pub(crate) async fn call_as(url: &str, token: &str, tool: &str, arguments: Value) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let params = json!({"name": tool, "arguments": arguments});
    let (status, _, answer) = modern_post(
        url,
        "tools/call",
        Some(tool),
        params,
        &[("authorization", &auth)],
    )
    .await;
    (status, answer)
}

/// [`call_as`] of `sleep` for a task of its own.
async fn call_as_owned(url: String, token: &'static str, arguments: Value) -> (u16, Value) {
    call_as(&url, token, "sleep", arguments).await
}

/// Waits until the replica at `url` runs one call (its `/metrics` say so).
pub(crate) async fn running_one_call(url: &str) {
    crate::metrics::until_running(url, Some("carol-token"), 1).await;
}

/// Whether a call ran and succeeded.
pub(crate) fn ran(status: u16, answer: &Value) -> bool {
    status == 200 && answer["result"]["isError"] == json!(false)
}

/// A fixture with `echo` and `sleep` and a `toolhost.toml` whose `[fleet]` is `fleet` and
/// whose tokens are ann, bob, dave and carol (their variables in `TOKENS`), with `quotas`.
fn fleet_fixture(fleet: &str, quotas: &str) -> (Fixture, String) {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write_slow(60000);
    let mut tokens = String::new();
    for (name, var) in TOKENS {
        tokens.push_str(&format!(
            "[[access.tokens]]\nname = \"{name}\"\nenv = \"{var}\"\n\n"
        ));
    }
    let path = fixture.root().join("toolhost.toml");
    std::fs::write(
        &path,
        format!("schema-version = 1\n\n[fleet]\n{fleet}\n\n{tokens}{quotas}"),
    )
    .expect("toolhost.toml");
    (fixture, path.to_str().expect("utf-8").to_string())
}

const TOKENS: [(&str, &str); 4] = [
    ("ann", "ANN"),
    ("bob", "BOB"),
    ("dave", "DAVE"),
    ("carol", "CAROL"),
];

const ENV: [(&str, &str); 4] = [
    ("ANN", "ann-token"),
    ("BOB", "bob-token"),
    ("DAVE", "dave-token"),
    ("CAROL", "carol-token"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_holds_exactly_across_three_replicas() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let redis = RedisServer::start(scratch.path());
    let (fixture, config) = fleet_fixture(
        &format!("redis = \"{}\"", redis.url()),
        "[[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 5\n\n\
         [[access.quotas]]\nidentities = [\"bob\"]\nconcurrent-calls = 2\n\n\
         [[access.quotas]]\nidentities = [\"dave\"]\ncalls-per-minute = 2\nconcurrent-calls = 1\n",
    );
    let replicas: Vec<HttpServer> = (0..3)
        .map(|_| HttpServer::start(&fixture, &["--config", &config, "--no-watch"], &ENV))
        .collect();
    let url = |n: usize| replicas[n % 3].url.as_str();

    // Ann, through haproxy round robin: 5 calls a minute for the fleet, not 5 per replica.
    let addresses: Vec<String> = (replicas.iter())
        .map(|r| (r.url.trim_start_matches("http://").trim_end_matches("/mcp")).to_string())
        .collect();
    let balancer = Haproxy::balancing(fixture.root(), &addresses, "roundrobin");
    let ready = balancer.url.replace("/mcp", "/readyz");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(reqwest::get(&ready).await).is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "haproxy never passed a request");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut answered = Vec::new();
    for n in 0..20 {
        let (status, answer) = call_as(&balancer.url, "ann-token", "echo", json!({"n": n})).await;
        assert!(status == 200 || status == 429, "{status} {answer}");
        if status == 429 {
            let said = answer["error_description"].as_str().unwrap_or_default();
            assert!(said.contains("5 calls a minute"), "{answer}");
        }
        answered.push(ran(status, &answer));
    }
    let ran_count = answered.iter().filter(|r| **r).count();
    assert_eq!(ran_count, 5, "{answered:?}");
    assert!(
        answered[..5].iter().all(|r| *r),
        "the burst first: {answered:?}"
    );

    // Dave: a call that never runs (no such tool, in a conversation) gives its token back,
    // on any replica, and holds nothing once its request ended.
    let params = json!({
        "name": "no-such-tool",
        "arguments": {},
        "_meta": {"io.toolhost/conversation": "dave-conversation-0001"},
    });
    let auth = [("authorization", "Bearer dave-token")];
    let (status, _, answer) =
        modern_post(url(0), "tools/call", Some("no-such-tool"), params, &auth).await;
    assert_eq!(status, 200, "{answer}");
    assert!(!ran(status, &answer), "{answer}");
    for n in 1..=2 {
        let params = json!({
            "name": "echo",
            "arguments": {"n": n},
            "_meta": {"io.toolhost/conversation": "dave-conversation-0001"},
        });
        let (status, _, answer) =
            modern_post(url(n), "tools/call", Some("echo"), params, &auth).await;
        assert!(ran(status, &answer), "call {n}: {status} {answer}");
    }
    let (status, _) = call_as(url(0), "dave-token", "echo", json!({"n": 3})).await;
    assert_eq!(status, 429, "two calls a minute, and two ran");

    // Bob: two at once across the fleet; a third on the third replica waits for one to end.
    let long = tokio::spawn(call_as_owned(
        url(0).into(),
        "bob-token",
        json!({"ms": 4000}),
    ));
    let short = tokio::spawn(call_as_owned(
        url(1).into(),
        "bob-token",
        json!({"ms": 1500}),
    ));
    for n in 0..2 {
        running_one_call(url(n)).await;
    }
    let (status, answer) = call_as(url(2), "bob-token", "echo", json!({"third": true})).await;
    assert_eq!(status, 429, "{answer}");
    let said = answer["error_description"].as_str().unwrap_or_default();
    assert!(said.contains("2 calls at once"), "{answer}");
    let (status, answer) = short.await.expect("short");
    assert!(ran(status, &answer), "{answer}");
    let (status, answer) = call_as(url(2), "bob-token", "echo", json!({"fourth": true})).await;
    assert!(ran(status, &answer), "{status} {answer}");
    let (status, answer) = long.await.expect("long");
    assert!(ran(status, &answer), "{answer}");

    // Carol has no quota: she never waits on anything.
    let (status, answer) = call_as(url(1), "carol-token", "echo", json!({})).await;
    assert!(ran(status, &answer), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_or_stalled_calls_under_a_quota_are_refused_with_503_and_the_host_says_so()
 {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut redis = RedisServer::start(scratch.path());
    let (fixture, config) = fleet_fixture(
        &format!("redis = \"{}\"\nredis-timeout-ms = 300", redis.url()),
        "[[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 100\n",
    );
    let server = HttpServer::start(&fixture, &["--config", &config, "--no-watch"], &ENV);
    let url = server.url.as_str();
    let base = url.trim_end_matches("/mcp").to_string();
    let probe = |path: &'static str| {
        let address = format!("{base}{path}");
        async move {
            let response = reqwest::Client::new()
                .get(address)
                .bearer_auth("carol-token")
                .send()
                .await
                .expect("GET");
            let status = response.status().as_u16();
            (status, response.text().await.expect("text"))
        }
    };
    let (status, answer) = call_as(url, "ann-token", "echo", json!({"before": true})).await;
    assert!(ran(status, &answer), "{answer}");
    assert_eq!(probe("/readyz").await.0, 200);

    redis.stop();
    let started = Instant::now();
    let (status, answer) = call_as(url, "ann-token", "echo", json!({"down": true})).await;
    assert_eq!(status, 503, "{answer}");
    let said = answer["error_description"].as_str().unwrap_or_default();
    assert!(said.contains("Redis at redis://127.0.0.1:"), "{said}");
    assert!(said.contains("calls under a quota wait"), "{said}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the timeout"
    );
    // Nobody else waits on Redis.
    let (status, answer) = call_as(url, "carol-token", "echo", json!({"down": true})).await;
    assert!(ran(status, &answer), "{answer}");
    // The probe says so and stays ready (every replica shares Redis: unready, the balancer
    // would have none); so do the metrics.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = probe("/readyz").await;
        assert_eq!(status, 200, "{text}");
        if text.contains("redis does not answer") {
            assert!(
                text.starts_with("ready; redis does not answer: calls under a quota answer 503"),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never said: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, metrics) = probe("/metrics").await;
    assert!(
        metrics.contains("toolhost_shared_engine_up{engine=\"redis\"} 0"),
        "{metrics}"
    );
    // So does `toolhost status` (the status file is written within 2 s of the change).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command
            .envs(ENV)
            .args(["--config", &config, "status"])
            .output()
            .expect("status");
        let said = String::from_utf8_lossy(&output.stdout).to_string();
        if said.contains("redis: does not answer (Redis at redis://127.0.0.1:") {
            break;
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(Instant::now() < deadline, "{said}{stderr}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Back (empty, as a Redis without persistence restarts): calls go on, the host is ready.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, answer) = call_as(url, "ann-token", "echo", json!({"back": true})).await;
        if ran(status, &answer) {
            break;
        }
        assert!(Instant::now() < deadline, "never back: {status} {answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe("/readyz").await.1 != "ready\n" {
        assert!(Instant::now() < deadline, "never said to answer again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, metrics) = probe("/metrics").await;
    assert!(
        metrics.contains("toolhost_shared_engine_up{engine=\"redis\"} 1"),
        "{metrics}"
    );

    // Stalled (SIGSTOP: connections open, nothing answered): the call under a quota waits
    // its 300 ms, not longer, and is refused; others run; resumed, calls are counted again.
    redis.pause(true);
    let started = Instant::now();
    let (status, answer) = call_as(url, "ann-token", "echo", json!({"stalled": true})).await;
    assert_eq!(status, 503, "{answer}");
    let said = answer["error_description"].as_str().unwrap_or_default();
    assert!(said.contains("did not answer within 300 ms"), "{said}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the timeout"
    );
    let (status, answer) = call_as(url, "carol-token", "echo", json!({"stalled": true})).await;
    assert!(ran(status, &answer), "{answer}");
    redis.pause(false);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, answer) = call_as(url, "ann-token", "echo", json!({"resumed": true})).await;
        if ran(status, &answer) {
            break;
        }
        assert!(Instant::now() < deadline, "never back: {status} {answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_calls_of_a_replica_killed_mid_call_are_given_back_within_the_lease() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let redis = RedisServer::start(scratch.path());
    let (fixture, config) = fleet_fixture(
        &format!("redis = \"{}\"", redis.url()),
        "[[access.quotas]]\nidentities = [\"bob\"]\nconcurrent-calls = 1\n",
    );
    let mut doomed = HttpServer::start(&fixture, &["--config", &config, "--no-watch"], &ENV);
    let survivor = HttpServer::start(&fixture, &["--config", &config, "--no-watch"], &ENV);
    let doomed_url = doomed.url.clone();
    let running = tokio::spawn(async move {
        call_as(&doomed_url, "bob-token", "sleep", json!({"ms": 50_000})).await
    });
    // Running on the doomed replica: the survivor refuses Bob's second call.
    running_one_call(&doomed.url).await;
    let (status, answer) = call_as(&survivor.url, "bob-token", "echo", json!({})).await;
    assert_eq!(status, 429, "{answer}");
    doomed.child.kill().expect("SIGKILL");
    let _ = doomed.child.wait();
    let killed = Instant::now();
    running.abort();
    // Its lease is not renewed: within 15 s (the lease) the survivor takes Bob's call.
    let deadline = killed + Duration::from_secs(25);
    loop {
        let (status, answer) = call_as(&survivor.url, "bob-token", "echo", json!({})).await;
        if ran(status, &answer) {
            break;
        }
        assert_eq!(status, 429, "{answer}");
        assert!(
            Instant::now() < deadline,
            "the dead replica's call still counts"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let waited = killed.elapsed();
    assert!(waited <= Duration::from_secs(17), "{waited:?}");
}

/// What `check` says of a `toolhost.toml` whose `[fleet]` is `fleet`, and whether it passed.
pub(crate) fn check(fleet: &str) -> (bool, String) {
    let (fixture, config) = fleet_fixture(fleet, "");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    for (var, value) in ENV {
        command.env(var, value);
    }
    let output = command
        .args(["--config", &config, "check"])
        .env_remove("NOT_SET_ANYWHERE")
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.success(), format!("{stdout}{stderr}"))
}

#[test]
fn check_says_where_a_fleet_setting_is_wrong() {
    let run = |fleet: &str| {
        let (passed, said) = check(fleet);
        assert!(!passed, "{fleet}: {said}");
        said
    };
    let said = run("redis = \"redis://:hunter2@redis:6379/0\"");
    assert!(
        said.contains("a Redis password is never read from toolhost.toml"),
        "{said}"
    );
    assert!(said.contains("toolhost.toml:4:9"), "{said}");
    // A variable that is not set: `serve` needs it, a check warns.
    let (passed, said) = check("redis-env = \"NOT_SET_ANYWHERE\"");
    assert!(passed, "{said}");
    assert!(
        said.contains("warning: $NOT_SET_ANYWHERE (`redis-env`) is not set: `serve` refuses"),
        "{said}"
    );
    let said = run("redis = \"redis://a/0\"\nredis-env = \"X\"");
    assert!(
        said.contains("write one of `redis` and `redis-env`"),
        "{said}"
    );
    assert!(said.contains("toolhost.toml:5:"), "{said}");
    let said = run("redis = \"mongodb://a/0\"");
    assert!(said.contains("is not a Redis URL"), "{said}");
    let said = run("redis-timeout-ms = 0");
    assert!(said.contains("redis-timeout-ms"), "{said}");
    // The address a replica advertises: http://host:port, and a Redis to say it in.
    let said = run("advertise = \"http://10.0.0.7:8750\"");
    assert!(said.contains("`advertise` needs a Redis"), "{said}");
    let said = run("redis = \"redis://a/0\"\nadvertise = \"https://10.0.0.7:8750/mcp\"");
    assert!(said.contains("is not an address to advertise"), "{said}");
    assert!(said.contains("toolhost.toml:5:13"), "{said}");
    let (passed, said) = check("redis = \"redis://a/0\"\nadvertise = \"http://10.0.0.7:8750/\"");
    assert!(passed, "{said}");
    assert!(!said.contains("without `advertise`"), "{said}");
    // A Redis and no address: passes, with a warning at the Redis's line saying what to set.
    let (passed, said) = check("redis = \"redis://a/0\"");
    assert!(passed, "{said}");
    assert!(said.contains("toolhost.toml:4:9"), "{said}");
    assert!(
        said.contains("warning: a fleet without `advertise`") && said.contains("advertise-env"),
        "{said}"
    );
}

/// A session opened on one replica of a fleet without `advertise`, asked of another: a 404
/// that says another replica may hold it and what to set (rmcp's own says only "Session not
/// found").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_another_replica_holds_without_advertise_is_a_404_that_says_what_to_set() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let redis = RedisServer::start(scratch.path());
    let (fixture, config) = fleet_fixture(&format!("redis = \"{}\"", redis.url()), "");
    let replicas: Vec<HttpServer> = (0..2)
        .map(|_| HttpServer::start(&fixture, &["--config", &config, "--no-watch"], &ENV))
        .collect();
    let client = reqwest::Client::new();
    let session = crate::mcp_http::open_session(&replicas[0].url, Some("carol-token")).await;
    let elsewhere = client
        .post(&replicas[1].url)
        .bearer_auth("carol-token")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(elsewhere.status().as_u16(), 404);
    let said = elsewhere.text().await.expect("text");
    assert!(
        said.contains("another replica of the fleet may hold it") && said.contains("advertise"),
        "{said}"
    );
}
