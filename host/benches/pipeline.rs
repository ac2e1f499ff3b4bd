//! The performance targets of DESIGN.md section 10, each against a baseline measured in the
//! same run:
//!
//! - `call/bare_wasmtime` vs `call/invoke`: a trivial tool (echo) as raw wasmtime does it
//!   (fresh Store, instantiate, call) and through the whole `invoke` path (lookup, validation,
//!   run, audit). Target: ratio at most 1.5.
//! - `call/dedup_hit`: an identical repeated call answered from the session, audit record
//!   included. Target < 5 us. `call/dedup_hit_without_audit` shows the audit write's share.
//! - `validate/typical_schema`: argument validation of a typical schema. Target < 5 us.
//! - `startup/50_invokers_warm_cache`: a new runtime resolving 50 invokers over 6 components
//!   with the compiled-component cache warm. Target < 100 ms.
//! - `isolation/echo_alone` vs `isolation/echo_while_a_tool_spins`: the trivial tool's calls
//!   alone, and while another task calls a tool that spins until its 200 ms timeout, back to
//!   back, against `isolation/echo_while_a_native_thread_spins` (a plain thread spinning on one
//!   core: what the machine's cores explain). On two cores the spinning guest takes one; the
//!   echo calls keep the other.
//!
//! - `languages/<language>/bare_wasmtime` vs `languages/<language>/invoke`: a trivial call of a
//!   Rust, a Python and a JavaScript tool, each of the `toolhost:plugin` world and typed, raw
//!   and through `invoke`. Target: each ratio at most 1.5.
//!
//! - `call/*_jwt`: the same calls authorized by an access token ([`identity`]).
//!
//! - `prepared/*`: calls on instances made before the calls arrive ([`prepared`]). Every other
//!   cell sets `prepared = 0`: each call instantiates, as the baselines do.
//!
//! Run: `cargo bench -p toolhost --bench pipeline`.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{Host, Session};
use toolhost::resolve;
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};
mod identity;

mod bare;
mod prepared;

fn ensemble(name: &str, component: &str, invokers: &[(&str, &str)], dedup: &str) -> String {
    let mut text = format!(
        "schema-version = 1\n[ensemble]\nname = \"{name}\"\nprefix = \"{name}\"\ncomponent = \"{component}\"\n\n\
         [defaults]\ndedup = \"{dedup}\"\nprepared = 0\n\n"
    );
    for (invoker, tool) in invokers {
        text.push_str(&format!(
            "[[invokers]]\ninvoker = {{ name = \"{invoker}\", tool = \"{tool}\" }}\n\n"
        ));
    }
    text
}

fn write_ensembles(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::write(
        dir.join("fast.toml"),
        ensemble("fast", toolhost_testkit::ECHO, &[("echo", "echo")], "off"),
    )
    .expect("write");
    std::fs::write(
        dir.join("dedup.toml"),
        ensemble(
            "dedup",
            toolhost_testkit::ECHO,
            &[("echo", "echo")],
            "exact",
        ),
    )
    .expect("write");
}

fn runtime(cache: &Path) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(cache.to_path_buf()),
            max_instances: 64,
            // Cranelift's code alone: what is measured or counted here is not the tiers.
            tiering: Tiering::Off,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    )
}

/// Resolves `dir` with a new resolver over `runtime`.
async fn resolve_dir(runtime: &Arc<Runtime>, dir: &Path) -> resolve::Resolved {
    resolve::Resolver::new(Arc::clone(runtime))
        .resolve_dir(dir)
        .await
}

