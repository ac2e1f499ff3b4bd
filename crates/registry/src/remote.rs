//! The registry side: the distribution protocol's requests, each made by toolhost itself so
//! that every response is read no further than a bound, whatever the registry (or whoever
//! answers for it) sends: a token at most [`MAX_TOKEN_BYTES`], a manifest its configured
//! maximum, a blob the size its manifest declares, an error body its first
//! [`MAX_DETAIL_BYTES`]; a response that is not needed is not read at all. Time limits (each
//! connection, each read, and the caller's deadline) come in addition to these, not instead.
//!
//! Authentication is the registries' token protocol: `GET /v2/` says how (a `Bearer` realm,
//! or `Basic`), the realm answers a token for the repository and the operation, and tokens are
//! kept until they expire. No redirect is followed for a manifest, a token or an upload; a
//! blob may be redirected (registries send them to storage hosts) a few times, and its
//! credentials never go to another host. Plain HTTP only for registries on loopback and those
//! the operator lists as insecure. Credentials ([`super::credentials`]) come from the
//! environment or a Docker `config.json`, never the TOML. oci-client's types describe manifests and references; its
//! client is not used, since it reads tokens and error bodies whole.

use super::reference::{Digest, Reference};
use super::{RegistryError, RegistrySettings};
use base64::Engine as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most of a token response read.
pub const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// The most of an error response read, for its message.
pub const MAX_DETAIL_BYTES: u64 = 4 << 10;
/// Redirects a blob download may follow.
const BLOB_REDIRECTS: usize = 5;
/// Tokens kept, at most (one per registry, repository and operation).
const MAX_TOKENS: usize = 256;
/// How long a token is kept when its response says nothing of it (the distribution spec's
/// default), and how much sooner than its end it is let go.
const TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// The longest a token is kept, whatever its response says.
const MAX_TOKEN_LIFETIME_S: u64 = 86_400;
const TOKEN_MARGIN: Duration = Duration::from_secs(10);

/// The manifest media types asked for: OCI and Docker image manifests and indexes.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// What a push or pull may do in a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Operation {
    Pull,
    Push,
}

impl Operation {
    fn scope(self, repository: &str) -> String {
        match self {
            Operation::Pull => format!("repository:{repository}:pull"),
            Operation::Push => format!("repository:{repository}:pull,push"),
        }
    }
}

/// `Authorization` values by registry and scope, with the moment each stops being used.
type Tokens = HashMap<(String, String), (Option<String>, Instant)>;

/// The clients for the registries of one resolve.
pub(super) struct Remote {
    /// Registry requests: no redirects.
    http: reqwest::Client,
    /// Blob downloads: a few redirects (reqwest drops `Authorization` for another host).
    blobs: reqwest::Client,
    credentials: super::Credentials,
    insecure: Vec<String>,
    tokens: Mutex<Tokens>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

/// The registries reached over plain HTTP for `references`: those listed as insecure, and
/// those on loopback; sorted, once each.
fn plain_http<'a>(
    settings: &RegistrySettings,
    references: impl Iterator<Item = &'a Reference>,
) -> Vec<String> {
    let mut insecure = settings.insecure.clone();
    insecure.extend(
        references
            .filter(|r| r.is_loopback())
            .map(|r| r.registry().to_string()),
    );
    insecure.sort();
    insecure.dedup();
    insecure
}

/// A token response: `token` (the distribution spec) or `access_token` (OAuth 2), and how
/// long it lasts.
#[derive(serde::Deserialize)]
struct TokenResponse {
    token: Option<String>,
    access_token: Option<String>,
    expires_in: Option<u64>,
}

