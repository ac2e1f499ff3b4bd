//! A command whose stdout is a pipe its reader closed (`toolhost status | head -1`) ends
//! quietly: no panic, no backtrace, exit code 141 (128 + SIGPIPE), whether the reader went
//! away before the first line or after it. `serve`, which writes to sockets and pipes of its
//! own, keeps serving when a client goes away mid-answer.

use crate::support::Fixture;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};

/// What a command that ended on a closed stdout must not have said.
fn assert_quiet(what: &str, output: &Output) {
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        !said.contains("panicked") && !said.contains("backtrace") && !said.contains("Broken pipe"),
        "{what}: {said}"
    );
    assert_eq!(output.status.code(), Some(141), "{what}: {said}");
}

/// `toolhost ARGS` over the fixture with a stdout whose reader is closed before it starts:
/// its first write finds nobody reading.
fn run_with_stdout_closed(fixture: &Fixture, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, fixture);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("toolhost runs")
}

#[test]
fn a_command_whose_reader_is_gone_ends_quietly_with_141() {
    let fixture = Fixture::new();
    fixture.write_echo();
    for args in [
        &["list"][..],
        &["list", "--json"],
        &["check"],
        &["call", "echo", r#"{"text": "hi"}"#],
        &["describe", "echo.wasm"],
        &["--help"],
        &["--version"],
    ] {
        let output = run_with_stdout_closed(&fixture, args);
        assert_quiet(&args.join(" "), &output);
    }
}

#[test]
fn status_read_one_line_then_closed_ends_quietly_with_141() {
    let fixture = Fixture::new();
    // More than a pipe holds (64 KiB): `status` is still writing when the reader leaves.
    let ensembles: Vec<serde_json::Value> = (0..3000)
        .map(|n| {
            serde_json::json!({
                "name": format!("ensemble-{n}"), "file": format!("/e/{n}.toml"), "enabled": true,
                "loaded_at": "2026-01-01T00:00:00Z", "components": ["ab".repeat(32)],
                "tools": [format!("tool_{n}=1")],
            })
        })
        .collect();
    let status = serde_json::json!({
        "pid": 1, "ensembles_dir": "/e",
        "status": {"generation": 1, "reloaded_at": "2026-01-01T00:00:00Z",
                   "ensembles": ensembles, "refused": []},
    });
    std::fs::write(fixture.root().join("status.json"), status.to_string()).expect("write");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let mut child = command
        .arg("status")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("status runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("one line");
    assert!(first.starts_with("host pid 1 "), "{first}");
    drop(stdout);
    let output = child.wait_with_output().expect("status ends");
    assert_quiet("status | head -1", &output);
}

#[test]
fn serve_keeps_serving_when_clients_go_away_mid_answer() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let mut server = crate::mcp::HttpServer::start(&fixture, &[], &[]);
    let address = (server.url.strip_prefix("http://"))
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .expect("http://ADDRESS/mcp")
        .to_string();
    // The web page is long enough to be written in several pieces to a client that is gone.
    for _ in 0..5 {
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        write!(stream, "GET / HTTP/1.1\r\nHost: {address}\r\n\r\n").expect("request");
        stream.shutdown(std::net::Shutdown::Both).expect("shutdown");
    }
    let mut stream = std::net::TcpStream::connect(&address).expect("connect");
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "serve is still running"
    );
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}
