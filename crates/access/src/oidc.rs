//! Access tokens of one OpenID provider (JWT, RFC 9068): the provider's metadata and keys
//! discovered and cached, each token checked for its signature (an allowlist of public-key
//! algorithms), `iss`, `aud` (this server's resource URI, RFC 8707), `exp` and `nbf` with a
//! leeway, and its claims mapped to an identity.
//!
//! Bounds: a token of at most [`MAX_TOKEN_BYTES`]; the provider's documents at most
//! [`MAX_DOCUMENT_BYTES`], fetched within [`FETCH_TIMEOUT`], without redirects; keys fetched
//! again at most once per [`REFETCH_INTERVAL`] (a token with an unknown `kid` asks for it,
//! so a flood of made-up `kid`s costs the provider one request per interval); validated
//! tokens remembered until they expire, at most [`MAX_CACHED_TOKENS`] (keyed by a hash of
//! the token, so the cache holds no token). A provider that is down leaves the keys already
//! fetched in use; with none, every token is refused (fail closed), and the keys are tried
//! again after a backoff that starts at [`FIRST_RETRY`] and doubles up to the interval, so a
//! provider that comes back after the host started is used within a second or two.
//!
//! Times a token carries are read as whole seconds and never added to a clock unchecked:
//! `exp` past [`MAX_TOKEN_LIFETIME`] from now is refused, as is any `exp` or `nbf` that is
//! not a whole number of seconds. A header that names critical extensions (`crit`, RFC 7515
//! 4.1.11) is refused, since this server understands none, and so is an unencoded payload
//! (`b64` other than true, RFC 7797).

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use toolhost_config::access::OidcSettings;
use toolhost_contract::{Identity, IdentityKind};

mod sign_in;
pub use sign_in::{SignedIn, Started};

/// The longest access token read.
pub const MAX_TOKEN_BYTES: usize = 8 << 10;
/// The largest metadata or key set document read from the provider.
pub const MAX_DOCUMENT_BYTES: usize = 256 << 10;
/// How long fetching one of them may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The keys are fetched again at most this often.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(10);
/// With no keys in hand (the provider was down), the first wait before trying again; each
/// failure doubles it, up to [`REFETCH_INTERVAL`].
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The furthest `exp` taken: about ten years from now. No provider issues tokens that last
/// longer; a later one is refused rather than trusted for centuries (or overflowing a clock).
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(10 * 366 * 24 * 3600);
/// Validated tokens remembered at once.
pub const MAX_CACHED_TOKENS: usize = 10_000;
/// Keys kept from one key set.
const MAX_KEYS: usize = 64;
/// Groups and scopes taken from one token: each item at most 256 bytes, each list at most 64
/// items and 4 KiB, so a remembered identity holds at most about 8 KiB and the cache of
/// validated tokens at most about 80 MiB.
const MAX_CLAIM_ITEMS: usize = 64;
const MAX_CLAIM_BYTES: usize = 256;
const MAX_CLAIM_LIST_BYTES: usize = 4 << 10;

/// Why a token was refused; the text is the `error_description` a client reads.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// One key of the provider's set.
struct Key {
    id: Option<String>,
    algorithm: Option<Algorithm>,
    key: DecodingKey,
}

/// When the keys were last fetched (or tried), and where they and the sign-in endpoints are
/// (from the provider's metadata): held while a fetch runs.
#[derive(Default)]
struct Fetching {
    fetched: Option<Instant>,
    /// Fetches (or discoveries) that failed in a row since the last success.
    failures: u32,
    /// When the metadata was last fetched (or tried), until it was read.
    discovered: Option<Instant>,
    metadata: Option<Discovered>,
}

impl Fetching {
    /// How long after the last try the provider is asked again: [`REFETCH_INTERVAL`] with
    /// keys in hand (a flood of made-up key ids costs one fetch an interval); without, a
    /// backoff from [`FIRST_RETRY`] that doubles with each failure in a row.
    fn wait(&self, keys_in_hand: bool) -> Duration {
        if keys_in_hand {
            return REFETCH_INTERVAL;
        }
        let doublings = self.failures.saturating_sub(1).min(8);
        (FIRST_RETRY * 2u32.pow(doublings)).min(REFETCH_INTERVAL)
    }

