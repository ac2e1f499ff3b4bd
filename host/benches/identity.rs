//! The cells of a call authorized by an OAuth access token (issue #31), as `serve --http`
//! makes it: the request's token checked by toolhost-access (a validated token is remembered
//! by its hash, so after the first request this is that lookup, the header's parse and the
//! rules), then the call on the session of that caller, whose rules are asked again. Against
//! the same calls with no identity, measured in the same run. Target: within 5 us.
//!
//! - `call/invoke_jwt` vs `call/invoke`;
//! - `call/dedup_hit_without_audit_jwt` vs `call/dedup_hit_without_audit`.
//!
//! The provider is a loopback HTTP server that serves its metadata and one ES256 key.

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolhost::access::Access;
use toolhost::config::access::{AccessSettings, OidcSettings, Rule, Who};
use toolhost::invoke::{Host, Session};

/// A P-256 key made for this benchmark alone (it signs nothing else).
const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgVoLsf99U9sjyDP/o
X7oHFXUAnJ6fNzixBVKuIF3J7aChRANCAAQpfTunItLRxpNKeaCdDkKm0Jw6jcQy
05XY6NFwjmCGyWVzSdk9OKjVmxdy1tWfaBr/c0psLIawVFdpd8pGxw44
-----END PRIVATE KEY-----
";

const RESOURCE: &str = "http://127.0.0.1/mcp";

/// Serves the provider's metadata and key set on loopback; returns its issuer URL.
fn provider(rt: &tokio::runtime::Runtime, key: &jsonwebtoken::EncodingKey) -> String {
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(key, jsonwebtoken::Algorithm::ES256)
        .expect("a JWK of the key");
    jwk.common.key_id = Some("bench".into());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("address"));
    let metadata = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
    let keys = json!({"keys": [jwk]});
    let router = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(metadata) }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || async move { axum::Json(keys) }),
        );
    rt.spawn(async move { axum::serve(listener, router).await });
    issuer
}

pub fn cells(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &tokio::runtime::Runtime,
    (audited, quiet): (&Host, &Host),
    arguments: &Value,
) {
    let key = jsonwebtoken::EncodingKey::from_ec_pem(KEY.as_bytes()).expect("the key");
    let issuer = provider(rt, &key);
    let settings = AccessSettings {
        oidc: Some(OidcSettings {
            issuer: issuer.clone(),
            resource: RESOURCE.into(),
            algorithms: vec!["ES256".into()],
            leeway: Duration::from_secs(30),
            groups_claim: "groups".into(),
            sign_in: None,
            challenge_scopes: None,
        }),
        rules: vec![Rule {
            who: Who {
                scopes: vec!["tools:all".into()],
                ..Who::default()
            },
            tools: vec!["*".into()],
            ..Rule::default()
        }],
        ..AccessSettings::default()
    };
    let access = Access::new(settings, None).expect("access");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    let claims = json!({
        "sub": "bench", "client_id": "bench", "scope": "tools:all",
        "iss": issuer, "aud": RESOURCE, "exp": now.as_secs() + 3600,
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("bench".into());
    let token = jsonwebtoken::encode(&header, &claims, &key).expect("a token");
    let mut headers = http::HeaderMap::new();
    let bearer = format!("Bearer {token}").parse().expect("a header value");
    headers.insert(http::header::AUTHORIZATION, bearer);
    let uri: http::Uri = "/mcp".parse().expect("uri");
    // The first request fetches the keys and checks the token; every later one is this.
    let authorize = || async {
        access
            .authenticate(&headers, &uri, false)
            .await
            .expect("authorized")
    };
    let caller = rt.block_on(authorize());
    let session = Session::new("bench-jwt").for_caller(caller.clone());
    group.bench_function("invoke_jwt", |b| {
        b.iter(|| {
            rt.block_on(async {
                let _caller = authorize().await;
                let outcome = audited
                    .invoke(&session, "fast_echo", arguments.clone())
                    .await;
                assert!(outcome.result.is_ok() && !outcome.deduplicated);
            })
        })
    });
    let quiet_session = Session::new("bench-jwt-quiet").for_caller(caller);
    rt.block_on(quiet.invoke(&quiet_session, "dedup_echo", arguments.clone()));
    group.bench_function("dedup_hit_without_audit_jwt", |b| {
        b.iter(|| {
            rt.block_on(async {
                let _caller = authorize().await;
                let outcome = quiet
                    .invoke(&quiet_session, "dedup_echo", arguments.clone())
                    .await;
                assert!(outcome.deduplicated);
            })
        })
    });
}
