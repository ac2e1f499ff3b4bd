//! What the CLI says of a tool whose ensemble was refused: `call` names the file and its
//! first reason (a core module instead of a component, say) before the tool is reported
//! missing, and a catalog with no tool says so instead of listing nothing. A component that
//! needs more of the instance pool than a call gets is refused naming the setting that
//! raises the share, and runs once it is raised, from what the refused run compiled.

use crate::cli::{stderr, stdout, toolhost_with_stdin};
use crate::support::Fixture;
use std::process::Command;

#[test]
fn a_call_to_a_tool_of_a_refused_ensemble_says_why_it_is_not_served() {
    let fixture = Fixture::new();
    std::fs::write(
        fixture.root().join("core.wasm"),
        wat::parse_str("(module)").expect("wat"),
    )
    .expect("write");
    fixture.write(
        "c.toml",
        "schema-version = 1\n[ensemble]\nname = \"c\"\ncomponent = \"../core.wasm\"\n\n\
         [[invokers]]\ninvoker = { name = \"hello\" }\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command
        .args(["call", "hello", "{}"])
        .output()
        .expect("call");
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("c.toml was refused: "), "{said}");
    assert!(
        said.contains("core.wasm is not a valid WebAssembly component"),
        "{said}"
    );
    assert!(said.contains("it is a core WebAssembly module"), "{said}");
    assert!(said.contains("its tools are not served"), "{said}");
    assert!(
        said.contains("no tool named `hello`; available tools: none (no ensemble serves a tool)"),
        "{said}"
    );
}

/// A typed component whose one tool, `answer`, returns 7, made of `core` core instances.
fn component_of_core_instances(core: usize) -> Vec<u8> {
    let instances: String = (0..core)
        .map(|n| format!("(core instance $i{n} (instantiate $m))\n"))
        .collect();
    wat::parse_str(format!(
        "(component\n(core module $m (func (export \"f\") (result i32) i32.const 7))\n{instances}\
         (func (export \"answer\") (result u32) (canon lift (core func $i0 \"f\"))))"
    ))
    .expect("wat")
}

/// `toolhost [--config CONFIG] ARGS` over the fixture's ensembles.
fn run_over(
    fixture: &Fixture,
    config: Option<&std::path::Path>,
    args: &[&str],
) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, fixture);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command.args(args).output().expect("toolhost")
}

/// The compiled file of the one component in the compile cache `dir`, and its identity on
/// disk (a compile writes a new file, renamed into place: another inode).
fn compiled_file(dir: &std::path::Path) -> (std::path::PathBuf, (u64, u64)) {
    use std::os::unix::fs::MetadataExt;
    let entries: Vec<_> = std::fs::read_dir(dir)
        .expect("the cache")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "one compiled component: {entries:?}");
    let metadata = std::fs::metadata(&entries[0]).expect("metadata");
    (entries[0].clone(), (metadata.dev(), metadata.ino()))
}

