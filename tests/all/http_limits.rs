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
    let config = fixture.root().join("toolhost.toml");
    std::fs::write(&config, format!("schema-version = 1\n[host]\n{host}\n")).expect("config");
    let server = HttpServer::start(&fixture, &["--config", config.to_str().expect("path")], &[]);
    (fixture, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_are_capped_and_idle_ones_are_closed() {
    let (_fixture, server) = server("max-mcp-sessions = 2\nmcp-session-idle-s = 1");
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
async fn connections_past_the_cap_are_closed_and_the_others_served() {
    let (_fixture, server) = server("max-http-connections = 2\nhttp-header-timeout-ms = 60000");
    let address = address(&server.url);
    let holders: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).expect("connect");
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\n")
                .expect("half a request");
            stream
        })
        .collect();
    // Let the server accept both before the third comes.
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(&address).expect("connect");
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let _ = third.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert!(
        closed_by_server(&mut third),
        "a connection past the cap was kept open"
    );
    drop(holders);
    // With the holders gone, requests are served again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = tokio::time::timeout(Duration::from_secs(5), post(&server.url, &[])).await;
        if status == Ok(200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed slots were never reused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
