//! The bounds of `serve --http`: MCP sessions capped and closed when idle, connections capped,
//! and request headers due within a deadline, so idle or half-open clients cannot pile up.

use crate::mcp::{HttpServer, post};
use crate::support::Fixture;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A host with echo and these `[host]` settings, serving HTTP.
fn server(host: &str) -> (Fixture, HttpServer) {
    let fixture = Fixture::new();
    fixture.write_echo();
    let config = fixture.write_host_file("host", host);
    let server = HttpServer::start(&fixture, &["--config", config.to_str().expect("path")], &[]);
    (fixture, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_are_capped_and_idle_ones_are_closed() {
    let (_fixture, server) = server("max-mcp-sessions = 2\nmcp-session-idle-s = 3");
    assert_eq!(post(&server.url, &[]).await, 200);
    assert_eq!(post(&server.url, &[]).await, 200);
    assert_eq!(
        post(&server.url, &[]).await,
        503,
        "a third session was opened"
    );
    // Idle sessions close: a new one is taken again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while post(&server.url, &[]).await != 200 {
        assert!(Instant::now() < deadline, "idle sessions were never closed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Host and port of a server's URL.
fn address(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().expect("host:port").to_string()
}

/// True when the server closes `stream` (perhaps after a `408` answer) before the read
/// timeout; false when the read times out with the connection still open.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 256];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_are_capped_and_cut_at_the_header_deadline() {
    let (_fixture, server) = server("max-http-connections = 3\nhttp-header-timeout-ms = 300");
    let address = address(&server.url);
    // Three clients start a request and never finish its headers.
    let mut half_open: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).expect("connect");
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .expect("half a request");
            stream
        })
        .collect();
    // Each is closed by the server at its header deadline (a failure deadline, not a timing
    // assertion).
    for stream in &mut half_open {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        assert!(
            closed_by_server(stream),
            "a half-open connection outlived its header deadline"
        );
    }
    // The slots they held are free again.
    assert_eq!(post(&server.url, &[]).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_cap_takes_the_place_of_the_one_idle_longest() {
    let (_fixture, server) = server("max-http-connections = 2\nhttp-header-timeout-ms = 60000");
    let address = address(&server.url);
    let mut holders: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).expect("connect");
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\n")
                .expect("half a request");
            // Accepted one after the other: the first is the one idle longest.
            std::thread::sleep(Duration::from_millis(200));
            stream
        })
        .collect();
    // Half-open connections hold no request: a normal one takes the oldest one's place, long
    // before their header deadline (60 s).
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), post(&server.url, &[]))
            .await
            .expect("answered while the connections were held"),
        200
    );
    holders[0]
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert!(
        closed_by_server(&mut holders[0]),
        "the connection idle longest was kept"
    );
    holders[1]
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    assert!(
        !closed_by_server(&mut holders[1]),
        "the newer one should have stayed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_half_open_connections_do_not_shut_out_a_call() {
    let (_fixture, server) = server("");
    let address = address(&server.url);
    let started = Instant::now();
    let half_open: Vec<TcpStream> = (0..2000)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).expect("connect");
            let _ = stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            stream
        })
        .collect();
    eprintln!("2,000 connections in {:?}", started.elapsed());
    // Past the cap of 1,024 the oldest idle ones made room: the call is answered at once, not
    // after the header deadline (10 s) freed their places.
    for _ in 0..3 {
        let status = tokio::time::timeout(Duration::from_secs(30), post(&server.url, &[]))
            .await
            .expect("answered");
        assert_eq!(status, 200);
    }
    eprintln!("and three calls after {:?}", started.elapsed());
    drop(half_open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_in_frees_its_connection_at_the_body_deadline() {
    let (_fixture, server) = server("max-http-connections = 1\nhttp-body-timeout-s = 1");
    let address = address(&server.url);
    let mut slow = TcpStream::connect(&address).expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: 1000000\r\n\r\n{{"
    );
    slow.write_all(head.as_bytes()).expect("a request started");
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // The body trickles in, a byte every 100 ms: each byte arriving does not put off the
    // deadline, which counts from the headers.
    let mut trickle = slow.try_clone().expect("a second handle");
    std::thread::spawn(move || {
        while trickle.write_all(b" ").is_ok() {
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // Answered (or closed) at its body's deadline, long before it could have sent 1 MB at
    // this pace; the one connection is free again.
    assert!(
        closed_by_server(&mut slow),
        "the slow body held its connection"
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), post(&server.url, &[]))
            .await
            .expect("answered"),
        200
    );
}

/// The status of one HTTP/1.1 request written on a new connection to `address`, and the
/// connection (kept open: a stream's answer goes on).
fn request(address: &str, head: &str) -> (u16, TcpStream) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    stream.write_all(head.as_bytes()).expect("request");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            other => panic!("no status line from {address}: {other:?}"),
        }
    }
    let status = String::from_utf8_lossy(&line)
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status");
    (status, stream)
}

