//! SIGHUP and the audit log of a running `serve`: a reload without watching, the log reopened
//! after a move or logrotate with no record lost, a FIFO or a link at its path refused while
//! reloads go on, and a full device that refuses calls until it takes writes again (or, with
//! `continue`, lets them go on and gives the unwritten records to stderr at exit).

use crate::service::{DEADLINE, Served, audit_at, fixture, result_text, wait_until};
use crate::support::ensemble;
use rustix::process::Signal;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn sighup_reloads_without_watching_and_reopens_the_moved_audit_log() {
    let fixture = fixture("");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    let first = served.call("echo", json!({"n": 1}));
    assert!(!result_text(&served.response(first)).1);
    let log = fixture.root().join("audit.jsonl");
    let moved = fixture.root().join("audit.jsonl.1");
    std::fs::rename(&log, &moved).expect("move the audit log");
    fixture.write("more.toml", &crate::support::fail_ensemble("more"));
    served.signal(Signal::HUP);
    // The new tool appears without a watcher: SIGHUP reloaded.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let list = served.request("tools/list", json!({}));
        let tools = served.response(list)["result"]["tools"].to_string();
        if tools.contains("\"fail\"") {
            break;
        }
        assert!(Instant::now() < deadline, "SIGHUP did not reload: {tools}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = served.call("echo", json!({"n": 2}));
    assert!(!result_text(&served.response(second)).1);
    assert_eq!(audit_at(&moved).len(), 1, "a record went to the moved file");
    let records = audit_at(&log);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["arguments"], json!({"n": 2}));
    drop(served.stdin.take());
    assert_eq!(served.exit().code(), Some(0));
}

/// Waits until `tools/list` names `tool`: a reload happened.
fn wait_for_tool(served: &mut Served, tool: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let list = served.request("tools/list", json!({}));
        let tools = served.response(list)["result"]["tools"].to_string();
        if tools.contains(&format!("\"{tool}\"")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no reload brought {tool}: {tools}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_fifo_or_a_link_at_the_audit_path_is_refused_at_reopen_and_sighup_keeps_reloading() {
    use std::os::unix::fs::PermissionsExt;
    let fixture = fixture("");
    let mut served = Served::start(&fixture, &["--no-watch", "-v"], &[]);
    served.initialize();
    let log = fixture.root().join("audit.jsonl");
    let moved = fixture.root().join("audit.jsonl.1");
    let first = served.call("echo", json!({"n": 1}));
    assert!(!result_text(&served.response(first)).1);
    std::fs::rename(&log, &moved).expect("move the audit log");

    // A FIFO where the log was: the reopen fails at once (a blocking open would wait for a
    // reader for ever, and every later SIGHUP with it), the reload still happens.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &log,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    fixture.write("more.toml", &crate::support::fail_ensemble("more"));
    served.signal(Signal::HUP);
    wait_for_tool(&mut served, "fail");
    wait_until("the refused reopen", || {
        served.stderr().contains("cannot reopen the audit log")
    });
    assert!(served.stderr().contains("FIFO"), "{}", served.stderr());
    let second = served.call("echo", json!({"n": 2}));
    assert!(!result_text(&served.response(second)).1);

    // A link to another file: never followed; its target is neither written nor narrowed.
    std::fs::remove_file(&log).expect("remove the FIFO");
    let target = fixture.root().join("elsewhere.txt");
    std::fs::write(&target, "").expect("target");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).expect("mode");
    std::os::unix::fs::symlink(&target, &log).expect("link");
    fixture.write(
        "again.toml",
        &ensemble(
            "again",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"again\", tool = \"fail\" }\n",
        ),
    );
    served.signal(Signal::HUP);
    wait_for_tool(&mut served, "again");
    wait_until("the second refused reopen", || {
        served
            .stderr()
            .matches("cannot reopen the audit log")
            .count()
            == 2
    });
    assert!(
        served.stderr().contains("symbolic link"),
        "{}",
        served.stderr()
    );
    let third = served.call("echo", json!({"n": 3}));
    assert!(!result_text(&served.response(third)).1);
    let target_meta = std::fs::metadata(&target).expect("target");
    assert_eq!(target_meta.len(), 0, "a record went through the link");
    assert_eq!(target_meta.permissions().mode() & 0o777, 0o644);
    // Every record is in the file that was open all along, none lost.
    let kept: Vec<Value> = audit_at(&moved)
        .into_iter()
        .filter(|r| r["tool"] == "echo")
        .map(|r| r["arguments"]["n"].clone())
        .collect();
    assert_eq!(kept, [json!(1), json!(2), json!(3)]);
    // `status` says the last reopen failed, and how often.
    wait_until("the status to show the failed reopen", || {
        std::fs::read_to_string(fixture.root().join("status.json"))
            .is_ok_and(|s| s.contains("\"reopen_failures\": 2") && s.contains("symbolic link"))
    });

    // A regular file again: taken at the next SIGHUP.
    std::fs::remove_file(&log).expect("remove the link");
    served.signal(Signal::HUP);
    wait_until("the reopen", || {
        served.stderr().contains("reopened the audit log")
    });
    let fourth = served.call("echo", json!({"n": 4}));
    assert!(!result_text(&served.response(fourth)).1);
    assert_eq!(audit_at(&log).len(), 1);
    drop(served.stdin.take());
    assert_eq!(served.exit().code(), Some(0));
}

/// Debian's logrotate, which `scripts/test-tools.sh` installs.
fn logrotate() -> PathBuf {
    let found = [
        "/usr/sbin/logrotate",
        "/sbin/logrotate",
        "/usr/bin/logrotate",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file());
    found.expect("logrotate is not installed: run ./scripts/test-tools.sh (./scripts/test.sh does)")
}

#[test]
fn logrotate_with_postrotate_sighup_loses_no_record() {
    let logrotate = logrotate();
    let fixture = fixture("");
    let mut served = Served::start(&fixture, &["--no-watch", "-v"], &[]);
    served.initialize();
    let log = fixture.root().join("audit.jsonl");
    let config = fixture.root().join("logrotate.conf");
    std::fs::write(
        &config,
        format!(
            "{} {{\n  rotate 3\n  create 0600\n  missingok\n  sharedscripts\n  postrotate\n    kill -HUP {}\n  endscript\n}}\n",
            log.display(),
            served.child.id()
        ),
    )
    .expect("logrotate.conf");
    let mut sent = 0;
    for round in 0..3 {
        for _ in 0..5 {
            sent += 1;
            let id = served.call("echo", json!({"n": sent}));
            assert!(!result_text(&served.response(id)).1);
        }
        let status = Command::new(&logrotate)
            .arg("--force")
            .arg("--state")
            .arg(fixture.root().join("logrotate.state"))
            .arg(&config)
            .status()
            .expect("logrotate runs");
        assert!(status.success(), "logrotate round {round}: {status:?}");
        // The reopen happens on the host's own time: the next records may go either way
        // until it has, so wait for it to say so.
        let reopened = round + 1;
        wait_until("the reopen", || {
            served.stderr().matches("reopened the audit log").count() >= reopened
        });
    }
    for _ in 0..5 {
        sent += 1;
        let id = served.call("echo", json!({"n": sent}));
        assert!(!result_text(&served.response(id)).1);
    }
    let mut numbers: Vec<u64> = [
        "audit.jsonl",
        "audit.jsonl.1",
        "audit.jsonl.2",
        "audit.jsonl.3",
    ]
    .iter()
    .flat_map(|name| audit_at(&fixture.root().join(name)))
    .map(|r| r["arguments"]["n"].as_u64().expect("n"))
    .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=sent).collect::<Vec<_>>());
    // Each file holds one round: nothing was written to a moved file after the reopen.
    assert_eq!(audit_at(&log).len(), 5);
    assert_eq!(audit_at(&fixture.root().join("audit.jsonl.1")).len(), 5);
}