impl Remote {
    /// True when these clients reach `references` as new ones would.
    pub(super) fn serves<'a>(
        &self,
        settings: &RegistrySettings,
        references: impl Iterator<Item = &'a Reference>,
    ) -> bool {
        plain_http(settings, references) == self.insecure
    }

    pub(super) fn new<'a>(
        settings: &RegistrySettings,
        references: impl Iterator<Item = &'a Reference>,
    ) -> Result<Self, RegistryError> {
        toolhost_contract::tls::install_provider();
        let insecure = plain_http(settings, references);
        let client = |redirects: reqwest::redirect::Policy| {
            reqwest::Client::builder()
                .redirect(redirects)
                .connect_timeout(Duration::from_secs(5))
                .read_timeout(Duration::from_secs(10))
                .user_agent(concat!("toolhost/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| {
                    RegistryError::Other(format!("cannot set up the registry client: {e}"))
                })
        };
        Ok(Remote {
            http: client(reqwest::redirect::Policy::none())?,
            blobs: client(reqwest::redirect::Policy::limited(BLOB_REDIRECTS))?,
            credentials: settings.credentials.clone(),
            insecure,
            tokens: Mutex::default(),
        })
    }

    fn scheme(&self, registry: &str) -> &'static str {
        if self.insecure.iter().any(|r| r == registry) {
            "http"
        } else {
            "https"
        }
    }

    /// `scheme://registry/v2/repository/<path>`.
    fn url(&self, reference: &Reference, path: &str) -> String {
        format!(
            "{}://{}/v2/{}/{path}",
            self.scheme(reference.registry()),
            reference.registry(),
            reference.repository()
        )
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, Tokens> {
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `Authorization` value for `operation` in `reference`'s repository, if the registry
    /// wants one: a kept token, or a new one from the realm `GET /v2/` names.
    pub(super) async fn authorize(
        &self,
        reference: &Reference,
        operation: Operation,
    ) -> Result<Option<String>, RegistryError> {
        let registry = reference.registry().to_string();
        let scope = operation.scope(reference.repository());
        let key = (registry.clone(), scope.clone());
        if let Some((header, until)) = self.lock_tokens().get(&key)
            && Instant::now() < *until
        {
            return Ok(header.clone());
        }
        let url = format!("{}://{registry}/v2/", self.scheme(&registry));
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        // Its body is never read: only the status and the challenge count.
        let challenge = (response.status() == reqwest::StatusCode::UNAUTHORIZED)
            .then(|| response.headers().get(reqwest::header::WWW_AUTHENTICATE))
            .flatten()
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        drop(response);
        let basic = self.credentials.basic(&registry).map(|(user, password)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )
        });
        let (header, lasts) = match challenge.as_deref().and_then(bearer_realm) {
            Some((realm, service)) => {
                let (token, lasts) = self
                    .token(
                        reference,
                        &realm,
                        service.as_deref(),
                        &scope,
                        basic.as_deref(),
                    )
                    .await?;
                (Some(format!("Bearer {token}")), lasts)
            }
            // No challenge (anonymous), or one that is not Bearer: the credentials as they are.
            None => (basic.filter(|_| challenge.is_some()), TOKEN_LIFETIME),
        };
        let mut tokens = self.lock_tokens();
        if tokens.len() >= MAX_TOKENS {
            tokens.clear();
        }
        let until = Instant::now() + lasts.saturating_sub(TOKEN_MARGIN);
        tokens.insert(key, (header.clone(), until));
        Ok(header)
    }

    /// A token for `scope` from `realm`, read no further than [`MAX_TOKEN_BYTES`], and how
    /// long it lasts.
    async fn token(
        &self,
        reference: &Reference,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        basic: Option<&str>,
    ) -> Result<(String, Duration), RegistryError> {
        let registry = reference.registry();
        let what = format!("the token for {reference} from {}", printable(realm));
        let refused = |status: u16, detail: String| RegistryError::Refused {
            registry: registry.to_string(),
            what: what.clone(),
            status,
            detail,
        };
        let mut url = reqwest::Url::parse(realm)
            .map_err(|e| refused(401, format!(": the realm is not a URL ({e})")))?;
        // Plain HTTP only where the registry itself is reached so.
        let plain = self.scheme(registry) == "http";
        if !(url.scheme() == "https" || (url.scheme() == "http" && plain)) {
            return Err(refused(
                401,
                format!(
                    ": its realm is a `{}` URL, which toolhost sends no credentials to",
                    url.scheme()
                ),
            ));
        }
        url.query_pairs_mut().append_pair("scope", scope);
        if let Some(service) = service {
            url.query_pairs_mut().append_pair("service", service);
        }
        let mut request = self.http.get(url);
        if let Some(basic) = basic {
            request = request.header(reqwest::header::AUTHORIZATION, basic);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            return Err(self.refused(reference, &what, &mut response).await);
        }
        let body = self
            .read(
                reference,
                &mut response,
                &what,
                MAX_TOKEN_BYTES,
                "the bound on a token response",
            )
            .await?;
        let token: TokenResponse = serde_json::from_slice(&body)
            .map_err(|e| refused(status, format!(": not a token response ({e})")))?;
        // Whatever the registry says, a token is kept a day at most.
        let lasts = (token.expires_in).map_or(TOKEN_LIFETIME, |s| {
            Duration::from_secs(s.min(MAX_TOKEN_LIFETIME_S))
        });
        match token.token.or(token.access_token).filter(|t| !t.is_empty()) {
            Some(token) => Ok((token, lasts)),
            None => Err(refused(status, ": the response holds no token".into())),
        }
    }

    /// The manifest at `tag_or_digest`, read no further than `limit` bytes; a digest asked
    /// for is checked.
    pub(super) async fn manifest(
        &self,
        reference: &Reference,
        tag_or_digest: &str,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let authorization = self.authorize(reference, Operation::Pull).await?;
        let url = self.url(reference, &format!("manifests/{tag_or_digest}"));
        let mut request = self.http.get(&url).header("Accept", MANIFEST_TYPES);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let what = format!("the manifest of {reference}");
        let mut response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .unwrap_or("elsewhere");
            return Err(RegistryError::Redirected {
                registry: reference.registry().to_string(),
                location: printable(location),
            });
        }
        if !status.is_success() {
            return Err(self.refused(reference, &what, &mut response).await);
        }
        let setting = "[host.registry] max-manifest-kib";
        let body = self
            .read(reference, &mut response, &what, limit, setting)
            .await?;
        if let Ok(expected) = Digest::parse(tag_or_digest) {
            let actual = Digest::of(&body);
            if actual != expected {
                return Err(RegistryError::DigestMismatch { expected, actual });
            }
        }
        Ok(body)
    }

    /// The blob `layer` describes, read no further than its declared size (itself at most
    /// `limit`), checked against its digest.
    pub(super) async fn blob(
        &self,
        reference: &Reference,
        layer: &oci_client::manifest::OciDescriptor,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let authorization = self.authorize(reference, Operation::Pull).await?;
        let declared = u64::try_from(layer.size).unwrap_or(u64::MAX).min(limit);
        let what = format!("the component of {reference}");
        let expected = Digest::parse(&layer.digest).map_err(RegistryError::Other)?;
        let url = self.url(reference, &format!("blobs/{}", expected.as_str()));
        let mut request = self.blobs.get(&url);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        if !response.status().is_success() {
            return Err(self.refused(reference, &what, &mut response).await);
        }
        let setting = "the size its manifest declares";
        let bytes = self
            .read(reference, &mut response, &what, declared, setting)
            .await?;
        let actual = Digest::of(&bytes);
        if actual != expected {
            return Err(RegistryError::DigestMismatch { expected, actual });
        }
        Ok(bytes)
    }

    /// True when the registry has the blob `digest` in `reference`'s repository.
    pub(super) async fn has_blob(
        &self,
        reference: &Reference,
        digest: &Digest,
        authorization: Option<&str>,
    ) -> Result<bool, RegistryError> {
        let url = self.url(reference, &format!("blobs/{}", digest.as_str()));
        let mut request = self.http.head(&url);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        Ok(response.status().is_success())
    }

    /// Uploads `bytes` as the blob `digest` of `reference`'s repository: an upload session
    /// opened, then the whole blob in one request (the distribution spec's monolithic upload).
    pub(super) async fn upload_blob(
        &self,
        reference: &Reference,
        digest: &Digest,
        bytes: bytes::Bytes,
        authorization: Option<&str>,
    ) -> Result<(), RegistryError> {
        let what = format!("the upload of {digest} to {reference}");
        let refused = |status: u16, detail: String| RegistryError::Refused {
            registry: reference.registry().to_string(),
            what: what.clone(),
            status,
            detail,
        };
        let start = self.url(reference, "blobs/uploads/");
        let mut request = self
            .http
            .post(&start)
            .header(reqwest::header::CONTENT_LENGTH, 0);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            return Err(self.refused(reference, &what, &mut response).await);
        }
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| refused(status, ": no Location for the upload".into()))?;
        drop(response);
        // The Location may be relative to the registry, and carry a query of its own; it
        // must stay on the registry, which the credentials are for.
        let base = reqwest::Url::parse(&start).map_err(|e| RegistryError::Other(e.to_string()))?;
        let mut url = base
            .join(&location)
            .map_err(|e| refused(status, format!(": its Location is not a URL ({e})")))?;
        if url.origin() != base.origin() {
            return Err(refused(
                status,
                format!(
                    ": it sends the upload to another host ({})",
                    printable(&location)
                ),
            ));
        }
        url.query_pairs_mut().append_pair("digest", digest.as_str());
        let mut request = self
            .http
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        if !response.status().is_success() {
            return Err(self.refused(reference, &what, &mut response).await);
        }
        Ok(())
    }

    /// Puts `manifest` (of `media_type`) at `tag` of `reference`'s repository.
    pub(super) async fn put_manifest(
        &self,
        reference: &Reference,
        tag: &str,
        manifest: Vec<u8>,
        media_type: &str,
        authorization: Option<&str>,
    ) -> Result<(), RegistryError> {
        let what = format!("the manifest of {reference}");
        let url = self.url(reference, &format!("manifests/{tag}"));
        let mut request = self
            .http
            .put(&url)
            .header(reqwest::header::CONTENT_TYPE, media_type)
            .body(manifest);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.unreachable(reference, &e))?;
        if !response.status().is_success() {
            return Err(self.refused(reference, &what, &mut response).await);
        }
        Ok(())
    }

    /// A response's body, no more than `limit` bytes (a declared length past it is refused
    /// before anything is read).
    async fn read(
        &self,
        reference: &Reference,
        response: &mut reqwest::Response,
        what: &str,
        limit: u64,
        setting: &'static str,
    ) -> Result<Vec<u8>, RegistryError> {
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large(what, limit, setting));
        }
        read_bounded(response, limit).await.map_err(|e| match e {
            Read::TooLarge => too_large(what, limit, setting),
            Read::Failed(e) => self.unreachable(reference, &e),
        })
    }

    /// A refusal (an error status), its message from the first [`MAX_DETAIL_BYTES`] of the
    /// body at most.
    async fn refused(
        &self,
        reference: &Reference,
        what: &str,
        response: &mut reqwest::Response,
    ) -> RegistryError {
        let status = response.status().as_u16();
        let detail = read_start(response, MAX_DETAIL_BYTES as usize)
            .await
            .map(|body| printable(&String::from_utf8_lossy(&body)))
            .filter(|text| !text.is_empty())
            .map(|text| format!(": {text}"))
            .unwrap_or_default();
        RegistryError::Refused {
            registry: reference.registry().to_string(),
            what: what.to_string(),
            status,
            detail,
        }
    }

    fn unreachable(&self, reference: &Reference, e: &reqwest::Error) -> RegistryError {
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            reason = format!("{reason}: {cause}");
            source = cause.source();
        }
        RegistryError::Unreachable {
            registry: reference.registry().to_string(),
            reason,
        }
    }
}

