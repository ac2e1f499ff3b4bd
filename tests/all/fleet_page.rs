//! The web chat's page in headless Chromium (`tests/clients/webchat.py`, every step of the
//! single-host test) through haproxy, round robin, in front of two replicas that keep their
//! conversations in PostgreSQL and route on Redis (`[fleet] advertise`): the page's requests
//! alternate replicas, its approvals and its answer to a tool's question reach the run on the
//! replica running it, and its stored conversations read back from either.

use crate::fleet::Haproxy;
use crate::fleet_chat::PostgresServer;
use crate::fleet_quotas::RedisServer;
use crate::mcp::HttpServer;
use crate::scripted::Scripted;
use crate::web::fixture;
use crate::web_page::{page_replies, prepare_page, run_page};
use std::time::{Duration, Instant};

#[test]
fn the_page_works_through_a_round_robin_fleet() {
    let postgres = PostgresServer::start();
    let model = Scripted::start(page_replies());
    let fixture = fixture(&model.base_url, "");
    let pending = prepare_page(&fixture);
    let redis = RedisServer::start(fixture.root());
    let config = fixture.write_host_file(
        "chat",
        &format!(
            "{}database-env = \"TOOLHOST_DATABASE_URL\"\n\n[fleet]\n\
             redis-env = \"TOOLHOST_REDIS_URL\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"",
            crate::support::scripted_chat(&model.base_url, "")
        ),
    );
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let replicas: Vec<HttpServer> = (0..2)
        .map(|_| {
            let port = crate::access::free_port();
            let advertise = format!("http://127.0.0.1:{port}");
            HttpServer::start_at(
                &format!("127.0.0.1:{port}"),
                &fixture,
                &["--config", config.to_str().expect("path")],
                &[
                    ("SCRIPTED_KEY", "k"),
                    ("TOOLHOST_REDIS_URL", &redis_url),
                    ("TOOLHOST_DATABASE_URL", &database_url),
                    ("TOOLHOST_ADVERTISE", &advertise),
                ],
            )
        })
        .collect();
    let addresses: Vec<String> = (replicas.iter())
        .map(|r| {
            r.url
                .trim_start_matches("http://")
                .trim_end_matches("/mcp")
                .to_string()
        })
        .collect();
    let balancer = Haproxy::start(fixture.root(), &addresses);
    let front = balancer.url.trim_end_matches("/mcp").to_string();
    // Both replicas passed haproxy's checks: three ready answers in a row.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ready = 0;
    while ready < 3 {
        let up = std::process::Command::new("curl")
            .args(["-sf", "-o", "/dev/null", &format!("{front}/readyz")])
            .status()
            .is_ok_and(|s| s.success());
        ready = if up { ready + 1 } else { 0 };
        assert!(
            Instant::now() < deadline,
            "the balancer never passed requests"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    run_page(
        &format!("{front}/"),
        &fixture,
        &pending,
        &model,
        "webchat-fleet.png",
    );
}