#[test]
fn a_full_audit_log_refuses_calls_until_it_takes_writes_again() {
    let fixture = fixture("");
    let log = fixture.root().join("audit.jsonl");
    std::os::unix::fs::symlink("/dev/full", &log).expect("link to /dev/full");
    let mut served = Served::start(&fixture, &["--no-watch", "-v"], &[]);
    served.initialize();
    // The first write shows the file refuses: the call that made it had run (its result is
    // answered, its record held); the calls after it are refused without running.
    let first = served.call("echo", json!({"n": "first"}));
    assert!(!result_text(&served.response(first)).1);
    for n in 0..3 {
        let id = served.call("echo", json!({"n": n}));
        let (text, is_error) = result_text(&served.response(id));
        assert!(
            is_error && text.starts_with("unavailable:") && text.contains("audit log"),
            "{text}"
        );
    }
    // One error line for the failure, not one per record.
    assert_eq!(
        served.stderr().matches("cannot be written").count(),
        1,
        "{}",
        served.stderr()
    );
    // Space comes back: the path is a real file again, and the host reopens it.
    std::fs::remove_file(&log).expect("unlink");
    served.signal(Signal::HUP);
    wait_until("the reopen", || {
        served.stderr().contains("reopened the audit log")
    });
    let id = served.call("echo", json!({"n": "after"}));
    let (text, is_error) = result_text(&served.response(id));
    assert!(!is_error, "{text}");
    // The refusals were held and written first, in order.
    let outcomes: Vec<String> = audit_at(&log)
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        outcomes,
        ["ok", "unavailable", "unavailable", "unavailable", "ok"],
        "{}",
        served.stderr()
    );
}

#[test]
fn with_continue_calls_go_on_and_the_unwritten_records_reach_stderr_at_exit() {
    let fixture = fixture("on-audit-error = \"continue\"");
    let log = fixture.root().join("audit.jsonl");
    std::os::unix::fs::symlink("/dev/full", &log).expect("link to /dev/full");
    let mut served = Served::start(&fixture, &["--no-watch"], &[]);
    served.initialize();
    let id = served.call("echo", json!({"n": "kept"}));
    let (text, is_error) = result_text(&served.response(id));
    assert!(!is_error, "{text}");
    // `status` shows the held record while the host runs.
    wait_until("the status to show the held record", || {
        std::fs::read_to_string(fixture.root().join("status.json"))
            .is_ok_and(|s| s.contains("\"held\": 1"))
    });
    served.signal(Signal::TERM);
    assert_eq!(served.exit().code(), Some(0));
    let stderr = served.stderr();
    assert!(
        stderr.contains("1 audit record(s) could not be written")
            && stderr.contains(r#""arguments":{"n":"kept"}"#),
        "{stderr}"
    );
    // A device is never fsynced: no error from the sync every second or at exit.
    assert!(!stderr.contains("Invalid argument"), "{stderr}");
}
