//! `toolhost login` against an imported server and an authorization server that misbehave
//! (issue #46, item 5), served by the test itself: endless and huge answers, a redirect off
//! the issuer, metadata naming another issuer or another resource, a registration for other
//! redirect URIs, a token for another audience. Each ends the sign-in with a reason, in
//! bounded time, with nothing kept.

use crate::mcp::configure;
use crate::support::Fixture;
use axum::body::Body;
use axum::response::Response;
use std::io::BufRead;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the servers get wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wrong {
    /// Nothing: the sign-in succeeds, so each case's refusal is its misbehaviour's.
    Nothing,
    EndlessMetadata,
    HugeMetadata,
    MetadataRedirectedElsewhere,
    AnotherIssuer,
    AnotherResource,
    RegisteredForOtherRedirects,
    EndlessToken,
    TokenForAnotherAudience,
    /// A token answer whose `expires_in` is this JSON (not an integer in the usual range).
    Lifetime(&'static str),
}

fn endless() -> Body {
    let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
    let stream = futures_util::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
    Body::from_stream(stream)
}

fn json(value: serde_json::Value) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(value.to_string()))
        .expect("response")
}

/// An access token in the JWT form, for `audience` (unsigned: the client cannot check a
/// signature, only read what it says).
fn jwt_for(audience: &str) -> String {
    use base64::Engine;
    let part = |value: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    };
    format!(
        "{}.{}.c2lnbmF0dXJl",
        part(serde_json::json!({"alg": "RS256", "typ": "at+jwt"})),
        part(serde_json::json!({"aud": audience, "sub": "ada", "exp": 4_000_000_000u64}))
    )
}

/// The MCP server and its authorization server, on one address, getting `wrong` wrong;
/// returns the address (`http://127.0.0.1:PORT`).
async fn serve(wrong: Wrong) -> String {
    serve_switching(wrong).await.base
}

/// A server of [`serve`]'s, whose protected resource metadata can be made to name another
/// authorization server, and which counts the requests to its token endpoint.
struct Served {
    base: String,
    /// The authorization server its metadata names instead of itself, once set.
    names: Arc<Mutex<Option<String>>>,
    tokens_asked: Arc<AtomicUsize>,
}

