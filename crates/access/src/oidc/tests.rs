//! The checks of a token, and the bounds on what the provider sends, held against keys set
//! by hand and against a provider served on loopback by the tests themselves.

use super::*;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A P-256 key made for these tests alone.
const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgVoLsf99U9sjyDP/o
X7oHFXUAnJ6fNzixBVKuIF3J7aChRANCAAQpfTunItLRxpNKeaCdDkKm0Jw6jcQy
05XY6NFwjmCGyWVzSdk9OKjVmxdy1tWfaBr/c0psLIawVFdpd8pGxw44
-----END PRIVATE KEY-----
";

/// The settings of a provider at `issuer`, for a server at `https://tools.example/mcp`.
fn settings(issuer: &str, leeway: u64) -> OidcSettings {
    OidcSettings {
        issuer: issuer.into(),
        resource: "https://tools.example/mcp".into(),
        algorithms: vec!["ES256".into()],
        leeway: Duration::from_secs(leeway),
        groups_claim: "groups".into(),
        challenge_scopes: None,
        sign_in: None,
    }
}

/// An `Oidc` that has fetched the public half of [`KEY`] (id `k`) just now.
fn provider(leeway: u64) -> Oidc {
    let oidc = Oidc::new(settings("https://id.example", leeway)).expect("oidc");
    let private = EncodingKey::from_ec_pem(KEY.as_bytes()).expect("key");
    let jwk = Jwk::from_encoding_key(&private, Algorithm::ES256).expect("jwk");
    let keys = Arc::new(vec![Key {
        id: Some("k".into()),
        algorithm: Some(Algorithm::ES256),
        key: DecodingKey::from_jwk(&jwk).expect("public key"),
    }]);
    oidc.keys.store(keys);
    oidc.fetching.try_lock().expect("lock").fetched = Some(Instant::now());
    oidc
}

fn token(claims: serde_json::Value, kid: &str) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.into());
    let key = EncodingKey::from_ec_pem(KEY.as_bytes()).expect("key");
    encode(&header, &claims, &key).expect("token")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[test]
