//! The fleet on engines reached over TLS (issue #58): Debian's `redis-server` on a TLS port
//! alone and a PostgreSQL that takes `hostssl` connections alone, their certificates from a
//! test CA made here with `openssl`. `examples/fleet/toolhost.toml` as written runs on them
//! (`rediss://`, the CA taken as the system's through `SSL_CERT_FILE`; `sslmode=verify-full`
//! with `sslrootcert`): the quota holds across two replicas, a 2025-11-25 session is routed
//! and a conversation shared. And the faults: a certificate of another CA, an expired one, a
//! plain-text server on the TLS port, a handshake that never ends: each a clear error within
//! the timeout, never the password.

use crate::fleet::Haproxy;
use crate::fleet_chat::PostgresServer;
use crate::mcp::HttpServer;
use crate::scripted::{Scripted, openai};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A CA and what it signed, as PEM files in a folder of the test's.
pub(crate) struct Certificates {
    pub(crate) ca: PathBuf,
    /// Another CA, which signed nothing the servers use.
    other_ca: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    /// The server's key certified for a day in 2020.
    expired_cert: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (Debian's openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Certificates {
    /// Makes them in `dir`: the server's certificate for 127.0.0.1 and localhost.
    pub(crate) fn make(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("dir");
        for ca in ["ca", "other-ca"] {
            openssl(
                dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=toolhost test {ca}"),
                ],
            );
        }
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .expect("ext.cnf");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
        // An expired one: `openssl ca` takes explicit dates.
        std::fs::write(dir.join("index.txt"), "").expect("index");
        std::fs::write(dir.join("serial"), "1000\n").expect("serial");
        std::fs::write(
            dir.join("ca.cnf"),
            "[ca]\ndefault_ca = test\n[test]\ndatabase = ./index.txt\nnew_certs_dir = .\n\
             serial = ./serial\ndefault_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n",
        )
        .expect("ca.cnf");
        openssl(
            dir,
            &[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-cert",
                "ca.crt",
                "-keyfile",
                "ca.key",
                "-in",
                "server.csr",
                "-out",
                "expired.crt",
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200102000000Z",
                "-extfile",
                "ext.cnf",
            ],
        );
        Certificates {
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            expired_cert: dir.join("expired.crt"),
        }
    }
}

/// Debian's redis-server on a TLS port alone (no plain port), with `cert`; stopped when
/// dropped.
struct TlsRedis {
    child: Child,
    port: u16,
}