/// The rest of a response after its status line (a short, closed answer).
fn rest(mut stream: TcpStream) -> String {
    let mut body = String::new();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = stream.read_to_string(&mut body);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_apart_and_with_every_connection_busy_the_probes_still_answer() {
    let (_fixture, server) = server(
        "max-http-connections = 4\nmax-http-streams = 2\nhttp-header-timeout-ms = 60000\n\
         http-body-timeout-s = 600",
    );
    let address = address(&server.url);
    let get =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    // Two streams of the catalog hold their connections; a third stream is refused.
    let streams: Vec<TcpStream> = (0..2)
        .map(|_| {
            let (status, stream) = request(&address, &get("/api/catalog/events"));
            assert_eq!(status, 200);
            stream
        })
        .collect();
    let (status, refused) = request(&address, &get("/api/catalog/events"));
    assert_eq!(status, 503);
    assert!(rest(refused).contains("max-http-streams"));
    // So is a `subscriptions/listen` stream, counted by the MCP server itself (by its body,
    // whatever its headers say).
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": true},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    })
    .to_string();
    let listen = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, refused) = request(&address, &listen);
    let refused = rest(refused);
    assert!(refused.contains("max-http-streams"), "{status}: {refused}");
    // Two requests whose bodies never come keep the other connections busy.
    let slow: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).expect("connect");
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {address}\r\ncontent-type: application/json\r\n\
                 accept: application/json, text/event-stream\r\ncontent-length: 1000000\r\n\r\n{{"
            );
            stream
                .write_all(head.as_bytes())
                .expect("a request started");
            stream
        })
        .collect();
    // Given the time to take them (a request polling for it would itself take a connection,
    // and could leave a slow one to be answered as one past the cap).
    std::thread::sleep(Duration::from_secs(1));
    // Every connection is busy: the probes answer, anything else says why.
    for path in ["/healthz", "/readyz"] {
        let (status, answer) = request(&address, &get(path));
        assert_eq!(status, 200, "{path}: {}", rest(answer));
    }
    let (status, answer) = request(&address, &get("/api/catalog"));
    assert_eq!(status, 503);
    assert!(rest(answer).contains("only /healthz and /readyz"));
    drop((streams, slow));
    // With the connections free again, everything is served.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = tokio::time::timeout(Duration::from_secs(5), post(&server.url, &[])).await;
        if status == Ok(200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the connections were never freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_low_file_limit_the_cap_fits_it_and_a_client_with_1100_streams_shuts_no_one_out() {
    // The common `nofile = 1024`: the host keeps room for its own files and the probes.
    let fixture = Fixture::new();
    fixture.write_echo();
    let config = fixture.root().join("toolhost.toml");
    std::fs::write(&config, "schema-version = 1\n").expect("config");
    let mut command = std::process::Command::new("prlimit");
    command.args(["--nofile=1024:1024", "--", env!("CARGO_BIN_EXE_toolhost")]);
    let server = HttpServer::start_command(
        command,
        &fixture,
        &["--config", config.to_str().expect("path")],
        &[],
    );
    let address = address(&server.url);
    let head = format!("GET /api/catalog/events HTTP/1.1\r\nHost: {address}\r\n\r\n");
    let mut open = Vec::new();
    let (mut streaming, mut refused) = (0, 0);
    for _ in 0..1100 {
        let (status, stream) = request(&address, &head);
        match status {
            200 => streaming += 1,
            503 => refused += 1,
            other => panic!("a stream got {other}"),
        }
        open.push(stream);
    }
    assert_eq!(streaming, 256, "the stream cap");
    assert_eq!(refused, 1100 - 256);
    let probe = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    assert_eq!(request(&address, &probe).0, 200);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), post(&server.url, &[]))
            .await
            .expect("a call is answered"),
        200
    );
    assert!(
        server
            .stderr()
            .contains("max-http-connections lowered from 1024 to 752"),
        "{}",
        server.stderr()
    );
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_let_a_service_name_through_and_no_other() {
    let (_fixture, server) =
        server("allowed-hosts = [\"toolhost.tools.svc\", \"lb.example:8080\"]");
    assert_eq!(
        post(&server.url, &[("host", "toolhost.tools.svc")]).await,
        200
    );
    assert_eq!(post(&server.url, &[("host", "lb.example:8080")]).await, 200);
    assert_eq!(post(&server.url, &[("host", "lb.example:9999")]).await, 403);
    assert_eq!(post(&server.url, &[("host", "evil.example")]).await, 403);
    assert_eq!(post(&server.url, &[]).await, 200, "loopback still works");
}
