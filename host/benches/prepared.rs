//! `prepared/*`: calls on instances made before the calls arrive (issue #33), for a Rust, a
//! Python and a JavaScript tool (the last two with the test tools of `scripts/test-tools.sh`):
//!
//! - `<language>/bare_instantiated` vs `<language>/invoke_prepared`: one call on an instance
//!   instantiated beforehand, as raw wasmtime makes it (a store and an instance, then only the
//!   call and the drop timed), against `invoke` taking an instance from the invoker's stock
//!   (the stock refilled, untimed, before each call). Target: ratio at most 1.5.
//! - `<language>/c1_inline`, `c1_prepared`, `c16_inline`, `c16_prepared`: calls back to back
//!   (no idle time to prepare in) at concurrency 1 and 16 through `invoke`, with `prepared = 0`
//!   and `prepared = 1`; the time is per call (calls/s is its inverse), and the process's CPU
//!   time per call is printed after each cell. Target: no fewer calls/s with preparation.
//!
//! Run: `cargo bench -p toolhost --bench pipeline -- prepared/`.

use super::bare;
use criterion::Criterion;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{Host, Session};

/// One tool of one language: its component, its `toolhost:plugin` tool, and a bare runner.
struct Case {
    label: &'static str,
    wasm: String,
    tool: &'static str,
    bare: bare::Bare,
}

/// The CPU time this process has used (user and system), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks (100 a second on Linux).
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<u64> = after
        .split(' ')
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("a number"))
        .collect();
    Duration::from_millis((fields[0] + fields[1]) * 10)
}

pub fn prepared(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let case = |label, wasm: String, tool| Case {
        label,
        bare: bare::Bare::new(&wasm, tool),
        wasm,
        tool,
    };
    let mut cases = vec![case("rust", toolhost_testkit::ECHO.to_string(), "echo")];
    if toolhost_testkit::languages::test_tools().is_some() {
        let (python, _) = toolhost_testkit::languages::python_components();
        let (js, _) = toolhost_testkit::languages::javascript_components();
        cases.push(case("python", python.display().to_string(), "shout"));
        cases.push(case("js", js.display().to_string(), "shout"));
    } else {
        eprintln!("prepared: the test tools are not installed; measuring Rust only");
    }
    let temp = tempfile::tempdir().expect("temp");
    let ensembles = temp.path().join("ensembles");
    std::fs::create_dir_all(&ensembles).expect("dir");
    for case in &cases {
        for (kind, prepared) in [("ready", 1), ("inline", 0)] {
            let name = format!("{}-{kind}", case.label);
            let prefix = name.replace('-', "_");
            let text = format!(
                "schema-version = 1\n[ensemble]\nname = \"{name}\"\nprefix = \"{prefix}\"\n\
                 component = \"{}\"\n\n[defaults]\ndedup = \"off\"\nmemory-mib = 256\n\
                 timeout-ms = 20000\nmax-concurrency = 16\nprepared = {prepared}\n",
                case.wasm
            );
            std::fs::write(ensembles.join(format!("{name}.toml")), text).expect("write");
        }
    }
    let runtime = super::runtime(&temp.path().join("cache"));
    let resolved = rt.block_on(super::resolve_dir(&runtime, &ensembles));
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let host = Arc::new(Host::new(
        Arc::new(LiveCatalog::new(resolved.catalog)),
        None,
    ));
    let arguments = json!({"text": "hello"});
    let text = arguments.to_string();

    let mut group = c.benchmark_group("prepared");
    group
        .measurement_time(Duration::from_secs(6))
        .sample_size(30);
    for case in &cases {
        let ready = format!("{}_ready_{}", case.label, case.tool);
        let inline = format!("{}_inline_{}", case.label, case.tool);
        let stock = {
            let catalog = host.catalog().snapshot();
            let tool = catalog.get(&ready).expect("the tool");
            tool.policy().stock.clone().expect("a stock")
        };
        group.bench_function(format!("{}/bare_instantiated", case.label), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let instance = rt.block_on(case.bare.instantiate());
                    let started = Instant::now();
                    rt.block_on(case.bare.call_on(instance, &text));
                    took += started.elapsed();
                }
                took
            })
        });
        group.bench_function(format!("{}/bare_instantiated_kept", case.label), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                let mut kept = Vec::new();
                for _ in 0..iters {
                    let instance = rt.block_on(case.bare.instantiate());
                    let started = Instant::now();
                    kept.push(rt.block_on(case.bare.call_and_keep(instance, &text)).1);
                    took += started.elapsed();
                    // Dropped outside the timing, a few at a time.
                    if kept.len() > 20 {
                        kept.clear();
                    }
                }
                took
            })
        });
        group.bench_function(format!("{}/invoke_prepared", case.label), |b| {
            let session = Session::new("bench");
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    rt.block_on(async {
                        stock.fill();
                        stock.settled(Duration::from_secs(60)).await;
                    });
                    assert_eq!(stock.state().ready, 1, "the stock did not fill");
                    let started = Instant::now();
                    let outcome = rt.block_on(host.invoke(&session, &ready, arguments.clone()));
                    took += started.elapsed();
                    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
                }
                took
            })
        });
        for concurrency in [1usize, 16] {
            for (kind, tool) in [("inline", &inline), ("prepared", &ready)] {
                let label = format!("{}/c{concurrency}_{kind}", case.label);
                let (mut cpu, mut calls) = (Duration::ZERO, 0u64);
                group.bench_function(&label, |b| {
                    b.iter_custom(|iters| {
                        let each = iters.div_ceil(concurrency as u64);
                        let before = cpu_time();
                        let started = Instant::now();
                        rt.block_on(back_to_back(&host, tool, concurrency, each));
                        let took = started.elapsed();
                        cpu += cpu_time().saturating_sub(before);
                        calls += each * concurrency as u64;
                        // Per call, as if `iters` were made: the extra calls of the last round
                        // are a rounding of at most `concurrency - 1`.
                        took.mul_f64(iters as f64 / (each * concurrency as u64) as f64)
                    })
                });
                eprintln!(
                    "prepared/{label}: process CPU per call {:.1} µs over {calls} calls",
                    cpu.as_secs_f64() * 1e6 / calls.max(1) as f64
                );
            }
        }
    }
    group.finish();
}

/// `concurrency` tasks each calling `tool` `each` times back to back.
async fn back_to_back(host: &Arc<Host>, tool: &str, concurrency: usize, each: u64) {
    let tasks: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (host, tool) = (Arc::clone(host), tool.to_string());
            tokio::spawn(async move {
                let session = Session::new(format!("bench-{worker}"));
                for _ in 0..each {
                    let outcome = host.invoke(&session, &tool, json!({"text": "hi"})).await;
                    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a calling task");
    }
}
