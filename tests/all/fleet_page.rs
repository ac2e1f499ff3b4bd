//! The web chat's page in headless Chromium (`tests/clients/webchat.py`, every step of the
//! single-host test) through haproxy, round robin, in front of two replicas that keep their
//! conversations in PostgreSQL and route on Redis (`[fleet] advertise`): the page's requests
//! alternate replicas, its approvals and its answer to a tool's question reach the run on the
//! replica running it, and its stored conversations read back from either.

use crate::fleet::Haproxy;
use crate::fleet_chat::{PostgresServer, routed_chat_fleet};
use crate::fleet_quotas::RedisServer;
use crate::scripted::Scripted;
use crate::web::fixture;
use crate::web_page::{page_replies, prepare_page, run_page};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_works_through_a_round_robin_fleet() {
    let postgres = PostgresServer::start();
    let model = Scripted::start(page_replies());
    let fixture = fixture(&model.base_url, "");
    let pending = prepare_page(&fixture);
    let redis = RedisServer::start(fixture.root());
    let replicas = routed_chat_fleet(&fixture, &model, &redis, &postgres);
    let balancer = Haproxy::over(fixture.root(), &replicas);
    balancer.wait_passing(crate::fleet::DEADLINE).await;
    // A blocking run of the browser: the replicas and the balancer are processes of their own.
    let page = format!("{}/", balancer.front());
    run_page(&page, &fixture, &pending, &model, "webchat-fleet.png");
}
