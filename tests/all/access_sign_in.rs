//! The web chat's sign-in (`[access.oidc.sign-in]`): authorization code with PKCE against a
//! real OpenID provider (oidc-provider, its own login and consent pages), in headless
//! Chromium; and what a hostile browser or link sends to `/auth/...`: a forged state, no
//! sign-in cookie, a provider's error with markup in it, a made-up code, a forged session
//! cookie, the cookie on `/mcp`, a cross-origin sign-out.

use crate::access::{Provider, free_port};
use crate::access_chat::{chat, listed};
use crate::mcp::HttpServer;
use crate::scripted::{Scripted, openai};
use crate::support::Fixture;
use crate::web::fixture;
use serde_json::json;
use std::path::Path;

/// A host at a port known beforehand whose web chat signs people in with `provider`, with a
/// static token `bob` beside; its resource is `http://127.0.0.1:PORT/mcp`, so the redirect
/// URI is the default one, `http://127.0.0.1:PORT/auth/callback`.
struct SigningIn {
    provider: Provider,
    server: HttpServer,
    _fixture: Fixture,
    base: String,
}

fn signing_in(model: &Scripted) -> SigningIn {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let provider = Provider::signing_in(&resource, &format!("{base}/auth/callback"));
    let fixture = fixture(&model.base_url, "");
    let path = fixture.root().join("toolhost.toml");
    let mut text = std::fs::read_to_string(&path).expect("toolhost.toml");
    text.push_str(
        "\n[access.oidc]\nissuer-env = \"ISSUER\"\nresource-env = \"RESOURCE\"\n\n\
         [access.oidc.sign-in]\nclient-id = \"web\"\nclient-secret-env = \"WEB_SECRET\"\n\
         scopes = [\"openid\", \"tools:all\"]\n\n\
         [[access.tokens]]\nname = \"bob\"\nenv = \"BOB\"\n",
    );
    std::fs::write(&path, text).expect("write");
    let server = HttpServer::start_at(
        &format!("127.0.0.1:{port}"),
        &fixture,
        &["--config", path.to_str().expect("path")],
        &[
            ("SCRIPTED_KEY", "k"),
            ("ISSUER", provider.issuer.as_str()),
            ("RESOURCE", resource.as_str()),
            ("WEB_SECRET", "web-secret"),
            ("BOB", "bob-token"),
        ],
    );
    SigningIn {
        provider,
        server,
        _fixture: fixture,
        base,
    }
}

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The `Set-Cookie` headers of a response, as written.
fn cookies(response: &reqwest::Response) -> Vec<String> {
    (response.headers().get_all("set-cookie").iter())
        .map(|v| v.to_str().expect("ASCII").to_string())
        .collect()
}

