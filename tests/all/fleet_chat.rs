//! The chat's conversations on PostgreSQL (`[chat] database-env`), shared by the replicas:
//! Debian's PostgreSQL started by the test as the `postgres` user, in a temporary data
//! directory on a free loopback port. A conversation started on one replica goes on, is read
//! and is deleted on another; the caps hold for the database, whichever replica writes; a
//! PostgreSQL that stops answering makes the chat a 503 that says so while tools run, and the
//! chat comes back with it, nothing lost.

use crate::mcp::HttpServer;
use crate::mcp_revisions::modern_post;
use crate::scripted::{Scripted, openai};
use crate::web::{DEADLINE, base, chat, fixture, get, post_json};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolhost::agent::provider::conversation::Conversation;
use toolhost::web::{Store, StoreError, StoreLimits};

/// A PostgreSQL of the test's own, stopped (immediately: nothing flushed) when dropped.
pub(crate) struct PostgresServer {
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
    bin: PathBuf,
    /// More `-c` settings of the server's (TLS).
    pub(crate) options: String,
}

impl PostgresServer {
    /// `initdb` in a new directory under the system's temporary one (the `postgres` user
    /// must reach it: the test's own directories are the root's, 0700), then started.
    pub(crate) fn start() -> Self {
        let server = Self::made();
        server.restart();
        server
    }