async fn serve_switching(wrong: Wrong) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let names: Arc<Mutex<Option<String>>> = Arc::default();
    let tokens_asked = Arc::new(AtomicUsize::new(0));
    let (named, asked) = (Arc::clone(&names), Arc::clone(&tokens_asked));
    let (b1, b2, b3, b4) = (base.clone(), base.clone(), base.clone(), base.clone());
    let mcp = move || {
        let base = b1.clone();
        async move {
            Response::builder()
                .status(401)
                .header(
                    "www-authenticate",
                    format!(
                        r#"Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp""#
                    ),
                )
                .body(Body::empty())
                .expect("response")
        }
    };
    let resource = move || {
        let base = b2.clone();
        let named = named.lock().expect("lock").clone();
        async move {
            let resource = match wrong {
                Wrong::AnotherResource => "https://elsewhere.example/mcp".to_string(),
                _ => format!("{base}/mcp"),
            };
            let server = named.unwrap_or(base);
            json(serde_json::json!({"resource": resource, "authorization_servers": [server]}))
        }
    };
    let metadata = move || {
        let base = b3.clone();
        async move {
            match wrong {
                Wrong::EndlessMetadata => {
                    return Response::builder()
                        .header("content-type", "application/json")
                        .body(endless())
                        .expect("response");
                }
                Wrong::HugeMetadata => {
                    let padding = "x".repeat(8 << 20);
                    return json(serde_json::json!({"issuer": base, "padding": padding}));
                }
                Wrong::MetadataRedirectedElsewhere => {
                    return Response::builder()
                        .status(302)
                        .header(
                            "location",
                            "http://localhost:9/.well-known/oauth-authorization-server",
                        )
                        .body(Body::empty())
                        .expect("response");
                }
                _ => {}
            }
            let issuer = match wrong {
                Wrong::AnotherIssuer => "https://issuer.example".to_string(),
                _ => base.clone(),
            };
            json(serde_json::json!({
                "issuer": issuer,
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": format!("{base}/token"),
                "registration_endpoint": format!("{base}/register"),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
            }))
        }
    };
    let register = move |axum::Json(asked): axum::Json<serde_json::Value>| async move {
        let redirects = match wrong {
            Wrong::RegisteredForOtherRedirects => {
                serde_json::json!(["https://elsewhere.example/callback"])
            }
            _ => asked["redirect_uris"].clone(),
        };
        Response::builder()
            .status(201)
            .header("content-type", "application/json")
            .body(Body::from(
                serde_json::json!({
                    "client_id": "registered",
                    "redirect_uris": redirects,
                    "token_endpoint_auth_method": "none",
                })
                .to_string(),
            ))
            .expect("response")
    };
    let authorize = |uri: axum::http::Uri| async move {
        let query: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
                .into_owned()
                .collect();
        let back = format!(
            "{}?code=the-code&state={}",
            query["redirect_uri"], query["state"]
        );
        Response::builder()
            .status(302)
            .header("location", back)
            .body(Body::empty())
            .expect("response")
    };
    let token = move || {
        let base = b4.clone();
        asked.fetch_add(1, Ordering::SeqCst);
        async move {
            match wrong {
                Wrong::EndlessToken => Response::builder()
                    .header("content-type", "application/json")
                    .body(endless())
                    .expect("response"),
                Wrong::TokenForAnotherAudience => json(serde_json::json!({
                    "access_token": jwt_for("https://elsewhere.example/mcp"),
                    "token_type": "Bearer",
                    "expires_in": 3600,
                })),
                Wrong::Lifetime(given) => json(serde_json::json!({
                    "access_token": jwt_for(&format!("{base}/mcp")),
                    "token_type": "Bearer",
                    "expires_in": serde_json::from_str::<serde_json::Value>(given)
                        .expect("JSON"),
                })),
                _ => json(serde_json::json!({
                    "access_token": jwt_for(&format!("{base}/mcp")),
                    "token_type": "Bearer",
                    "expires_in": 3600,
                })),
            }
        }
    };
    let router = axum::Router::new()
        .route("/mcp", axum::routing::post(mcp))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(resource),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(metadata),
        )
        .route("/register", axum::routing::post(register))
        .route("/authorize", axum::routing::get(authorize))
        .route("/token", axum::routing::post(token));
    tokio::spawn(async move { axum::serve(listener, router).await });
    Served {
        base,
        names,
        tokens_asked,
    }
}

/// A host importing the server at `base` (one of [`serve`]'s), which a person signs in to.
fn importing(base: &str) -> Fixture {
    let fixture = Fixture::new();
    fixture.write_mcp_import(
        "remote",
        &format!("url = \"{base}/mcp\"\noauth = {{ sign-in = true }}"),
    );
    fixture
}

