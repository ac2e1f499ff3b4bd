//! Hot reload, measured (DESIGN.md section 10):
//!
//! - `reload/component_write_to_answer`: from writing a changed component file (by rename, as
//!   deploys do) to the new version answering a call, through the real watcher with the
//!   default debounce. Target < 250 ms for a small component.
//! - `reload/unchanged_component_rewrite`: the same bytes written again; the reload must not
//!   recompile (asserted) and changes nothing.
//! - `reload/calls_without_reloads` vs `reload/calls_during_reloads`: 400 calls from 4 tasks,
//!   alone and while another task reloads the catalog back to back (the descriptor changes
//!   every time). No call may fail (asserted); the ratio is the cost of reloading.
//!
//! Run: `cargo bench -p toolhost --bench reload`.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use toolhost::invoke::{Host, Session};
use toolhost::reload::{DEFAULT_DEBOUNCE, Reloader};
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

/// The component with a custom section appended: a new blake3, the same code.
fn stamped(original: &[u8], stamp: u64) -> Vec<u8> {
    let mut bytes = original.to_vec();
    let name = b"bench";
    let payload = stamp.to_le_bytes();
    bytes.extend_from_slice(&[0, (1 + name.len() + payload.len()) as u8, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&payload);
    bytes
}

fn replace_by_rename(path: &Path, bytes: &[u8]) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, bytes).expect("write");
    std::fs::rename(&temp, path).expect("rename");
}

fn ensemble(description: &str) -> String {
    format!(
        "schema-version = 1\n[ensemble]\nname = \"web\"\ncomponent = \"../dist/echo.wasm\"\n\n[defaults]\ndedup = \"off\"\n\n\
         [[invokers]]\ninvoker = {{ name = \"echo\", description = \"{description}\" }}\n"
    )
}

struct Setup {
    _temp: tempfile::TempDir,
    wasm: std::path::PathBuf,
    toml: std::path::PathBuf,
    runtime: Arc<Runtime>,
    reloader: Arc<Reloader>,
    host: Arc<Host>,
}

async fn setup() -> Setup {
    let temp = tempfile::tempdir().expect("temp");
    let dist = temp.path().join("dist");
    let ensembles = temp.path().join("ensembles");
    std::fs::create_dir_all(&dist).expect("dist");
    std::fs::create_dir_all(&ensembles).expect("ensembles");
    let wasm = dist.join("echo.wasm");
    std::fs::copy(toolhost_testkit::ECHO, &wasm).expect("copy");
    let toml = ensembles.join("web.toml");
    std::fs::write(&toml, ensemble("v0")).expect("write");
    let settings = RuntimeSettings {
        cache_dir: Some(temp.path().join("cache")),
        max_instances: 64,
        // Cranelift's code alone: what is measured or counted here is not the tiers.
        tiering: Tiering::Off,
        ..RuntimeSettings::default()
    };
    let runtime = Arc::new(Runtime::new(&settings).expect("runtime"));
    let reloader = Reloader::start(runtime.clone(), ensembles).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    Setup {
        _temp: temp,
        wasm,
        toml,
        runtime,
        reloader,
        host,
    }
}

fn component_changes(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let setup = rt.block_on(setup());
    let _watch = rt
        .block_on(async { setup.reloader.watch(DEFAULT_DEBOUNCE) })
        .expect("watch");
    let original = std::fs::read(toolhost_testkit::ECHO).expect("read");
    let stamp = AtomicU64::new(1);
    let session = Session::new("bench");
    let mut group = c.benchmark_group("reload");
    group.sample_size(20);
    group.bench_function("component_write_to_answer", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let bytes = stamped(&original, stamp.fetch_add(1, Ordering::Relaxed));
                let wanted = toolhost::contract::SourceHash(*blake3::hash(&bytes).as_bytes());
                let started = Instant::now();
                replace_by_rename(&setup.wasm, &bytes);
                rt.block_on(async {
                    loop {
                        let catalog = setup.host.catalog().snapshot();
                        if catalog
                            .get("echo")
                            .is_some_and(|t| t.source_hash() == wanted)
                        {
                            let outcome = setup.host.invoke(&session, "echo", json!({})).await;
                            assert!(outcome.result.is_ok());
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                });
                total += started.elapsed();
            }
            total
        })
    });
    let mut changes = setup.reloader.subscribe();
    group.bench_function("unchanged_component_rewrite", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let compiled = setup.runtime.compile_stats().compiled;
                let same = std::fs::read(&setup.wasm).expect("read");
                let started = Instant::now();
                replace_by_rename(&setup.wasm, &same);
                let change = rt.block_on(changes.recv()).expect("change");
                total += started.elapsed();
                assert!(!change.tools_changed());
                assert_eq!(
                    setup.runtime.compile_stats().compiled,
                    compiled,
                    "recompiled unchanged bytes"
                );
            }
            total
        })
    });
    group.finish();
}

/// 400 calls from 4 tasks; returns how long they took.
async fn call_batch(host: &Arc<Host>) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|worker| {
            let host = host.clone();
            tokio::spawn(async move {
                let session = Session::new(format!("w{worker}"));
                for n in 0..100 {
                    let outcome = host.invoke(&session, "echo", json!({ "n": n })).await;
                    assert!(
                        outcome.result.is_ok(),
                        "a call failed: {:?}",
                        outcome.result
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    started.elapsed()
}

fn calls_and_reloads(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let setup = rt.block_on(setup());
    let mut group = c.benchmark_group("reload");
    group.sample_size(20);
    group.bench_function("calls_without_reloads", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| rt.block_on(call_batch(&setup.host)))
                .sum()
        })
    });
    let stop = Arc::new(AtomicBool::new(false));
    let reloads = Arc::new(AtomicU64::new(0));
    let reloader_task = {
        let (reloader, toml, stop, reloads) = (
            setup.reloader.clone(),
            setup.toml.clone(),
            stop.clone(),
            reloads.clone(),
        );
        rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = reloads.fetch_add(1, Ordering::Relaxed);
                std::fs::write(&toml, ensemble(&format!("v{n}"))).expect("write");
                reloader.reload().await;
            }
        })
    };
    group.bench_function("calls_during_reloads", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| rt.block_on(call_batch(&setup.host)))
                .sum()
        })
    });
    stop.store(true, Ordering::Relaxed);
    rt.block_on(reloader_task).expect("reloader");
    eprintln!(
        "reloads completed during calls_during_reloads: {}",
        reloads.load(Ordering::Relaxed)
    );
    group.finish();
}

criterion_group!(benches, component_changes, calls_and_reloads);
criterion_main!(benches);