fn calls(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let ensembles = temp.path().join("ensembles");
    write_ensembles(&ensembles);
    let runtime = runtime(&temp.path().join("cache"));
    let resolved = rt.block_on(resolve_dir(&runtime, &ensembles));
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let audit =
        toolhost::audit::AuditLog::open(&temp.path().join("audit.jsonl"), Default::default())
            .expect("audit");
    let catalog = Arc::new(LiveCatalog::new(resolved.catalog));
    let host = Host::new(catalog.clone(), Some(audit));
    // The same catalog without an audit log, to show what the audit write costs; and with
    // metrics (as `serve` counts every call), to show what counting costs.
    let quiet = Host::new(catalog.clone(), None);
    let metered = Host::new(catalog, None).with_metrics(Arc::new(
        toolhost::metrics::Metrics::new().expect("metrics"),
    ));
    let bare = bare::Bare::new(toolhost_testkit::ECHO, "echo");
    let arguments = json!({"text": "hello"});
    let text = arguments.to_string();

    let mut group = c.benchmark_group("call");
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("bare_wasmtime", |b| {
        b.iter(|| rt.block_on(bare.call(black_box(&text))))
    });
    let session = Session::new("bench");
    group.bench_function("invoke", |b| {
        b.iter(|| {
            let outcome = rt.block_on(host.invoke(&session, "fast_echo", arguments.clone()));
            assert!(outcome.result.is_ok() && !outcome.deduplicated);
        })
    });
    rt.block_on(host.invoke(&session, "dedup_echo", arguments.clone()));
    group.bench_function("dedup_hit", |b| {
        b.iter(|| {
            let outcome = rt.block_on(host.invoke(&session, "dedup_echo", arguments.clone()));
            assert!(outcome.deduplicated);
        })
    });
    let quiet_session = Session::new("bench-quiet");
    rt.block_on(quiet.invoke(&quiet_session, "dedup_echo", arguments.clone()));
    group.bench_function("dedup_hit_without_audit", |b| {
        b.iter(|| {
            let outcome =
                rt.block_on(quiet.invoke(&quiet_session, "dedup_echo", arguments.clone()));
            assert!(outcome.deduplicated);
        })
    });
    let metered_session = Session::new("bench-metered");
    rt.block_on(metered.invoke(&metered_session, "dedup_echo", arguments.clone()));
    group.bench_function("dedup_hit_without_audit_with_metrics", |b| {
        b.iter(|| {
            let outcome =
                rt.block_on(metered.invoke(&metered_session, "dedup_echo", arguments.clone()));
            assert!(outcome.deduplicated);
        })
    });
    identity::cells(&mut group, &rt, (&host, &quiet), &arguments);
    group.finish();
}

fn validation(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let dir = temp.path().join("ensembles");
    std::fs::create_dir_all(&dir).expect("dir");
    // A typical tool schema: a few typed properties, bounds, an enum, an array, a nested object.
    let invoker = format!(
        "schema-version = 1\n[ensemble]\nname = \"v\"\ncomponent = \"{}\"\n\n[[invokers]]\ninvoker = {{ name = \"echo\" }}\n\
         [invokers.arguments]\ntype = \"object\"\nrequired = [\"query\", \"limit\"]\nadditionalProperties = false\n\
         [invokers.arguments.properties.query]\ntype = \"string\"\nminLength = 1\nmaxLength = 500\n\
         [invokers.arguments.properties.limit]\ntype = \"integer\"\nminimum = 1\nmaximum = 100\n\
         [invokers.arguments.properties.sort]\nenum = [\"relevance\", \"date\", \"title\"]\n\
         [invokers.arguments.properties.tags]\ntype = \"array\"\nitems = {{ type = \"string\", pattern = \"^[a-z-]+$\" }}\nmaxItems = 10\n\
         [invokers.arguments.properties.range]\ntype = \"object\"\nproperties = {{ from = {{ type = \"string\" }}, to = {{ type = \"string\" }} }}\n",
        toolhost_testkit::ECHO
    );
    std::fs::write(dir.join("v.toml"), invoker).expect("write");
    let runtime = runtime(&temp.path().join("cache"));
    let resolved = rt.block_on(resolve_dir(&runtime, &dir));
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let tool = resolved.catalog.get("echo").expect("tool").clone();
    let arguments = json!({"query": "wasm sandboxes", "limit": 20, "sort": "date", "tags": ["security", "wasi"], "range": {"from": "2024", "to": "2026"}});
    c.bench_function("validate/typical_schema", |b| {
        b.iter(|| toolhost::invoke::validate(&tool, black_box(&arguments)).expect("valid"))
    });
}

/// An ensemble name, its component, and its invokers as (name, tool in the component).
type InvokerSet<'a> = (&'a str, &'a str, Vec<(String, &'a str)>);