fn validated_tokens_are_remembered_within_their_bound() {
    let oidc = provider(0);
    let identity = Arc::new(Identity::local());
    let later = SystemTime::now() + Duration::from_secs(60);
    for n in 0..MAX_CACHED_TOKENS as u32 {
        let mut hash = [0; 32];
        hash[..4].copy_from_slice(&n.to_le_bytes());
        oidc.remember(hash, &identity, later);
    }
    // Full of live tokens: one more is checked again next time, not remembered.
    oidc.remember([0xff; 32], &identity, later);
    assert!(oidc.remembered(&[0xff; 32]).is_none());
    assert_eq!(oidc.tokens.lock().expect("lock").len(), MAX_CACHED_TOKENS);
    // Expired ones make room.
    let earlier = SystemTime::now() - Duration::from_secs(60);
    for entry in oidc.tokens.lock().expect("lock").values_mut() {
        entry.expires = earlier;
    }
    oidc.remember([0xff; 32], &identity, later);
    assert!(oidc.remembered(&[0xff; 32]).is_some());
    assert_eq!(oidc.tokens.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn every_claim_is_checked_and_a_valid_token_is_remembered() {
    let oidc = provider(5);
    let good = json!({"sub": "ann", "iss": "https://id.example",
        "aud": "https://tools.example/mcp", "exp": now() + 60});
    let with = |change: serde_json::Value| {
        let mut claims = good.clone();
        for (key, value) in change.as_object().expect("object") {
            if value.is_null() {
                claims.as_object_mut().expect("object").remove(key);
            } else {
                claims[key] = value.clone();
            }
        }
        token(claims, "k")
    };
    let cases = [
        (with(json!({"nbf": now() + 60})), "not valid yet"),
        (with(json!({"exp": now() - 60})), "has expired"),
        (
            with(json!({"iss": "https://evil.example"})),
            "not issued by https://id.example",
        ),
        (
            with(json!({"aud": "https://other.example/mcp"})),
            "not for this server",
        ),
        (with(json!({"sub": null})), "`sub`"),
    ];
    for (bad, reason) in &cases {
        let refused = oidc.identify(bad).await.expect_err(reason);
        assert!(refused.0.contains(reason), "{reason}: {}", refused.0);
    }
    // Within the leeway, a token just past `exp` or just before `nbf` passes.
    let lenient = with(json!({"exp": now() - 2, "nbf": now() + 2}));
    assert_eq!(
        oidc.identify(&lenient).await.expect("within leeway").name,
        "ann"
    );
    // A key the token does not name is not used, even when it is the only one.
    let elsewhere = token(good.clone(), "other");
    let refused = oidc.identify(&elsewhere).await.expect_err("unknown kid");
    assert!(refused.0.contains("`other`"), "{}", refused.0);
    // Checked once: the same token passes from memory even with the keys gone.
    let valid = token(good, "k");
    assert_eq!(oidc.identify(&valid).await.expect("valid").name, "ann");
    oidc.keys.store(Arc::default());
    assert_eq!(oidc.identify(&valid).await.expect("remembered").name, "ann");
}

/// A token of ann for this server with `claims` over the good ones (`null` removes one),
/// signed as `kid` with `header` changed by `edit`.
fn token_with(claims: serde_json::Value, edit: impl FnOnce(&mut Header)) -> String {
    let mut all = json!({"sub": "ann", "iss": "https://id.example",
        "aud": "https://tools.example/mcp", "exp": now() + 60});
    for (key, value) in claims.as_object().expect("object") {
        if value.is_null() {
            all.as_object_mut().expect("object").remove(key);
        } else {
            all[key] = value.clone();
        }
    }
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("k".into());
    edit(&mut header);
    let key = EncodingKey::from_ec_pem(KEY.as_bytes()).expect("key");
    encode(&header, &all, &key).expect("token")
}

#[tokio::test]
async fn extreme_times_in_a_token_are_refused_with_a_reason_and_never_panic() {
    let oidc = provider(30);
    let years = |n: u64| now() + n * 366 * 24 * 3600;
    let far = "more than 10 years away";
    let unreadable = "cannot be read";
    let not_seconds = "no `exp` claim that is a whole number of seconds";
    let cases = [
        (json!({"exp": 1u64 << 63}), far),
        (json!({"exp": u64::MAX}), far),
        (json!({"exp": 1u64 << 62}), far),
        (json!({"exp": years(11)}), far),
        (json!({"exp": 1e300}), not_seconds),
        (json!({"exp": -1}), not_seconds),
        (json!({"exp": "soon"}), not_seconds),
        (json!({"exp": null}), not_seconds),
        (json!({"nbf": u64::MAX}), "not valid yet"),
        (json!({"nbf": 1u64 << 63}), "not valid yet"),
        (json!({"nbf": -5}), unreadable),
    ];
    for (claims, reason) in cases {
        let Err(refused) = oidc.identify(&token_with(claims.clone(), |_| ())).await else {
            panic!("{claims} was taken");
        };
        assert!(refused.0.contains(reason), "{claims}: {}", refused.0);
    }
    // Within the bound, a long-lived token passes; `iat` is not read, whatever it says.
    for claims in [
        json!({"exp": years(9)}),
        json!({"iat": u64::MAX}),
        json!({"iat": -1}),
        json!({"nbf": 0}),
    ] {
        let passed = oidc.identify(&token_with(claims.clone(), |_| ())).await;
        let passed = passed.unwrap_or_else(|e| panic!("{claims}: {}", e.0));
        assert_eq!(passed.name, "ann");
    }
}

#[tokio::test]
async fn a_header_with_critical_extensions_or_an_unencoded_payload_is_refused() {
    let oidc = provider(0);
    let critical = |names: &[&str]| {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        move |header: &mut Header| header.crit = Some(names)
    };
    let refusals = [
        token_with(json!({}), critical(&["x-unknown"])),
        token_with(json!({}), critical(&[])),
        token_with(json!({}), |header| {
            header.crit = Some(vec!["b64".into()]);
            header.extras.insert("b64", false);
        }),
        token_with(json!({}), |header| header.extras.insert("b64", false)),
        token_with(json!({}), |header| header.extras.insert("b64", "false")),
    ];
    for (n, token) in refusals.iter().enumerate() {
        let refused = oidc.identify(token).await.expect_err("refused");
        assert!(
            refused.0.contains("(crit)") || refused.0.contains("(b64)"),
            "case {n}: {}",
            refused.0
        );
    }
    // `b64: true` is the default spelled out, and other extra parameters are not critical.
    let plain = token_with(json!({}), |header| {
        header.extras.insert("b64", true);
        header.extras.insert("x-note", "hello");
    });
    assert_eq!(oidc.identify(&plain).await.expect("plain").name, "ann");
}

#[test]
fn claims_map_to_an_identity_bounded() {
    let claims: Map<String, Value> = serde_json::from_value(serde_json::json!({
        "sub": "alice",
        "azp": "inspector",
        "scope": "tools:calculate  tools:all",
        "groups": ["ops", 7, "x".repeat(300)],
    }))
    .expect("claims");
    let identity = identity_of(&claims, "groups").expect("identity");
    assert_eq!(identity.name, "alice");
    assert_eq!(identity.client.as_deref(), Some("inspector"));
    assert_eq!(identity.scopes, ["tools:calculate", "tools:all"]);
    assert_eq!(identity.groups, ["ops"]);
    let nobody: Map<String, Value> =
        serde_json::from_value(serde_json::json!({"sub": ""})).expect("claims");
    assert!(identity_of(&nobody, "groups").is_err());
    let crowded: Map<String, Value> = serde_json::from_value(serde_json::json!({
        "sub": "x", "groups": (0..64).map(|n| format!("{n:0>200}")).collect::<Vec<_>>(),
    }))
    .expect("claims");
    let identity = identity_of(&crowded, "groups").expect("identity");
    assert_eq!(identity.groups.len(), 20, "4 KiB of 200-byte groups");
}

#[test]
fn scopes_and_groups_are_read_strictly() {
    let read = |claims: serde_json::Value| {
        let claims: Map<String, Value> = serde_json::from_value(claims).expect("claims");
        identity_of(&claims, "groups")
    };
    // `scp` as a list or a string (providers write both); `scope` wins over it.
    let listed = read(json!({"sub": "a", "scp": ["tools:a", "tools:b"]})).expect("scp list");
    assert_eq!(listed.scopes, ["tools:a", "tools:b"]);
    let spaced = read(json!({"sub": "a", "scp": "tools:a tools:b"})).expect("scp string");
    assert_eq!(spaced.scopes, ["tools:a", "tools:b"]);
    let both = read(json!({"sub": "a", "scope": "tools:a", "scp": ["tools:all"]})).expect("both");
    assert_eq!(both.scopes, ["tools:a"]);
    // `scope` as a list, separators other than spaces, quotes: refused, with the reason.
    for (claims, reason) in [
        (
            json!({"sub": "a", "scope": ["tools:all"]}),
            "not a string of scopes",
        ),
        (
            json!({"sub": "a", "scope": "tools:a\ntools:all"}),
            "a scope may not have",
        ),
        (
            json!({"sub": "a", "scope": "tools:a\ttools:all"}),
            "a scope may not have",
        ),
        (
            json!({"sub": "a", "scope": "\"tools:all\""}),
            "a scope may not have",
        ),
        (
            json!({"sub": "a", "scp": ["tools:a", 7]}),
            "other than text",
        ),
        (
            json!({"sub": "a", "scp": {"tools": "all"}}),
            "neither a string nor a list",
        ),
    ] {
        let Err(refused) = read(claims.clone()) else {
            panic!("{claims} was taken");
        };
        assert!(refused.0.contains(reason), "{claims}: {}", refused.0);
    }
    // A groups claim of one string is one group: never split into others' names.
    let one = read(json!({"sub": "a", "groups": "Domain Admins"})).expect("one group");
    assert_eq!(one.groups, ["Domain Admins"]);
    let none = read(json!({"sub": "a", "groups": 7})).expect("no groups");
    assert!(none.groups.is_empty());
}

/// Where the provider on loopback serves its metadata and its key set.
const METADATA: &str = "/.well-known/openid-configuration";
const JWKS: &str = "/jwks";

/// An OpenID provider on loopback: a fixed document for each path, and how many requests
/// each path got.
struct LoopbackProvider {
    issuer: String,
    documents: Arc<Mutex<HashMap<String, String>>>,
    asked: Arc<Mutex<HashMap<String, usize>>>,
}

impl LoopbackProvider {
    /// A provider serving its metadata and the public half of [`KEY`] as its one key `k`.
    async fn start() -> LoopbackProvider {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let issuer = format!("http://{}", listener.local_addr().expect("address"));
        let provider = LoopbackProvider {
            documents: Arc::default(),
            asked: Arc::default(),
            issuer,
        };
        let metadata = json!({"issuer": provider.issuer, "jwks_uri": provider.url(JWKS)});
        provider.serve(METADATA, metadata.to_string());
        provider.serve(JWKS, key_set(["k"]).to_string());
        let documents = Arc::clone(&provider.documents);
        let asked = Arc::clone(&provider.asked);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, Arc::clone(&documents), Arc::clone(&asked)));
            }
        });
        provider
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    fn serve(&self, path: &str, document: String) {
        (self.documents.lock().expect("lock")).insert(path.into(), document);
    }

    fn asked(&self, path: &str) -> usize {
        (self.asked.lock().expect("lock").get(path)).map_or(0, |n| *n)
    }

    /// An `Oidc` trusting this provider, with no keys fetched yet.
    fn oidc(&self) -> Oidc {
        Oidc::new(settings(&self.issuer, 0)).expect("oidc")
    }

    /// A token of `subject` for `https://tools.example/mcp`, signed with [`KEY`] as `kid`.
    fn token(&self, subject: &str, kid: &str) -> String {
        let claims = json!({"sub": subject, "iss": self.issuer,
            "aud": "https://tools.example/mcp", "exp": now() + 60});
        token(claims, kid)
    }
}

