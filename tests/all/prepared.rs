//! Prepared instances (issue #33): made ahead of calls, each taken by one call and dropped
//! after it; nothing of one call reaches the next; a call always wins a slot over a
//! preparation; a failed preparation is reported once; a reload drops the stocks it replaced.

use crate::reload::DEADLINE;
use crate::reload_calls::calls_waiting_for_the_flag;
use crate::support::{Fixture, ensemble, err, ok, runtime, session};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use toolhost::invoke::{ErrorKind, Host};
use toolhost::reload::Reloader;
use toolhost::runtime::{
    PREPARE_ABOVE, PreparedLimits, Runtime, RuntimeSettings, Stock, StockState,
};

/// The stock of the tool `name` in `host`'s catalog.
pub(crate) fn stock(host: &Host, name: &str) -> Stock {
    let catalog = host.catalog().snapshot();
    let tool = catalog.get(name).expect("the tool");
    tool.policy()
        .stock
        .clone()
        .expect("a component's invoker has a stock")
}

/// Fills `stock` and waits until it holds what it wants.
async fn filled(stock: &Stock) -> StockState {
    stock.fill();
    assert!(stock.settled(DEADLINE).await, "the stock never settled");
    stock.state()
}

/// Polls `condition` until it holds (a failure deadline, not a timing assertion).
async fn until(what: &str, condition: impl Fn() -> bool) {
    let wait = async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    if tokio::time::timeout(DEADLINE, wait).await.is_err() {
        panic!("never happened: {what}");
    }
}

