//! `serve` over stdio against a client that sends what cannot be read (issue #29's tenth
//! finding): a request nested 100,000 levels deep, one of 20 MB, one that passes 16 MiB and
//! has not ended yet. Each gets a JSON-RPC error with its id, at once, and the session goes on.

use crate::support::{Fixture, peak_kib};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn requests_too_large_or_too_deep_are_answered_with_their_id_and_the_session_goes_on() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let mut child = command
        .args(["serve", "--no-watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (send, lines) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let value = serde_json::from_str(&line).expect("every line out is whole JSON");
            if send.send(value).is_err() {
                return;
            }
        }
    });
    let answer = |id: i64| loop {
        let message = lines.recv_timeout(DEADLINE).expect("an answer in time");
        if message["id"] == id {
            return message;
        }
    };
    let mut send = |text: &[u8]| {
        stdin.write_all(text).expect("write");
        stdin.flush().expect("flush");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "1"}}})
        .to_string()
        .as_bytes(),
    );
    send(b"\n");
    answer(1);
    send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");

    // 100,000 levels deep.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"a":{}}}}}}}"#,
        "[".repeat(100_000)
    );
    send(deep.as_bytes());
    send(b"\n");
    let refused = answer(2);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nested too deep")),
        "{refused}"
    );

    // 20 MB in one line.
    let mut big = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"a":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 20_000_000));
    big.extend_from_slice(b"\"}}}\n");
    send(&big);
    let refused = answer(3);
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("larger than the 16 MiB")),
        "{refused}"
    );

    // Past 16 MiB and not ended: answered while the line is still open.
    let mut open = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"a":""#.to_vec();
    open.extend(std::iter::repeat_n(b'y', 17 << 20));
    send(&open);
    let refused = answer(4);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    send(b"\"}}}\n");

    // The session goes on.
    send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"still": "here"}}})
        .to_string()
        .as_bytes(),
    );
    send(b"\n");
    let called = answer(5);
    assert_eq!(
        called["result"]["content"][0]["text"], r#"{"still":"here"}"#,
        "{called}"
    );
    let peak = peak_kib(child.id());
    eprintln!("peak RSS of serve over stdio: {} MiB", peak >> 10);
    assert!(peak < 200 << 10, "serve peaked at {} MiB", peak >> 10);
    drop(stdin);
    let _ = child.wait();
}