    fn count(&mut self, succeeded: bool) {
        self.failures = if succeeded {
            0
        } else {
            self.failures.saturating_add(1)
        };
    }
}

/// What the host takes from the provider's metadata.
#[derive(Clone)]
struct Discovered {
    jwks_uri: String,
    endpoints: Option<Endpoints>,
}

/// Where the provider signs people in: its `authorization_endpoint` and `token_endpoint`.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub authorization: url::Url,
    pub token: url::Url,
}

/// A validated token, remembered until it expires.
struct Remembered {
    identity: Arc<Identity>,
    expires: SystemTime,
}

/// The provider trusted, its keys, and the tokens validated lately.
pub struct Oidc {
    pub settings: OidcSettings,
    client: reqwest::Client,
    algorithms: Vec<Algorithm>,
    fetching: tokio::sync::Mutex<Fetching>,
    /// The keys as last fetched, read without waiting for a fetch in progress.
    keys: ArcSwap<Vec<Key>>,
    tokens: Mutex<HashMap<[u8; 32], Remembered>>,
    /// Sign-ins being finished (token exchanges running).
    exchanges: Arc<tokio::sync::Semaphore>,
}

impl Oidc {
    pub fn new(settings: OidcSettings) -> Result<Self, Invalid> {
        toolhost_contract::tls::install_provider();
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Invalid(format!("cannot build the HTTP client: {e}")))?;
        let algorithms = (settings.algorithms.iter())
            .filter_map(|a| Algorithm::from_str(a).ok())
            .collect();
        Ok(Oidc {
            settings,
            client,
            algorithms,
            fetching: tokio::sync::Mutex::default(),
            keys: ArcSwap::default(),
            tokens: Mutex::default(),
            exchanges: Arc::new(tokio::sync::Semaphore::new(sign_in::MAX_EXCHANGES)),
        })
    }

    /// The identity `token` proves, from the cache or checked now.
    pub async fn identify(&self, token: &str) -> Result<Arc<Identity>, Invalid> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Invalid(format!(
                "the access token is longer than {} KiB",
                MAX_TOKEN_BYTES >> 10
            )));
        }
        let hash = *blake3::hash(token.as_bytes()).as_bytes();
        if let Some(identity) = self.remembered(&hash) {
            return Ok(identity);
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Invalid(format!("the access token is not a JWT: {e}")))?;
        understood(&header)?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Invalid(format!(
                "the access token is signed with {:?}, which this server does not accept \
                 (accepted: {})",
                header.alg,
                self.settings.algorithms.join(", ")
            )));
        }
        let mut keys = self.keys.load_full();
        if pick(&keys, header.kid.as_deref(), header.alg).is_none() {
            // A key this host has not seen: the provider may have rotated its keys.
            keys = self.refetch().await?;
        }
        let key = pick(&keys, header.kid.as_deref(), header.alg).ok_or_else(|| {
            Invalid(match &header.kid {
                Some(kid) => format!("no key of the issuer has the id `{kid}` (kid)"),
                None => "the access token names no key (kid) and the issuer has several".into(),
            })
        })?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.settings.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| Invalid(describe(&e, &self.settings)))?
            .claims;
        let expires = expiry(&claims)?;
        let identity = Arc::new(identity_of(&claims, &self.settings.groups_claim)?);
        self.remember(hash, &identity, expires);
        Ok(identity)
    }

    /// Fetches the provider's keys now (at start-up, so the first call does not wait).
    pub async fn prefetch(&self) {
        if let Err(e) = self.refetch().await {
            tracing::warn!("{e}");
        }
    }

    /// The keys fetched again, unless they were within [`REFETCH_INTERVAL`]; a failure keeps
    /// the keys fetched before.
    async fn refetch(&self) -> Result<Arc<Vec<Key>>, Invalid> {
        let mut fetching = self.fetching.lock().await;
        let keys = self.keys.load_full();
        let wait = fetching.wait(!keys.is_empty());
        if fetching.fetched.is_some_and(|at| at.elapsed() < wait) {
            if keys.is_empty() {
                return Err(Invalid(format!(
                    "this server has no keys of the issuer to check the token with: the last \
                     fetch failed (tried again in {} ms)",
                    wait.as_millis()
                )));
            }
            return Ok(keys);
        }
        fetching.fetched = Some(Instant::now());
        let fetched = self.fetch(&mut fetching).await;
        fetching.count(fetched.is_ok());
        match fetched {
            Ok(fetched) => {
                let fetched = Arc::new(fetched);
                self.keys.store(Arc::clone(&fetched));
                Ok(fetched)
            }
            Err(e) if keys.is_empty() => Err(Invalid(format!(
                "this server has no keys of the issuer to check the token with: {e}"
            ))),
            Err(e) => {
                tracing::warn!("{e}; the keys fetched before stay in use");
                Ok(keys)
            }
        }
    }

    /// The provider's key set, found through its metadata the first time.
    async fn fetch(&self, fetching: &mut Fetching) -> Result<Vec<Key>, Invalid> {
        let uri = match &fetching.metadata {
            Some(metadata) => metadata.jwks_uri.clone(),
            None => self.discover(fetching).await?.jwks_uri,
        };
        let set: JwkSet = self.document(&uri).await?;
        let keys: Vec<Key> = set
            .keys
            .iter()
            .filter(|jwk| !matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature))
            // Never a secret key: an HMAC key in a public key set is someone's mistake or attack.
            .filter(|jwk| !matches!(jwk.algorithm, jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)))
            .filter_map(|jwk| {
                Some(Key {
                    id: jwk.common.key_id.clone(),
                    algorithm: jwk.common.key_algorithm.and_then(algorithm_of),
                    key: DecodingKey::from_jwk(jwk).ok()?,
                })
            })
            .take(MAX_KEYS)
            .collect();
        if keys.is_empty() {
            return Err(Invalid(format!(
                "the key set at {uri} has no signing key this server can use"
            )));
        }
        Ok(keys)
    }

    /// Where the provider signs people in, from its metadata (fetched once; after a failure,
    /// tried again after the backoff of a fetch with no keys in hand).
    pub async fn endpoints(&self) -> Result<Endpoints, Invalid> {
        let mut fetching = self.fetching.lock().await;
        let wait = fetching.wait(false);
        let discovered = match &fetching.metadata {
            Some(metadata) => metadata.clone(),
            None if (fetching.discovered).is_some_and(|at| at.elapsed() < wait) => {
                return Err(Invalid(format!(
                    "the provider's metadata could not be fetched lately (tried again in {} ms)",
                    wait.as_millis()
                )));
            }
            None => {
                let discovered = self.discover(&mut fetching).await;
                fetching.count(discovered.is_ok());
                discovered?
            }
        };
        discovered.endpoints.ok_or_else(|| {
            Invalid(
                "the provider's metadata names no authorization_endpoint and token_endpoint \
                 (https, or http on loopback): nobody can sign in with it"
                    .into(),
            )
        })
    }

    /// The provider's metadata, read and kept.
    async fn discover(&self, fetching: &mut Fetching) -> Result<Discovered, Invalid> {
        fetching.discovered = Some(Instant::now());
        let issuer = self.settings.issuer.trim_end_matches('/');
        let url = format!("{issuer}/.well-known/openid-configuration");
        let metadata: Map<String, Value> = self.document(&url).await?;
        if metadata.get("issuer").and_then(Value::as_str) != Some(&self.settings.issuer) {
            return Err(Invalid(format!(
                "the issuer's metadata at {url} names another issuer"
            )));
        }
        let jwks_uri = (metadata.get("jwks_uri").and_then(Value::as_str))
            .ok_or_else(|| Invalid(format!("the issuer's metadata at {url} has no jwks_uri")))?
            .to_string();
        let endpoint = |name: &str| {
            (metadata.get(name).and_then(Value::as_str))
                .and_then(|text| url::Url::parse(text).ok())
                .filter(toolhost_config::access::is_https_or_loopback)
        };
        let endpoints = match (
            endpoint("authorization_endpoint"),
            endpoint("token_endpoint"),
        ) {
            (Some(authorization), Some(token)) => Some(Endpoints {
                authorization,
                token,
            }),
            _ => None,
        };
        let discovered = Discovered {
            jwks_uri,
            endpoints,
        };
        fetching.metadata = Some(discovered.clone());
        Ok(discovered)
    }

    /// A JSON document of the provider, bounded in size and time.
    async fn document<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, Invalid> {
        let failed = |e: String| Invalid(format!("cannot fetch {url}: {e}"));
        let mut response = self
            .client
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!(
                "the provider answered {}",
                response.status()
            )));
        }
        let body = read_bounded(&mut response).await.map_err(failed)?;
        serde_json::from_slice(&body).map_err(|e| failed(format!("not the JSON expected: {e}")))
    }

    fn remembered(&self, hash: &[u8; 32]) -> Option<Arc<Identity>> {
        let tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        let remembered = tokens.get(hash)?;
        // Expired to the second as the check would see it, leeway included.
        (remembered.expires + self.settings.leeway > SystemTime::now())
            .then(|| Arc::clone(&remembered.identity))
    }

    fn remember(&self, hash: [u8; 32], identity: &Arc<Identity>, expires: SystemTime) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        if tokens.len() >= MAX_CACHED_TOKENS {
            let now = SystemTime::now();
            tokens.retain(|_, r| r.expires + self.settings.leeway > now);
        }
        // Still full of live tokens: this one is checked again next time.
        if tokens.len() < MAX_CACHED_TOKENS {
            tokens.insert(
                hash,
                Remembered {
                    identity: Arc::clone(identity),
                    expires,
                },
            );
        }
    }
}