#[test]
fn the_web_chat_signs_people_in_with_the_provider_in_a_real_browser() {
    let model = Scripted::start(vec![
        openai::text("Hello, Bob."),
        openai::text("Hello, Alice."),
    ]);
    let host = signing_in(&model);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // Bob (a static token) has a conversation the browser must never list.
    let api = format!("{}/api/conversations", host.base);
    runtime.block_on(async {
        let mut events = chat(&api, "bob-token", json!({"message": "Hi"})).await;
        events.rest().await;
    });
    let python = crate::mcp_list::test_tools().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/signin.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .args(["--url", &format!("{}/", host.base)])
        .args(["--login", "alice", "--expect-reply", "Hello, Alice."])
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        host.server.stderr()
    );
    // Bob still sees his one conversation, not Alice's.
    let bobs = runtime.block_on(listed(&api, Some("bob-token")));
    assert_eq!(bobs.len(), 1, "{bobs:?}");
    assert_eq!(model.requests().len(), 2, "Bob's run and Alice's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_holds_against_forged_states_codes_and_cookies() {
    let model = Scripted::start(vec![]);
    let host = signing_in(&model);
    let (base, client) = (host.base.as_str(), client());
    let options: serde_json::Value = (client.get(format!("{base}/auth/options")).send().await)
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(options["sign_in"], true);

    // The start: to the provider with PKCE (S256), the resource and the redirect URI; the
    // state and verifier kept in a cookie only /auth reads, which scripts cannot.
    let started = client
        .get(format!("{base}/auth/sign-in"))
        .send()
        .await
        .expect("GET");
    assert_eq!(started.status(), 303);
    let location = started.headers()["location"].to_str().expect("location");
    let location = url::Url::parse(location).expect("a URL");
    assert!(
        location.as_str().starts_with(&host.provider.issuer),
        "{location}"
    );
    let query: std::collections::HashMap<_, _> = location.query_pairs().into_owned().collect();
    assert_eq!(query["response_type"], "code");
    assert_eq!(query["client_id"], "web");
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["code_challenge"].len(), 43, "{query:?}");
    assert_eq!(query["resource"], format!("{base}/mcp"));
    assert_eq!(query["redirect_uri"], format!("{base}/auth/callback"));
    let kept = cookies(&started);
    assert_eq!(kept.len(), 1, "{kept:?}");
    for attribute in ["Path=/auth", "HttpOnly", "SameSite=Lax", "Max-Age=600"] {
        assert!(kept[0].contains(attribute), "{kept:?}");
    }
    let value = kept[0].split(';').next().expect("pair").to_string();
    let state = &query["state"];
    assert!(
        value.starts_with(&format!("toolhost-sign-in={state}.")),
        "{value}"
    );

    let callback = |query: String, cookie: Option<String>| {
        let mut request = client.get(format!("{base}/auth/callback?{query}"));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send()
    };
    let refused = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        assert!(
            cookies(&response).is_empty(),
            "a refused sign-in set a cookie"
        );
        let nosniff = response.headers()["x-content-type-options"] == "nosniff";
        let text = response.text().await.expect("text");
        assert!(nosniff && text.starts_with("Sign-in failed: "), "{text}");
        (status, text)
    };
    // A link made by someone else (their state) in this browser: refused before the code is
    // used.
    let forged = callback(
        format!("code=theirs&state=not-{state}"),
        Some(value.clone()),
    );
    let (status, text) = refused(forged.await.expect("GET")).await;
    assert_eq!(status, 400);
    assert!(
        text.contains("not the one this browser's sign-in started with"),
        "{text}"
    );
    // No sign-in started in this browser.
    let (status, text) = refused(
        callback(format!("code=x&state={state}"), None)
            .await
            .expect("GET"),
    )
    .await;
    assert_eq!(status, 400);
    assert!(text.contains("did not start a sign-in"), "{text}");
    // The provider's error, with markup in it: said as plain text.
    let error = "error=access_denied&error_description=%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let response = callback(error.into(), Some(value.clone()))
        .await
        .expect("GET");
    assert!(
        response.headers()["content-type"]
            .to_str()
            .expect("type")
            .starts_with("text/plain")
    );
    let (status, text) = refused(response).await;
    assert_eq!(status, 400);
    assert!(text.contains("access_denied <script>"), "{text}");
    // A made-up code with the right state: the provider refuses it, and so does the host.
    let made_up = callback(format!("code=made-up&state={state}"), Some(value.clone()));
    let (status, text) = refused(made_up.await.expect("GET")).await;
    assert_eq!(status, 400);
    assert!(
        text.contains("the provider refused the code: invalid_grant"),
        "{text}"
    );
    // A code longer than any provider's.
    let long = callback(
        format!("code={}&state={state}", "c".repeat(3000)),
        Some(value),
    );
    let (status, text) = refused(long.await.expect("GET")).await;
    assert_eq!(status, 400);
    assert!(text.contains("longer than 2 KiB"), "{text}");

    // The session cookie is a token checked as any other: a forged one is refused, a real
    // access token is taken on the page's paths and never on /mcp.
    let conversations = format!("{base}/api/conversations");
    let with_cookie = |url: &str, token: &str| {
        client
            .get(url)
            .header("cookie", format!("theme=dark; toolhost-session={token}"))
            .send()
    };
    let forged = with_cookie(&conversations, "eyJhbGciOiJub25lIn0.e30.")
        .await
        .expect("GET");
    assert_eq!(forged.status(), 401);
    let resource = format!("{base}/mcp");
    let token = host.provider.token("tools", "tools:all", &resource).await;
    assert_eq!(
        with_cookie(&conversations, &token)
            .await
            .expect("GET")
            .status(),
        200
    );
    let mcp = client
        .post(&resource)
        .header("cookie", format!("toolhost-session={token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(mcp.status(), 401, "a cookie is never a token on /mcp");
    // Two session cookies: neither is taken.
    let twice = client
        .get(&conversations)
        .header(
            "cookie",
            format!("toolhost-session={token}; toolhost-session=x"),
        )
        .send()
        .await
        .expect("GET");
    assert_eq!(twice.status(), 401);

    // Sign-out clears the cookie, but not for another site's page.
    let out = client.post(format!("{base}/auth/sign-out"));
    let cross = out
        .try_clone()
        .expect("clone")
        .header("origin", "https://evil.example");
    assert_eq!(cross.send().await.expect("POST").status(), 403);
    let signed_out = out.header("origin", base).send().await.expect("POST");
    assert_eq!(signed_out.status(), 204);
    let cleared = cookies(&signed_out);
    assert!(
        cleared.len() == 1 && cleared[0].starts_with("toolhost-session=;"),
        "{cleared:?}"
    );
    assert!(cleared[0].contains("Max-Age=0"), "{cleared:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_sign_in_says_so() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "");
    let server = crate::web::serve(&fixture, &[]);
    let base = crate::web::base(&server);
    let options: serde_json::Value = reqwest::get(format!("{base}/auth/options"))
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(options["sign_in"], false);
    let start = client()
        .get(format!("{base}/auth/sign-in"))
        .send()
        .await
        .expect("GET");
    assert_eq!(start.status(), 404);
    let text = start.text().await.expect("text");
    assert!(text.contains("no [access.oidc.sign-in]"), "{text}");
    // The page's settings say who it is (the local operator, on loopback).
    let (status, settings) = crate::web::get(&format!("{base}/api/settings")).await;
    assert_eq!(status, 200);
    assert_eq!(settings["identity"]["kind"], "local", "{settings}");
}

/// A provider whose token endpoint never answers: its metadata, and how many token requests
/// reached it.
async fn silent_provider() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("address"));
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let metadata = json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/jwks"),
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
    });
    let counted = asked.clone();
    let router = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(metadata) }),
        )
        .route(
            "/jwks",
            axum::routing::get(|| async { axum::Json(json!({"keys": []})) }),
        )
        .route(
            "/token",
            axum::routing::post(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<String>()
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    (issuer, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_ins_being_finished_at_once_are_bounded() {
    let (issuer, asked) = silent_provider().await;
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "");
    let path = fixture.root().join("toolhost.toml");
    let mut text = std::fs::read_to_string(&path).expect("toolhost.toml");
    text.push_str(&format!(
        "\n[access.oidc]\nissuer = \"{issuer}\"\nresource = \"http://127.0.0.1/mcp\"\n\n\
         [access.oidc.sign-in]\nclient-id = \"web\"\n"
    ));
    std::fs::write(&path, text).expect("write");
    let server = HttpServer::start(
        &fixture,
        &["--config", path.to_str().expect("path")],
        &[("SCRIPTED_KEY", "k")],
    );
    let base = crate::web::base(&server);
    let callback = |n: usize| {
        client()
            .get(format!("{base}/auth/callback?code=c{n}&state=s{n}"))
            .header("cookie", format!("toolhost-sign-in=s{n}.verifier{n}"))
            .send()
    };
    // 32 exchanges wait on the provider (each at most 5 s); the 33rd is refused at once.
    let waiting: Vec<_> = (0..32).map(|n| tokio::spawn(callback(n))).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while asked.load(std::sync::atomic::Ordering::SeqCst) < 32 {
        assert!(
            std::time::Instant::now() < deadline,
            "the exchanges never reached the provider"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let refused = callback(32).await.expect("GET");
    assert_eq!(refused.status(), 400);
    let text = refused.text().await.expect("text");
    assert!(
        text.contains("32 sign-ins are being finished at once"),
        "{text}"
    );
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        32,
        "the 33rd never asked"
    );
    // Those waiting end when their request times out, each saying so.
    for waiting in waiting {
        let response = waiting.await.expect("task").expect("GET");
        assert_eq!(response.status(), 400);
        let text = response.text().await.expect("text");
        assert!(text.contains("the provider's token endpoint"), "{text}");
    }
}
