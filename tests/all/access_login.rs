//! Imported servers that a person signs in to (`[ensemble.mcp] oauth = { sign-in = true }`,
//! issue #46). The server is another toolhost behind `[access.oidc]`, its authorization
//! server oidc-provider with dynamic registration: `toolhost login` registers a client there,
//! sends the person through the provider's pages (walked here over HTTP, as a browser would
//! go) and back to its loopback redirect, and keeps the tokens for this user alone; a host
//! already serving takes them without a restart. Calls through the import carry them (the server records the person who signed in), a token due
//! is renewed by the refresh token, and one the provider revoked makes the import "needs
//! sign-in", with the command to run.

use crate::access::{Provider, free_port};
use crate::mcp::configure;
use crate::support::Fixture;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The command `toolhost ARGS` on `fixture`.
pub(crate) fn command(fixture: &Fixture, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, fixture);
    command.args(args);
    command
}

/// `toolhost ARGS` on `fixture`: exit code, stdout, stderr.
pub(crate) fn toolhost(fixture: &Fixture, args: &[&str]) -> (i32, String, String) {
    let output = command(fixture, args).output().expect("toolhost");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Goes where `authorize` sends a person, as a browser would: the provider's login page
/// (any login, "ada" here, and password), its consent page, and back to the redirect, whose
/// answer it returns.
pub(crate) async fn sign_in_as_ada(authorize: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut cookies: BTreeMap<String, String> = BTreeMap::new();
    let (mut url, mut form): (String, Option<Vec<(String, String)>>) = (authorize.into(), None);
    for _ in 0..16 {
        let cookie = (cookies.iter())
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ");
        let request = match form.take() {
            None => client.get(&url),
            Some(fields) => client
                .post(&url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(
                    url::form_urlencoded::Serializer::new(String::new())
                        .extend_pairs(fields)
                        .finish(),
                ),
        };
        let response = request
            .header("cookie", cookie)
            .send()
            .await
            .expect("request");
        for set in response.headers().get_all("set-cookie") {
            let pair = set
                .to_str()
                .expect("cookie")
                .split(';')
                .next()
                .unwrap_or("");
            if let Some((name, value)) = pair.split_once('=') {
                cookies.insert(name.into(), value.into());
            }
        }
        let here = url::Url::parse(&url).expect("url");
        if response.status().is_redirection() {
            let location = response.headers()["location"].to_str().expect("location");
            url = here.join(location).expect("location").to_string();
            continue;
        }
        let text = response.text().await.expect("page");
        if here.path() == "/callback" {
            return text;
        }
        // A page of the provider's: its one form, with the person's login where it asks.
        let action = text
            .split("action=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("no form at {url}: {text}"));
        url = here.join(action).expect("action").to_string();
        let mut fields = vec![("prompt".to_string(), "login".to_string())];
        if text.contains("name=\"password\"") {
            fields = vec![
                ("prompt".into(), "login".into()),
                ("login".into(), "ada".into()),
                ("password".into(), "any".into()),
            ];
        } else {
            fields[0].1 = "consent".into();
        }
        form = Some(fields);
    }
    panic!("the sign-in never came back to its redirect");
}

/// `toolhost login remote` on `fixture`, its stdout and stderr piped.
pub(crate) fn spawn_login(fixture: &Fixture) -> std::process::Child {
    command(fixture, &["login", "remote"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("login")
}

/// `toolhost login remote` on `fixture`, once it printed the authorization URL (at
/// `issuer`): the process, the rest of its stdout, and the URL's query (with the URL itself
/// as `authorize`).
pub(crate) fn start_login(
    fixture: &Fixture,
    issuer: &str,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
    BTreeMap<String, String>,
) {
    let mut login = spawn_login(fixture);
    let mut stdout = std::io::BufReader::new(login.stdout.take().expect("stdout"));
    let mut authorize = String::new();
    let mut line = String::new();
    while authorize.is_empty() && stdout.read_line(&mut line).expect("a line") > 0 {
        if let Some(at) = line.trim().strip_prefix(&format!("{issuer}/auth?")) {
            authorize = format!("{issuer}/auth?{at}");
        }
        line.clear();
    }
    let mut query: BTreeMap<String, String> = url::Url::parse(&authorize)
        .expect("the authorization URL")
        .query_pairs()
        .into_owned()
        .collect();
    query.insert("authorize".into(), authorize);
    (login, stdout, query)
}

/// The files of the fixture's folder of tokens, in order (none when there is no folder).
pub(crate) fn kept_files(fixture: &Fixture) -> Vec<PathBuf> {
    let dir = fixture.root().join("state/toolhost/sign-in");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Whether the fixture's folder of tokens holds none.
fn kept_none(fixture: &Fixture) -> bool {
    kept_files(fixture).is_empty()
}

/// The one file of tokens `toolhost login` kept in the fixture's state folder (beside it,
/// the authorization server it pinned and the client it registered, also for this user
/// alone).
fn kept_tokens(fixture: &Fixture) -> PathBuf {
    let files = kept_files(fixture);
    let extensions: Vec<_> = (files.iter())
        .map(|f| f.extension().and_then(|e| e.to_str()).unwrap_or_default())
        .collect();
    assert_eq!(extensions, ["client", "json", "server"], "{files:?}");
    use std::os::unix::fs::PermissionsExt;
    for kept in [&files[0], &files[2]] {
        let mode = std::fs::metadata(kept).expect("kept").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    files[1].clone()
}

/// Makes the kept access token look a day old, so that the next use renews it.
fn age_tokens(path: &PathBuf) -> Value {
    let mut kept: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("tokens")).expect("JSON");
    kept["token_received_at"] = Value::from(1);
    std::fs::write(path, kept.to_string()).expect("write");
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_once_and_the_host_calls_renews_and_says_when_to_sign_in_again() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let provider = Provider::registering(&url);
    let (remote, _server) = crate::access_import::echo_behind(&provider, port);

    let local = Fixture::new();
    local.write_mcp_import(
        "remote",
        &format!("url = \"{url}\"\noauth = {{ sign-in = true, scopes = [\"tools:all\"] }}"),
    );
    // Nobody signed in yet: refused, with the command to run.
    let (code, out, _) = toolhost(&local, &["check"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("needs sign-in") && out.contains("toolhost login"),
        "{out}"
    );

    // A host already serving: the import is refused, its other tools (none here) served.
    let serving = crate::mcp::HttpServer::start(&local, &[], &[]);
    let listed = || async {
        let (_, _, answer) =
            crate::mcp_revisions::modern_post(&serving.url, "tools/list", None, json!({}), &[])
                .await;
        (answer["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default())
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
    };
    assert!(listed().await.is_empty());
    // Said by /readyz (how many, still ready: the rest serves) and `toolhost status` (which),
    // once the import's first start (in the background, "loading" until it ends) failed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let said = loop {
        let ready = reqwest::get(serving.url.replace("/mcp", "/readyz"))
            .await
            .expect("readyz");
        let (status, said) = (ready.status(), ready.text().await.expect("text"));
        if said != "loading\n" {
            assert_eq!(status, 200, "{said}");
            break said;
        }
        assert!(std::time::Instant::now() < deadline, "still loading");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(
        said.contains("ready; 1 ensemble(s) need a person to sign in"),
        "{said}"
    );
    // The status file is written after the reload that /readyz answers from.
    loop {
        let (_, status, _) = toolhost(&local, &["status"]);
        if status.contains("needs sign-in: 1 ensemble(s)") {
            assert!(status.contains("toolhost login"), "{status}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // `toolhost login remote`: the URL printed, waiting for the redirect.
    let (mut login, mut stdout, query) = start_login(&local, &provider.issuer);
    // A redirect that is not this sign-in's (another state, as a forged link carries), a
    // request off `/callback`, and a head past the listener's 16 KiB: each refused, nothing
    // kept, and the sign-in goes on waiting for its own redirect.
    let forged = format!(
        "{}?code=stolen&state=not-{}",
        query["redirect_uri"], query["state"]
    );
    let refused = reqwest::get(&forged).await.expect("the redirect");
    assert_eq!(refused.status(), 400);
    let said = refused.text().await.expect("text");
    assert!(
        said.contains("not the redirect of the sign-in under way"),
        "{said}"
    );
    let elsewhere = query["redirect_uri"].replace("/callback", "/favicon.ico");
    assert_eq!(
        reqwest::get(&elsewhere).await.expect("a request").status(),
        404
    );
    let listener = query["redirect_uri"]
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("address")
        .to_string();
    let mut huge = std::net::TcpStream::connect(&listener).expect("connect");
    let head = format!(
        "GET /callback?state={} HTTP/1.1\r\nx: {}",
        query["state"],
        "a".repeat(20 << 10)
    );
    let _ = std::io::Write::write_all(&mut huge, head.as_bytes());
    let mut answered = Vec::new();
    let _ = std::io::Read::read_to_end(&mut huge, &mut answered);
    assert!(
        answered.is_empty(),
        "a head past 16 KiB is dropped unanswered"
    );
    assert!(login.try_wait().expect("login").is_none(), "login goes on");
    assert!(kept_none(&local));

    // The person's sign-in, and the redirect taken.
    let authorize = query["authorize"].clone();
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["resource"], url);
    assert!(
        query["redirect_uri"].starts_with("http://127.0.0.1:"),
        "{query:?}"
    );
    assert!(query["scope"].contains("tools:all"), "{query:?}");
    let answer = sign_in_as_ada(&authorize).await;
    assert!(answer.contains("Signed in"), "{answer}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("the rest");
    assert!(login.wait().expect("login ends").success(), "{rest}");
    assert!(rest.contains("Signed in"), "{rest}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut login.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(
        err.contains("refused a redirect that is not this sign-in's"),
        "{err}"
    );

    // Kept for this user alone, with a refresh token.
    let tokens = kept_tokens(&local);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&tokens)
        .expect("tokens")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(&tokens).expect("read")).expect("JSON");
    let client_id = kept["client_id"]
        .as_str()
        .expect("a registered client")
        .to_string();
    assert!(
        kept["token_response"]["refresh_token"].is_string(),
        "{kept}"
    );

    // The host serving picks the tokens up without a restart: it tries the import again when
    // the backoff of its failed start is over (at most a minute).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while listed().await != ["echo"] {
        assert!(
            std::time::Instant::now() < deadline,
            "the serving host never took the sign-in"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // A call through the import carries the person's token: the server records Ada, by the
    // client this host registered.
    let called = |n: u32| {
        let local = &local;
        async move { toolhost(local, &["call", "echo", &format!("{{\"n\": {n}}}")]) }
    };
    let (code, out, err) = called(1).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let identities = || -> Vec<(String, String)> {
        let audit = std::fs::read_to_string(remote.root().join("audit.jsonl")).expect("audit");
        (audit.lines())
            .map(|l| serde_json::from_str::<Value>(l).expect("record"))
            .filter(|r| r["tool"] == "echo" && r["outcome"] == "ok")
            .map(|r| {
                let identity = &r["identity"];
                (identity["name"].to_string(), identity["client"].to_string())
            })
            .collect()
    };
    assert_eq!(
        identities(),
        [("\"ada\"".to_string(), format!("\"{client_id}\""))]
    );

    // The access token due: renewed by the refresh token (a new one kept), and the call goes
    // on as Ada.
    let before = age_tokens(&tokens);
    let (code, out, err) = called(2).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let after: Value =
        serde_json::from_str(&std::fs::read_to_string(&tokens).expect("read")).expect("JSON");
    assert_ne!(
        before["token_response"]["access_token"],
        after["token_response"]["access_token"]
    );
    assert_eq!(identities().len(), 2);
    // Renewed under the lock beside the tokens, one process at a time: two calls due at once
    // (as a `serve` and a `toolhost call` may be) renew in turn, the second with the refresh
    // token the first saved. Both spending the same one would have the provider, which
    // rotates a public client's refresh tokens, take the second use for a theft and revoke
    // the grant: the third call would need a sign-in.
    assert!(tokens.with_extension("lock").exists());
    age_tokens(&tokens);
    let both = [3, 4].map(|n| {
        command(&local, &["call", "echo", &format!("{{\"n\": {n}}}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("call")
    });
    for call in both {
        let output = call.wait_with_output().expect("call ends");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{err}");
    }
    let (code, out, err) = called(5).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(identities().len(), 5);
    let after: Value =
        serde_json::from_str(&std::fs::read_to_string(&tokens).expect("read")).expect("JSON");

    // The provider revokes the refresh token: once the access token is due, the import needs
    // a sign-in again, and says how.
    let refresh = after["token_response"]["refresh_token"]
        .as_str()
        .expect("refresh token");
    let revoked = reqwest::Client::new()
        .post(format!("{}/token/revocation", provider.issuer))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("token", refresh)
                .append_pair("client_id", &client_id)
                .finish(),
        )
        .send()
        .await
        .expect("revocation");
    assert_eq!(revoked.status(), 200);
    age_tokens(&tokens);
    let (code, out, err) = called(6).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("was refused"), "{err}");
    let (code, out, _) = toolhost(&local, &["check"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("needs sign-in") && out.contains("toolhost login"),
        "{out}"
    );

    // The person signs in again, and the import serves again.
    let (mut login, mut stdout, query) = start_login(&local, &provider.issuer);
    let answer = sign_in_as_ada(&query["authorize"]).await;
    assert!(answer.contains("Signed in"), "{answer}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("the rest");
    assert!(login.wait().expect("login ends").success(), "{rest}");
    let (code, out, err) = called(7).await;
    assert_eq!(code, 0, "{out}\n{err}");

    // `toolhost logout remote`: the grant revoked at the provider (its refresh token no
    // longer renews anything), and the tokens gone from here.
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(&tokens).expect("read")).expect("JSON");
    let refresh = kept["token_response"]["refresh_token"]
        .as_str()
        .expect("refresh token")
        .to_string();
    let (code, out, _) = toolhost(&local, &["logout", "remote"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Signed out") && out.contains("revoked at its authorization server"),
        "{out}"
    );
    assert!(!tokens.exists() && !tokens.with_extension("lock").exists());
    // The client registered stays, for the next sign-in (the grant is what was revoked).
    assert!(tokens.with_extension("client").exists());
    let renewed = reqwest::Client::new()
        .post(format!("{}/token", provider.issuer))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("grant_type", "refresh_token")
                .append_pair("refresh_token", &refresh)
                .append_pair("client_id", &client_id)
                .finish(),
        )
        .send()
        .await
        .expect("refresh");
    assert_eq!(renewed.status(), 400, "a revoked grant renews nothing");
    let (code, out, _) = toolhost(&local, &["logout", "remote"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Nobody was signed in"), "{out}");
}
