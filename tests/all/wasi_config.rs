//! `wasi:config/store`, as jco's components of other hosts read their settings: a typed
//! JavaScript component (`tests/plugins/settings`, componentize-js) offered without
//! `[[invokers]]` gets the settings `[defaults] capabilities` names from the ensemble's
//! `[grants] config` (a value, or one taken from the host's environment) and nothing else;
//! the same component without capabilities gets none; `list --json` names a setting from the
//! environment by its variable, never its value; `check` says where a setting is not granted,
//! and warns of grants no tool asks for and of `[defaults] capabilities` beside `[[invokers]]`
//! (which name their own, so those give nothing); `describe` offers the grant to paste, which
//! works as pasted; a setting's value from the environment never reaches the audit record,
//! though the tool returns it.

use crate::support::{Fixture, ok, session};
use serde_json::{Value, json};
use std::process::Command;
use toolhost_testkit::languages::javascript_settings;

/// An ensemble `name` over the settings component, with `more` lines after `[ensemble]`.
fn ensemble(name: &str, wasm: &std::path::Path, more: &str) -> String {
    format!(
        "schema-version = 1\n\n[ensemble]\nname = \"{name}\"\nprefix = \"{name}\"\n\
         component = \"{}\"\n\n{more}",
        wasm.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jco_component_reads_the_settings_it_is_granted_and_no_others() {
    let wasm = javascript_settings();
    let fixture = Fixture::new();
    // CARGO_PKG_NAME is set for every test; SETTINGS_SECRET is not (its setting is left out).
    fixture.write(
        "granted.toml",
        &ensemble(
            "granted",
            &wasm,
            "[defaults]\ntimeout-ms = 20000\ncapabilities = { config = [\"api-base\", \"package\", \"secret\"] }\n\n\
             [grants.config]\napi-base = \"https://api.example\"\npackage = { env = \"CARGO_PKG_NAME\" }\n\
             secret = { env = \"SETTINGS_SECRET\" }\nunused = \"not asked for\"\n",
        ),
    );
    fixture.write(
        "bare.toml",
        &ensemble(
            "bare",
            &wasm,
            "[defaults]\ntimeout-ms = 20000\n\n[grants.config]\napi-base = \"https://api.example\"\n",
        ),
    );
    let host = fixture.host().await;
    let s = session();
    let setting = |prefix: &str, key: &str| {
        let host = &host;
        let s = &s;
        let tool = format!("{prefix}_setting");
        let key = key.to_string();
        async move { ok(&host.invoke(s, &tool, json!({"key": key})).await) }
    };
    assert_eq!(
        setting("granted", "api-base").await,
        "\"https://api.example\""
    );
    assert_eq!(setting("granted", "package").await, "\"toolhost\"");
    assert_eq!(
        setting("granted", "secret").await,
        "null",
        "its variable is not set"
    );
    assert_eq!(
        setting("granted", "unused").await,
        "null",
        "granted, not asked for"
    );
    let all = ok(&host.invoke(&s, "granted_granted", json!({})).await);
    assert_eq!(
        serde_json::from_str::<Value>(&all).expect("JSON"),
        json!(["api-base=https://api.example", "package=toolhost"])
    );
    // Deny by default: granted to the ensemble, asked for by no capability.
    assert_eq!(setting("bare", "api-base").await, "null");
    let none = ok(&host.invoke(&s, "bare_granted", json!({})).await);
    assert_eq!(
        serde_json::from_str::<Value>(&none).expect("JSON"),
        json!([])
    );

    // `list --json` shows a value written as it is and one from the environment by name.
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command
        .env("SETTINGS_SECRET", "hunter2-never-shown")
        .args(["list", "--json"])
        .output()
        .expect("list");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(!stdout.contains("hunter2-never-shown"), "{stdout}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).expect("JSON");
    let row = (rows.iter())
        .find(|r| r["name"] == "granted_setting")
        .expect("the tool");
    assert_eq!(
        row["config"],
        json!({
            "api-base": "https://api.example",
            "package": "$CARGO_PKG_NAME",
            "secret": "$SETTINGS_SECRET",
        })
    );
}

#[test]
fn check_says_where_a_setting_is_not_granted_or_not_written_right() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "asks.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"asks\"\ncomponent = \"../echo.wasm\"\n\n\
         [grants.config]\nhost = \"db.internal\"\nport = 5432\n\"two words\" = \"x\"\n\n\
         [[invokers]]\nname = \"echo\"\ncapabilities = { config = [\"host\", \"password\"] }\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command.arg("check").output().expect("check");
    let stderr = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "{stderr}");
    for (line, what) in [
        (9, "setting `port` is a string, or { env = \"VAR\" }"),
        (10, "\"two words\" is not a setting's key"),
        (
            14,
            "asks for the setting `password`, which ensemble `asks` does not grant",
        ),
    ] {
        let at = stderr
            .find(what)
            .unwrap_or_else(|| panic!("{what}\n{stderr}"));
        let place = stderr[at..].lines().nth(1).unwrap_or_default();
        assert!(
            place.contains(&format!("asks.toml:{line}:")),
            "{what}: {place}\n{stderr}"
        );
    }
}

#[test]
fn check_warns_of_grants_no_tool_asks_for_and_passes() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "granting.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"granting\"\ncomponent = \"../echo.wasm\"\n\n\
         [grants]\nenv = [\"TZ\"]\nnetwork = [\"example.org:443\"]\n\n[grants.config]\n\
         used = \"yes\"\nunused = \"no\"\n\n\
         [[invokers]]\nname = \"echo2\"\ntool = \"echo\"\ncapabilities = { config = [\"used\"] }\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command.arg("check").output().expect("check");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "warnings do not fail a check: {said}"
    );
    for (line, what) in [
        (8, "grants environment variable TZ, which no tool asks for"),
        (
            9,
            "grants network access to example.org:443, which no tool asks for",
        ),
        (13, "grants the setting `unused`, which no tool asks for"),
    ] {
        let at = said.find(what).unwrap_or_else(|| panic!("{what}\n{said}"));
        assert!(
            said[..at].ends_with("warning: ensemble `granting` "),
            "{said}"
        );
        let place = said[at..].lines().nth(1).unwrap_or_default();
        assert!(
            place.contains(&format!("granting.toml:{line}:")),
            "{what}: {place}\n{said}"
        );
    }
    assert!(!said.contains("`used`, which no tool"), "{said}");
}

