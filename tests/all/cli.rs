//! The `toolhost` binary: check, list and call, their JSON output and exit codes.

use crate::support::{Fixture, ensemble};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn toolhost(fixture: &Fixture, args: &[&str]) -> Output {
    toolhost_with_stdin(fixture, args, None)
}

pub(crate) fn toolhost_with_stdin(fixture: &Fixture, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(fixture.root())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_AUDIT")
        .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
        .env("TOOLHOST_CACHE_DIR", fixture.root().join("cache"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolhost runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("toolhost finishes")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn good_fixture() -> Fixture {
    let fixture = Fixture::new();
    let rest = "[defaults]\ntimeout-ms = 300\n\n[[invokers]]\ninvoker = { name = \"echo\" }\n\n\
        [[invokers]]\ninvoker = { name = \"spin\", tool = \"echo\", enabled = false }\n";
    fixture.write("echo.toml", &ensemble("echo", "echo", rest));
    fixture.write(
        "slow.toml",
        &ensemble(
            "slow",
            "testbed",
            "[defaults]\ntimeout-ms = 200\n\n[[invokers]]\ninvoker = { name = \"spin\" }\n",
        ),
    );
    fixture
}

#[test]
fn check_passes_on_good_ensembles() {
    let fixture = good_fixture();
    let output = toolhost(&fixture, &["check"]);
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stdout(&output).contains(
            "2 ensemble(s) loaded with 2 enabled tool(s), 0 prompt(s), 0 resource set(s); \
                 0 refused; 0 error(s)"
        ),
        "{}",
        stdout(&output)
    );
}

#[test]
fn check_reports_every_error_in_every_file_and_fails() {
    let fixture = good_fixture();
    fixture.write(
        "bad1.toml",
        "schema-version = 1\n[ensemble]\nname = \"Bad\"\n",
    );
    fixture.write("bad2.toml", &ensemble("bad2", "echo", "[[invokers]]\ninvoker = { name = \"x\", tool = \"nope\" }\n\n[[invokers]]\nsource = \"missing.toml\"\n"));
    let output = toolhost(&fixture, &["check"]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(text.contains("bad1.toml:3:8"), "{text}");
    assert!(text.contains("ensemble names use [a-z0-9-]"), "{text}");
    assert!(text.contains("has no tool `nope`"), "{text}");
    assert!(text.contains("missing.toml does not exist"), "{text}");
    assert!(text.contains("2 refused; 3 error(s)"), "{text}");

    let output = toolhost(&fixture, &["check", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON report");
    assert_eq!(report["ok"], false);
    let errors = report["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 3);
    assert_eq!(errors[0]["line"], 3);
    assert_eq!(errors[0]["column"], 8);
}

#[test]
fn the_second_start_compiles_nothing() {
    let fixture = good_fixture();
    let first: Value =
        serde_json::from_slice(&toolhost(&fixture, &["check", "--json"]).stdout).expect("JSON");
    assert_eq!(first["components"]["compiled"], 2);
    let second: Value =
        serde_json::from_slice(&toolhost(&fixture, &["check", "--json"]).stdout).expect("JSON");
    assert_eq!(second["components"]["compiled"], 0);
    assert_eq!(second["components"]["from_cache"], 2);
}

#[test]
fn list_shows_tools_with_ensemble_hash_and_enabled() {
    let fixture = good_fixture();
    let output = toolhost(&fixture, &["list"]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert!(text.starts_with("TOOL"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("echo ") && l.contains(" yes ")),
        "{text}"
    );
    let output = toolhost(&fixture, &["list", "--json"]);
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(rows.len(), 3);
    let disabled = rows
        .iter()
        .find(|r| r["ensemble"] == "echo" && r["name"] == "spin")
        .expect("disabled row");
    assert_eq!(disabled["enabled"], false);
    assert_eq!(rows[0]["component"].as_str().map(str::len), Some(64));
    assert_eq!(rows[0]["input_schema"]["type"], "object");
}

#[test]
fn call_prints_the_result() {
    let fixture = good_fixture();
    let output = toolhost(&fixture, &["call", "echo", r#"{"text":"hello"}"#]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "{\"text\":\"hello\"}\n");
    let output = toolhost_with_stdin(
        &fixture,
        &["call", "echo", "-"],
        Some(r#"{"text":"from stdin"}"#),
    );
    assert_eq!(stdout(&output), "{\"text\":\"from stdin\"}\n");
}

#[test]
fn a_typed_error_gives_exit_1_and_one_line() {
    let fixture = good_fixture();
    // The first start announces each compilation on stderr; the error line is then alone.
    let first = toolhost(&fixture, &["check"]);
    assert!(stderr(&first).contains("compiling"), "{}", stderr(&first));
    let output = toolhost(&fixture, &["call", "spin"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    let line = stderr(&output);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.starts_with("error: timeout: tool `spin` did not finish within 200 ms"),
        "{line}"
    );

    let output = toolhost(&fixture, &["call", "echo", "{bad json", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["ok"], false);
    assert_eq!(report["error"]["kind"], "invalid-arguments");

    let output = toolhost(&fixture, &["call", "nope"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).starts_with("error: unknown-tool: there is no tool named `nope`"));
}

#[test]
fn a_bad_host_file_stops_the_host_with_its_location() {
    let fixture = good_fixture();
    fixture.write_host_file("host", "ensemble = \"x\"");
    let output = toolhost(&fixture, &["list"]);
    assert_eq!(output.status.code(), Some(3));
    let text = stderr(&output);
    assert!(text.contains("toolhost.toml:4:1"), "{text}");
    assert!(
        text.contains("unknown key `ensemble` in [host]; did you mean `ensembles`?"),
        "{text}"
    );
    // No empty `error:` line before the diagnostics.
    assert!(text.starts_with("error: unknown key"), "{text}");

    // A bound of zero (which would switch it off) or past its top is refused where it stands.
    for (line, expected) in [
        (
            "max-mcp-sessions = 0",
            "max-mcp-sessions must be from 1 to 1000000; got 0",
        ),
        (
            "compile-memory-mib = 99999999999",
            "compile-memory-mib must be from 1 to 1048576",
        ),
        (
            "dedup-total-mib = -1",
            "dedup-session-mib and dedup-total-mib must be from 1",
        ),
        // The same for the agent loop's bounds, though `list` does not use them: the file
        // is checked whole.
        (
            "[chat]\nmax-attempts = 4000000000",
            "max-attempts must be from 1 to 100; got 4000000000",
        ),
        (
            "[chat]\nmax-parallel-calls = 0",
            "max-parallel-calls must be from 1 to 256; got 0",
        ),
        (
            "allowed-hosts = [\"https://evil.example/\"]",
            "allowed hosts are host names or addresses as the Host header carries them",
        ),
    ] {
        fixture.write_host_file("host", line);
        let output = toolhost(&fixture, &["list"]);
        assert_eq!(output.status.code(), Some(3), "{line}");
        let text = stderr(&output);
        let at = format!("toolhost.toml:{}:", 3 + line.lines().count());
        assert!(text.contains(&at), "{line}: {text}");
        assert!(text.contains(expected), "{line}: {text}");
    }
}

#[test]
fn the_host_file_sets_paths_relative_to_itself() {
    let fixture = good_fixture();
    let config =
        "schema-version = 1\n[host]\nensembles = \"ensembles\"\naudit = \"state/audit.jsonl\"\n";
    std::fs::write(fixture.root().join("toolhost.toml"), config).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir("/")
        .env_remove("TOOLHOST_ENSEMBLES")
        .env_remove("TOOLHOST_AUDIT")
        .env("TOOLHOST_CACHE_DIR", fixture.root().join("cache"))
        .arg("--config")
        .arg(fixture.root().join("toolhost.toml"))
        .args(["call", "echo", "{}"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{}", stderr(&output));
    let audit =
        std::fs::read_to_string(fixture.root().join("state/audit.jsonl")).expect("audit written");
    assert_eq!(audit.lines().count(), 1);
}

#[test]
fn a_missing_component_is_named_by_the_path_it_was_looked_for_at() {
    let fixture = Fixture::new();
    fixture.write(
        "web.toml",
        &ensemble(
            "web",
            "nope",
            "[[invokers]]\ninvoker = { name = \"echo\" }\n",
        ),
    );
    // The ensembles folder named relatively, as a newcomer does.
    let output = toolhost(&fixture, &["--ensembles", "ensembles", "check"]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output) + &stderr(&output);
    let looked_at = fixture.root().join("nope.wasm");
    assert!(
        text.contains(&format!(
            "cannot read component {}: No such file or directory (os error 2); a component's \
             path is relative to the folder of the file that names it",
            looked_at.display()
        )),
        "{text}"
    );
}

#[test]
fn new_projects_name_a_schema_their_ensemble_fits() {
    use toolhost::config::file_schemas::Kind;
    let fixture = Fixture::new();
    for lang in ["rust", "python", "js", "c"] {
        let name = format!("fits-{lang}");
        let output = toolhost(&fixture, &["new", &name, "--lang", lang]);
        assert!(output.status.success(), "{}", stderr(&output));
        let project = fixture.root().join(&name);
        let ensemble = std::fs::read_to_string(project.join(format!("ensembles/{name}.toml")))
            .expect("the ensemble");
        assert!(
            ensemble.starts_with("#:schema ../schemas/ensemble.schema.json\n"),
            "{ensemble}"
        );
        assert_eq!(Kind::Ensemble.check(&ensemble), Vec::<String>::new());
        let schema = std::fs::read_to_string(project.join("schemas/ensemble.schema.json"))
            .expect("the schema beside it");
        assert_eq!(schema, Kind::Ensemble.schema_text());
    }
}

#[test]
fn usage_errors_exit_2() {
    let fixture = good_fixture();
    assert_eq!(toolhost(&fixture, &["call"]).status.code(), Some(2));
    assert_eq!(toolhost(&fixture, &["frobnicate"]).status.code(), Some(2));
    // A project name `new` cannot use is a bad command line, said before anything is written.
    let output = toolhost(&fixture, &["new", "word_count"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("(try `word-count`)"),
        "{}",
        stderr(&output)
    );
    assert!(!fixture.root().join("word_count").exists());
}

#[test]
fn text_from_a_tool_reaches_the_terminal_escaped_and_json_exact() {
    let fixture = Fixture::new();
    fixture.write(
        "t.toml",
        &ensemble(
            "t",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"say\", description = \"Says \\u001b]0;pwned\\u0007 things\" }\n",
        ),
    );
    // OSC 52 (write the clipboard) and a screen clear in a result.
    let hostile = "hi\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J";
    let arguments = serde_json::json!({ "text": hostile }).to_string();
    let output = toolhost(&fixture, &["call", "say", &arguments]);
    assert!(output.status.success(), "{}", stderr(&output));
    let shown = stdout(&output);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown.starts_with("hi\\u{1b}]52;c;"), "{shown:?}");
    let listed = stdout(&toolhost(&fixture, &["list"]));
    assert!(!listed.contains('\u{1b}'), "{listed:?}");
    assert!(listed.contains("Says \\u{1b}]0;pwned"), "{listed:?}");

    let json = toolhost(&fixture, &["call", "say", &arguments, "--json"]);
    let report: Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(report["result"], hostile, "--json keeps the text exact");
}

#[test]
fn describe_says_what_a_component_is_and_writes_an_ensemble_that_loads() {
    let fixture = Fixture::new();
    let output = toolhost(&fixture, &["describe", "typed.wasm", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(report["world"], "typed");
    assert!(
        report["imports"]
            .as_array()
            .expect("imports")
            .iter()
            .all(|i| i["provided"] == true),
        "{}",
        report["imports"]
    );
    let forecast = report["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "get_forecast")
        .expect("get_forecast");
    assert_eq!(forecast["tool"], "weather/get-forecast");
    assert_eq!(
        forecast["output_schema"]["properties"]["celsius"]["type"],
        "number"
    );
    // The ensemble it offers loads as it is, with every tool.
    let text = report["ensemble"].as_str().expect("an ensemble");
    // Relative to the ensembles folder (`<root>/ensembles`), where it is saved.
    assert!(text.contains("component = \"../typed.wasm\""), "{text}");
    assert_eq!(report["unused_exports"], serde_json::json!([]));
    fixture.write("typed.toml", text);
    let check = toolhost(&fixture, &["check"]);
    assert!(check.status.success(), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("11 enabled tool(s)"),
        "{}",
        stdout(&check)
    );

    // A toolhost:plugin component, in words.
    let output = toolhost(&fixture, &["describe", "echo.wasm"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(text.contains("a toolhost:plugin@0.1.0 component"), "{text}");
    assert!(text.contains("toolhost:plugin/host@0.1.0"), "{text}");
    assert!(text.contains("[[invokers]]\nname = \"echo\""), "{text}");

    // What the host does not provide is marked, and the exit code says it cannot be served.
    std::fs::write(
        fixture.root().join("odd.wasm"),
        wat::parse_str(
            r#"(component (import "wasi:keyvalue/store@0.2.0" (instance (export "get" (func)))))"#,
        )
        .expect("wat"),
    )
    .expect("write");
    let output = toolhost(&fixture, &["describe", "odd.wasm"]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.contains("wasi:keyvalue/store@0.2.0   <- not provided by toolhost"),
        "{text}"
    );
    assert!(text.contains("which toolhost does not provide"), "{text}");
}

#[test]
fn add_docs_gives_a_cargo_built_typed_component_its_wit_descriptions() {
    let fixture = Fixture::new();
    let description = |file: &str, tool: &str| -> String {
        let output = toolhost(&fixture, &["describe", file, "--json"]);
        assert!(output.status.success(), "{}", stderr(&output));
        let report: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
        let tools = report["tools"].as_array().expect("tools").clone();
        let found = tools.iter().find(|t| t["name"] == tool).expect("the tool");
        found["description"]
            .as_str()
            .expect("a description")
            .to_string()
    };
    // Built by cargo with wit-bindgen: the WIT's doc comments did not reach the component.
    assert!(description("typed.wasm", "get_forecast").starts_with("Calls `weather/get-forecast`"));
    let wit = std::path::Path::new(toolhost_testkit::REPO_ROOT).join("tests/plugins/typed/wit");
    let before = std::fs::read(fixture.root().join("typed.wasm")).expect("read");
    let wit = wit.to_str().expect("path");
    let output = toolhost(
        &fixture,
        &[
            "add-docs",
            "typed.wasm",
            "--wit",
            wit,
            "-o",
            "documented.wasm",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("the doc comments of example:typed@0.1.0"),
        "{}",
        stdout(&output)
    );
    assert_eq!(
        description("documented.wasm", "get_forecast"),
        "The forecast for a place; an unknown place is an error."
    );
    assert_eq!(description("documented.wasm", "add"), "Adds two numbers.");
    assert_eq!(
        std::fs::read(fixture.root().join("typed.wasm")).expect("read"),
        before
    );
    // In place, and again over its own section.
    for _ in 0..2 {
        let output = toolhost(&fixture, &["add-docs", "typed.wasm", "--wit", wit]);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    assert_eq!(description("typed.wasm", "greet"), "Says hello.");
    let output = toolhost(
        &fixture,
        &["add-docs", "typed.wasm", "--wit", "no-such-wit"],
    );
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("cannot read the WIT at no-such-wit"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_cache_keeps_what_ensembles_use_and_prune_removes_the_rest() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write("typed.toml", &ensemble("typed", "typed", ""));
    assert!(toolhost(&fixture, &["check"]).status.success());
    let entries = || compiled_entries(&fixture.root().join("cache"));
    assert_eq!(entries(), 2);
    std::fs::remove_file(fixture.ensembles().join("typed.toml")).expect("remove");
    // Kept when asked to keep the most recent one; removed otherwise.
    let kept = toolhost(&fixture, &["cache", "prune", "--keep", "1", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&kept)).expect("JSON");
    assert_eq!(
        (report["removed"].as_u64(), report["kept"].as_u64()),
        (Some(0), Some(2))
    );
    let pruned = toolhost(&fixture, &["cache", "prune"]);
    assert!(pruned.status.success(), "{}", stderr(&pruned));
    assert!(
        stdout(&pruned).contains("removed 1 compiled component(s)"),
        "{}",
        stdout(&pruned)
    );
    assert_eq!(entries(), 1);
    // What is left is what echo needs: nothing compiles again.
    let check = toolhost(&fixture, &["check", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&check)).expect("JSON");
    assert_eq!(report["components"]["compiled"], 0);
}

#[test]
fn serve_prunes_the_cache_to_what_it_serves_and_what_any_host_used_lately() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write_host_file("host", "tiered-compile = false"); // one entry per component
    fixture.write("typed.toml", &ensemble("typed", "typed", ""));
    assert!(toolhost(&fixture, &["check"]).status.success());
    std::fs::remove_file(fixture.ensembles().join("typed.toml")).expect("remove");
    let cache = fixture.root().join("cache");
    let count = || compiled_entries(&cache);
    assert_eq!(count(), 2);
    // Both were last used 8 days ago (no host uses them lately), and another host's
    // component was used just now.
    let eight_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(8 * 86_400);
    for entry in std::fs::read_dir(&cache).expect("cache").flatten() {
        if entry.file_name().to_string_lossy().ends_with(".cwasm") {
            (std::fs::File::options().write(true).open(entry.path()))
                .and_then(|file| file.set_modified(eight_days_ago))
                .expect("age");
        }
    }
    let another_hosts = cache.join("another-hosts-component.cwasm");
    std::fs::write(&another_hosts, b"compiled elsewhere").expect("write");
    assert_eq!(count(), 3);
    let mut serve = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(fixture.root())
        .env_remove("TOOLHOST_CONFIG")
        .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
        .env("TOOLHOST_CACHE_DIR", &cache)
        .args(["--cache-keep", "0", "serve", "--no-watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count() != 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(serve.stdin.take());
    let _ = serve.wait();
    assert_eq!(count(), 2, "serve kept a component nobody used lately");
    assert!(
        another_hosts.exists(),
        "serve removed a component another host used lately"
    );
}

/// The compiled components in the cache at `dir`.
fn compiled_entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .expect("cache")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .count()
}

#[test]
fn the_hosts_of_two_projects_keep_their_own_status() {
    let state = tempfile::tempdir().expect("state");
    let projects: Vec<Fixture> = (0..2).map(|_| Fixture::new()).collect();
    for project in &projects {
        project.write_echo();
        project.write_host_file("host", "");
    }
    let status = |project: &Fixture| {
        Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .current_dir(project.root())
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_STATUS_FILE")
            .env("XDG_STATE_HOME", state.path())
            .env("TOOLHOST_ENSEMBLES", project.ensembles())
            .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
            .arg("status")
            .output()
            .expect("status")
    };
    // One project's host runs; the other project has none.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(projects[0].root())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_STATUS_FILE")
        .env("XDG_STATE_HOME", state.path())
        .env("TOOLHOST_ENSEMBLES", projects[0].ensembles())
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .env("TOOLHOST_CACHE_KEEP", crate::mcp::SHARED_CACHE_KEEP)
        .args(["serve", "--no-watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !status(&projects[0]).status.success() {
        assert!(std::time::Instant::now() < deadline, "no status written");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let running = status(&projects[0]);
    assert!(String::from_utf8_lossy(&running.stdout).contains("running"));
    let other = status(&projects[1]);
    assert_eq!(
        other.status.code(),
        Some(1),
        "another project's host was shown"
    );
    assert!(String::from_utf8_lossy(&other.stderr).contains("no `toolhost serve` has run"));
    drop(serve.stdin.take());
    let _ = serve.wait();
}

#[test]
fn a_bad_input_to_new_or_describe_exits_1_not_3() {
    let fixture = good_fixture();
    // An existing folder: the work cannot be done as asked, and nothing is written over.
    std::fs::create_dir(fixture.root().join("taken")).expect("mkdir");
    let output = toolhost(&fixture, &["new", "taken"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("exists already"),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("--dir"), "{}", stderr(&output));
    // A core module, not a component.
    std::fs::write(
        fixture.root().join("core.wasm"),
        wat::parse_str("(module)").expect("wat"),
    )
    .expect("write");
    let output = toolhost(&fixture, &["describe", "core.wasm"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.starts_with("error: core.wasm is not a valid WebAssembly component"),
        "{said}"
    );
    assert!(said.contains("it is a core WebAssembly module"), "{said}");
}
