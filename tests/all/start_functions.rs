//! Components whose core module has a start function (written in WAT and made a component
//! with wit-component, as `wasm-tools component new` does): the Rust toolchain runs its
//! constructors at the first call, so nothing else in the suite starts code while a component
//! is instantiated. A start that never returns, traps or takes too much memory is bounded by
//! the invoker's limits wherever an instance is made: at load (`describe()`), inline for a
//! call, and ahead of calls (prepared instances); and a host whose preparations failed stays
//! idle.

use crate::prepared::stock as stock_of;
use crate::support::{Fixture, ensemble, err, ok, session};
use serde_json::json;
use std::time::Duration;
use toolhost::invoke::ErrorKind;

/// A typed component (no `describe`: loading it runs nothing) exporting `ping() -> u32`,
/// which answers 7, after the start function `start` (WAT instructions).
fn typed_with_start(start: &str) -> Vec<u8> {
    let wit = "package test:start;\nworld starter {\n    export ping: func() -> u32;\n}\n";
    let core = format!(
        r#"(module
            (memory (export "memory") 1)
            (func $start {start})
            (start $start)
            (func (export "ping") (result i32) (i32.const 7)))"#
    );
    component(wit, "starter", &core)
}

/// A `toolhost:plugin@0.1.0` component whose start function is `start`: its `describe()` at
/// load runs the start first (its exports are never reached).
fn plugin_with_start(start: &str) -> Vec<u8> {
    let wit_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/toolhost-plugin-0.1.0");
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(wit_dir).expect("the 0.1.0 WIT");
    let world = resolve
        .select_world(&[package], Some("plugin"))
        .expect("world");
    let core = format!(
        r#"(module
            (memory (export "memory") 1)
            (func $start {start})
            (start $start)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
            (func (export "toolhost:plugin/tool@0.1.0#describe") (result i32) unreachable)
            (func (export "toolhost:plugin/tool@0.1.0#call")
                (param i32 i32 i32 i32) (result i32) unreachable))"#
    );
    encode(&resolve, world, &core)
}

fn component(wit: &str, world: &str, core: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("start.wit", wit).expect("WIT");
    let world = resolve
        .select_world(&[package], Some(world))
        .expect("world");
    encode(&resolve, world, core)
}

fn encode(resolve: &wit_parser::Resolve, world: wit_parser::WorldId, core: &str) -> Vec<u8> {
    let mut module = wat::parse_str(core).expect("WAT");
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .expect("metadata");
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .expect("core module")
        .encode()
        .expect("component")
}

const FOREVER: &str = "(loop $again (br $again))";
const TRAP: &str = "unreachable";
/// 64 MiB more than the one page it has, or a trap when refused.
const GREEDY: &str =
    "(if (i32.eq (memory.grow (i32.const 1024)) (i32.const -1)) (then unreachable))";