/// `toolhost login remote` against `base`, with the browser's part played (the printed URL
/// followed to the loopback redirect): its exit code and all it said.
async fn login(fixture: &Fixture) -> (i32, String) {
    let mut login = crate::access_login::spawn_login(fixture);
    let stdout = std::io::BufReader::new(login.stdout.take().expect("stdout"));
    let mut said = String::new();
    for line in stdout.lines() {
        let line = line.expect("a line");
        said.push_str(&line);
        said.push('\n');
        if let Some(url) = line.trim().strip_prefix("http://")
            && line.starts_with("  ")
        {
            let answer = reqwest::get(format!("http://{url}")).await;
            said.push_str(&format!("browser: {:?}\n", answer.map(|a| a.status())));
        }
    }
    let output = login.wait_with_output().expect("login ends");
    said.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_authorization_server_ends_a_sign_in_with_a_reason_and_nothing_kept() {
    // The control: these servers, getting nothing wrong, sign the host in.
    let fixture = importing(&serve(Wrong::Nothing).await);
    let (code, said) = login(&fixture).await;
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("Signed in"), "{said}");

    let mut wrongly = Vec::new();
    for (wrong, reason) in [
        (Wrong::EndlessMetadata, "its answer exceeds 256 KiB"),
        (Wrong::HugeMetadata, "its answer exceeds 256 KiB"),
        (Wrong::MetadataRedirectedElsewhere, "localhost:9"),
        (Wrong::AnotherIssuer, "issuer mismatch"),
        (Wrong::AnotherResource, "resource mismatch"),
        (Wrong::RegisteredForOtherRedirects, "other redirect URIs"),
        (Wrong::EndlessToken, "its answer exceeds 256 KiB"),
        (Wrong::TokenForAnotherAudience, "for another audience"),
    ] {
        let fixture = importing(&serve(wrong).await);
        let started = Instant::now();
        let (code, said) = tokio::time::timeout(Duration::from_secs(90), login(&fixture))
            .await
            .unwrap_or_else(|_| panic!("{wrong:?}: the sign-in never ended"));
        if code == 0 || !said.to_lowercase().contains(&reason.to_lowercase()) {
            wrongly.push(format!(
                "{wrong:?} was to be refused for `{reason}`: {said}"
            ));
        }
        let files = crate::access_login::kept_files(&fixture);
        if !files.is_empty() {
            wrongly.push(format!("{wrong:?}: kept {files:?}"));
        }
        eprintln!("{wrong:?}: refused in {:?}", started.elapsed());
    }
    assert!(wrongly.is_empty(), "{}", wrongly.join("\n"));
}

/// An `expires_in` a provider sends negative, huge, with a fraction or as a string: the
/// sign-in succeeds, the lifetime kept between a minute and a day (SECURITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_odd_lifetime_is_held_between_a_minute_and_a_day() {
    for (given, held) in [
        ("-100", 60),
        ("1e30", 86_400),
        ("3600.0", 3600),
        ("\"3599\"", 3599),
        ("null", 60),
    ] {
        let fixture = importing(&serve(Wrong::Lifetime(given)).await);
        let (code, said) = login(&fixture).await;
        assert_eq!(code, 0, "expires_in {given}: {said}");
        let files = crate::access_login::kept_files(&fixture);
        let tokens = (files.iter())
            .find(|f| f.extension().is_some_and(|e| e == "json"))
            .unwrap_or_else(|| panic!("expires_in {given}: nothing kept: {files:?}"));
        let kept: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(tokens).expect("read")).expect("JSON");
        assert_eq!(
            kept["token_response"]["expires_in"], held,
            "expires_in {given}: {kept}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_go_to_no_authorization_server_but_the_one_signed_in_at() {
    let server = serve_switching(Wrong::Nothing).await;
    let fixture = importing(&server.base);
    let (code, said) = login(&fixture).await;
    assert_eq!(code, 0, "{said}");
    // The server names another authorization server (a hostile one's): the refresh token
    // is sent to neither, and the import needs a sign-in, saying why.
    let elsewhere = serve_switching(Wrong::Nothing).await;
    *server.names.lock().expect("lock") = Some(elsewhere.base.clone());
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let output = command.arg("check").output().expect("check");
    let said = String::from_utf8_lossy(&output.stdout);
    assert_ne!(output.status.code(), Some(0), "{said}");
    assert!(
        said.contains("needs sign-in") && said.contains("names another authorization server"),
        "{said}"
    );
    assert_eq!(elsewhere.tokens_asked.load(Ordering::SeqCst), 0);
    // Kept: with the server naming its own authorization server again, the tokens are used
    // (this server, no MCP server really, then refuses the session: its own `401`).
    let kept = crate::access_login::kept_files(&fixture);
    assert_eq!(
        kept.len(),
        3,
        "the tokens, their authorization server and the client registered are kept: {kept:?}"
    );
    *server.names.lock().expect("lock") = None;
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let output = command.arg("check").output().expect("check");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        !said.contains("needs sign-in") && said.contains("Auth required"),
        "{said}"
    );
}
