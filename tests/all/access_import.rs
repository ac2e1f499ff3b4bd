//! An imported MCP server that needs OAuth (`[ensemble.mcp] oauth`): toolhost finds the
//! authorization server from the server's `401`, gets its own access token by client
//! credentials for the server's URL, and calls with it; the server (another toolhost behind
//! `[access.oidc]`, with oidc-provider) records this host's client as the caller, never the
//! caller of this host. Credentials that the provider refuses keep the ensemble out, with
//! the reason; a secret variable that is not set is a `check` error at its place.

use crate::access::{Provider, free_port, trust_provider};
use crate::mcp::{HttpServer, configure};
use crate::support::Fixture;
use serde_json::Value;
use std::process::Command;

/// `toolhost call TOOL ARGUMENTS` on `fixture`, with `env`: exit code, stdout, stderr.
fn call(
    fixture: &Fixture,
    env: &[(&str, &str)],
    tool: &str,
    arguments: &str,
) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, fixture);
    let output = command
        .args(["call", tool, arguments])
        .envs(env.iter().copied())
        .output()
        .expect("toolhost call");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The remote: a toolhost on `port` serving echo, that takes only access tokens of
/// `provider` with `tools:all`.
pub(crate) fn echo_behind(provider: &Provider, port: u16) -> (Fixture, HttpServer) {
    let url = format!("http://127.0.0.1:{port}/mcp");
    let remote = Fixture::new();
    remote.write_echo();
    let host_file = trust_provider(
        &remote,
        "\n[[access.rules]]\nscopes = [\"tools:all\"]\ntools = [\"*\"]\n",
    );
    let env = [
        ("ISSUER", provider.issuer.as_str()),
        ("RESOURCE", url.as_str()),
    ];
    let address = format!("127.0.0.1:{port}");
    let config = host_file.to_str().expect("path");
    let server = HttpServer::start_at(&address, &remote, &["--config", config], &env);
    (remote, server)
}

#[test]
fn an_imported_server_that_needs_oauth_gets_this_hosts_own_token() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let provider = Provider::start(&url, 0, "k1");
    let (remote, _server) = echo_behind(&provider, port);

    // This host imports it with its own client credentials.
    let local = Fixture::new();
    let import = local.write_mcp_import(
        "remote",
        &format!(
            "url = \"{url}\"\n\
             oauth = {{ client-id = \"tools\", client-secret-env = \"REMOTE_SECRET\", scopes = [\"tools:all\"] }}"
        ),
    );
    let secret = [("REMOTE_SECRET", "tools-secret")];
    let (code, stdout, stderr) = call(&local, &secret, "echo", r#"{"via": "import"}"#);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains(r#""via":"import""#), "{stdout}");
    // The remote recorded this host's OAuth client as the caller.
    let audit = std::fs::read_to_string(remote.root().join("audit.jsonl")).expect("audit");
    let record: Value = (audit.lines())
        .map(|line| serde_json::from_str::<Value>(line).expect("a record"))
        .find(|r| r["tool"] == "echo" && r["outcome"] == "ok")
        .expect("the call's record");
    assert_eq!(record["identity"]["kind"], "oauth");
    assert_eq!(record["identity"]["client"], "tools");

    // Credentials the provider refuses: the import is refused, and `check` says why; the
    // secret's variable unset: `check` names it at its place.
    let check = |env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut command, &local);
        let output = command
            .arg("check")
            .env_remove("REMOTE_SECRET")
            .envs(env.iter().copied())
            .output()
            .expect("check");
        assert_eq!(output.status.code(), Some(1));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let (code, stdout, stderr) = call(&local, &[("REMOTE_SECRET", "not-it")], "echo", "{}");
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("remote.toml was refused"), "{stderr}");
    let refused = check(&[("REMOTE_SECRET", "not-it")]);
    assert!(refused.contains("gave no access token"), "{refused}");
    let unset = check(&[]);
    let name = import
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        unset.contains("$REMOTE_SECRET, which is not set"),
        "{unset}"
    );
    assert!(unset.contains(&format!("{name}:8:")), "{unset}");
}

