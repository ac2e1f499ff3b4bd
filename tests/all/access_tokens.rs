//! Tokens and rules under attack: bad tokens refused each with its reason (and nothing else
//! touched), keys rotated and a provider that is down, what each identity holds apart from
//! the others (sessions, dedup conversations), and `[access]` checked at file:line:col and
//! read again on SIGHUP.

use crate::access::{Provider, RESOURCE, audit, bearer, call, listed, trust_provider};
use crate::mcp::HttpServer;
use crate::mcp_revisions::modern_post;
use crate::support::Fixture;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_each_with_its_reason_and_the_good_ones_go_on() {
    const OTHER: &str = "http://127.0.0.1/other";
    let provider = Provider::start(&format!("{RESOURCE} {OTHER}"), 0, "k1");
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = trust_provider(&fixture, "leeway-s = 0\n");
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
    // Signed by the trusted provider, but saying what this server must refuse.
    let eternal = provider.token("eternal", "tools:all", RESOURCE).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let cases: Vec<(&str, String, &str)> = vec![
        ("expired", brief, "has expired"),
        ("another audience", other_audience, "not for this server"),
        ("exp 2^63", eternal, "more than 10 years away"),
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

    // A flood of bad tokens: at most 20 records a second; the next record counts the rest.
    let started = Instant::now();
    let flood = (0..200).map(|n| {
        let request = client.post(url).bearer_auth(format!("bad-{n}"));
        async move { request.send().await.expect("POST").status().as_u16() }
    });
    let statuses = futures_util::future::join_all(flood).await;
    let windows = started.elapsed().as_secs() as usize + 2;
    assert!(statuses.iter().all(|status| *status == 401));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, _, _) = call(url, "one-more", "echo", json!({})).await;
    assert_eq!(status, 401);
    let records = audit(&fixture);
    let flooded = records
        .iter()
        .filter(|r| r["outcome"] == "refused-401")
        .count()
        - (cases.len() + 1);
    assert!(
        flooded <= 20 * windows && flooded < 200,
        "{flooded} records"
    );
    // The records left out are counted by the next one written: the first of the flood's
    // next second, or (when the flood's last second left some out) the one after the flood.
    let counted = (records.iter())
        .filter_map(|r| r["error"].as_str())
        .any(|said| said.contains("were not recorded"));
    assert!(counted, "{:?}", records.last());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_and_a_provider_that_is_down_leaves_the_keys_fetched_in_use() {
    let first = Provider::start(RESOURCE, 0, "k1");
    let port = first.port();
    let issuer = first.issuer.clone();
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = trust_provider(&fixture, "");
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
    let server = HttpServer::start(&fixture, &["--config", config, "--no-watch"], &env);
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

    // New rules on SIGHUP (the file is not watched here): bob may call nothing, and `echo`
    // is unknown to him.
    let rules = format!("{tokens}\n[[access.rules]]\nidentities = [\"ann\"]\ntools = [\"ec*\"]\n");
    fixture.write_host_file("access", &rules);
    hang_up(&server);
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
    hang_up(&server);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.stderr().contains("kept as it was") {
        assert!(Instant::now() < deadline, "the reload was never reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed(url, "ann-secret").await, ["echo"]);
    assert!(listed(url, "bob-secret").await.is_empty());
}

/// Sends `server` SIGHUP.
fn hang_up(server: &HttpServer) {
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_toolhost_toml_applies_to_the_next_request_without_a_signal() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let token = "[[access.tokens]]\nname = \"ann\"\nenv = \"ANN_TOKEN\"\n";
    let host_file = fixture.write_host_file("access", token);
    let config = host_file.to_str().expect("path");
    let server = HttpServer::start(&fixture, &["--config", config], &[("ANN_TOKEN", "ann")]);
    let url = server.url.as_str();
    assert_eq!(listed(url, "ann").await, ["echo"]);
    // A rule that grants ann nothing that exists: echo leaves her list.
    let rules =
        format!("{token}\n[[access.rules]]\nidentities = [\"ann\"]\ntools = [\"nothing\"]\n");
    fixture.write_host_file("access", &rules);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listed(url, "ann").await.is_empty() {
        assert!(Instant::now() < deadline, "the changed file was never read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
         algorithms = [\"HS256\"]\nchallenge-scopes = [\"tools:everything\", \"two words\"]\n\n\
         [[access.rules]]\ntools = [\"calc ulate\"]\n\n\
         [access.oidc.sign-in]\nclient-id = \"web\"\nclient-secret-env = \"NOT_SET_ANYWHERE\"\n\
         redirect-uri = \"http://tools.example/auth/callback\"\n",
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
        (16, "no rule names the scope `tools:everything`"),
        (16, "\"two words\" is not a scope"),
        (18, "a rule says whom it is for"),
        (19, "neither a name nor a glob"),
        (23, "$NOT_SET_ANYWHERE (`client-secret-env`) is not set"),
        (24, "`redirect-uri` must be an https URL"),
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

#[test]
fn a_token_whose_variable_is_unset_stops_serve_and_nothing_local() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let host_file = fixture.write_host_file(
        "access",
        "[[access.tokens]]\nname = \"ann\"\ngroups = [\"ops\"]\nenv = \"ANN_NOT_SET\"\n\n\
         [[access.rules]]\nidentities = [\"ann\"]\ntools = [\"echo\"]\n",
    );
    let config = host_file.to_str().expect("path");
    let run = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command
            .env_remove("ANN_NOT_SET")
            .args(["--config", config])
            .args(args)
            .output()
            .expect("toolhost");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };
    let said = "the token of `ann` is read from $ANN_NOT_SET, which is not set or empty: \
                `serve` refuses to start without it";
    // check: a warning at its place, and the check passes.
    let (code, stdout, stderr) = run(&["check"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains(&format!("warning: {said}")), "{stdout}");
    assert!(stdout.contains("toolhost.toml:7:7"), "{stdout}");
    // The local commands work, and say nothing of it; `list --as` still knows ann.
    let (code, stdout, stderr) = run(&["list", "--as", "ann"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("echo"), "{stdout}");
    assert!(!stderr.contains("ANN_NOT_SET"), "{stderr}");
    let (code, stdout, stderr) = run(&["call", "echo", "{\"text\": \"hi\"}"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    // serve refuses, naming the variable, with no empty `error:` line before it.
    let (code, _, stderr) = run(&["serve", "--http", "127.0.0.1:0"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains(&format!("error: {said}")), "{stderr}");
    assert!(
        !stderr.lines().any(|l| l.trim() == "error:"),
        "a stray empty error line: {stderr}"
    );
}
