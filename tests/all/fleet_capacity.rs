//! What the shared engines do per request, counted by the engines themselves (issue #58's
//! capacity model, docs/fleet.md "Capacity"): Redis's `INFO commandstats` around calls under
//! a quota, with and without a conversation's dedup, and PostgreSQL's statement log
//! (`log_statement = all`) around a chat turn. The counts are the model's inputs; these
//! tests hold them, so that a change that adds a round trip shows here.

use crate::fleet_chat::PostgresServer;
use crate::fleet_quotas::RedisServer;
use crate::scripted::{Scripted, openai};
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Command;

/// Every command `redis` counted so far: name -> calls.
fn commandstats(redis: &RedisServer) -> BTreeMap<String, u64> {
    let output = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "info", "commandstats"])
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields.split(',').next()?.strip_prefix("calls=")?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

/// The commands counted between `before` and `after`, per call of `calls`.
fn per_call(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    calls: u64,
) -> BTreeMap<String, f64> {
    (after.iter())
        .map(|(name, n)| {
            let taken = n - before.get(name).copied().unwrap_or(0);
            (name.clone(), taken as f64 / calls as f64)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

/// `calls` calls of `echo` by ann through `url`, in `conversation` if any, each of which ran.
async fn calls(url: &str, calls: u64, conversation: Option<&str>) {
    for n in 0..calls {
        let mut params = json!({"name": "echo", "arguments": {"n": n}});
        if let Some(conversation) = conversation {
            params["_meta"] = json!({"io.toolhost/conversation": conversation});
        }
        let (status, _, answer) = crate::mcp_revisions::modern_post(
            url,
            "tools/call",
            Some("echo"),
            params,
            &[("authorization", "Bearer ann-token")],
        )
        .await;
        assert!(crate::fleet_quotas::ran(status, &answer), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_call_takes_two_scripts_and_four_with_a_conversations_dedup() {
    let fixture = crate::support::Fixture::new();
    fixture.write_echo();
    let redis = RedisServer::start(fixture.root());
    let config = fixture.write_host_file(
        "fleet",
        &format!(
            "redis = \"{}\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"\n\n\
             [[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
             [[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 100000\n\
             concurrent-calls = 1000\n",
            redis.url()
        ),
    );
    let server = crate::fleet_routes::advertising(&fixture, &config, &[("ANN", "ann-token")]);
    // The first call loads the scripts (SCRIPT LOAD after a NOSCRIPT) and connects.
    calls(&server.url, 1, Some("capacity-warm-up-conversation")).await;
    const N: u64 = 40;

    let before = commandstats(&redis);
    calls(&server.url, N, None).await;
    let quota = per_call(&before, &commandstats(&redis), N);
    let before = commandstats(&redis);
    calls(&server.url, N, Some("capacity-conversation-0001")).await;
    let with_dedup = per_call(&before, &commandstats(&redis), N);
    eprintln!("per call, quota: {quota:?}\nper call, quota and dedup: {with_dedup:?}");

    // Under calls-per-minute and concurrent-calls: the admission, and the release of the
    // lease before the answer; the pings (TIME), this replica's address (SET) and any lease
    // renewal once a second or less add a few over the run.
    let near = |counted: &BTreeMap<String, f64>, name: &str, wanted: f64| {
        let n = counted.get(name).copied().unwrap_or(0.0);
        assert!(
            (wanted..wanted + 0.25).contains(&n),
            "{name}: {n} per call, wanted {wanted}: {counted:?}"
        );
    };
    near(&quota, "evalsha", 2.0);
    // With a conversation: the dedup claim beside the admission (the same round trip), the
    // result stored after the call (off its path).
    near(&with_dedup, "evalsha", 4.0);
    // What Redis runs in all (a script's own commands are counted under their names): what
    // its CPU per call follows.
    let total = |counted: &BTreeMap<String, f64>| counted.values().sum::<f64>();
    assert!(total(&quota) < 11.5, "{quota:?}");
    assert!(total(&with_dedup) < 20.5, "{with_dedup:?}");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_on_postgres_takes_a_bounded_number_of_statements() {
    let mut postgres = PostgresServer::start();
    postgres.options.push_str(" -c log_statement=all");
    postgres.stop();
    postgres.restart();
    let model = Scripted::start(vec![
        openai::text("One."),
        openai::text("Two."),
        openai::text("Three."),
    ]);
    let [one, _two] = crate::fleet_chat::replicas(&model, &postgres, "");
    let log = postgres.dir.join("log");
    let statements = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.lines())
            .filter(|l| l.contains("LOG:  statement:") || l.contains("LOG:  execute "))
            .count()
    };
    let api = crate::fleet_chat::api(&one);
    let events = crate::web::chat(&api, json!({"message": "1"}))
        .await
        .rest()
        .await;
    let id = events[0]["id"].as_str().expect("id").to_string();
    let mut turns = Vec::new();
    for message in ["2", "3"] {
        let before = statements();
        let url = format!("{api}/{id}/messages");
        let events = crate::web::chat(&url, json!({"message": message}))
            .await
            .rest()
            .await;
        assert_eq!(events.last().expect("done")["type"], "done", "{events:#?}");
        // The server writes its log as it goes: the turn's last statement is in it once the
        // answer is done, since the run is saved before its last event goes out.
        turns.push(statements() - before);
    }
    eprintln!("statements per chat turn: {turns:?}");
    // The room left (twice), the conversation's size, the conversation and its log read;
    // then one transaction (begin, the conversation, the next log number, one INSERT per
    // event of the run, its size, commit): 10 and one per event (3 for a text answer), never
    // one per message of the conversation.
    assert_eq!(turns[0], turns[1], "as many for a longer conversation");
    assert_eq!(turns[0], 13, "{turns:?}");
}