#[test]
fn check_says_what_is_wrong_with_an_imports_oauth_credentials() {
    let fixture = Fixture::new();
    let check_written = |oauth: &str, env: &[(&str, &str)]| {
        fixture.write_mcp_import(
            "remote",
            &format!("url = \"https://tools.example/mcp\"\noauth = {{ {oauth} }}"),
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut command, &fixture);
        let output = command
            .arg("check")
            .envs(env.iter().copied())
            .output()
            .expect("check");
        assert_eq!(output.status.code(), Some(1));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let check = |oauth: &str, env: &[(&str, &str)]| {
        check_written(&format!("client-id = \"me\"{oauth}"), env)
    };
    let neither = check("", &[]);
    assert!(
        neither
            .contains("`oauth` needs one of `client-secret-env` (a secret) and `private-key-env`"),
        "{neither}"
    );
    assert!(neither.contains("remote.toml:8:"), "{neither}");
    let both = check(
        ", client-secret-env = \"S\", private-key-env = \"K\"",
        &[("S", "s"), ("K", "k")],
    );
    assert!(both.contains("`oauth` needs one of"), "{both}");
    let hmac = check(
        ", private-key-env = \"K\", algorithm = \"HS256\"",
        &[("K", "k")],
    );
    assert!(hmac.contains("`HS256` is not an algorithm this host signs assertions with: one of ES256, ES384, RS256, RS384, RS512"), "{hmac}");
    let stray = check(
        ", client-secret-env = \"S\", algorithm = \"ES256\"",
        &[("S", "s")],
    );
    assert!(
        stray.contains("`algorithm` is the signature of a `private-key-env` assertion"),
        "{stray}"
    );
    let not_pem = check(", private-key-env = \"K\"", &[("K", "hunter2")]);
    assert!(
        not_pem.contains("$K does not hold a private key in PEM"),
        "{not_pem}"
    );
    assert!(
        !not_pem.contains("hunter2"),
        "the key's text is never printed: {not_pem}"
    );
    // No client: only a server a person signs in to registers one; a key is for client
    // credentials.
    let no_client = check_written("client-secret-env = \"S\"", &[("S", "s")]);
    assert!(
        no_client.contains("`oauth` needs `client-id`") && no_client.contains("sign-in = true"),
        "{no_client}"
    );
    let keyed = check_written("sign-in = true, private-key-env = \"K\"", &[("K", "k")]);
    assert!(
        keyed.contains("`private-key-env` is for client credentials"),
        "{keyed}"
    );
    // A client ID metadata document's URL is the client's ID: https, with a path.
    for (url, said) in [
        (
            "http://toolhost.example/client.json",
            "must be an https URL",
        ),
        ("https://toolhost.example", "needs a path"),
        (
            "https://toolhost.example/a/../client.json",
            "may not have `.` or `..` segments",
        ),
        (
            "https://toolhost.example/client.json#me",
            "may not have a fragment",
        ),
    ] {
        let wrong = check_written(
            &format!("sign-in = true, client-metadata-url = \"{url}\""),
            &[],
        );
        assert!(
            wrong.contains(&format!("`client-metadata-url` `{url}` {said}"))
                && wrong.contains("remote.toml:8:"),
            "{wrong}"
        );
    }
    let not_signing_in = check(
        ", client-secret-env = \"S\", client-metadata-url = \"https://toolhost.example/c.json\"",
        &[("S", "s")],
    );
    assert!(
        not_signing_in.contains("`client-metadata-url` names the client a person signs in with"),
        "{not_signing_in}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imports_token_that_expires_is_replaced_without_failing_a_call() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let provider = Provider::start(&url, 0, "k1");
    let remote = Fixture::new();
    remote.write_echo();
    // No leeway: a token past its `exp` is refused.
    let host_file = trust_provider(&remote, "leeway-s = 0\n");
    let env = [
        ("ISSUER", provider.issuer.as_str()),
        ("RESOURCE", url.as_str()),
    ];
    let address = format!("127.0.0.1:{port}");
    let config = host_file.to_str().expect("path");
    let _remote = HttpServer::start_at(&address, &remote, &["--config", config], &env);

    // This host's client `brief` gets tokens that hold for one second: each round's call
    // needs a new one (rmcp's own client stops sending a token 30 s before it expires).
    let local = Fixture::new();
    local.write_mcp_import(
        "remote",
        &format!("url = \"{url}\"\noauth = {{ client-id = \"brief\", client-secret-env = \"BRIEF_SECRET\" }}"),
    );
    let server = HttpServer::start(&local, &[], &[("BRIEF_SECRET", "brief-secret")]);
    let mut answers = Vec::new();
    for round in 0..3 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let answer = loop {
            let (status, _, answer) = crate::access::call(
                &server.url,
                "-",
                "echo",
                serde_json::json!({"round": round}),
            )
            .await;
            // The first round waits for the import to be up (it starts in the background).
            if round > 0
                || answer["result"]["isError"] != true
                || std::time::Instant::now() > deadline
            {
                assert_eq!(status, 200, "{answer}\n{}", server.stderr());
                break answer;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        answers.push(answer);
        // Past the token's life.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    }
    for (round, answer) in answers.iter().enumerate() {
        assert_ne!(
            answer["result"]["isError"],
            true,
            "round {round}: {answer}\n{}",
            server.stderr()
        );
        assert!(
            answer
                .to_string()
                .contains(&format!("\\\"round\\\":{round}")),
            "round {round}: {answer}"
        );
    }
}