/// `toolhost ARGS` over the fixture's ensembles, with `env` set.
fn toolhost(fixture: &Fixture, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, fixture);
    command.env_remove("API_KEY");
    for (key, value) in env {
        command.env(key, value);
    }
    command.args(args).output().expect("toolhost runs")
}

/// The settings lines `describe` writes, commented out, for a component that reads settings.
const GRANT_STUB: &str = "# [grants.config]\n# api-base = \"https://api.example.org\"\n\
    # api-key = { env = \"API_KEY\" }";
const ASKED_STUB: &str = "# capabilities = { config = [\"api-base\", \"api-key\"] }";

/// Writes the ensemble `describe` suggests for the settings component, with its settings
/// uncommented as an operator would paste them (and a timeout for a busy machine).
fn paste_the_described_ensemble(fixture: &Fixture) {
    let wasm = javascript_settings();
    let wasm = wasm.to_str().expect("a UTF-8 path");
    let output = toolhost(fixture, &[], &["describe", wasm]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let at = text.find("schema-version = 1").expect("an ensemble");
    let uncommented: String = text[at..]
        .lines()
        .map(|line| {
            let pasted = ["# [grants", "# api-", "# capabilities"]
                .iter()
                .any(|stub| line.starts_with(stub));
            format!("{}\n", if pasted { &line[2..] } else { line })
        })
        .collect();
    fixture.write(
        "settings.toml",
        &format!("{uncommented}\n[defaults]\ntimeout-ms = 20000\n"),
    );
}

#[test]
fn describe_offers_a_grant_of_settings_to_paste_for_a_component_that_reads_them() {
    let fixture = Fixture::new();
    let wasm = javascript_settings();
    let output = toolhost(&fixture, &[], &["describe", wasm.to_str().expect("UTF-8")]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains(GRANT_STUB), "{text}");
    assert_eq!(text.matches(ASKED_STUB).count(), 2, "one per tool: {text}");
    // A component that reads no settings is offered none.
    let echo = toolhost(&fixture, &[], &["describe", "echo.wasm"]);
    let echo = String::from_utf8_lossy(&echo.stdout);
    assert!(
        echo.contains("[[invokers]]") && !echo.contains("grants"),
        "{echo}"
    );

    paste_the_described_ensemble(&fixture);
    let checked = toolhost(&fixture, &[], &["check"]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stdout)
    );
    let called = toolhost(
        &fixture,
        &[],
        &["call", "setting", r#"{"key": "api-base"}"#],
    );
    let said = String::from_utf8_lossy(&called.stdout);
    assert!(called.status.success(), "{said}");
    assert_eq!(said.trim(), "\"https://api.example.org\"");
}

/// SECURITY.md: a value a tool was given from the host's environment never reaches the audit
/// log, though the tool returns it (the model sees it: the tool's to give) or the model sends
/// it back in arguments; a setting written in the ensemble is no secret and stays.
#[test]
fn a_setting_from_the_environment_is_withheld_from_the_audit_record() {
    let fixture = Fixture::new();
    paste_the_described_ensemble(&fixture);
    let secret = "k-7f3e9a-never-in-the-audit-log";
    let env = [("API_KEY", secret)];
    for (tool, arguments, returned) in [
        ("setting", r#"{"key": "api-key"}"#.to_string(), secret),
        ("granted", "{}".to_string(), secret),
        ("setting", format!(r#"{{"key": "{secret}"}}"#), "null"),
        (
            "setting",
            r#"{"key": "api-base"}"#.to_string(),
            "api.example.org",
        ),
    ] {
        let called = toolhost(&fixture, &env, &["call", tool, &arguments]);
        let said = String::from_utf8_lossy(&called.stdout);
        assert!(called.status.success() && said.contains(returned), "{said}");
    }
    let audit = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    assert!(!audit.contains("7f3e9a"), "{audit}");
    let records: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    let summaries: Vec<&str> = (records.iter())
        .map(|r| r["summary"].as_str().expect("a summary"))
        .collect();
    assert_eq!(
        summaries,
        [
            "\"[redacted]\"",
            "[\"api-base=https://api.example.org\",\"api-key=[redacted]\"]",
            "null",
            "\"https://api.example.org\"",
        ]
    );
    assert_eq!(records[2]["arguments"], json!({"key": "[redacted]"}));
}

#[test]
fn check_warns_that_defaults_capabilities_beside_invokers_give_nothing() {
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "listing.toml",
        "schema-version = 1\n\n[ensemble]\nname = \"listing\"\ncomponent = \"../echo.wasm\"\n\n\
         [defaults]\ntimeout-ms = 5000\ncapabilities = { env = [\"TZ\"] }\n\n\
         [grants]\nenv = [\"TZ\"]\n\n\
         [[invokers]]\nname = \"echo2\"\ntool = \"echo\"\ncapabilities = { env = [\"TZ\"] }\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command.arg("check").output().expect("check");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "a warning does not fail a check: {said}"
    );
    let what = "warning: ensemble `listing` lists [[invokers]], so its [defaults] capabilities \
                give nothing";
    let at = said.find(what).unwrap_or_else(|| panic!("{said}"));
    let place = said[at..].lines().nth(1).unwrap_or_default();
    assert!(place.contains("listing.toml:9:16"), "{place}\n{said}");
    // The invoker asks for TZ itself: the grant is used, and not warned of.
    assert!(!said.contains("which no tool asks for"), "{said}");
}