impl TlsRedis {
    fn start(dir: &Path, certificates: &Certificates, cert: &Path) -> Self {
        let port = crate::access::free_port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-key-file")
            .arg(&certificates.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&certificates.ca)
            .args([
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis { child, port }
    }

    fn url(&self) -> String {
        format!("rediss://:hunter2-not-set@127.0.0.1:{}/0", self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_example_runs_on_redis_and_postgres_over_tls() {
    let fixture = crate::support::Fixture::new();
    let certificates = Certificates::make(&fixture.root().join("certs"));
    let redis = TlsRedis::start(fixture.root(), &certificates, &certificates.server_cert);
    let postgres =
        PostgresServer::start_with_tls(&certificates.server_cert, &certificates.server_key);
    crate::support::copy_shipped(fixture.root());
    let config = fixture.root().join("examples/fleet/toolhost.toml");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("dir");
    let repo = Path::new(toolhost_testkit::REPO_ROOT);
    std::fs::copy(repo.join("examples/fleet/toolhost.toml"), &config).expect("copy example");
    let model = Scripted::start(vec![openai::text("Hello."), openai::text("Again.")]);
    // Redis without a password here: the URL's user info is the default user's, empty.
    let redis_url = redis.url().replace(":hunter2-not-set@", "");
    let database_url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        postgres.url(),
        certificates.ca.display()
    );
    let ca = certificates.ca.to_str().expect("path");
    let env = [
        ("TOOLHOST_REDIS_URL", redis_url.as_str()),
        ("TOOLHOST_DATABASE_URL", database_url.as_str()),
        ("TOOLHOST_AGENT_TOKEN", "agent-secret"),
        ("TOOLHOST_CHAT_BASE_URL", model.base_url.as_str()),
        // rediss:// checks Redis against the system's roots: this CA, as rustls-native-certs
        // reads them.
        ("SSL_CERT_FILE", ca),
    ];
    let replicas: Vec<HttpServer> = (0..2)
        .map(|_| crate::fleet_routes::advertising(&fixture, &config, &env))
        .collect();
    let balancer = Haproxy::over(fixture.root(), &replicas);
    balancer.wait_passing(Duration::from_secs(120)).await;
    let front = balancer.front();
    for replica in &replicas {
        let ready = reqwest::get(replica.url.replace("/mcp", "/readyz"))
            .await
            .expect("readyz");
        assert_eq!(ready.text().await.expect("text"), "ready\n");
    }

    // A conversation kept on PostgreSQL over TLS, continued through the other replica.
    let chat = |message: &'static str, id: Option<String>| {
        let front = front.clone();
        async move {
            let url = match id {
                Some(id) => format!("{front}/api/conversations/{id}/messages"),
                None => format!("{front}/api/conversations"),
            };
            crate::access_chat::chat(&url, "agent-secret", json!({"message": message}))
                .await
                .rest()
                .await
        }
    };
    let events = chat("Hi", None).await;
    assert_eq!(
        events.last().expect("done")["text"],
        "Hello.",
        "{events:#?}"
    );
    let id = events[0]["id"].as_str().expect("id").to_string();
    let events = chat("Again?", Some(id)).await;
    assert_eq!(
        events.last().expect("done")["text"],
        "Again.",
        "{events:#?}"
    );

    // The quota held on Redis over TLS: 20 calls alternating replicas, 5 a minute, 5 run.
    let ran = crate::fleet_chat::calls_of_calculate_that_ran(&balancer.url, "agent-secret", 20);
    assert_eq!(ran.await, 5);
    // A 2025-11-25 session routed between the replicas through Redis over TLS.
    crate::fleet_chat::session_lists(&balancer.url, "agent-secret", "calculate", 4).await;
}

/// A replica whose `[fleet]` names `redis_url` (checked against `ca` as the system's roots),
/// with a quota for `ann`, within 300 ms.
fn replica(fixture: &crate::support::Fixture, redis_url: &str, ca: &Path) -> HttpServer {
    let config = fixture.write_host_file(
        "fleet",
        "redis-env = \"TOOLHOST_REDIS_URL\"\nredis-timeout-ms = 300\n\n\
         [[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
         [[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 100\n",
    );
    let env = [
        ("TOOLHOST_REDIS_URL", redis_url),
        ("ANN", "ann-token"),
        ("SSL_CERT_FILE", ca.to_str().expect("path")),
    ];
    let config = config.to_str().expect("path");
    HttpServer::start(fixture, &["--config", config, "--no-watch"], &env)
}

/// ann's call through `server`: its status and what it said.
async fn anns_call(server: &HttpServer) -> (u16, String) {
    let (status, _, answer) = crate::mcp_revisions::modern_post(
        &server.url,
        "tools/call",
        Some("echo"),
        json!({"name": "echo", "arguments": {}}),
        &[("authorization", "Bearer ann-token")],
    )
    .await;
    let said = match &answer["error_description"] {
        Value::String(said) => said.clone(),
        _ => answer.to_string(),
    };
    (status, said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_fault_is_a_clear_error_within_the_timeout_never_a_hang_or_the_password() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let certificates = Certificates::make(&scratch.path().join("certs"));
    let good = TlsRedis::start(scratch.path(), &certificates, &certificates.server_cert);
    let expired = TlsRedis::start(scratch.path(), &certificates, &certificates.expired_cert);
    let plain = crate::fleet_quotas::RedisServer::start(scratch.path());
    // A server that takes the connection and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("address").port();
    let held = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().take(64) {
            held.push(stream);
        }
    });
    // A server that answers in plain text at once.
    let talker = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let talker_port = talker.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for mut stream in talker.incoming().take(64).flatten() {
            let _ = std::io::Write::write_all(&mut stream, b"-ERR this is no TLS server\r\n");
        }
    });

    let cases = [
        (good.url(), &certificates.ca, None),
        (
            good.url(),
            &certificates.other_ca,
            Some("certificate is refused"),
        ),
        (expired.url(), &certificates.ca, Some("Expired")),
        // A plain Redis reads the TLS hello as the start of an inline command and waits for
        // its end: the handshake never ends, as with a server that says nothing.
        (
            format!("rediss://:hunter2-not-set@127.0.0.1:{}/0", plain.port),
            &certificates.ca,
            Some("within 300 ms"),
        ),
        (
            format!("rediss://:hunter2-not-set@127.0.0.1:{silent_port}/0"),
            &certificates.ca,
            Some("within 300 ms"),
        ),
        (
            format!("rediss://:hunter2-not-set@127.0.0.1:{talker_port}/0"),
            &certificates.ca,
            Some("TLS failed"),
        ),
    ];
    for (url, ca, refused) in cases {
        let fixture = crate::support::Fixture::new();
        fixture.write_echo();
        // The URL names a password the servers do not ask for (Redis 7 takes it for the
        // default user with none set only after AUTH; these servers have none): it must
        // never be shown.
        let url = match refused {
            None => url.replace(":hunter2-not-set@", ""),
            Some(_) => url,
        };
        let server = replica(&fixture, &url, ca);
        let started = Instant::now();
        let (status, said) = anns_call(&server).await;
        match refused {
            None => assert_eq!(status, 200, "{said}"),
            Some(reason) => {
                assert_eq!(status, 503, "{url}: {said}");
                assert!(said.contains(reason), "{url}: {said}");
                assert!(!said.contains("hunter2"), "{said}");
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "{url}: bounded by the timeout"
                );
                let logged = server.stderr();
                assert!(!logged.contains("hunter2"), "{logged}");
            }
        }
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_certificate_of_another_ca_is_a_chat_503_that_says_so() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let certificates = Certificates::make(&scratch.path().join("certs"));
    let postgres =
        PostgresServer::start_with_tls(&certificates.server_cert, &certificates.server_key);
    let model = Scripted::start(vec![openai::text("Hello.")]);
    let fixture = crate::web::fixture(
        &model.base_url,
        "database-env = \"TOOLHOST_DATABASE_URL\"\n",
    );
    let config = fixture.root().join("toolhost.toml");
    for (root, works) in [(&certificates.other_ca, false), (&certificates.ca, true)] {
        let database_url = format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            postgres.url(),
            root.display()
        );
        let env = [
            ("SCRIPTED_KEY", "k"),
            ("TOOLHOST_DATABASE_URL", database_url.as_str()),
        ];
        let server = HttpServer::start(
            &fixture,
            &["--config", config.to_str().expect("path")],
            &env,
        );
        let api = format!("{}/api/conversations", crate::web::base(&server));
        let (status, said) = crate::web::get(&api).await;
        match works {
            true => assert_eq!(status, 200, "{said}"),
            false => {
                assert_eq!(status, 503, "{said}");
                let said = said.to_string();
                assert!(said.contains("certificate"), "{said}");
            }
        }
    }
}