fn marks(prepared: &str) -> String {
    ensemble(
        "marks",
        "testbed",
        &format!(
            "[defaults]\ndedup = \"off\"\n{prepared}\n\n[[invokers]]\ninvoker = {{ name = \"mark\" }}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_instance_carries_nothing_from_one_call_to_the_next() {
    let fixture = Fixture::new();
    fixture.write("marks.toml", &marks("prepared = 2"));
    let host = fixture.host().await;
    let stock = stock(&host, "mark");
    let used_before = runtime().prepared().used;
    for i in 0..6 {
        // Every call takes an instance made before it arrived, never called before.
        assert_eq!(filled(&stock).await.ready, 2, "call {i}");
        let secret = format!("secret-{i}");
        let seen: Value = serde_json::from_str(&ok(&host
            .invoke(&session(), "mark", json!({ "secret": secret }))
            .await))
        .expect("mark answers JSON");
        assert_eq!(
            seen,
            json!({"calls_before": 0, "secret_before": null, "env_before": null}),
            "call {i} saw what an earlier call left"
        );
    }
    assert!(runtime().prepared().used >= used_before + 6);
    let state = stock.state();
    assert!(state.made >= 6, "{state:?}");
    assert_eq!(state.failures, 0, "{state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoker_with_prepared_0_prepares_nothing() {
    let fixture = Fixture::new();
    fixture.write("marks.toml", &marks("prepared = 0"));
    let host = fixture.host().await;
    let stock = stock(&host, "mark");
    for i in 0..3 {
        ok(&host
            .invoke(&session(), "mark", json!({ "secret": format!("s{i}") }))
            .await);
    }
    let state = filled(&stock).await;
    assert_eq!(
        (state.ready, state.target, state.made),
        (0, 0, 0),
        "{state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_fails_while_prepared_is_reported_once_and_its_calls_still_answer() {
    let fixture = Fixture::new();
    // The testbed's initial memory (its 1 MiB stack and its data) is over 1 MiB: every
    // instantiation is refused, the ones made ahead of calls too.
    fixture.write("marks.toml", &marks("prepared = 1\nmemory-mib = 1"));
    let host = fixture.host().await;
    let stock = stock(&host, "mark");
    let state = filled(&stock).await;
    let reason = state.failed.clone().expect("the preparation failed");
    assert!(reason.contains("memory"), "{reason}");
    assert_eq!((state.ready, state.made, state.failures), (0, 0, 1));
    for i in 0..3 {
        let error = err(&host
            .invoke(&session(), "mark", json!({ "secret": format!("s{i}") }))
            .await);
        assert_eq!(error.kind, ErrorKind::ResourceLimit, "{}", error.message);
        // Each call asks for a refill; a stock that failed does not try again.
        assert_eq!(filled(&stock).await.failures, 1);
    }
}

/// A runtime of its own, with `max_instances` slots.
fn small_runtime(max_instances: u32) -> Arc<Runtime> {
    bounded_runtime(max_instances, PreparedLimits::default())
}

fn bounded_runtime(max_instances: u32, prepared: PreparedLimits) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(crate::support::cache_dir()),
            max_instances,
            prepared,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    )
}

/// Three stocks of one instance each: invokers whose timeouts differ make different instances.
fn three_stocks(fixture: &Fixture) {
    let invokers: String = (1..=3)
        .map(|n| {
            format!(
                "[[invokers]]\ninvoker = {{ name = \"say{n}\", tool = \"say\" }}\n\
                 limits = {{ prepared = 1, timeout-ms = {} }}\n\n",
                1000 * n
            )
        })
        .collect();
    fixture.write("three.toml", &ensemble("three", "testbed", &invokers));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_wide_bounds_hold_however_many_stocks_want_instances() {
    // At most two instances in all: the third stock waits for its own next call.
    let fixture = Fixture::new();
    three_stocks(&fixture);
    let limits = PreparedLimits {
        max_instances: 2,
        max_bytes: 1 << 30,
    };
    let runtime = bounded_runtime(16, limits);
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Host::new(reloader.catalog().clone(), None);
    for n in 1..=3 {
        filled(&stock(&host, &format!("say{n}"))).await;
    }
    assert_eq!(runtime.prepared().instances, 2);
    let states = runtime.stocks();
    assert_eq!(
        states.iter().map(|s| s.ready).sum::<usize>(),
        2,
        "{states:?}"
    );
    assert!(states.iter().all(|s| s.failed.is_none()), "{states:?}");

    // Less linear memory than one testbed instance has: none is kept, none failed, and the
    // calls answer.
    let fixture = Fixture::new();
    three_stocks(&fixture);
    let limits = PreparedLimits {
        max_instances: 8,
        max_bytes: 64 << 10,
    };
    let runtime = bounded_runtime(16, limits);
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Host::new(reloader.catalog().clone(), None);
    for n in 1..=3 {
        let stock = stock(&host, &format!("say{n}"));
        let state = filled(&stock).await;
        assert_eq!((state.ready, state.failures), (0, 0), "{state:?}");
        let said = ok(&host
            .invoke(&session(), &format!("say{n}"), json!({"text": "hi"}))
            .await);
        assert_eq!(said, "hi");
    }
    let usage = runtime.prepared();
    assert_eq!((usage.instances, usage.bytes), (0, 0), "{usage:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_takes_the_slot_of_a_prepared_instance_when_the_pool_is_full() {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    fixture.write(
        "pool.toml",
        &ensemble(
            "pool",
            "testbed",
            "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read\" }]\n\n\
             [defaults]\ntimeout-ms = 60000\ndedup = \"off\"\n\n\
             [[invokers]]\ninvoker = { name = \"say\" }\nlimits = { prepared = 1 }\n\n\
             [[invokers]]\ninvoker = { name = \"wait_for\" }\nlimits = { prepared = 0 }\n\
             capabilities = { files = [{ guest = \"/data\", access = \"read\" }] }\n",
        ),
    );
    // Two slots: at most one of them may hold a prepared instance.
    let runtime = small_runtime(2);
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    assert_eq!(filled(&stock(&host, "say")).await.ready, 1);
    assert_eq!(runtime.prepared().instances, 1);
    assert_eq!(
        runtime.pool().in_use,
        0,
        "a prepared instance is not in use"
    );

    // Two calls that each wait for the other's turn to end would deadlock in one slot:
    // both run at once only if the second takes the prepared instance's slot.
    let calls = calls_waiting_for_the_flag(&host, 2);
    until("both calls run", || runtime.pool().in_use == 2).await;
    assert_eq!(runtime.prepared().evicted, 1);
    assert_eq!(runtime.prepared().instances, 0);
    std::fs::write(data.join("flag"), "go").expect("write the flag");
    for call in calls {
        assert_eq!(ok(&call.await.expect("call task")), "go");
    }
    // The stock fills again once the calls are done.
    until("the stock refills", || runtime.prepared().instances == 1).await;
    assert_eq!(
        ok(&host.invoke(&session(), "say", json!({"text": "hi"})).await),
        "hi"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_drops_the_stocks_it_replaced_and_keeps_the_others() {
    let fixture = Fixture::new();
    let marks_file = fixture.write("marks.toml", &marks("prepared = 1"));
    fixture.write(
        "echo.toml",
        &ensemble(
            "echo",
            "echo",
            "[defaults]\nprepared = 1\n\n[[invokers]]\ninvoker = { name = \"echo\" }\n",
        ),
    );
    let runtime = small_runtime(16);
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Host::new(reloader.catalog().clone(), None);
    // The first load fills every stock by itself.
    until("both stocks are full", || runtime.prepared().instances == 2).await;
    let echo_made = filled(&stock(&host, "echo")).await.made;

    std::fs::write(&marks_file, marks("prepared = 3")).expect("write");
    // How many are prepared is no part of a tool's version: nothing changed for a client.
    let change = reloader.reload().await;
    assert!(change.changed.is_empty(), "{change:?}");
    until("the new stock is full", || {
        runtime.prepared().instances == 4
    })
    .await;
    let stocks = runtime.stocks();
    let targets: Vec<usize> = stocks.iter().map(|s| s.target).collect();
    assert_eq!(targets, [1, 3], "one stock per component: {stocks:?}");
    // The unchanged invoker kept its stock: nothing was prepared again for it.
    assert_eq!(filled(&stock(&host, "echo")).await.made, echo_made);

    std::fs::remove_file(&marks_file).expect("remove");
    reloader.reload().await;
    until("the removed stock is gone", || {
        runtime.prepared().instances == 1
    })
    .await;
    assert_eq!(runtime.stocks().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_component_is_prepared_only_when_its_instantiation_is_slow() {
    let fixture = Fixture::new();
    fixture.write("marks.toml", &marks(""));
    let host = fixture.host().await;
    let stock = stock(&host, "mark");
    // Undecided, it keeps one to time; it decides on the fastest of three instantiations.
    let state = filled(&stock).await;
    let took = state.instantiate_us.expect("instantiations timed");
    let slow = Duration::from_micros(took) >= PREPARE_ABOVE;
    assert_eq!(state.target, usize::from(slow), "{state:?}");
    assert_eq!(state.ready, usize::from(slow), "{state:?}");
    assert!(state.made >= 3, "{state:?}");
    ok(&host
        .invoke(&session(), "mark", json!({"secret": "x"}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_shows_its_stocks_in_metrics_and_status() {
    let fixture = Fixture::new();
    fixture.write(
        "said.toml",
        &ensemble(
            "said",
            "testbed",
            "[defaults]\nprepared = 1\n\n[[invokers]]\ninvoker = { name = \"say\" }\n",
        ),
    );
    let server = crate::mcp::HttpServer::start(&fixture, &[], &[]);
    let metrics = server.url.replace("/mcp", "/metrics");
    let sample = |page: &str, series: &str| -> Option<f64> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    // The first load fills the stock by itself, in the background.
    let mut page = String::new();
    let started = std::time::Instant::now();
    while sample(&page, "toolhost_prepared_instances") != Some(1.0) {
        assert!(started.elapsed() < DEADLINE, "never prepared:\n{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        page = (reqwest::get(&metrics).await.expect("GET /metrics"))
            .text()
            .await
            .expect("body");
    }
    assert!(
        sample(&page, "toolhost_prepared_bytes").is_some_and(|b| b > 0.0),
        "{page}"
    );
    let made = "toolhost_prepared_since_start{outcome=\"made\"}";
    assert!(sample(&page, made).is_some_and(|n| n >= 1.0), "{page}");
    let failed = "toolhost_prepared_since_start{outcome=\"failed\"}";
    assert_eq!(sample(&page, failed), Some(0.0), "{page}");

    // `toolhost status` (the status file looks at the stocks every 2 s).
    let status = || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command.arg("status").output().expect("status runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let mut text = status();
    while !text.contains("testbed.wasm ready 1 of 1") {
        assert!(started.elapsed() < DEADLINE, "never shown:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        text = status();
    }
    assert!(text.contains("prepared instances: 1 of at most"), "{text}");
}