/// Answers one HTTP/1.1 request with the document at its path (404 for others), then closes.
async fn answer(
    mut stream: TcpStream,
    documents: Arc<Mutex<HashMap<String, String>>>,
    asked: Arc<Mutex<HashMap<String, usize>>>,
) {
    let mut head = Vec::new();
    let mut buffer = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or_default().to_string();
    *asked.lock().expect("lock").entry(path.clone()).or_default() += 1;
    let document = documents.lock().expect("lock").get(&path).cloned();
    let response = match document {
        Some(body) => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        ),
        None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
    };
    // A client stops reading a document past its bound: then this write fails, as it may.
    let _ = stream.write_all(response.as_bytes()).await;
}

/// A key set of the public half of [`KEY`] under each of `kids`.
fn key_set<const N: usize>(kids: [&str; N]) -> Value {
    key_set_of(kids.iter().map(|kid| kid.to_string()))
}

fn key_set_of(kids: impl Iterator<Item = String>) -> Value {
    let private = EncodingKey::from_ec_pem(KEY.as_bytes()).expect("key");
    let jwk = Jwk::from_encoding_key(&private, Algorithm::ES256).expect("jwk");
    let keys: Vec<Jwk> = kids
        .map(|kid| {
            let mut jwk = jwk.clone();
            jwk.common.key_id = Some(kid);
            jwk
        })
        .collect();
    serde_json::to_value(JwkSet { keys }).expect("key set")
}