/// `check` refuses the fixture's ensembles for wanting more than 32 core instances (the
/// component needs `needs`), naming the setting, and keeps what it compiled; a second
/// `check` and, with the setting raised to 48, `call TOOL ARGUMENTS` answer from the compile
/// cache without compiling again (`-v` says each compile). Returns the call's output.
fn refused_then_run_with_the_setting(
    fixture: &Fixture,
    needs: usize,
    tool: &str,
    arguments: &str,
) -> String {
    // A cache of its own: what is in it was compiled by this test.
    let cache = fixture.root().join("own-cache");
    let run = |config: Option<&std::path::Path>, args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, fixture);
        command.env("TOOLHOST_CACHE_DIR", &cache).arg("-v");
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        command.args(args).output().expect("toolhost")
    };
    let compiled = |output: &std::process::Output| {
        String::from_utf8_lossy(&output.stderr).contains("compiling ")
    };
    let refused = run(None, &["check"]);
    let said = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("it needs more of the instance pool than one call gets (32 core instances"),
        "{said}"
    );
    assert!(
        said.contains(&format!("contains {needs} core module instances")),
        "{said}"
    );
    assert!(
        said.contains("raise [host] core-instances-per-call"),
        "{said}"
    );
    assert!(compiled(&refused), "the first check compiles it");
    let (file, first) = compiled_file(&cache);

    let again = run(None, &["check"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("it needs more of the instance pool"),
        "refused from the cache just the same"
    );
    assert!(
        !compiled(&again),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let config = fixture.write_host_file(
        "host",
        &format!(
            "ensembles = \"{}\"\ncore-instances-per-call = 48",
            fixture.ensembles().display()
        ),
    );
    let called = run(Some(&config), &["call", tool, arguments]);
    let out = String::from_utf8_lossy(&called.stdout).into_owned();
    let said = String::from_utf8_lossy(&called.stderr);
    assert!(called.status.success(), "{out}\n{said}");
    assert!(
        !compiled(&called),
        "raising the share compiles nothing: {said}"
    );
    assert_eq!(
        compiled_file(&cache),
        (file, first),
        "the file the refused check compiled is the one the call loaded"
    );
    out
}

#[test]
fn a_component_past_one_calls_share_of_the_pool_names_the_setting_that_lets_it_run() {
    let fixture = Fixture::new();
    std::fs::write(
        fixture.root().join("wide.wasm"),
        component_of_core_instances(40),
    )
    .expect("write");
    fixture.write(
        "wide.toml",
        "schema-version = 1\n[ensemble]\nname = \"wide\"\ncomponent = \"../wide.wasm\"\n",
    );
    let out = refused_then_run_with_the_setting(&fixture, 40, "answer", "{}");
    assert_eq!(out.trim(), "7");

    // Memories reserve address space: the pool's total is bounded, at the setting's place.
    let config = fixture.write_host_file(
        "host",
        &format!(
            "ensembles = \"{}\"\nmax-concurrent-calls = 2000\nmemories-per-call = 16",
            fixture.ensembles().display()
        ),
    );
    let refused = run_over(&fixture, Some(&config), &["check"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("memories-per-call (16) times max-concurrent-calls (2000) is 32000 memories"),
        "{said}"
    );
    assert!(said.contains("toolhost.toml:6:"), "{said}");
}

/// A Python component built as Wassette builds its `eval-py` (componentize-py with every WASI
/// import stubbed, 38 core instances) is refused by default and runs once the share is raised.
#[test]
fn a_componentize_py_build_past_the_share_runs_once_it_is_raised() {
    let wasm = toolhost_testkit::languages::python_stubbed();
    let fixture = Fixture::new();
    fixture.write(
        "stubbed.toml",
        &format!(
            "schema-version = 1\n[ensemble]\nname = \"stubbed\"\ncomponent = \"{}\"\n\
             [defaults]\ntimeout-ms = 20000\n",
            wasm.display()
        ),
    );
    let out = refused_then_run_with_the_setting(&fixture, 38, "greet", r#"{"name": "Ada"}"#);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(out.trim()).expect("JSON"),
        serde_json::json!({"text": "hello Ada", "length": 9})
    );
}

#[test]
fn describe_shows_what_a_component_it_cannot_run_exports_and_why_not() {
    let fixture = Fixture::new();
    let unlinked = wat::parse_str(
        r#"(component
            (import "wasi:keyvalue/store@0.2.0" (instance (export "get" (func))))
            (core module $m (func (export "f") (result i32) i32.const 7))
            (core instance $i0 (instantiate $m))
            (func (export "answer") (result u32) (canon lift (core func $i0 "f"))))"#,
    )
    .expect("wat");
    std::fs::write(fixture.root().join("unlinked.wasm"), unlinked).expect("write");
    std::fs::write(
        fixture.root().join("wide.wasm"),
        component_of_core_instances(40),
    )
    .expect("write");
    for (file, why) in [
        ("unlinked.wasm", "which toolhost does not provide"),
        (
            "wide.wasm",
            "needs more of the instance pool than one call gets",
        ),
    ] {
        let output = toolhost_with_stdin(&fixture, &["describe", file], None);
        let (text, said) = (stdout(&output), stderr(&output));
        assert_eq!(output.status.code(), Some(1), "{file}: {text}\n{said}");
        assert!(
            text.contains("answer"),
            "{file}: the export is shown: {text}"
        );
        assert!(!text.contains("no tools in it"), "{file}: {text}");
        assert!(
            format!("{text}{said}").contains(why),
            "{file}: {text}\n{said}"
        );
        let output = toolhost_with_stdin(&fixture, &["describe", file, "--json"], None);
        assert_eq!(output.status.code(), Some(1), "{file} --json");
        let report: serde_json::Value =
            serde_json::from_str(&stdout(&output)).expect("a JSON report");
        assert!(report["exports"].to_string().contains("answer"), "{report}");
        assert!(report.to_string().contains(why), "{report}");
    }
}

/// An error in `[defaults] capabilities`, which every tool offered without an invoker shares,
/// is said once (the typed component offers nine tools).
#[test]
fn an_error_every_offered_tool_shares_is_said_once() {
    let fixture = Fixture::new();
    fixture.write(
        "greedy.toml",
        &crate::support::ensemble(
            "greedy",
            "typed",
            "[defaults]\ncapabilities = { network = [\"example.com:443\"] }\n",
        ),
    );
    let refused = run_over(&fixture, None, &["check"]);
    let said = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert_eq!(said.matches("asks for network access").count(), 1, "{said}");
    assert!(
        said.contains("[defaults] capabilities (of the tools offered without invokers) asks for"),
        "{said}"
    );
}