/// The body of a provider's answer, at most [`MAX_DOCUMENT_BYTES`].
async fn read_bounded(response: &mut reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("longer than {} KiB", MAX_DOCUMENT_BYTES >> 10));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The key a token's header names: by `kid`, or the only key when it names none; never one
/// whose own algorithm differs from the token's.
fn pick<'k>(keys: &'k [Key], kid: Option<&str>, algorithm: Algorithm) -> Option<&'k Key> {
    let usable = |key: &&Key| key.algorithm.is_none_or(|a| a == algorithm);
    match kid {
        Some(kid) => keys
            .iter()
            .filter(usable)
            .find(|k| k.id.as_deref() == Some(kid)),
        None if keys.len() == 1 => keys.iter().find(usable),
        None => None,
    }
}

fn algorithm_of(algorithm: KeyAlgorithm) -> Option<Algorithm> {
    Algorithm::from_str(&format!("{algorithm:?}")).ok()
}

/// Refuses a header that asks for more than this server understands: any critical extension
/// (`crit`, RFC 7515 4.1.11: a recipient that does not understand one must refuse the token,
/// and this server understands none), or a payload signed unencoded (`b64` other than true,
/// RFC 7797), which would otherwise be checked as if it were encoded.
fn understood(header: &jsonwebtoken::Header) -> Result<(), Invalid> {
    if header.crit.is_some() {
        return Err(Invalid(
            "the access token's header lists critical extensions (crit), and this server \
             understands none: RFC 7515 says to refuse it"
                .into(),
        ));
    }
    match header.extras.get::<Value>("b64") {
        Ok(None) | Ok(Some(Value::Bool(true))) => Ok(()),
        _ => Err(Invalid(
            "the access token's payload is not base64url-encoded (b64), which this server does \
             not accept"
                .into(),
        )),
    }
}

