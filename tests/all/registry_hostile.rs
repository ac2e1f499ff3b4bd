//! A registry that misbehaves in every way a registry can, served by the test itself: its
//! manifests and blobs, and (behind a token challenge) its token endpoint, its error bodies and
//! its redirects. Every response is read no further than a bound, in bounded time.

use crate::support::{Fixture, peak_kib};
use axum::body::Body;
use axum::extract::Path as UrlPath;
use axum::response::Response;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::registry::{Credentials, Fetch, Reference, Registry, RegistrySettings};

const CONFIG: &str = "application/vnd.wasm.config.v0+json";

fn digest(bytes: &[u8]) -> String {
    toolhost::registry::Digest::of(bytes).to_string()
}

fn manifest(config: &str, layers: &[(&str, &[u8], u64)]) -> Vec<u8> {
    let layers: Vec<serde_json::Value> = layers
        .iter()
        .map(|(media_type, bytes, size)| {
            serde_json::json!({"mediaType": media_type, "digest": digest(bytes), "size": size})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": config, "digest": digest(b"{}"), "size": 2},
        "layers": layers,
    }))
    .expect("manifest")
}

/// The component every case declares (its digest is what the manifests name).
fn component() -> Vec<u8> {
    std::fs::read(toolhost_testkit::ECHO).expect("echo.wasm")
}

fn endless() -> Body {
    let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    let stream = futures_util::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
    Body::from_stream(stream)
}

async fn manifests(UrlPath((repo, _tag)): UrlPath<(String, String)>) -> Response {
    let echo = component();
    let size = echo.len() as u64;
    let ok = |body: Vec<u8>| {
        Response::builder()
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(Body::from(body))
            .expect("response")
    };
    match repo.as_str() {
        "endless-manifest" => Response::builder()
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(endless())
            .expect("response"),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            ok(Vec::new())
        }
        "redirect" => Response::builder()
            .status(302)
            .header("location", "http://169.254.169.254/latest/meta-data")
            .body(Body::empty())
            .expect("response"),
        "many-layers" => ok(manifest(
            CONFIG,
            &[
                ("application/wasm", &echo, size),
                ("application/wasm", &echo, size),
                ("application/wasm", &echo, size),
            ],
        )),
        "not-wasm" => ok(manifest(
            "application/vnd.oci.image.config.v1+json",
            &[("application/vnd.oci.image.layer.v1.tar", &echo, size)],
        )),
        "huge-blob" => ok(manifest(CONFIG, &[("application/wasm", &echo, 10 << 30)])),
        // The blob served for these is not the one declared (below).
        "wrong-digest"
        | "endless-blob"
        | "slow-blob"
        | "endless-blob-error"
        | "blob-redirect-loop"
        | "endless-token"
        | "endless-token-error"
        | "redirect-token"
        | "no-token"
        | "eternal-token" => ok(manifest(CONFIG, &[("application/wasm", &echo, size)])),
        _ => Response::builder()
            .status(404)
            .body(Body::from("{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}"))
            .expect("response"),
    }
}

async fn blobs(UrlPath((repo, _digest)): UrlPath<(String, String)>) -> Response {
    let echo = component();
    match repo.as_str() {
        "wrong-digest" => {
            let mut other = echo.clone();
            other[100] ^= 0xff;
            Response::new(Body::from(other))
        }
        "endless-blob" => Response::new(endless()),
        "eternal-token" => Response::new(Body::from(echo)),
        "slow-blob" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Response::new(Body::from(echo))
        }
        "endless-blob-error" => Response::builder()
            .status(500)
            .body(endless())
            .expect("response"),
        // To itself, for ever: a client that follows every redirect never stops.
        "blob-redirect-loop" => Response::builder()
            .status(307)
            .header("location", format!("/v2/{repo}/blobs/{_digest}"))
            .body(Body::empty())
            .expect("response"),
        _ => Response::builder()
            .status(404)
            .body(Body::empty())
            .expect("response"),
    }
}

