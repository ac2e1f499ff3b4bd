//! A sign-in that lasts while `serve` runs (issue #56): a second `toolhost login` signs in
//! with the client the first registered (the provider has one registered client); a `serve`
//! running across a third that registered another client follows it whole and keeps calling
//! through the import past several expiries of its 15-second access tokens; a `toolhost
//! logout` makes the next call, `status`, `/readyz` and the audit record say "needs sign-in"
//! at once, and a login again serves again, with the client last registered.

use crate::access::{Provider, free_port};
use crate::access_login::{sign_in_as_ada, start_login, toolhost};
use crate::mcp::HttpServer;
use crate::support::Fixture;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// How long anything here may take before the test fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(60);

/// `toolhost login remote` on `fixture`, signed in as Ada at `issuer`: what it printed (on
/// stdout after the URL, then on stderr).
async fn login(fixture: &Fixture, issuer: &str) -> String {
    let (mut login, mut stdout, query) = start_login(fixture, issuer);
    let answer = sign_in_as_ada(&query["authorize"]).await;
    assert!(answer.contains("Signed in"), "{answer}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("the rest");
    let mut stderr = login.stderr.take().expect("stderr");
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("stderr");
    assert!(login.wait().expect("login ends").success(), "{rest}");
    rest
}

/// A call of `echo` through `serving`: whether it ran, and its answer.
async fn call(serving: &HttpServer, n: u32) -> (bool, Value) {
    let (status, _, answer) = crate::mcp_revisions::modern_post(
        &serving.url,
        "tools/call",
        Some("echo"),
        json!({"name": "echo", "arguments": {"n": n}}),
        &[],
    )
    .await;
    (
        status == 200 && answer["result"]["isError"] == json!(false),
        answer,
    )
}

/// The reloads `serving` made so far (`toolhost_reloads_total`, every outcome).
async fn reloads(serving: &HttpServer) -> u64 {
    let metrics = reqwest::get(serving.url.replace("/mcp", "/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    (metrics.lines())
        .filter(|line| line.starts_with("toolhost_reloads_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Calls until one runs (a sign-in being taken up), within the deadline: how long it took.
async fn until_a_call_runs(serving: &HttpServer, n: u32) -> Duration {
    let started = Instant::now();
    loop {
        let (ran, answer) = call(serving, n).await;
        if ran {
            return started.elapsed();
        }
        assert!(started.elapsed() < DEADLINE, "{answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_login_and_a_logout_while_serving_are_followed_at_once() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let provider = Provider::registering_for(&url, 15);
    let (_remote, _server) = crate::access_import::echo_behind(&provider, port);
    let local = Fixture::new();
    local.write_mcp_import(
        "remote",
        &format!("url = \"{url}\"\noauth = {{ sign-in = true, scopes = [\"tools:all\"] }}"),
    );
    let serving = HttpServer::start(&local, &[], &[]);

    // Needing a sign-in, it waits for one: no reload until the tokens come.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (_, status, _) = toolhost(&local, &["status"]);
        if status.contains("needs sign-in") {
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = reloads(&serving).await;

    // The first sign-in: one client registered, and the running serve takes it, reloading
    // once for the tokens and once for the start that follows (a sign-in used to set off a
    // reload every 100 ms for a second).
    let said = login(&local, &provider.issuer).await;
    assert!(!said.contains("registered at the last sign-in"), "{said}");
    let took = until_a_call_runs(&serving, 1).await;
    eprintln!("the first sign-in served after {took:?}");
    let during = reloads(&serving).await - before;
    assert!(during <= 4, "{during} reloads for one sign-in");
    assert_eq!(provider.registered().len(), 1);

    // A second sign-in while serving signs in with the client the first registered: the
    // provider has one registered client.
    let said = login(&local, &provider.issuer).await;
    assert!(
        said.contains("signing in with the client registered at the last sign-in"),
        "{said}"
    );
    assert_eq!(
        provider.registered().len(),
        1,
        "{:?}",
        provider.registered()
    );
    let (ran, answer) = call(&serving, 2).await;
    assert!(ran, "{answer}");

    // A third that registers another client (the first one's record is gone, as when its
    // loopback port is taken): the serve follows the new client whole, and past two expiries
    // of the 15-second access tokens every call through it runs (it renews with the client
    // its tokens were issued to). toolhost holds a token's lifetime to a minute at least and
    // rmcp renews 30 s ahead: the first renewal comes 30 s after the sign-in.
    let kept = crate::access_login::kept_files(&local);
    let registered = kept
        .iter()
        .find(|f| f.extension().is_some_and(|e| e == "client"));
    std::fs::remove_file(registered.expect("the client the first sign-in registered"))
        .expect("forget the client");
    let said = login(&local, &provider.issuer).await;
    assert!(!said.contains("registered at the last sign-in"), "{said}");
    assert_eq!(provider.registered().len(), 2);
    let started = Instant::now();
    let mut n = 3;
    while started.elapsed() < Duration::from_secs(45) {
        let (ran, answer) = call(&serving, n).await;
        assert!(ran, "after {:?}: {answer}", started.elapsed());
        n += 1;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }

    // `toolhost logout` while serving: the next call says so at once, and so do status and
    // /readyz; the call's audit record says it whole.
    let (code, out, err) = toolhost(&local, &["logout", "remote"]);
    assert_eq!(code, 0, "{out}{err}");
    let (ran, answer) = call(&serving, 100).await;
    assert!(!ran, "{answer}");
    let said = answer.to_string();
    assert!(said.contains("needs sign-in"), "{said}");
    assert!(said.contains("toolhost login"), "{said}");
    assert!(!said.contains("::"), "a Rust type path: {said}");
    let deadline = Instant::now() + DEADLINE;
    loop {
        let ready = reqwest::get(serving.url.replace("/mcp", "/readyz"))
            .await
            .expect("readyz");
        let said = ready.text().await.expect("text");
        let (_, status, _) = toolhost(&local, &["status"]);
        if said.contains("1 ensemble(s) need a person to sign in")
            && status.contains("needs sign-in")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{said}\n{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let audit = std::fs::read_to_string(local.root().join("audit.jsonl")).expect("audit");
    let record: Value = (audit.lines())
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .rfind(|record| record["tool"] == "echo")
        .expect("the refused call's record");
    let error = record["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("needs sign-in") && !error.contains("[redacted]") && !error.contains("::"),
        "{record}"
    );

    // Signed in again: it serves again, with the same client.
    let said = login(&local, &provider.issuer).await;
    assert!(said.contains("registered at the last sign-in"), "{said}");
    let took = until_a_call_runs(&serving, 200).await;
    eprintln!("signed in again, served after {took:?}");
    assert_eq!(provider.registered().len(), 2);
}