/// When a token that passed its checks expires, as a time of the clock: refused when `exp`
/// is further away than [`MAX_TOKEN_LIFETIME`] (the addition checked, never a panic).
fn expiry(claims: &Map<String, Value>) -> Result<SystemTime, Invalid> {
    let furthest = SystemTime::now() + MAX_TOKEN_LIFETIME;
    (claims.get("exp").and_then(Value::as_u64))
        .and_then(|exp| UNIX_EPOCH.checked_add(Duration::from_secs(exp)))
        .filter(|expires| *expires <= furthest)
        .ok_or_else(|| {
            Invalid(format!(
                "the access token's expiry (exp) is more than {} years away; this server \
                 takes tokens that expire sooner",
                MAX_TOKEN_LIFETIME.as_secs() / (366 * 24 * 3600)
            ))
        })
}

/// What a failed check says to the client.
fn describe(error: &jsonwebtoken::errors::Error, settings: &OidcSettings) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "the access token has expired".into(),
        ErrorKind::ImmatureSignature => "the access token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => format!(
            "the access token is not for this server: its audience must be {}",
            settings.resource
        ),
        ErrorKind::InvalidIssuer => {
            format!("the access token was not issued by {}", settings.issuer)
        }
        ErrorKind::InvalidSignature => "the access token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) if claim == "exp" => {
            "the access token has no `exp` claim that is a whole number of seconds".into()
        }
        ErrorKind::MissingRequiredClaim(claim) => {
            format!("the access token has no `{claim}` claim")
        }
        ErrorKind::InvalidAlgorithm => {
            "the access token's algorithm does not fit the issuer's key".into()
        }
        _ => format!("the access token cannot be read: {error}"),
    }
}

