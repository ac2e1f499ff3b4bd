//! A fleet on one machine: three `toolhost serve --http` replicas on loopback behind Debian's
//! haproxy (round robin, health-checked on `/readyz`), a 2026-07-28 client sending a few
//! thousand session-less calls through it, while the shared ensembles directory goes through
//! the `..data` swap a Kubernetes ConfigMap volume makes. No call may fail, every replica
//! must list the new tool soon after the swap, and the replicas' `/metrics` must add up to
//! the calls made.

use crate::mcp::HttpServer;
use crate::support::{Fixture, ensemble, fail_ensemble};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A failure deadline for waits, not a timing assertion.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);
const CALLS: usize = 3000;
const CLIENTS: usize = 6;

/// The volume a kubelet writes for a ConfigMap: the files in a timestamped directory,
/// `..data` a symlink to it, and each file a symlink through `..data`.
struct ConfigMapVolume {
    dir: PathBuf,
    generation: usize,
}

impl ConfigMapVolume {
    fn new(dir: PathBuf, files: &[(&str, String)]) -> Self {
        let mut volume = ConfigMapVolume { dir, generation: 0 };
        volume.publish(files);
        volume
    }

    /// Publishes `files` as the kubelet's atomic writer does: a new timestamped directory,
    /// `..data_tmp` pointing at it renamed over `..data`, the symlinks of new files made,
    /// those of gone files removed, the old directory deleted.
    fn publish(&mut self, files: &[(&str, String)]) {
        self.generation += 1;
        let stamp = format!("..2026_11_23_00_00_00.{}", self.generation);
        let fresh = self.dir.join(&stamp);
        std::fs::create_dir_all(&fresh).expect("timestamped dir");
        for (name, text) in files {
            std::fs::write(fresh.join(name), text).expect("write");
        }
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&stamp, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap ..data");
        for (name, _) in files {
            let link = self.dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), &link).expect("link");
            }
        }
        for entry in std::fs::read_dir(&self.dir).expect("volume") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !files.iter().any(|(f, _)| *f == name) {
                std::fs::remove_file(entry.path()).expect("remove link");
            }
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).expect("remove old dir");
        }
    }
}

/// haproxy in front of `backends`, on a free loopback port; stopped when dropped.
pub(crate) struct Haproxy {
    child: Child,
    pub(crate) url: String,
}

impl Haproxy {
    /// Round robin over `backends`.
    pub(crate) fn start(root: &Path, backends: &[String]) -> Self {
        Self::balancing(root, backends, "roundrobin")
    }

    /// Round robin over `replicas`.
    pub(crate) fn over(root: &Path, replicas: &[HttpServer]) -> Self {
        Self::start(root, &addresses(replicas))
    }

