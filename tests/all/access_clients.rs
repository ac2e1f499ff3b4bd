//! docs/access.md's client of the official Python SDK runs as written against the example
//! `[access]` file and oidc-provider: it gets a calculate-only token because the `401` asks
//! for `tools:calculate` (`challenge-scopes`); a client that may hold more steps up when it
//! calls another tool; and without `challenge-scopes` the same snippet is refused by a
//! provider that keeps `reports` to its one scope.

use crate::access::{Provider, example, free_port};
use crate::mcp::HttpServer;
use crate::mcp_list::test_tools;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The first `python` block after `heading` in docs/access.md.
fn snippet(heading: &str) -> String {
    let doc =
        std::fs::read_to_string(Path::new(toolhost_testkit::REPO_ROOT).join("docs/access.md"))
            .expect("docs/access.md");
    let after = &doc[doc.find(heading).expect("the heading")..];
    let start = after.find("```python\n").expect("a python block") + "```python\n".len();
    let end = after[start..].find("```").expect("its end");
    after[start..start + end].to_string()
}

fn python(script: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(test_tools().join("venv/bin/python"))
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("python runs")
}

async fn challenge(base: &str) -> String {
    let response = reqwest::get(format!("{base}/api/catalog"))
        .await
        .expect("GET");
    assert_eq!(response.status().as_u16(), 401);
    response.headers()["www-authenticate"]
        .to_str()
        .expect("ascii")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_in_the_docs_runs_as_written_and_the_challenge_steers_its_scopes() {
    // The resource is the URL clients connect to (the SDK checks it): a port chosen first.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let base = url.trim_end_matches("/mcp").to_string();
    let provider = Provider::start(&url, 0, "k1");
    let (fixture, config) = example();
    let env = [
        ("TOOLHOST_OIDC_ISSUER", provider.issuer.as_str()),
        ("TOOLHOST_RESOURCE", url.as_str()),
        ("TOOLHOST_OPS_TOKEN", "ops-secret"),
    ];
    let config_arg = config.to_str().expect("path");
    let server = HttpServer::start_at(
        &format!("127.0.0.1:{port}"),
        &fixture,
        &["--config", config_arg],
        &env,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(reqwest::get(format!("{base}/readyz")).await).is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        challenge(&base).await.contains("scope=\"tools:calculate\""),
        "the example's challenge-scopes"
    );

    let script = fixture.root().join("calculate_only.py");
    std::fs::write(&script, snippet("## Clients that get their own token")).expect("script");
    let client_env = [
        ("TOOLHOST_RESOURCE", url.as_str()),
        ("TOOLHOST_OIDC_ISSUER", provider.issuer.as_str()),
        ("REPORTS_SECRET", "reports-secret"),
    ];
    let output = python(&script, &[], &client_env);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"['calculate']"), "{stdout}");
    assert!(lines.get(1).is_some_and(|l| l.contains("42")), "{stdout}");

    // A client that may hold `tools:all` starts with `tools:calculate` too, and steps up
    // when it calls a tool only `tools:all` allows; `reports` may not, and is refused.
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/oauth_client.py");
    let issuer = provider.issuer.as_str();
    let arguments = r#"{"text": "one two three"}"#;
    let stepped = python(
        &sdk,
        &[
            &url,
            issuer,
            "tools",
            "tools-secret",
            "",
            "text_stats",
            arguments,
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&stepped.stdout);
    assert!(
        stepped.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&stepped.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        answer["tools"],
        serde_json::json!(["calculate"]),
        "listed before the step-up"
    );
    assert_eq!(answer["is_error"], serde_json::json!(false), "{answer}");
    let refused = python(
        &sdk,
        &[
            &url,
            issuer,
            "reports",
            "reports-secret",
            "",
            "text_stats",
            arguments,
        ],
        &[],
    );
    assert!(!refused.status.success(), "reports may not hold tools:all");

    // Without challenge-scopes the 401 asks for every scope the rules name, and the provider
    // refuses `reports` a token at all (the reload takes the edit; the snippet is unchanged).
    let text = std::fs::read_to_string(&config).expect("example");
    let edited: String = (text.lines())
        .filter(|l| !l.starts_with("challenge-scopes"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&config, edited).expect("edit");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !challenge(&base)
        .await
        .contains("scope=\"tools:all tools:calculate\"")
    {
        assert!(
            Instant::now() < deadline,
            "the edit was never read: {}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = python(&script, &[], &client_env);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("scope"), "the provider's refusal: {stderr}");
}