/// `document` followed by spaces (which JSON allows) to exactly `size` bytes.
fn padded(document: &Value, size: usize) -> String {
    let mut text = document.to_string();
    let padding = size
        .checked_sub(text.len())
        .expect("a document within the size");
    text.push_str(&" ".repeat(padding));
    text
}

/// Makes the last fetch of the keys (or the try) `ago` old.
async fn age(oidc: &Oidc, ago: Duration) {
    oidc.fetching.lock().await.fetched = Instant::now().checked_sub(ago);
}

#[tokio::test]
async fn metadata_past_256_kib_is_refused_and_256_kib_is_read() {
    let provider = LoopbackProvider::start().await;
    let metadata = json!({"issuer": provider.issuer, "jwks_uri": provider.url(JWKS)});
    provider.serve(METADATA, padded(&metadata, MAX_DOCUMENT_BYTES + 1));
    let oidc = provider.oidc();
    let token = provider.token("ann", "k");
    let refused = oidc.identify(&token).await.expect_err("no keys");
    assert!(refused.0.contains("longer than 256 KiB"), "{}", refused.0);
    assert_eq!(provider.asked(METADATA), 1);
    assert_eq!(provider.asked(JWKS), 0, "no key set without metadata");
    // At the bound exactly, it is read, and the keys it points to are fetched.
    provider.serve(METADATA, padded(&metadata, MAX_DOCUMENT_BYTES));
    age(&oidc, REFETCH_INTERVAL).await;
    assert_eq!(oidc.identify(&token).await.expect("read").name, "ann");
    assert_eq!((provider.asked(METADATA), provider.asked(JWKS)), (2, 1));
}