/// The token endpoint: `scope=repository:REPO:pull` picks the misbehaviour.
async fn token(uri: axum::http::Uri) -> Response {
    // `scope=repository%3AREPO%3Apull` (or with `:` as it is).
    let query = uri.query().unwrap_or_default().replace("%3A", ":");
    let repo = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("scope=repository:"))
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default()
        .to_string();
    match repo.as_str() {
        "endless-token" => Response::new(endless()),
        "endless-token-error" => Response::builder()
            .status(500)
            .body(endless())
            .expect("response"),
        "redirect-token" => Response::builder()
            .status(302)
            .header("location", "http://169.254.169.254/latest/meta-data")
            .body(Body::empty())
            .expect("response"),
        "no-token" => Response::new(Body::from("{}")),
        // A lifetime no clock can add: kept a day at most, and the pull goes on.
        "eternal-token" => Response::new(Body::from(format!(
            r#"{{"token": "t", "expires_in": {}}}"#,
            u64::MAX
        ))),
        _ => Response::new(Body::from(r#"{"token": "t", "expires_in": 300}"#)),
    }
}

/// Serves the hostile registry on 127.0.0.1; returns its address. With `challenge`, `GET
/// /v2/` asks for a token from its own endpoint.
async fn serve_with(challenge: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let realm = format!("http://{address}/token");
    let v2 = move || {
        let realm = realm.clone();
        async move {
            if !challenge {
                return Response::new(Body::from("{}"));
            }
            Response::builder()
                .status(401)
                .header(
                    "www-authenticate",
                    format!(r#"Bearer realm="{realm}",service="hostile""#),
                )
                .body(endless())
                .expect("response")
        }
    };
    let router = axum::Router::new()
        .route("/v2/", axum::routing::get(v2))
        .route("/token", axum::routing::get(token))
        .route("/v2/{repo}/manifests/{tag}", axum::routing::get(manifests))
        .route("/v2/{repo}/blobs/{digest}", axum::routing::get(blobs));
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

async fn serve() -> String {
    serve_with(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_misbehaviour_ends_in_a_clear_error_in_bounded_time_with_nothing_kept() {
    let address = serve().await;
    let store = tempfile::tempdir().expect("store");
    let settings = RegistrySettings {
        store: Some(store.path().to_path_buf()),
        max_manifest_bytes: 256 << 10,
        max_blob_bytes: 16 << 20,
        resolve_timeout: Duration::from_millis(500),
        pull_timeout: Duration::from_secs(2),
        credentials: Credentials::default(),
        ..RegistrySettings::default()
    };
    let registry = Arc::new(Registry::new(settings));
    for (repo, expected) in [
        ("endless-manifest", "larger than the 262144 bytes allowed"),
        ("slow", "did not finish within 500ms"),
        ("redirect", "does not follow a redirect"),
        (
            "many-layers",
            "it has 3 layers; a Wasm component artifact has one",
        ),
        (
            "not-wasm",
            "its config is `application/vnd.oci.image.config.v1+json`",
        ),
        ("huge-blob", "larger than the 16777216 bytes allowed"),
        ("wrong-digest", "was expected; nothing kept"),
        ("endless-blob", "the size its manifest declares"),
        ("slow-blob", "did not finish within 2s"),
        ("missing", "answered 404"),
    ] {
        let reference = Reference::parse(&format!("oci://{address}/{repo}:1")).expect("ref");
        // The slow cases end by their deadlines (the message says which), the endless
        // ones at their size bounds.
        let error = registry
            .pull(&reference, Fetch::Missing)
            .await
            .expect_err(repo)
            .to_string();
        assert!(error.contains(expected), "{repo}: {error}");
    }
    // Nothing half-written, and no component: only the manifests that were whole and
    // matched their digest.
    let component = toolhost::registry::Digest::of(&component());
    let store = toolhost::registry::Store::open(store.path()).expect("store");
    assert!(!store.has(&component));
    for entry in std::fs::read_dir(store.dir().join("blobs/sha256")).expect("blobs") {
        let entry = entry.expect("entry");
        let name = entry.file_name().into_string().expect("name");
        assert!(!name.ends_with(".tmp"), "a temporary was left: {name}");
        let bytes = std::fs::read(entry.path()).expect("blob");
        assert_eq!(
            toolhost::registry::Digest::of(&bytes).hex(),
            name,
            "a blob that is not its digest"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_token_error_and_redirect_is_read_no_further_than_its_bound() {
    // The challenge itself comes with an endless body, which is never read.
    let address = serve_with(true).await;
    let store = tempfile::tempdir().expect("store");
    let settings = RegistrySettings {
        store: Some(store.path().to_path_buf()),
        resolve_timeout: Duration::from_secs(20),
        pull_timeout: Duration::from_secs(30),
        credentials: Credentials::everywhere("user", "secret"),
        ..RegistrySettings::default()
    };
    let registry = Arc::new(Registry::new(settings));
    for (repo, expected) in [
        (
            "endless-token",
            "is larger than the 65536 bytes allowed (the bound on a token response)",
        ),
        ("endless-token-error", "answered 500 for the token"),
        ("redirect-token", "answered 302 for the token"),
        ("no-token", "the response holds no token"),
        ("endless-blob-error", "answered 500 for the component"),
        ("blob-redirect-loop", "redirect"),
    ] {
        let reference = Reference::parse(&format!("oci://{address}/{repo}:1")).expect("ref");
        let started = Instant::now();
        let error = registry
            .pull(&reference, Fetch::Missing)
            .await
            .expect_err(repo)
            .to_string();
        assert!(error.contains(expected), "{repo}: {error}");
        // Bounded by size, not by the deadlines (20 s, 30 s) that loopback would fill with
        // gigabytes.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{repo} took {:?}",
            started.elapsed()
        );
        // An error body is shown by its start, and one line at most.
        assert!(error.len() < 5000, "{repo}: {} bytes of error", error.len());
        if repo.ends_with("-error") {
            assert!(error.contains(": xxxxxxxxxx"), "{repo}: {error}");
        }
    } // A token whose `expires_in` is u64::MAX seconds is taken (for a day at most), and the
    // pull that asked for it goes on.
    let reference = Reference::parse(&format!("oci://{address}/eternal-token:1")).expect("ref");
    registry
        .pull(&reference, Fetch::Missing)
        .await
        .expect("a pull with a token of any lifetime");
}

#[test]
fn toolhost_pull_from_an_endless_token_endpoint_stays_small() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let address = runtime.block_on(serve_with(true));
    let fixture = Fixture::new();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(fixture.root())
        .env("DOCKER_CONFIG", fixture.root().join("no-docker-config"))
        .env("TOOLHOST_CACHE_DIR", fixture.root().join("cache"))
        .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
        .args(["pull", &format!("oci://{address}/endless-token:1")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("toolhost pull");
    // The peak is read while the process is alive (it goes with it).
    let pid = child.id();
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        peak = peak.max(peak_kib(pid));
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the pull never ended");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("stdout");
    assert_eq!(status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("the bound on a token response"), "{stdout}");
    eprintln!("peak RSS of toolhost pull: {} MiB", peak >> 10);
    assert!(
        peak < 100 << 10,
        "toolhost pull peaked at {} MiB",
        peak >> 10
    );
}