/// The realm and service of a `Bearer` challenge among `header`'s challenges.
fn bearer_realm(header: &str) -> Option<(String, Option<String>)> {
    let challenge = http_auth::parser::ChallengeParser::new(header)
        .map_while(Result::ok)
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))?;
    let param = |name: &str| {
        challenge
            .params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.to_unescaped())
    };
    Some((param("realm")?, param("service")))
}

enum Read {
    TooLarge,
    Failed(reqwest::Error),
}

/// A response's body, failing past `limit` bytes.
async fn read_bounded(response: &mut reqwest::Response, limit: u64) -> Result<Vec<u8>, Read> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Read::Failed)? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(Read::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The first `limit` bytes of a response's body, the rest not read (an error's message).
async fn read_start(response: &mut reqwest::Response, limit: usize) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while body.len() < limit {
        let Ok(Some(chunk)) = response.chunk().await else {
            break;
        };
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    (!body.is_empty()).then_some(body)
}

fn too_large(what: &str, limit: u64, setting: &'static str) -> RegistryError {
    RegistryError::TooLarge {
        what: what.to_string(),
        limit,
        setting,
    }
}

/// A registry's text for a message: one line, printable, at most 300 characters.
fn printable(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    clean.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_realm_is_found_among_challenges() {
        assert_eq!(
            bearer_realm(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="x""#
            ),
            Some((
                "https://auth.example/token".into(),
                Some("registry.example".into())
            ))
        );
        assert_eq!(
            bearer_realm(r#"Basic realm="r", Bearer realm="https://a/t""#),
            Some(("https://a/t".into(), None))
        );
        assert_eq!(bearer_realm(r#"Basic realm="registry""#), None);
        assert_eq!(bearer_realm("Bearer"), None);
        assert_eq!(bearer_realm("\"garbage"), None);
    }
}