/// The identity of a token's claims: `sub`; the client from `client_id` (RFC 9068) or
/// `azp`; scopes from `scope` (a string of scope tokens separated by spaces, RFC 6749 3.3) or
/// `scp` (that string, or a list of scope tokens); groups from the configured claim (a list
/// of names, or one name). Each list and item bounded.
///
/// Read strictly, so that no reading gives a token more than its provider meant: `scope` as
/// a list, or a scope token with characters RFC 6749 does not allow (a newline, a tab, a
/// quote), refuses the token; a groups claim given as one string is one group, never split
/// (a group may be called `Domain Admins`).
fn identity_of(claims: &Map<String, Value>, groups_claim: &str) -> Result<Identity, Invalid> {
    let text = |name: &str| {
        claims
            .get(name)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty() && v.len() <= MAX_CLAIM_BYTES)
            .map(str::to_string)
    };
    let name = text("sub").ok_or_else(|| {
        Invalid(format!(
            "the access token's subject (sub) is empty or longer than {MAX_CLAIM_BYTES} bytes"
        ))
    })?;
    let scopes = match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => {
            scope_tokens(s.split(' ').filter(|t| !t.is_empty()))?
        }
        (None, Some(Value::Array(items))) => {
            let items: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            let items = items.ok_or_else(|| {
                Invalid("the access token's scp claim lists something other than text".into())
            })?;
            scope_tokens(items.into_iter())?
        }
        (None, None) => Vec::new(),
        (Some(_), _) => {
            return Err(Invalid(
                "the access token's scope claim is not a string of scopes separated by spaces \
                 (RFC 9068 2.2.3)"
                    .into(),
            ));
        }
        (None, Some(_)) => {
            return Err(Invalid(
                "the access token's scp claim is neither a string nor a list of scopes".into(),
            ));
        }
    };
    let groups = match claims.get(groups_claim) {
        Some(Value::String(group)) => bounded(std::iter::once(group.clone())),
        Some(Value::Array(items)) => bounded(
            (items.iter())
                .filter_map(|v| v.as_str().map(str::to_string))
                .filter(|s| !s.is_empty()),
        ),
        _ => Vec::new(),
    };
    Ok(Identity {
        kind: IdentityKind::Oauth,
        name,
        client: text("client_id").or_else(|| text("azp")),
        groups,
        scopes,
    })
}

/// Scope tokens as RFC 6749 3.3 writes them (`%x21 / %x23-5B / %x5D-7E`, at least one), or
/// the token refused; then bounded.
fn scope_tokens<'a>(items: impl Iterator<Item = &'a str>) -> Result<Vec<String>, Invalid> {
    let valid = |c: char| matches!(c, '\x21' | '\x23'..='\x5b' | '\x5d'..='\x7e');
    let mut tokens = Vec::new();
    for item in items {
        if item.is_empty() || !item.chars().all(valid) {
            return Err(Invalid(
                "the access token's scopes hold a character a scope may not have (RFC 6749 \
                 3.3: printable ASCII but space, `\"` and `\\`)"
                    .into(),
            ));
        }
        tokens.push(item.to_string());
    }
    Ok(bounded(tokens.into_iter()))
}

/// At most [`MAX_CLAIM_ITEMS`] items, each at most [`MAX_CLAIM_BYTES`], all at most
/// [`MAX_CLAIM_LIST_BYTES`].
fn bounded(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut total = 0;
    items
        .filter(|s| s.len() <= MAX_CLAIM_BYTES)
        .take(MAX_CLAIM_ITEMS)
        .take_while(|s| {
            total += s.len();
            total <= MAX_CLAIM_LIST_BYTES
        })
        .collect()
}

#[cfg(test)]
mod tests;