#[tokio::test]
async fn a_key_set_past_256_kib_is_refused_and_the_keys_fetched_before_stay_in_use() {
    let provider = LoopbackProvider::start().await;
    provider.serve(JWKS, padded(&key_set(["k"]), MAX_DOCUMENT_BYTES));
    let oidc = provider.oidc();
    let ann = provider.token("ann", "k");
    assert_eq!(oidc.identify(&ann).await.expect("256 KiB read").name, "ann");
    // One byte more, and a new key in it: the set is fetched, refused, and `k` kept.
    provider.serve(JWKS, padded(&key_set(["k", "k2"]), MAX_DOCUMENT_BYTES + 1));
    age(&oidc, REFETCH_INTERVAL).await;
    let rotated = provider.token("ann", "k2");
    let refused = oidc.identify(&rotated).await.expect_err("k2 never read");
    assert!(
        refused.0.contains("no key of the issuer has the id `k2`"),
        "{}",
        refused.0
    );
    assert_eq!(provider.asked(JWKS), 2);
    let bob = provider.token("bob", "k");
    assert_eq!(oidc.identify(&bob).await.expect("kept key").name, "bob");
    // What the refused fetch said (a warning in the log).
    let mut fetching = oidc.fetching.lock().await;
    let Err(refused) = oidc.fetch(&mut fetching).await else {
        panic!("a key set past 256 KiB was read");
    };
    assert!(refused.0.contains("longer than 256 KiB"), "{}", refused.0);
    assert!(refused.0.contains(&provider.url(JWKS)), "{}", refused.0);
}

#[tokio::test]
async fn a_key_set_keeps_its_first_64_keys() {
    let provider = LoopbackProvider::start().await;
    let kids = (0..MAX_KEYS + 6).map(|n| format!("k{n}"));
    provider.serve(JWKS, key_set_of(kids).to_string());
    let oidc = provider.oidc();
    let first = provider.token("ann", "k0");
    assert_eq!(oidc.identify(&first).await.expect("first key").name, "ann");
    assert_eq!(oidc.keys.load().len(), MAX_KEYS);
    let last = provider.token("ann", &format!("k{}", MAX_KEYS - 1));
    assert_eq!(oidc.identify(&last).await.expect("64th key").name, "ann");
    for n in MAX_KEYS..MAX_KEYS + 6 {
        let dropped = provider.token("ann", &format!("k{n}"));
        let refused = oidc.identify(&dropped).await.expect_err("past 64 keys");
        assert!(refused.0.contains(&format!("id `k{n}`")), "{}", refused.0);
    }
    assert_eq!(provider.asked(JWKS), 1);
}

