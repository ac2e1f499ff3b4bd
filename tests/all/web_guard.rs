//! The chat API and the page keep the guard of MCP: another site's origin and a DNS-rebinding
//! Host refused, the page's headers that keep it from being framed or loading anything
//! elsewhere, the token (`--token-env`) on everything but the page's own files and the probes,
//! and `--no-ui`.

use crate::mcp::HttpServer;
use crate::scripted::Scripted;
use crate::web::{base, fixture, get, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_page_keep_the_guard_of_mcp() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let base = base(&server);
    let authority = base.trim_start_matches("http://").to_string();
    let client = reqwest::Client::new();
    let status = |request: reqwest::RequestBuilder| async move {
        request.send().await.expect("request").status().as_u16()
    };
    let page = format!("{base}/");
    assert_eq!(status(client.get(&page)).await, 200);
    let (_, _) = get(&format!("{base}/api/catalog")).await;
    // Another site's page: refused; this host's own page: served.
    let api = format!("{base}/api/conversations");
    assert_eq!(
        status(client.get(&api).header("origin", "https://evil.example")).await,
        403
    );
    assert_eq!(
        status(
            client
                .get(&api)
                .header("origin", format!("http://{authority}"))
        )
        .await,
        200
    );
    // A DNS-rebinding page: its own name in Host (and Origin).
    let port = authority.rsplit(':').next().expect("port");
    let rebound = format!("evil.example:{port}");
    assert_eq!(
        status(
            client
                .get(&api)
                .header("host", &rebound)
                .header("origin", format!("http://{rebound}"))
        )
        .await,
        403
    );
    // Same-origin passes only where the Host header is checked: not on /metrics.
    assert_eq!(
        status(
            client
                .get(format!("{base}/metrics"))
                .header("host", &rebound)
                .header("origin", format!("http://{rebound}"))
        )
        .await,
        403
    );
    // The page's headers keep it from being framed and from loading anything elsewhere.
    let response = client.get(&page).send().await.expect("page");
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    drop(server);

    // With a token, everything but the probes needs it; `--no-ui` leaves the API alone.
    let server = HttpServer::start(
        &fixture,
        &[
            "--config",
            fixture.root().join("toolhost.toml").to_str().expect("path"),
            "--token-env",
            "WEB_TOKEN",
            "--no-ui",
        ],
        &[("WEB_TOKEN", "sesame"), ("SCRIPTED_KEY", "k")],
    );
    let base = crate::web::base(&server);
    assert_eq!(status(client.get(format!("{base}/api/catalog"))).await, 401);
    assert_eq!(
        status(
            client
                .get(format!("{base}/api/catalog"))
                .bearer_auth("sesame")
        )
        .await,
        200
    );
    assert_eq!(
        status(client.get(format!("{base}/")).bearer_auth("sesame")).await,
        404,
        "--no-ui"
    );
    drop(server);

    // The page's own files load without the token (the page asks for it); nothing else does.
    let server = HttpServer::start(
        &fixture,
        &[
            "--config",
            fixture.root().join("toolhost.toml").to_str().expect("path"),
            "--token-env",
            "WEB_TOKEN",
        ],
        &[("WEB_TOKEN", "sesame"), ("SCRIPTED_KEY", "k")],
    );
    let base = crate::web::base(&server);
    for path in ["/", "/app.js", "/app.css"] {
        assert_eq!(
            status(client.get(format!("{base}{path}"))).await,
            200,
            "{path}"
        );
    }
    for path in [
        "/api/settings",
        "/api/conversations",
        "/metrics",
        "/app.js/../api/catalog",
    ] {
        assert_eq!(
            status(client.get(format!("{base}{path}"))).await,
            401,
            "{path}"
        );
    }
    assert_eq!(status(client.post(format!("{base}/"))).await, 401, "POST /");
}