    /// `http://127.0.0.1:PORT`, without `/mcp`.
    pub(crate) fn front(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// Waits until the balancer passed three `/readyz` answers of `200` in a row: every
    /// replica passed haproxy's checks. `within` is a failure deadline, not a timing check.
    pub(crate) async fn wait_passing(&self, within: Duration) {
        let readyz = format!("{}/readyz", self.front());
        let deadline = Instant::now() + within;
        let mut ready = 0;
        while ready < 3 {
            let up = reqwest::get(&readyz).await.is_ok_and(|r| r.status() == 200);
            ready = if up { ready + 1 } else { 0 };
            assert!(
                Instant::now() < deadline,
                "the balancer never passed requests"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `backends` balanced by `balance` (`roundrobin`, `hdr(Authorization)`, ...), with the
    /// shipped `deploy/haproxy/haproxy.cfg` as it is but for its `bind`, `server` and (if
    /// another is asked for) `balance` lines.
    pub(crate) fn balancing(root: &Path, backends: &[String], balance: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let shipped =
            std::path::Path::new(toolhost_testkit::REPO_ROOT).join("deploy/haproxy/haproxy.cfg");
        let shipped = std::fs::read_to_string(shipped).expect("deploy/haproxy/haproxy.cfg");
        let mut config = String::new();
        for line in shipped.lines() {
            match line.split_whitespace().next() {
                Some("bind") => config.push_str(&format!("    bind 127.0.0.1:{port}\n")),
                Some("balance") => config.push_str(&format!("    balance {balance}\n")),
                Some("server") => {}
                _ => config.push_str(&format!("{line}\n")),
            }
        }
        assert!(config.contains("option redispatch"), "{config}");
        for (n, address) in backends.iter().enumerate() {
            config.push_str(&format!("    server replica{n} {address}\n"));
        }
        let path = root.join(format!("haproxy-{port}.cfg"));
        std::fs::write(&path, config).expect("haproxy.cfg");
        let haproxy = ["/usr/sbin/haproxy", "haproxy"]
            .into_iter()
            .find(|p| Command::new(p).arg("-v").output().is_ok())
            .expect("haproxy is installed (./scripts/test-tools.sh installs it)");
        let child = Command::new(haproxy)
            .args(["-db", "-f"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy starts");
        Haproxy {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `host:port` of each of `replicas`, as haproxy names its servers.
pub(crate) fn addresses(replicas: &[HttpServer]) -> Vec<String> {
    (replicas.iter())
        .map(|r| {
            r.url
                .trim_start_matches("http://")
                .trim_end_matches("/mcp")
                .to_string()
        })
        .collect()
}

/// One 2026-07-28 request: the JSON-RPC answer, or why there is none.
async fn request(
    client: &reqwest::Client,
    url: &str,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "fleet", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = request
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {text}"));
    }
    crate::support::answer_of(&text).ok_or_else(|| format!("no answer in {text}"))
}

async fn tool_names(client: &reqwest::Client, url: &str) -> Vec<String> {
    let answer = request(client, url, "tools/list", json!({}))
        .await
        .unwrap_or_default();
    answer["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The sum of `toolhost_calls_total` on a replica's `/metrics`.
async fn calls_counted(client: &reqwest::Client, url: &str) -> usize {
    let metrics = url.replace("/mcp", "/metrics");
    let text = client
        .get(metrics)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics");
    text.lines()
        .filter(|line| line.starts_with("toolhost_calls_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_haproxy_take_a_configmap_swap_without_a_failed_call() {
    let fixture = Fixture::new();
    let echo = ensemble(
        "echo",
        "echo",
        "[defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = { name = \"echo\" }\n",
    );
    let mut volume = ConfigMapVolume::new(fixture.ensembles(), &[("echo.toml", echo.clone())]);
    let replicas: Vec<HttpServer> = (0..3)
        .map(|n| {
            // Each replica its own audit and status file, as each pod has.
            let file = |name: &str| fixture.root().join(name).display().to_string();
            let (audit, status) = (
                file(&format!("audit-{n}.jsonl")),
                file(&format!("status-{n}.json")),
            );
            HttpServer::start(
                &fixture,
                &[],
                &[
                    ("TOOLHOST_AUDIT", &audit),
                    ("TOOLHOST_STATUS_FILE", &status),
                ],
            )
        })
        .collect();
    let balancer = Haproxy::over(fixture.root(), &replicas);
    let client = reqwest::Client::new();

    // Every replica ready, and the balancer passing calls.
    let started = Instant::now();
    while request(&client, &balancer.url, "tools/list", json!({}))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < DEADLINE,
            "haproxy never passed a request"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let made = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|worker| {
            let (client, url) = (client.clone(), balancer.url.clone());
            let (made, failures) = (made.clone(), failures.clone());
            tokio::spawn(async move {
                for n in 0..CALLS / CLIENTS {
                    let params = json!({"name": "echo", "arguments": {"worker": worker, "n": n}});
                    let answer = request(&client, &url, "tools/call", params).await;
                    made.fetch_add(1, Ordering::SeqCst);
                    match answer {
                        Ok(answer) if answer["result"]["isError"] == json!(false) => {}
                        other => failures
                            .lock()
                            .expect("failures")
                            .push(format!("{other:?}")),
                    }
                }
            })
        })
        .collect();

    // A third of the way in, the ConfigMap changes: a new ensemble beside echo.
    while made.load(Ordering::SeqCst) < CALLS / 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    volume.publish(&[("echo.toml", echo), ("more.toml", fail_ensemble("more"))]);
    let swapped = Instant::now();
    let mut seen = Vec::new();
    for replica in &replicas {
        while !tool_names(&client, &replica.url)
            .await
            .contains(&"fail".to_string())
        {
            assert!(
                swapped.elapsed() < DEADLINE,
                "{} never listed the new tool",
                replica.url
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen.push(swapped.elapsed());
    }
    eprintln!("every replica listed the new tool after {seen:?}");

    for worker in workers {
        worker.await.expect("worker");
    }
    let failures = std::mem::take(&mut *failures.lock().expect("failures"));
    assert!(
        failures.is_empty(),
        "{} failed calls: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert_eq!(made.load(Ordering::SeqCst), CALLS / CLIENTS * CLIENTS);

    let mut counted = Vec::new();
    for replica in &replicas {
        counted.push(calls_counted(&client, &replica.url).await);
    }
    assert_eq!(
        counted.iter().sum::<usize>(),
        CALLS / CLIENTS * CLIENTS,
        "calls counted by the replicas: {counted:?}"
    );
    assert!(
        counted.iter().all(|&c| c > 0),
        "round robin reached every replica: {counted:?}"
    );
}
