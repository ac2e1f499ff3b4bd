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
//! fetched in use; with none, every token is refused (fail closed).

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
    /// When the metadata was last fetched (or tried), until it was read.
    discovered: Option<Instant>,
    metadata: Option<Discovered>,
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
        let identity = Arc::new(identity_of(&claims, &self.settings.groups_claim)?);
        let expires = (claims.get("exp").and_then(Value::as_u64))
            .map_or(UNIX_EPOCH, |exp| UNIX_EPOCH + Duration::from_secs(exp));
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
        if fetching
            .fetched
            .is_some_and(|at| at.elapsed() < REFETCH_INTERVAL)
        {
            if keys.is_empty() {
                return Err(Invalid(format!(
                    "this server has no keys of the issuer to check the token with: the last \
                     fetch failed (tried again at most every {} s)",
                    REFETCH_INTERVAL.as_secs()
                )));
            }
            return Ok(keys);
        }
        fetching.fetched = Some(Instant::now());
        match self.fetch(&mut fetching).await {
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
    /// tried again at most once per [`REFETCH_INTERVAL`]).
    pub async fn endpoints(&self) -> Result<Endpoints, Invalid> {
        let mut fetching = self.fetching.lock().await;
        let discovered = match &fetching.metadata {
            Some(metadata) => metadata.clone(),
            None if (fetching.discovered).is_some_and(|at| at.elapsed() < REFETCH_INTERVAL) => {
                return Err(Invalid(format!(
                    "the provider's metadata could not be fetched lately (tried again at most \
                     every {} s)",
                    REFETCH_INTERVAL.as_secs()
                )));
            }
            None => self.discover(&mut fetching).await?,
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
/// `azp`; scopes from `scope` (a space-separated string) or `scp` (a list); groups from the
/// configured claim. Each list and item bounded.
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
    let list = |value: Option<&Value>| -> Vec<String> {
        let items: Vec<String> = match value {
            Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
            Some(Value::Array(items)) => (items.iter())
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        let mut total = 0;
        (items.into_iter())
            .filter(|s| s.len() <= MAX_CLAIM_BYTES)
            .take(MAX_CLAIM_ITEMS)
            .take_while(|s| {
                total += s.len();
                total <= MAX_CLAIM_LIST_BYTES
            })
            .collect()
    };
    Ok(Identity {
        kind: IdentityKind::Oauth,
        name,
        client: text("client_id").or_else(|| text("azp")),
        groups: list(claims.get(groups_claim)),
        scopes: list(claims.get("scope").or_else(|| claims.get("scp"))),
    })
}

#[cfg(test)]
mod tests;