fn startup(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let dir = temp.path().join("ensembles");
    std::fs::create_dir_all(&dir).expect("dir");
    let testbed: Vec<(String, &str)> = [
        "read",
        "write",
        "list",
        "env",
        "sleep",
        "fail",
        "big_output",
        "log_flood",
    ]
    .iter()
    .flat_map(|t| (0..2).map(move |i| (format!("{t}_{i}"), *t)))
    .collect();
    let sets: Vec<InvokerSet<'_>> = vec![
        (
            "echo",
            toolhost_testkit::ECHO,
            (0..10).map(|i| (format!("echo_{i}"), "echo")).collect(),
        ),
        ("testbed", toolhost_testkit::TESTBED, testbed),
        (
            "calc",
            toolhost_testkit::CALCULATOR,
            (0..5).map(|i| (format!("calc_{i}"), "calculate")).collect(),
        ),
        (
            "text",
            toolhost_testkit::TEXT,
            ["text_stats", "text_case", "regex_find", "slugify"]
                .iter()
                .map(|t| (t.to_string(), *t))
                .collect(),
        ),
        (
            "json",
            toolhost_testkit::JSON,
            ["json_query", "json_pretty", "json_validate"]
                .iter()
                .flat_map(|t| (0..2).map(move |i| (format!("{t}_{i}"), *t)))
                .collect(),
        ),
        (
            "files",
            toolhost_testkit::FILES,
            ["list_files", "read_file", "search_files"]
                .iter()
                .flat_map(|t| (0..3).map(move |i| (format!("{t}_{i}"), *t)))
                .collect(),
        ),
    ];
    let mut count = 0;
    for (name, wasm, invokers) in &sets {
        let pairs: Vec<(&str, &str)> = invokers.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        count += pairs.len();
        std::fs::write(
            dir.join(format!("{name}.toml")),
            ensemble(name, wasm, &pairs, "exact"),
        )
        .expect("write");
    }
    assert_eq!(count, 50);
    let cache = temp.path().join("cache");
    // Warm the cache once.
    let warm = rt.block_on(resolve_dir(&runtime(&cache), &dir));
    assert!(
        warm.refused.is_empty(),
        "{:?}",
        warm.refused
            .iter()
            .map(|r| r.diagnostics.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(warm.catalog.tools().count(), 50);
    drop(warm);
    let mut group = c.benchmark_group("startup");
    group.sample_size(20);
    group.bench_function("50_invokers_warm_cache", |b| {
        b.iter(|| {
            let runtime = runtime(&cache);
            let resolved = rt.block_on(resolve_dir(&runtime, &dir));
            assert_eq!(runtime.compile_stats().compiled, 0);
            black_box(resolved.catalog.tools().count())
        })
    });
    group.finish();
}

/// A plugin that spins until its timeout, called back to back on one worker, against the
/// latency of a trivial tool's calls.
fn isolation(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let dir = temp.path().join("ensembles");
    write_ensembles(&dir);
    let spin = format!(
        "schema-version = 1\n[ensemble]\nname = \"spin\"\ncomponent = \"{}\"\n\n[defaults]\ndedup = \"off\"\ntimeout-ms = 200\n\n\
         [[invokers]]\ninvoker = {{ name = \"spin\" }}\n",
        toolhost_testkit::TESTBED
    );
    std::fs::write(dir.join("spin.toml"), spin).expect("write");
    let runtime = runtime(&temp.path().join("cache"));
    let resolved = rt.block_on(resolve_dir(&runtime, &dir));
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let host = Arc::new(Host::new(
        Arc::new(LiveCatalog::new(resolved.catalog)),
        None,
    ));
    let session = Session::new("bench");
    let arguments = json!({"text": "hello"});
    // One echo call, the unit all three isolation benchmarks measure.
    let echo = || {
        let outcome = rt.block_on(host.invoke(&session, "fast_echo", arguments.clone()));
        assert!(outcome.result.is_ok());
    };
    let mut group = c.benchmark_group("isolation");
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("echo_alone", |b| b.iter(echo));
    // The machine's own share: the same calls while a native thread spins on one core. The
    // guest's effect is explained by the cores when it is no worse than this.
    let native_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let native = {
        let stop = native_stop.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x = black_box(x.wrapping_add(1));
            }
        })
    };
    group.bench_function("echo_while_a_native_thread_spins", |b| b.iter(echo));
    native_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    native.join().expect("native spinner");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spins = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let spinner = {
        let (host, stop, spins) = (host.clone(), stop.clone(), spins.clone());
        rt.spawn(async move {
            let session = Session::new("spinner");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let outcome = host.invoke(&session, "spin", json!({})).await;
                assert!(outcome.result.is_err(), "spin cannot succeed");
                spins.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    group.bench_function("echo_while_a_tool_spins", |b| b.iter(echo));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    rt.block_on(spinner).expect("spinner");
    eprintln!(
        "spin calls timed out during echo_while_a_tool_spins: {}",
        spins.load(std::sync::atomic::Ordering::Relaxed)
    );
    group.finish();
}

/// One tool of one language and kind, for `languages`.
struct Case {
    label: &'static str,
    wasm: String,
    /// The tool's name in the catalog (the ensemble's prefix, then the tool's).
    tool: String,
    arguments: serde_json::Value,
    bare: Bare,
}

enum Bare {
    Plugin(bare::Bare, String),
    Typed(bare::BareTyped, Vec<wasmtime::component::Val>),
}

/// A trivial call of a Rust, a Python and a JavaScript tool, of each kind, through `invoke`
/// and as raw wasmtime calls it (a fresh instance each), in the same run. The Python and
/// JavaScript components are built with the test tools (`scripts/test-tools.sh`); without
/// them only Rust is measured.
fn languages(c: &mut Criterion) {
    use wasmtime::component::Val;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let plugin = |label: &'static str, wasm: String, tool: &str, text: &str| Case {
        label,
        tool: format!("{}_{tool}", label.replace('-', "_")),
        arguments: json!({ "text": text }),
        bare: Bare::Plugin(
            bare::Bare::new(&wasm, tool),
            json!({ "text": text }).to_string(),
        ),
        wasm,
    };
    let mut cases = vec![
        plugin("rust", toolhost_testkit::ECHO.to_string(), "echo", "hello"),
        Case {
            label: "rust-typed",
            wasm: toolhost_testkit::TYPED.to_string(),
            tool: "rust_typed_add".into(),
            arguments: json!({"a": 1, "b": 2}),
            bare: Bare::Typed(
                bare::BareTyped::new(toolhost_testkit::TYPED, &["add"]),
                vec![Val::S32(1), Val::S32(2)],
            ),
        },
    ];
    if toolhost_testkit::languages::test_tools().is_some() {
        let greet = |label: &'static str, wasm: std::path::PathBuf| {
            let wasm = wasm.display().to_string();
            Case {
                label,
                tool: format!("{}_greet", label.replace('-', "_")),
                arguments: json!({"name": "Ada"}),
                bare: Bare::Typed(
                    bare::BareTyped::new(&wasm, &["example:greeter/greetings@0.1.0", "greet"]),
                    vec![Val::String("Ada".into()), Val::Option(None)],
                ),
                wasm,
            }
        };
        let (python, python_typed) = toolhost_testkit::languages::python_components();
        let (js, js_typed) = toolhost_testkit::languages::javascript_components();
        cases.push(plugin(
            "python",
            python.display().to_string(),
            "shout",
            "hello",
        ));
        cases.push(greet("python-typed", python_typed));
        cases.push(plugin("js", js.display().to_string(), "shout", "hello"));
        cases.push(greet("js-typed", js_typed));
    } else {
        eprintln!("languages: the test tools are not installed; measuring Rust only");
    }
    let temp = tempfile::tempdir().expect("temp");
    let ensembles = temp.path().join("ensembles");
    std::fs::create_dir_all(&ensembles).expect("dir");
    for case in &cases {
        let text = format!(
            "schema-version = 1\n[ensemble]\nname = \"{}\"\nprefix = \"{}\"\ncomponent = \"{}\"\n\n\
             [defaults]\ndedup = \"off\"\nmemory-mib = 256\ntimeout-ms = 20000\nprepared = 0\n",
            case.label,
            case.label.replace('-', "_"),
            case.wasm
        );
        std::fs::write(ensembles.join(format!("{}.toml", case.label)), text).expect("write");
    }
    let runtime = runtime(&temp.path().join("cache"));
    let resolved = rt.block_on(resolve_dir(&runtime, &ensembles));
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let host = Host::new(Arc::new(LiveCatalog::new(resolved.catalog)), None);
    let session = Session::new("bench");
    let mut group = c.benchmark_group("languages");
    group
        .measurement_time(Duration::from_secs(6))
        .sample_size(40);
    for case in &cases {
        group.bench_function(format!("{}/bare_wasmtime", case.label), |b| {
            match &case.bare {
                Bare::Plugin(bare, arguments) => b.iter(|| rt.block_on(bare.call(arguments))),
                Bare::Typed(bare, params) => b.iter(|| rt.block_on(bare.call(params))),
            }
        });
        group.bench_function(format!("{}/invoke", case.label), |b| {
            b.iter(|| {
                let outcome =
                    rt.block_on(host.invoke(&session, &case.tool, case.arguments.clone()));
                assert!(outcome.result.is_ok(), "{:?}", outcome.result);
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    calls,
    validation,
    startup,
    isolation,
    languages,
    prepared::prepared
);
criterion_main!(benches);
