//! The fleet on a Redis Cluster (issue #58, `[fleet] redis-cluster-env`): three primaries
//! made by `redis-cli --cluster create`, each with a replica. Two replicas of the host behind
//! haproxy round robin hold a quota exactly (5 a minute, 2 at once), share a conversation's
//! result, route a 2025-11-25 session; and when the primary holding an identity's quota is
//! killed mid-run, that identity's calls are refused with `503` and `Retry-After` until its
//! replica is promoted, `/readyz` stays `200` and says why, and then they run again. The
//! same on a cluster reached over TLS alone.

use crate::fleet::Haproxy;
use crate::fleet_tls::Certificates;
use crate::mcp::HttpServer;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Redis Cluster on loopback: `primaries` primaries with `replicas` replicas each, every
/// node's client and bus port free ones, on TLS alone (clients and bus) with `tls`; killed
/// when dropped.
struct RedisCluster {
    nodes: Vec<(u16, Option<Child>)>,
    /// The CA its certificates chain to, when it speaks TLS.
    ca: Option<PathBuf>,
}

impl RedisCluster {
    fn start(root: &Path, primaries: usize, replicas: usize, tls: Option<&Certificates>) -> Self {
        let dir = root.join("cluster");
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let mut nodes = Vec::new();
        for _ in 0..primaries * (1 + replicas) {
            let (port, bus) = (crate::access::free_port(), crate::access::free_port());
            let mut command = Command::new("redis-server");
            command.args(["--bind", "127.0.0.1"]);
            match tls {
                Some(tls) => {
                    command.args(["--port", "0", "--tls-port", &port.to_string()]);
                    command.args(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                    command.arg("--tls-cert-file").arg(&tls.server_cert);
                    command.arg("--tls-key-file").arg(&tls.server_key);
                    command.arg("--tls-ca-cert-file").arg(&tls.ca);
                    command.args(["--tls-auth-clients", "no"]);
                }
                None => {
                    command.args(["--port", &port.to_string()]);
                }
            }
            let child = command
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus.to_string(),
                ])
                .args(["--cluster-node-timeout", "1000"])
                .arg("--cluster-config-file")
                .arg(dir.join(format!("nodes-{port}.conf")))
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts (./scripts/test-tools.sh installs it)");
            nodes.push((port, Some(child)));
        }
        let cluster = RedisCluster {
            nodes,
            ca: tls.map(|tls| tls.ca.clone()),
        };
        for (port, _) in &cluster.nodes {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(Instant::now() < deadline, "redis-server never listened");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let hosts: Vec<String> = (cluster.nodes.iter())
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let made = cluster
            .redis_cli()
            .args(["--cluster", "create"])
            .args(&hosts)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            made.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&made.stdout)
        );
        cluster.until_ok(Duration::from_secs(30));
        cluster
    }

    /// Two seeds, as an operator would write them.
    fn seeds(&self) -> String {
        let scheme = if self.ca.is_some() { "rediss" } else { "redis" };
        let seeds: Vec<String> = (self.nodes[..2].iter())
            .map(|(port, _)| format!("{scheme}://127.0.0.1:{port}"))
            .collect();
        seeds.join(",")
    }

    /// `redis-cli`, over TLS when the cluster speaks it.
    fn redis_cli(&self) -> Command {
        let mut command = Command::new("redis-cli");
        if let Some(ca) = &self.ca {
            command.arg("--tls").arg("--cacert").arg(ca);
        }
        command
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let output = self
            .redis_cli()
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until every live node says the cluster serves every slot.
    fn until_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let ok = (self.live()).all(|port| {
                self.cli(port, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster never said ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn live(&self) -> impl Iterator<Item = u16> + '_ {
        (self.nodes.iter()).filter_map(|(port, child)| child.as_ref().map(|_| *port))
    }

    /// Every key toolhost keeps, and the live primary holding it.
    fn keys(&self) -> Vec<(String, u16)> {
        let mut keys = Vec::new();
        for port in self.live() {
            if !self.cli(port, &["role"]).starts_with("master") {
                continue;
            }
            let found = self.cli(port, &["--scan", "--pattern", "toolhost:*"]);
            keys.extend(found.lines().map(|key| (key.to_string(), port)));
        }
        keys
    }

    /// Kills the node on `port` (SIGKILL: nothing saved).
    fn kill(&mut self, port: u16) {
        for (at, child) in &mut self.nodes {
            if *at == port
                && let Some(mut child) = child.take()
            {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        let ports: Vec<u16> = self.live().collect();
        for port in ports {
            self.kill(port);
        }
    }
}

/// Two replicas of a host with `echo` and `sleep` on `cluster` (`fleet`: more of `[fleet]`),
/// advertising each other; ann
/// may make 5 calls a minute, bob 2 at once, kim 1 a minute, erin 100,000 a minute; carol
/// has no quota.
fn replicas(
    fixture: &crate::support::Fixture,
    cluster: &RedisCluster,
    fleet: &str,
) -> Vec<HttpServer> {
    fixture.write_echo();
    fixture.write_slow(60000);
    let config: PathBuf = fixture.write_host_file(
        "fleet",
        &format!(
            "redis-cluster-env = \"TOOLHOST_REDIS_CLUSTER\"\nadvertise-env = \"TOOLHOST_ADVERTISE\"\n{fleet}\n\
         [[access.tokens]]\nname = \"ann\"\nenv = \"ANN\"\n\n\
         [[access.tokens]]\nname = \"bob\"\nenv = \"BOB\"\n\n\
         [[access.tokens]]\nname = \"carol\"\nenv = \"CAROL\"\n\n\
         [[access.tokens]]\nname = \"kim\"\nenv = \"KIM\"\n\n\
         [[access.tokens]]\nname = \"erin\"\nenv = \"ERIN\"\n\n\
         [[access.quotas]]\nidentities = [\"ann\"]\ncalls-per-minute = 5\n\n\
         [[access.quotas]]\nidentities = [\"bob\"]\nconcurrent-calls = 2\n\n\
         [[access.quotas]]\nidentities = [\"kim\"]\ncalls-per-minute = 1\n\n\
         [[access.quotas]]\nidentities = [\"erin\"]\ncalls-per-minute = 100000\n",
        ),
    );
    let seeds = cluster.seeds();
    let env = [
        ("TOOLHOST_REDIS_CLUSTER", seeds.as_str()),
        ("ANN", "ann-token"),
        ("BOB", "bob-token"),
        ("CAROL", "carol-token"),
        ("KIM", "kim-token"),
        ("ERIN", "erin-token"),
    ];
    (0..2)
        .map(|_| crate::fleet_routes::advertising(fixture, &config, &env))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_holds_the_fleets_state_and_a_primary_failing_over_costs_only_its_calls() {
    let fixture = crate::support::Fixture::new();
    let mut cluster = RedisCluster::start(fixture.root(), 3, 1, None);
    let replicas = replicas(&fixture, &cluster, "");
    let balancer = Haproxy::over(fixture.root(), &replicas);
    balancer.wait_passing(Duration::from_secs(60)).await;
    let url = |n: usize| replicas[n % 2].url.clone();

    // Ann: 5 calls a minute for the fleet, through round robin.
    let mut ran = 0;
    for n in 0..12 {
        let (status, answer) =
            crate::fleet_quotas::call_as(&balancer.url, "ann-token", "echo", json!({"n": n})).await;
        assert!(status == 200 || status == 429, "{status} {answer}");
        ran += usize::from(crate::fleet_quotas::ran(status, &answer));
    }
    assert_eq!(ran, 5);

    // Bob: two at once across the fleet; a third waits for one to end.
    let slow = |n: usize, ms: u64| {
        let url = url(n);
        tokio::spawn(async move {
            crate::fleet_quotas::call_as(&url, "bob-token", "sleep", json!({"ms": ms})).await
        })
    };
    let (long, short) = (slow(0, 4000), slow(1, 1500));
    for n in 0..2 {
        crate::metrics::until_running(&url(n), Some("carol-token"), 1).await;
    }
    let (status, answer) =
        crate::fleet_quotas::call_as(&url(0), "bob-token", "echo", json!({"third": 1})).await;
    assert_eq!(status, 429, "{answer}");
    for call in [short, long] {
        let (status, answer) = call.await.expect("bob's call");
        assert!(crate::fleet_quotas::ran(status, &answer), "{answer}");
    }

    // A conversation's identical call runs once, on whichever replica it reaches.
    let conversation = "a-conversation-of-carols-0001";
    for n in 0..2 {
        let arguments = json!({"ms": 1, "n": 7});
        crate::fleet_dedup::call_in(url(n), "carol-token", conversation, "sleep", arguments).await;
    }
    assert_eq!(
        crate::fleet_dedup::runs_of(&fixture, "carol", "sleep"),
        (1, 1)
    );

    // A 2025-11-25 session routed between the replicas.
    crate::fleet_chat::session_lists(&balancer.url, "carol-token", "echo", 4).await;

    // Kim spends her one call a minute (a bucket that refills in 60 s, not ann's 12 s, so
    // that the failover below cannot outlast it; her name hashes to another primary than
    // erin's, which ann's does not); erin's quota lives on one primary: kill it mid-run.
    let new_quota_key = |cluster: &RedisCluster, before: &BTreeSet<(String, u16)>| {
        (cluster.keys().into_iter())
            .find(|key| !before.contains(key) && key.0.starts_with("toolhost:quota:"))
            .expect("a new bucket")
    };
    let before: BTreeSet<(String, u16)> = cluster.keys().into_iter().collect();
    let (status, answer) =
        crate::fleet_quotas::call_as(&url(0), "kim-token", "echo", json!({"n": 0})).await;
    assert!(crate::fleet_quotas::ran(status, &answer), "{answer}");
    let kims = new_quota_key(&cluster, &before);
    let before: BTreeSet<(String, u16)> = cluster.keys().into_iter().collect();
    let (status, answer) =
        crate::fleet_quotas::call_as(&url(0), "erin-token", "echo", json!({"n": 0})).await;
    assert!(crate::fleet_quotas::ran(status, &answer), "{answer}");
    let (_, primary) = new_quota_key(&cluster, &before);
    assert_ne!(
        kims.1, primary,
        "kim's bucket is on another primary than erin's"
    );
    cluster.kill(primary);

    // Her calls are refused (503, Retry-After) until the node's replica is promoted, then
    // run; `/readyz` stays 200 throughout.
    let (mut refused, mut said_on_readyz) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    loop {
        n += 1;
        let (status, answer) =
            crate::fleet_quotas::call_as(&url(n), "erin-token", "echo", json!({"n": n})).await;
        if crate::fleet_quotas::ran(status, &answer) && refused > 0 {
            break;
        }
        if status != 200 {
            assert_eq!(status, 503, "{answer}");
            refused += 1;
        }
        let ready = reqwest::get(url(n).replace("/mcp", "/readyz"))
            .await
            .expect("readyz");
        assert_eq!(ready.status().as_u16(), 200);
        said_on_readyz |= ready.text().await.expect("text").contains("redis");
        assert!(
            Instant::now() < deadline,
            "erin's calls never ran again ({refused} refused)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(said_on_readyz, "/readyz never said Redis failed");
    // Kim's bucket on another primary was never touched.
    cluster.until_ok(Duration::from_secs(30));
    let (status, answer) =
        crate::fleet_quotas::call_as(&url(1), "kim-token", "echo", json!({"after": 1})).await;
    assert_eq!(status, 429, "kim's call is still counted: {answer}");
}

/// The same cluster on TLS alone (`tls-port`, `tls-cluster`), its certificates from a test
/// CA named by `redis-ca-file`: seeds `rediss://`, the slot map's nodes reached over TLS,
/// and ann's quota exact across the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_over_tls_holds_a_quota_across_replicas() {
    let fixture = crate::support::Fixture::new();
    let certificates = Certificates::make(&fixture.root().join("certs"));
    let cluster = RedisCluster::start(fixture.root(), 3, 0, Some(&certificates));
    let ca = format!("redis-ca-file = \"{}\"", certificates.ca.display());
    let replicas = replicas(&fixture, &cluster, &ca);
    let mut ran = 0;
    for n in 0..8 {
        let url = &replicas[n % 2].url;
        let (status, answer) =
            crate::fleet_quotas::call_as(url, "ann-token", "echo", json!({"n": n})).await;
        assert!(status == 200 || status == 429, "{status} {answer}");
        ran += usize::from(crate::fleet_quotas::ran(status, &answer));
    }
    assert_eq!(ran, 5);
    let keys = cluster.keys();
    assert!(
        keys.iter()
            .any(|(key, _)| key.starts_with("toolhost:quota:")),
        "{keys:?}"
    );
}

#[test]
fn check_says_what_is_wrong_with_a_clusters_seeds() {
    let run = |fleet: &str| {
        let (passed, said) = crate::fleet_quotas::check(fleet);
        assert!(!passed, "{fleet}: {said}");
        said
    };
    let said = run("redis = \"redis://a/0\"\nredis-cluster = \"redis://b:7000\"");
    assert!(said.contains("name one Redis"), "{said}");
    assert!(said.contains("toolhost.toml:5:17"), "{said}");
    let said = run("redis-cluster = \"redis://a:7000,redis://:hunter2@b:7001\"");
    assert!(said.contains("password is never read"), "{said}");
    let said = run("redis-cluster = \"redis://a:7000/2\"");
    assert!(said.contains("has only database 0"), "{said}");
    let said = run("redis-cluster = \"redis://a:7000,rediss://b:7001\"");
    assert!(said.contains("mix redis:// and rediss://"), "{said}");
    let said = run("redis-cluster = \" , \"");
    assert!(said.contains("no seed URL"), "{said}");
    let said = run("redis-cluster = \"redis+unix:///tmp/r.sock\"");
    assert!(said.contains("redis:// or rediss:// URLs"), "{said}");
    let seeds = vec!["redis://a:7000"; 65].join(",");
    let said = run(&format!("redis-cluster = \"{seeds}\""));
    assert!(said.contains("at most 64"), "{said}");
    // Seeds that make a cluster client: passes, with the usual warning without `advertise`.
    let (passed, said) =
        crate::fleet_quotas::check("redis-cluster = \"redis://a:7000, redis://b:7001\"");
    assert!(passed, "{said}");
    assert!(said.contains("a fleet without `advertise`"), "{said}");
}
