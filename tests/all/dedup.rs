//! Exact-match dedup: an identical call in the same session is answered from the first
//! result without running the tool (runs are counted in a file the tool appends to).

use crate::support::{Fixture, ensemble, ok, session};
use serde_json::json;
use std::sync::Arc;
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{Host, Session};

const COUNT: &str = "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read-write\" }]\n\n\
    [[invokers]]\ninvoker = { name = \"count\" }\ncapabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n\n\
    [[invokers]]\ninvoker = { name = \"count_always\", tool = \"count\", dedup = \"off\" }\n\
    capabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n";

async fn counting_host(limits: &str) -> (Fixture, Host) {
    let fixture = Fixture::new();
    fixture.mkdir("data");
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            &format!("[defaults]\n{limits}\n\n{COUNT}"),
        ),
    );
    let host = fixture.host().await;
    (fixture, host)
}

fn runs(fixture: &Fixture, file: &str) -> usize {
    std::fs::read_to_string(fixture.root().join("data").join(file)).map_or(0, |t| t.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_call_returns_the_first_result_without_running_again() {
    let (fixture, host) = counting_host("").await;
    let s = session();
    let first = host
        .invoke(&s, "count", json!({"path": "/data/a", "x": 1, "y": [1, 2]}))
        .await;
    assert!(!first.deduplicated);
    // Same arguments, keys in another order: the same canonical JSON.
    let second = host
        .invoke(&s, "count", r#"{"y": [1, 2], "x": 1, "path": "/data/a"}"#)
        .await;
    assert!(second.deduplicated);
    assert_eq!(ok(&first), ok(&second));
    assert_eq!(runs(&fixture, "a"), 1);
    // Different arguments run.
    let third = host
        .invoke(&s, "count", json!({"path": "/data/a", "x": 2, "y": [1, 2]}))
        .await;
    assert!(!third.deduplicated);
    assert_eq!(runs(&fixture, "a"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_is_scoped_to_a_session() {
    let (fixture, host) = counting_host("").await;
    let args = json!({"path": "/data/b"});
    assert!(
        !host
            .invoke(&Session::new("one"), "count", args.clone())
            .await
            .deduplicated
    );
    assert!(
        !host
            .invoke(&Session::new("two"), "count", args)
            .await
            .deduplicated
    );
    assert_eq!(runs(&fixture, "b"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_off_runs_every_call() {
    let (fixture, host) = counting_host("").await;
    let s = session();
    for _ in 0..3 {
        assert!(
            !host
                .invoke(&s, "count_always", json!({"path": "/data/c"}))
                .await
                .deduplicated
        );
    }
    assert_eq!(runs(&fixture, "c"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_calls_in_flight_at_once_run_once() {
    let (fixture, host) = counting_host("timeout-ms = 20000").await;
    let host = Arc::new(host);
    let s = Arc::new(session());
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (host, s) = (host.clone(), s.clone());
            tokio::spawn(async move {
                host.invoke(&s, "count", json!({"path": "/data/d", "sleep_ms": 300}))
                    .await
            })
        })
        .collect();
    let mut deduplicated = 0;
    let mut texts = Vec::new();
    for call in calls {
        let outcome = call.await.expect("task");
        deduplicated += usize::from(outcome.deduplicated);
        texts.push(ok(&outcome));
    }
    assert_eq!(runs(&fixture, "d"), 1, "the tool ran more than once");
    assert_eq!(deduplicated, 7);
    assert!(texts.windows(2).all(|w| w[0] == w[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_not_remembered() {
    let (_fixture, host) = counting_host("").await;
    let s = session();
    // The directory does not exist, so the tool fails each time, and each time it runs.
    for _ in 0..2 {
        let outcome = host
            .invoke(&s, "count", json!({"path": "/data/missing/e"}))
            .await;
        assert!(outcome.result.is_err());
        assert!(!outcome.deduplicated);
    }
    assert!(s.dedup().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_invoker_never_answers_from_its_old_versions_results() {
    let (fixture, host) = counting_host("timeout-ms = 4000").await;
    let s = session();
    let args = json!({"path": "/data/f"});
    host.invoke(&s, "count", args.clone()).await;
    assert!(host.invoke(&s, "count", args.clone()).await.deduplicated);
    // A new version of the descriptor (another timeout) replaces the catalog.
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            &format!("[defaults]\ntimeout-ms = 5000\n\n{COUNT}"),
        ),
    );
    let resolved = fixture.resolve().await;
    let live: &Arc<LiveCatalog> = host.catalog();
    live.replace(resolved.catalog, Vec::new());
    let after = host.invoke(&s, "count", args).await;
    assert!(!after.deduplicated);
    assert_eq!(runs(&fixture, "f"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_results_are_bounded_in_bytes_per_session_and_in_total() {
    let fixture = Fixture::new();
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"big_output\" }\nlimits = { max-output-bytes = 4194304 }\n",
        ),
    );
    // Each session may keep 4 MiB, all of them 6 MiB.
    let host = fixture
        .host()
        .await
        .with_dedup_budget(toolhost::invoke::DedupBudget::new(4 << 20, 6 << 20));
    let big = |n: u64| json!({"bytes": (1 << 20) + n});
    let alice = host.session("alice", Default::default());
    let bob = host.session("bob", Default::default());
    for n in 0..20 {
        ok(&host.invoke(&alice, "big_output", big(n)).await);
        assert!(
            alice.dedup().bytes() <= 4 << 20,
            "{}",
            alice.dedup().bytes()
        );
    }
    for n in 0..20 {
        ok(&host.invoke(&bob, "big_output", big(100 + n)).await);
        assert!(
            host.dedup_budget().used() <= 6 << 20,
            "{}",
            host.dedup_budget().used()
        );
    }
    // The newest result is still remembered; the oldest were forgotten.
    assert!(host.invoke(&bob, "big_output", big(119)).await.deduplicated);
    assert!(!host.invoke(&alice, "big_output", big(0)).await.deduplicated);
    // A result larger than a session's share is not remembered at all.
    let huge = json!({"bytes": 4u64 << 20});
    ok(&host.invoke(&alice, "big_output", huge.clone()).await);
    assert!(!host.invoke(&alice, "big_output", huge).await.deduplicated);
    drop((alice, bob));
    assert_eq!(
        host.dedup_budget().used(),
        0,
        "closed sessions give their bytes back"
    );
}