#[tokio::test]
async fn with_no_keys_in_hand_the_provider_is_tried_again_after_a_growing_backoff() {
    let provider = LoopbackProvider::start().await;
    let metadata = provider.documents.lock().expect("lock").remove(METADATA);
    let oidc = provider.oidc();
    // Down when the host starts: the first try fails, the next waits FIRST_RETRY only.
    oidc.prefetch().await;
    let token = provider.token("ann", "k");
    let refused = oidc.identify(&token).await.expect_err("down");
    assert!(refused.0.contains("tried again in 500 ms"), "{}", refused.0);
    assert_eq!(provider.asked(METADATA), 1);
    // Each failure in a row doubles the wait: 500 ms, 1 s, 2 s, 4 s, 8 s, then 10 s.
    for (n, wait) in [1000, 2000, 4000, 8000, 10_000, 10_000]
        .into_iter()
        .enumerate()
    {
        age(&oidc, FIRST_RETRY * 2u32.pow(n as u32)).await;
        let refused = oidc.identify(&token).await.expect_err("still down");
        assert!(refused.0.contains("404"), "{}", refused.0);
        assert_eq!(provider.asked(METADATA), n + 2);
        let refused = oidc.identify(&token).await.expect_err("waiting");
        assert!(
            refused.0.contains(&format!("tried again in {wait} ms")),
            "{}",
            refused.0
        );
    }
    // Back: a token is taken as soon as the backoff of the moment allows, not 10 s later.
    provider.serve(METADATA, metadata.expect("metadata"));
    age(&oidc, REFETCH_INTERVAL).await;
    assert_eq!(oidc.identify(&token).await.expect("back").name, "ann");
    // With keys in hand, an unknown key id waits the whole interval again.
    age(&oidc, FIRST_RETRY * 2).await;
    let made_up = provider.token("ann", "x");
    oidc.identify(&made_up).await.expect_err("made-up id");
    assert_eq!(provider.asked(JWKS), 1);
}

#[tokio::test]
async fn made_up_key_ids_cost_the_provider_one_key_set_fetch_an_interval() {
    let provider = LoopbackProvider::start().await;
    let oidc = Arc::new(provider.oidc());
    oidc.prefetch().await;
    assert_eq!((provider.asked(METADATA), provider.asked(JWKS)), (1, 1));
    // The interval over, a flood of made-up ids at once: one fetch for them all.
    age(&oidc, REFETCH_INTERVAL).await;
    let mut flood = tokio::task::JoinSet::new();
    for n in 0..100 {
        let (oidc, token) = (Arc::clone(&oidc), provider.token("ann", &format!("x{n}")));
        flood.spawn(async move { oidc.identify(&token).await.map(|_| ()) });
    }
    while let Some(refused) = flood.join_next().await {
        let refused = refused.expect("task").expect_err("made-up id");
        assert!(
            refused.0.contains("no key of the issuer has the id `x"),
            "{}",
            refused.0
        );
    }
    assert_eq!(provider.asked(JWKS), 2);
    // Half an interval later (5 s of margin for a slow machine), more of them fetch nothing.
    age(&oidc, REFETCH_INTERVAL / 2).await;
    for n in 100..200 {
        let made_up = provider.token("ann", &format!("x{n}"));
        oidc.identify(&made_up).await.expect_err("made-up id");
    }
    assert_eq!((provider.asked(METADATA), provider.asked(JWKS)), (1, 2));
    // The key the provider has still checks tokens, from the keys fetched.
    let ann = provider.token("ann", "k");
    assert_eq!(oidc.identify(&ann).await.expect("known key").name, "ann");
    assert_eq!(provider.asked(JWKS), 2);
}