    /// A server that takes only TLS connections (`hostssl` alone in `pg_hba.conf`), with the
    /// certificate and key at `cert` and `key` (copied for the `postgres` user).
    pub(crate) fn start_with_tls(cert: &Path, key: &Path) -> Self {
        let mut server = Self::made();
        let (own_cert, own_key) = (server.dir.join("server.crt"), server.dir.join("server.key"));
        std::fs::copy(cert, &own_cert).expect("copy the certificate");
        std::fs::copy(key, &own_key).expect("copy the key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&own_key, std::fs::Permissions::from_mode(0o600)).expect("0600");
        server.as_postgres("chown", |c| {
            c.args(["postgres:postgres"]).arg(&own_cert).arg(&own_key);
        });
        std::fs::write(
            server.data().join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("pg_hba.conf");
        server.options = format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            own_cert.display(),
            own_key.display()
        );
        server.restart();
        server
    }

    /// The data directory made (`initdb`), not started.
    fn made() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                let mut found: Vec<PathBuf> = versions
                    .filter_map(|v| Some(v.ok()?.path().join("bin")))
                    .filter(|bin| bin.join("initdb").is_file())
                    .collect();
                found.sort();
                found.pop()
            })
            .expect("PostgreSQL is installed (./scripts/test-tools.sh installs it)");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(format!("toolhost-pg-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("data dir");
        let server = PostgresServer {
            port,
            dir,
            bin,
            options: String::new(),
        };
        server.as_postgres("chown", |c| {
            c.args(["-R", "postgres:postgres"]).arg(&server.dir);
        });
        server.as_postgres(&server.bin.join("initdb").to_string_lossy(), |c| {
            c.args(["--auth=trust", "--username=toolhost", "--no-sync", "-D"])
                .arg(server.data());
        });
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs `program` as the `postgres` user (PostgreSQL refuses to run as root), or as is
    /// when the tests do not run as root; fails the test unless it succeeds.
    fn as_postgres(&self, program: &str, args: impl FnOnce(&mut Command)) {
        let Some(output) = run_as_postgres(program, args) else {
            return;
        };
        let output = output.unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            output.status.success(),
            "{program}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `postgres://toolhost@127.0.0.1:PORT/postgres`.
    pub(crate) fn url(&self) -> String {
        format!("postgres://toolhost@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts it (again, on the same port, with what it had).
    pub(crate) fn restart(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off{}",
            self.port,
            self.dir.display(),
            self.options
        );
        self.as_postgres(&self.bin.join("pg_ctl").to_string_lossy(), |c| {
            c.args(["-w", "-t", "60", "-l"])
                .arg(self.dir.join("log"))
                .arg("-D")
                .arg(self.data())
                .args(["-o", &options, "start"]);
        });
    }

    /// Stops it at once, as a crash would (`-m immediate`).
    pub(crate) fn stop(&self) {
        self.as_postgres(&self.bin.join("pg_ctl").to_string_lossy(), |c| {
            c.arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"]);
        });
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let _ = run_as_postgres(&pg_ctl.to_string_lossy(), |c| {
            c.arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "stop"]);
        });
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `program` run as the `postgres` user when the tests run as root, as is otherwise: its
/// output, or `None` for a `chown`, which only root needs.
fn run_as_postgres(
    program: &str,
    args: impl FnOnce(&mut Command),
) -> Option<std::io::Result<std::process::Output>> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let mut command = match (root, program) {
        (false, "chown") => return None,
        (true, "chown") | (false, _) => Command::new(program),
        (true, _) => {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--", program]);
            command
        }
    };
    args(&mut command);
    Some(command.stdin(Stdio::null()).output())
}

/// Two replicas of one fixture whose chat keeps its conversations in `postgres`, asking
/// `model`; `chat` is more of `[chat]`.
pub(crate) fn replicas(model: &Scripted, db: &PostgresServer, chat: &str) -> [HttpServer; 2] {
    let chat = format!("database-env = \"TOOLHOST_DATABASE_URL\"\n{chat}");
    let fixture = fixture(&model.base_url, &chat);
    let config = fixture.root().join("toolhost.toml");
    let args = ["--config", config.to_str().expect("path")];
    let env = [("SCRIPTED_KEY", "k"), ("TOOLHOST_DATABASE_URL", &db.url())];
    let one = HttpServer::start(&fixture, &args, &env);
    let two = HttpServer::start(&fixture, &args, &env);
    // The fixture's directory lives as long as the servers need it.
    std::mem::forget(fixture);
    [one, two]
}

pub(crate) fn api(server: &HttpServer) -> String {
    format!("{}/api/conversations", base(server))
}

async fn delete(url: &str) -> u16 {
    let response = reqwest::Client::new()
        .delete(url)
        .send()
        .await
        .expect("DELETE");
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_started_on_one_replica_goes_on_and_is_deleted_on_another() {
    let postgres = PostgresServer::start();
    let model = Scripted::start(vec![
        openai::stream(
            "Computing.",
            &[("c1", "calculate", r#"{"expression": "40 + 2"}"#)],
        ),
        openai::text("It is 42."),
        openai::text("Still 42."),
    ]);
    let [one, two] = replicas(&model, &postgres, "");
    let events = chat(&api(&one), json!({"message": "What is 40 + 2?"}))
        .await
        .rest()
        .await;
    assert_eq!(events.last().expect("done")["text"], "It is 42.");
    let id = events[0]["id"].as_str().expect("id").to_string();

    // The other replica lists it, and continues it with the whole conversation.
    let (status, list) = get(&api(&two)).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["conversations"][0]["id"], id.as_str());
    let more = chat(
        &format!("{}/{id}/messages", api(&two)),
        json!({"message": "Sure?"}),
    )
    .await
    .rest()
    .await;
    assert_eq!(more.last().expect("done")["text"], "Still 42.", "{more:#?}");
    let sent = &model.requests()[2].body["messages"];
    assert_eq!(sent.as_array().expect("messages").len(), 5, "{sent}");

    // The first replica reads both runs, in order.
    let (status, read) = get(&format!("{}/{id}", api(&one))).await;
    assert_eq!(status, 200);
    let messages = read["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 6, "and the last answer: {messages:#?}");
    let log: Vec<&str> = (read["log"].as_array().expect("log").iter())
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(log.iter().filter(|t| **t == "done").count(), 2, "{log:?}");

    assert_eq!(delete(&format!("{}/{id}", api(&two))).await, 204);
    let (status, _) = get(&format!("{}/{id}", api(&one))).await;
    assert_eq!(status, 404, "deleted on the other replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversation_cap_holds_for_the_fleet_and_a_stopped_postgres_is_a_503_while_tools_run()
{
    let postgres = PostgresServer::start();
    let model = Scripted::start(vec![
        openai::text("one"),
        openai::text("two"),
        openai::text("three"),
    ]);
    let [one, two] = replicas(&model, &postgres, "max-conversations = 2");
    for server in [&one, &two] {
        let events = chat(&api(server), json!({"message": "hi"}))
            .await
            .rest()
            .await;
        assert_eq!(events.last().expect("done")["type"], "done", "{events:#?}");
    }
    let (status, refused) = post_json(&api(&one), json!({"message": "a third"})).await;
    assert_eq!(status, 507, "{refused}");
    let said = refused["error"].as_str().expect("error");
    assert!(said.contains("2 conversations are kept"), "{said}");

    postgres.stop();
    let (status, answer) = get(&api(&two)).await;
    assert_eq!(status, 503, "{answer}");
    let said = answer["error"].as_str().expect("error");
    assert!(
        said.contains(&format!("PostgreSQL at {}", postgres.url())),
        "{said}"
    );
    // Tools run, and the replica stays ready, saying what does not answer.
    let (status, _, answer) = modern_post(
        &two.url,
        "tools/call",
        Some("calculate"),
        json!({"name": "calculate", "arguments": {"expression": "6 * 7"}}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.to_string().contains("42"), "{answer}");
    let deadline = Instant::now() + DEADLINE;
    loop {
        let response = reqwest::get(format!("{}/readyz", base(&two)))
            .await
            .expect("readyz");
        assert_eq!(response.status().as_u16(), 200);
        let text = response.text().await.expect("text");
        if text.contains("postgres does not answer") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    postgres.restart();
    let deadline = Instant::now() + DEADLINE;
    let list = loop {
        let (status, list) = get(&api(&one)).await;
        if status == 200 {
            break list;
        }
        assert!(Instant::now() < deadline, "{list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(list["conversations"].as_array().map(Vec::len), Some(2));
}

/// What the store is asked directly, as the API asks it: owners apart, the size bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_owners_stay_apart_and_the_size_bound_holds() {
    let postgres = PostgresServer::start();
    let settings = toolhost::state::FleetSettings {
        postgres: Some(toolhost::state::PostgresSettings::new(&postgres.url()).expect("url")),
        ..Default::default()
    };
    let shared = toolhost::state::Shared::open(&settings).expect("shared");
    let limits = StoreLimits {
        max_conversations: 100,
        max_bytes: 1 << 20,
    };
    let store = Store::postgres(shared.postgres().expect("postgres"), limits);
    store.prepare().await.expect("tables");
    // Made once: a second replica starting finds them.
    store.prepare().await.expect("again");

    let mut big = Conversation::default();
    big.push_user("x".repeat(600_000));
    store.create("a", "a", &big, Some("ann")).await.expect("a");
    assert!(store.get("a", Some("bob")).await.expect("get").is_none());
    assert!(store.get("a", None).await.expect("get").is_none());
    assert!(!store.owns("a", Some("bob")).await.expect("owns"));
    assert!(!store.delete("a", Some("bob")).await.expect("delete"));
    assert_eq!(store.list(Some("ann")).await.expect("list").len(), 1);
    assert!(store.list(Some("bob")).await.expect("list").is_empty());

    store
        .create("b", "b", &big, None)
        .await
        .expect("b: 600 KB in use");
    let full = store
        .create("c", "c", &big, None)
        .await
        .expect_err("past 1 MiB");
    assert!(matches!(full, StoreError::DatabaseFull { .. }), "{full}");
    assert!(store.has_room().await.is_err());
    // A run that was going when the bound was reached keeps its conversation, not its log.
    let record = toolhost::web::RunRecord {
        conversation: big.clone(),
        log: vec![json!({"type": "text", "text": "w".repeat(500_000)})],
        allowed_tools: vec!["say".into()],
        pending_question: Some("q1".into()),
    };
    assert!(store.save_run("b", record).await.expect("saved"));
    let kept = store.get("b", None).await.expect("get").expect("b");
    assert_eq!(kept.log.len(), 1);
    let note = kept.log[0]["message"].as_str().unwrap_or_default();
    assert!(note.contains("not kept"), "{note}");
    assert_eq!(kept.allowed_tools, ["say"]);
    assert_eq!(kept.pending_question.as_deref(), Some("q1"));
    let sizes: Option<(u64, u64)> = store.sizes("b", None).await.expect("sizes");
    assert!(sizes.is_some_and(|(messages, log)| messages > 600_000 && log < 1000));
    assert!(store.delete("a", Some("ann")).await.expect("delete"));
    store.has_room().await.expect("room again after a deletion");
    store.create("c", "c", &big, None).await.expect("c");
}

#[test]
fn check_says_where_a_chat_database_url_is_wrong() {
    // What a command says with `chat` as `[chat]`, and whether it passed.
    let run = |chat: &str, command: &[&str]| -> (bool, String) {
        let fixture = crate::support::Fixture::new();
        fixture.write_echo();
        fixture.write_host_file("chat", chat);
        let config = fixture.root().join("toolhost.toml");
        let mut toolhost = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut toolhost, &fixture);
        let output = toolhost
            .args(["--config", config.to_str().expect("path")])
            .args(command)
            .env_remove("NOT_SET_ANYWHERE")
            .output()
            .expect("toolhost runs");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), said)
    };
    let check = |chat: &str| run(chat, &["check"]);
    let (passed, said) = check("database = \"postgres://chat:hunter2@db/toolhost\"");
    assert!(
        !passed && said.contains("a PostgreSQL password is never read"),
        "{said}"
    );
    assert!(said.contains("toolhost.toml:4:12"), "{said}");
    let (passed, said) = check("database = \"postgres://db/toolhost?sslmode=sometimes\"");
    assert!(!passed && said.contains("sslmode `sometimes`"), "{said}");
    assert!(said.contains("toolhost.toml:4:12"), "{said}");
    let (passed, said) = check("database = \"postgres://db/toolhost?sslmode=require\"");
    assert!(passed, "{said}");
    let (passed, said) = check("database = \"mysql://db/toolhost\"");
    assert!(
        !passed && said.contains("is not a PostgreSQL URL"),
        "{said}"
    );
    let (passed, said) = check("database = \"chat.db\"\ndatabase-env = \"X\"");
    assert!(
        !passed && said.contains("write one of `database` and `database-env`"),
        "{said}"
    );
    let (passed, said) = check("database-env = \"NOT_SET_ANYWHERE\"");
    assert!(passed, "{said}");
    assert!(
        said.contains("$NOT_SET_ANYWHERE (`database-env`) is not set: `serve` refuses"),
        "{said}"
    );
    // The chat's base URL: written, or from the environment, not both.
    let (passed, said) = check("base-url = \"http://a/v1\"\nbase-url-env = \"X\"");
    assert!(!passed, "{said}");
    assert!(
        said.contains("write one of `base-url` and `base-url-env`"),
        "{said}"
    );
    assert!(said.contains("toolhost.toml:5:16"), "{said}");
    let unset = "model = \"m\"\nbase-url-env = \"NOT_SET_ANYWHERE\"";
    let (passed, said) = run(unset, &["chat", "hi"]);
    assert!(!passed, "{said}");
    assert!(
        said.contains("$NOT_SET_ANYWHERE ([chat] base-url-env) is not set"),
        "{said}"
    );
    // A file is still a file.
    let (passed, said) = check("database = \"state/chat.db\"");
    assert!(passed, "{said}");
}

/// `examples/fleet/toolhost.toml` as written, on two replicas behind haproxy (round robin),
/// each with its own `TOOLHOST_ADVERTISE`: the shipped ensembles, Redis and PostgreSQL from
/// the environment, the agents' token under 5 calls a minute, the chat on a model at
/// `$TOOLHOST_CHAT_BASE_URL`, and a 2025-11-25 client's session answered whichever replica
/// each of its requests reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_example_runs_as_written_behind_a_round_robin_balancer() {
    let postgres = PostgresServer::start();
    let fixture = crate::support::Fixture::new();
    let redis = crate::fleet_quotas::RedisServer::start(fixture.root());
    crate::support::copy_shipped(fixture.root());
    let config = fixture.root().join("examples/fleet/toolhost.toml");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("dir");
    let repo = std::path::Path::new(toolhost_testkit::REPO_ROOT);
    std::fs::copy(repo.join("examples/fleet/toolhost.toml"), &config).expect("copy example");
    let model = Scripted::start(vec![openai::text("Hello."), openai::text("Again.")]);
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let env = [
        ("TOOLHOST_REDIS_URL", redis_url.as_str()),
        ("TOOLHOST_DATABASE_URL", database_url.as_str()),
        ("TOOLHOST_AGENT_TOKEN", "agent-secret"),
        ("TOOLHOST_CHAT_BASE_URL", model.base_url.as_str()),
    ];
    let replicas: Vec<HttpServer> = (0..2)
        .map(|_| crate::fleet_routes::advertising(&fixture, &config, &env))
        .collect();
    let balancer = crate::fleet::Haproxy::over(fixture.root(), &replicas);
    let front = balancer.front();
    // Both replicas ready (every shipped ensemble loaded) before anything is counted.
    balancer.wait_passing(Duration::from_secs(120)).await;

    // A conversation started through the balancer goes on through it (the other replica).
    let events = as_agent(&format!("{front}/api/conversations"), "Hi").await;
    assert_eq!(
        events.last().expect("done")["text"],
        "Hello.",
        "{events:#?}"
    );
    let id = events[0]["id"].as_str().expect("id");
    let more = format!("{front}/api/conversations/{id}/messages");
    let events = as_agent(&more, "Again?").await;
    assert_eq!(
        events.last().expect("done")["text"],
        "Again.",
        "{events:#?}"
    );
    let sent = &model.requests()[1].body["messages"];
    assert_eq!(sent.as_array().map(Vec::len), Some(3), "{sent}");

    // A client with a session (rmcp's, 2025-11-25): every request answers, on both replicas.
    session_lists(&balancer.url, "agent-secret", "calculate", 6).await;
    // 20 calls alternating replicas under 5 a minute: 5 run, the fleet's, not each one's.
    assert_eq!(
        calls_of_calculate_that_ran(&balancer.url, "agent-secret", 20).await,
        5
    );
}

/// A 2025-11-25 session (rmcp's client) through `url` as the bearer of `token`, whose
/// `tools/list` lists `tool` `times` times in a row (each may reach another replica).
pub(crate) async fn session_lists(url: &str, token: &str, tool: &str, times: usize) {
    use rmcp::ServiceExt;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_string(),
        )
        .auth_header(token.to_string()),
    );
    let client = crate::mcp::Client::default()
        .serve(transport)
        .await
        .expect("an MCP session through round robin");
    for _ in 0..times {
        let names = crate::mcp::tool_names(&client).await;
        assert!(names.iter().any(|n| n == tool), "{names:?}");
    }
    client.cancel().await.expect("close");
}

/// `calls` session-less calls of `calculate` through `url` as the bearer of `token`: how
/// many ran (every other one is a `429`).
pub(crate) async fn calls_of_calculate_that_ran(url: &str, token: &str, calls: usize) -> usize {
    let mut ran = 0;
    let auth = format!("Bearer {token}");
    for _ in 0..calls {
        let (status, _, answer) = modern_post(
            url,
            "tools/call",
            Some("calculate"),
            json!({"name": "calculate", "arguments": {"expression": "1 + 1"}}),
            &[("authorization", &auth)],
        )
        .await;
        if crate::fleet_quotas::ran(status, &answer) {
            ran += 1;
        } else {
            assert_eq!(status, 429, "{answer}");
        }
    }
    ran
}

/// A chat request with `message` by the bearer of the agents' token: its events.
async fn as_agent(url: &str, message: &str) -> Vec<serde_json::Value> {
    let response = reqwest::Client::new()
        .post(url)
        .bearer_auth("agent-secret")
        .json(&json!({ "message": message }))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status().as_u16(), 200);
    crate::web::Events::of(response).rest().await
}

/// Two replicas of `fixture` whose chat asks `model` and keeps its conversations in
/// `postgres`, routing on `redis` (`[fleet] advertise`).
pub(crate) fn routed_chat_fleet(
    fixture: &crate::support::Fixture,
    model: &Scripted,
    redis: &crate::fleet_quotas::RedisServer,
    postgres: &PostgresServer,
) -> Vec<HttpServer> {
    let config = fixture.write_host_file(
        "chat",
        &format!(
            "{}\ndatabase-env = \"TOOLHOST_DATABASE_URL\"\n\n[fleet]\n\
             redis-env = \"TOOLHOST_REDIS_URL\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"",
            crate::support::scripted_chat(&model.base_url, "")
        ),
    );
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let env = [
        ("SCRIPTED_KEY", "k"),
        ("TOOLHOST_REDIS_URL", redis_url.as_str()),
        ("TOOLHOST_DATABASE_URL", database_url.as_str()),
    ];
    (0..2)
        .map(|_| crate::fleet_routes::advertising(fixture, &config, &env))
        .collect()
}

/// A chat run's approvals reach it through any replica (`[fleet] advertise`): the run goes on
/// on the replica that started it, and the other forwards what is about it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_approval_and_state_reach_it_through_the_other_replica() {
    let postgres = PostgresServer::start();
    let model = Scripted::start(vec![
        crate::web::say("a1", "first"),
        openai::text("Said it."),
        openai::text("Again."),
    ]);
    let fixture = fixture(&model.base_url, "");
    let redis = crate::fleet_quotas::RedisServer::start(fixture.root());
    let replicas = routed_chat_fleet(&fixture, &model, &redis, &postgres);
    let (one, two) = (api(&replicas[0]), api(&replicas[1]));
    let mut events = chat(&one, json!({"message": "Say hi"})).await;
    let first = events.until("approval_request").await;
    let id = first[0]["id"].as_str().expect("id").to_string();

    // Through the other replica: the state of the run, a continuation refused while it runs,
    // and the approval, which the run takes.
    let (status, read) = get(&format!("{two}/{id}")).await;
    assert_eq!((status, &read["running"]), (200, &json!(true)), "{read}");
    let (status, busy) = post_json(&format!("{two}/{id}/messages"), json!({"message": "?"})).await;
    assert_eq!(status, 409, "{busy}");
    let decided = post_json(
        &format!("{two}/{id}/approvals/a1"),
        json!({"decision": "allow"}),
    )
    .await;
    assert_eq!(decided.0, 204, "{}", decided.1);
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a result");
    assert_eq!(result["outcome"], "ok", "{rest:#?}");
    assert_eq!(rest.last().expect("done")["text"], "Said it.");

    // Ended: the other replica continues it itself.
    let more = chat(&format!("{two}/{id}/messages"), json!({"message": "Again"}))
        .await
        .rest()
        .await;
    assert_eq!(more.last().expect("done")["text"], "Again.", "{more:#?}");
}
