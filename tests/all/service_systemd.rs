//! `toolhost serve` under a service manager: systemd's readiness messages, the shipped systemd
//! unit, JSON log lines that carry the call, and the exit codes the book lists (docs/service.md).

use crate::mcp::configure;
use crate::service::{DEADLINE, Served, fixture, result_text};
use crate::support::{Fixture, ensemble};
use rustix::process::Signal;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let fixture = fixture("");
    let socket_path = fixture.root().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind NOTIFY_SOCKET");
    socket.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let next = || {
        let mut buffer = [0u8; 512];
        let n = socket.recv(&mut buffer).expect("a notification");
        String::from_utf8_lossy(&buffer[..n]).to_string()
    };
    let served = Served::start(
        &fixture,
        &["--http", "127.0.0.1:0"],
        &[("NOTIFY_SOCKET", socket_path.to_str().expect("path"))],
    );
    assert_eq!(next(), "READY=1\n");
    served.signal(Signal::HUP);
    let reloading = next();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert_eq!(next(), "READY=1\n");
    served.signal(Signal::TERM);
    assert_eq!(next(), "STOPPING=1\n");
}

#[test]
fn json_log_lines_parse_and_carry_the_call() {
    let fixture = fixture("");
    let testbed = "[[invokers]]\ninvoker = { name = \"log\" }\n";
    fixture.write("talk.toml", &ensemble("talk", "testbed", testbed));
    // At the default level: the call's fields come with every line, whatever its level.
    let mut served = Served::start(&fixture, &["--no-watch", "--log-format", "json"], &[]);
    served.initialize();
    let id = served.call("log", json!({"message": "hello from the plugin"}));
    assert!(!result_text(&served.response(id)).1);
    served.signal(Signal::TERM);
    assert_eq!(served.exit().code(), Some(0));
    let stderr = served.stderr();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for line in &lines {
        for field in ["time", "level", "target", "message"] {
            assert!(line.get(field).is_some(), "{field} missing: {line}");
        }
    }
    let plugin = lines
        .iter()
        .find(|l| l["message"] == "hello from the plugin")
        .unwrap_or_else(|| panic!("the plugin's line: {stderr}"));
    assert_eq!(plugin["level"], "WARN");
    assert_eq!(plugin["target"], "plugin");
    assert_eq!(plugin["tool"], "log");
    assert_eq!(plugin["ensemble"], "talk");
    assert!(
        plugin["session"]
            .as_str()
            .is_some_and(|s| s.starts_with("mcp-stdio-"))
    );
    assert!(lines.iter().any(|l| {
        l["level"] == "WARN"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("SIGTERM"))
    }));
}

#[test]
fn the_shipped_systemd_unit_verifies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let unit = std::fs::read_to_string(root.join("deploy/systemd/toolhost.service"))
        .expect("deploy/systemd/toolhost.service");
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // The unit names /usr/local/bin/toolhost; verify it against the binary built here.
    let dir = tempfile::tempdir().expect("dir");
    let local = dir.path().join("toolhost.service");
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/toolhost", env!("CARGO_BIN_EXE_toolhost")),
    )
    .expect("unit");
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .expect("systemd-analyze (Debian's systemd, which scripts/test-tools.sh installs)");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && said.trim().is_empty(), "{said}");
    // The example toolhost.toml it points at is one this host accepts (its ensembles
    // directory and cache replaced by a fixture's).
    let fixture = Fixture::new();
    fixture.write_echo();
    let example = root.join("deploy/systemd/toolhost.toml");
    let check = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--config")
        .arg(&example)
        .arg("--ensembles")
        .arg(fixture.ensembles())
        .arg("--cache-dir")
        .arg(crate::support::cache_dir())
        .arg("check")
        .output()
        .expect("check");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The codes of the book's exit-code table (docs/service.md), as written in its first column.
fn readme_exit_codes() -> Vec<String> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/service.md"))
            .expect("docs/service.md");
    let table = page
        .split("**Exit codes**")
        .nth(1)
        .expect("docs/service.md has an exit-code table");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn exit_codes_are_those_the_readme_lists() {
    // 141 (a closed stdout) is held by `cli_pipes`.
    assert_eq!(
        readme_exit_codes(),
        ["0", "1", "2", "3", "4", "130, 143", "141"]
    );
    let fixture = fixture("");
    let run = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut command, &fixture);
        let output = command.args(args).output().expect("toolhost runs");
        output.status.code()
    };
    assert_eq!(run(&["check"]), Some(0));
    assert_eq!(run(&["call", "echo", "{}"]), Some(0));
    // A refused call (an unknown tool) and a failed check.
    assert_eq!(run(&["call", "no_such_tool", "{}"]), Some(1));
    fixture.write("broken.toml", "schema-version = 1\n[ensemble]\nname = 3\n");
    assert_eq!(run(&["check"]), Some(1));
    assert_eq!(run(&["--no-such-flag", "check"]), Some(2));
    fixture.write_host_file("host", "drain-timeout-s = -1");
    assert_eq!(run(&["list"]), Some(3));
    // 4 and 130 / 143: `the_drain_deadline_cancels_what_is_left_audits_it_and_exits_4` and
    // `a_second_signal_cancels_at_once_and_exits_with_its_number`.
}