/// A fixture with the component `start` over `bytes` and an ensemble `start` of one tool,
/// `ping`, with these `[defaults]` lines.
fn fixture_with(bytes: Vec<u8>, defaults: &str) -> Fixture {
    let fixture = Fixture::new();
    std::fs::write(fixture.root().join("start.wasm"), bytes).expect("component");
    let rest = format!(
        "[defaults]\ndedup = \"off\"\n{defaults}\n\n[[invokers]]\ninvoker = {{ name = \"ping\" }}\n"
    );
    fixture.write("start.toml", &ensemble("start", "start", &rest));
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_never_returns_is_cut_at_the_timeout_inline_and_when_prepared() {
    // The harness itself: a start that returns lets the call answer.
    let fixture = fixture_with(typed_with_start("nop"), "timeout-ms = 300\nprepared = 0");
    let host = fixture.host().await;
    assert_eq!(ok(&host.invoke(&session(), "ping", json!({})).await), "7");

    let fixture = fixture_with(typed_with_start(FOREVER), "timeout-ms = 300\nprepared = 0");
    let host = fixture.host().await;
    for _ in 0..2 {
        let error = err(&host.invoke(&session(), "ping", json!({})).await);
        assert_eq!(error.kind, ErrorKind::Timeout, "{}", error.message);
        assert!(error.message.contains("300 ms"), "{}", error.message);
    }

    // Prepared ahead of calls: the preparation is cut at the same bound, reported once, and
    // the calls still end in time, each instantiating inline.
    let fixture = fixture_with(typed_with_start(FOREVER), "timeout-ms = 300\nprepared = 2");
    let host = fixture.host().await;
    let stock = stock_of(&host, "ping");
    stock.fill();
    assert!(
        stock.settled(crate::reload::DEADLINE).await,
        "never settled"
    );
    let state = stock.state();
    let reason = state.failed.clone().expect("the preparation failed");
    assert!(reason.contains("300 ms"), "{reason}");
    assert_eq!((state.ready, state.made, state.failures), (0, 0, 1));
    let error = err(&host.invoke(&session(), "ping", json!({})).await);
    assert_eq!(error.kind, ErrorKind::Timeout, "{}", error.message);
    assert_eq!(stock.state().failures, 1, "a failed stock prepares no more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_traps_or_overreaches_its_memory_ends_only_its_call() {
    let fixture = fixture_with(typed_with_start(TRAP), "prepared = 0");
    let host = fixture.host().await;
    let error = err(&host.invoke(&session(), "ping", json!({})).await);
    assert_eq!(error.kind, ErrorKind::Crashed, "{}", error.message);

    let fixture = fixture_with(typed_with_start(GREEDY), "memory-mib = 16\nprepared = 0");
    let host = fixture.host().await;
    let error = err(&host.invoke(&session(), "ping", json!({})).await);
    assert_eq!(error.kind, ErrorKind::ResourceLimit, "{}", error.message);
    assert!(error.message.contains("memory"), "{}", error.message);
    // Within the limit, the same start grows and the call answers.
    let fixture = fixture_with(typed_with_start(GREEDY), "memory-mib = 128\nprepared = 0");
    let host = fixture.host().await;
    assert_eq!(ok(&host.invoke(&session(), "ping", json!({})).await), "7");
}

#[test]
fn a_plugin_whose_start_never_returns_or_traps_is_refused_at_load_in_time() {
    for (start, reason) in [(FOREVER, "500 ms"), (TRAP, "unreachable")] {
        let fixture = fixture_with(plugin_with_start(start), "");
        let config = fixture.write_host_file("host", "describe-timeout-ms = 500");
        let output = crate::cli::toolhost_with_stdin(
            &fixture,
            &["--config", config.to_str().expect("path"), "check"],
            None,
        );
        let stdout = crate::cli::stdout(&output);
        assert_eq!(output.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains("start.wasm") && stdout.contains(reason),
            "{reason}: {stdout}"
        );
    }
}

/// The CPU time process `pid` has used so far (user and system), from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // The fields after the command's name (in parentheses, which may hold spaces).
    let after = stat.rsplit_once(')').expect("stat format").1;
    let fields: Vec<u64> = (after.split_whitespace())
        .filter_map(|f| f.parse().ok())
        .collect();
    // utime and stime are fields 14 and 15 of the line; after the name and the state they
    // are the 11th and 12th numbers.
    let ticks = fields[10] + fields[11];
    Duration::from_millis(ticks * 10)
}

#[test]
fn a_host_whose_preparations_failed_stays_idle() {
    let fixture = fixture_with(typed_with_start(FOREVER), "timeout-ms = 300\nprepared = 2");
    let server = crate::mcp::HttpServer::start(&fixture, &["--no-watch"], &[]);
    let status = fixture.root().join("status.json");
    let failed = || {
        let text = std::fs::read_to_string(&status).unwrap_or_default();
        let published: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        (published["prepared"]["stocks"].as_array())
            .is_some_and(|stocks| stocks.iter().any(|s| s["failures"] == 1))
    };
    let deadline = std::time::Instant::now() + crate::reload::DEADLINE;
    while !failed() {
        assert!(
            std::time::Instant::now() < deadline,
            "the stock never failed: {}",
            std::fs::read_to_string(&status).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Two seconds with nothing to do: a host that retried its preparations (each spinning
    // 300 ms) would use a good part of a core; an idle one uses a few ticks.
    let before = cpu_time(server.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_time(server.child.id()) - before;
    assert!(
        used <= Duration::from_millis(200),
        "{used:?} of CPU while idle"
    );
}
