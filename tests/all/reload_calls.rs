//! Calls that go on while the catalog is swapped: a component replaced mid-call finishes the
//! call on the old version, a hundred reloads under load drop no call, and a changed component
//! loads while calls fill the instance pool.

use crate::reload::{DEADLINE, Live, changed, echo_ensemble, rebuilt, replace_by_rename};
use crate::support::{Fixture, ensemble, ok, runtime, session};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolhost::invoke::Host;
use toolhost::reload::Reloader;
use toolhost::runtime::{Runtime, RuntimeSettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_replaced_while_it_is_called_finishes_the_call_on_the_old_version() {
    let fixture = Fixture::new();
    fixture.write(
        "t.toml",
        &ensemble(
            "t",
            "testbed",
            "[defaults]\ntimeout-ms = 30000\n\n[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    );
    let wasm = fixture.root().join("testbed.wasm");
    let mut live = Live::new(fixture).await;
    let before = component_of(&live, "sleep");

    let call = {
        let host = live.host.clone();
        tokio::spawn(async move { host.invoke(&session(), "sleep", json!({"ms": 1500})).await })
    };
    // The component outside the ensembles directory is replaced by rename, as deploys do.
    replace_by_rename(&wasm, &rebuilt(&wasm, "v2"));
    let change = live.change(changed("sleep")).await;
    assert!(change.refused.is_empty());
    assert_eq!(ok(&call.await.expect("task")), r#"{"slept_ms":1500}"#);
    let after = component_of(&live, "sleep");
    assert_ne!(before, after);
    ok(&live
        .host
        .invoke(&session(), "sleep", json!({"ms": 1}))
        .await);
}

/// The component hash `tool` runs on now.
fn component_of(live: &Live, tool: &str) -> toolhost::contract::SourceHash {
    live.host
        .catalog()
        .snapshot()
        .get(tool)
        .map(|t| t.source_hash())
        .expect("tool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_reloads_under_load_drop_no_call() {
    let fixture = Fixture::new();
    let file = fixture.write(
        "web.toml",
        &ensemble(
            "web",
            "echo",
            "[defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = { name = \"echo\" }\n",
        ),
    );
    let reloader = Reloader::start(runtime(), fixture.ensembles()).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (calls, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let (host, stop, calls, failures) =
                (host.clone(), stop.clone(), calls.clone(), failures.clone());
            tokio::spawn(async move {
                let s = session();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let outcome = host
                        .invoke(&s, "echo", json!({"worker": worker, "n": n}))
                        .await;
                    calls.fetch_add(1, Ordering::Relaxed);
                    if outcome.result.is_err() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for i in 0..100 {
        let description = format!("version {i}");
        let text = ensemble(
            "web",
            "echo",
            &format!(
                "[defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = {{ name = \"echo\", description = \"{description}\" }}\n"
            ),
        );
        std::fs::write(&file, text).expect("write");
        let change = reloader.reload().await;
        assert_eq!(change.changed, ["echo"], "reload {i}");
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("worker");
    }
    assert!(calls.load(Ordering::Relaxed) > 0);
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "calls failed during reloads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_component_loads_while_calls_fill_the_instance_pool() {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    fixture.write("web.toml", &echo_ensemble("v1"));
    fixture.write(
        "wait.toml",
        &ensemble(
            "wait",
            "testbed",
            "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read\" }]\n\n\
             [defaults]\ntimeout-ms = 60000\ndedup = \"off\"\n\n[[invokers]]\ninvoker = { name = \"wait_for\" }\n\
             capabilities = { files = [{ guest = \"/data\", access = \"read\" }] }\n",
        ),
    );
    let wasm = fixture.root().join("echo.wasm");
    let runtime = Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(crate::support::cache_dir()),
            max_instances: 2,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    );
    // No watcher: this test reloads by itself, once.
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    let echo_hash = || {
        host.catalog()
            .snapshot()
            .get("echo")
            .map(|t| t.source_hash())
            .expect("echo")
    };
    let before = echo_hash();

    // Two calls hold both instances until the flag file appears.
    let calls = calls_waiting_for_the_flag(&host, 2);
    wait_until(|| runtime.pool().in_use == 2).await;

    // The reload's describe() of the changed component waits for a slot instead of failing.
    replace_by_rename(&wasm, &rebuilt(&wasm, "while-full"));
    let reload = {
        let reloader = reloader.clone();
        tokio::spawn(async move { reloader.reload().await })
    };
    wait_until(|| runtime.pool().waiting >= 1).await;
    assert!(!reload.is_finished(), "the reload did not wait for a slot");
    std::fs::write(data.join("flag"), "go").expect("write the flag");
    for call in calls {
        assert_eq!(ok(&call.await.expect("call task")), "go");
    }
    let change = reload.await.expect("reload task");
    assert!(change.refused.is_empty(), "{:?}", change.refused);
    assert!(change.changed.contains(&"echo".to_string()), "{change:?}");
    assert_ne!(echo_hash(), before);
    ok(&host
        .invoke(&session(), "echo", json!({"text": "after"}))
        .await);
    drop(fixture);
}

/// `count` calls of `wait_for` that each hold an instance until `/data/flag` appears.
pub(crate) fn calls_waiting_for_the_flag(
    host: &Arc<Host>,
    count: usize,
) -> Vec<tokio::task::JoinHandle<toolhost::invoke::CallOutcome>> {
    (0..count)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move {
                host.invoke(
                    &session(),
                    "wait_for",
                    json!({"path": "/data/flag", "ms": 60000}),
                )
                .await
            })
        })
        .collect()
}

/// Polls `condition` until it holds (a failure deadline, not a timing assertion).
async fn wait_until(condition: impl Fn() -> bool) {
    let wait = async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the condition never held");
}
