//! The registry side: authentication and blob transfers through oci-client, and the one
//! request toolhost makes itself, the manifest's, so that it is read no further than its
//! maximum size and a redirect is refused (oci-client reads a manifest whole and follows
//! redirects). Plain HTTP only for registries on loopback and those the operator lists as
//! insecure. Credentials come from the environment or a Docker `config.json`, never the TOML.

use super::reference::{Digest, Reference};
use super::{RegistryError, RegistrySettings};
use base64::Engine as _;
use futures_util::StreamExt as _;
use oci_client::RegistryOperation;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use std::collections::HashMap;
use std::time::Duration;

/// The manifest media types asked for: OCI and Docker image manifests and indexes.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// Registry credentials: `TOOLHOST_REGISTRY_USERNAME` and `TOOLHOST_REGISTRY_PASSWORD` for
/// every registry, else the registry's entry in the Docker `config.json`
/// (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), else anonymous.
#[derive(Clone, Default)]
pub struct Credentials {
    everywhere: Option<(String, String)>,
    by_registry: HashMap<String, (String, String)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("everywhere", &self.everywhere.is_some())
            .field("registries", &self.by_registry.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Credentials {
    /// Reads the environment and the Docker config. A config that cannot be read is named
    /// in the error; one that does not exist is no credentials.
    pub fn from_environment() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let everywhere = match (
            var("TOOLHOST_REGISTRY_USERNAME"),
            var("TOOLHOST_REGISTRY_PASSWORD"),
        ) {
            (Some(user), Some(password)) => Some((user, password)),
            (None, None) => None,
            _ => {
                return Err("set both TOOLHOST_REGISTRY_USERNAME and \
                            TOOLHOST_REGISTRY_PASSWORD, or neither"
                    .into());
            }
        };
        let config = var("DOCKER_CONFIG")
            .map(|dir| std::path::PathBuf::from(dir).join("config.json"))
            .or_else(|| var("HOME").map(|home| format!("{home}/.docker/config.json").into()));
        let by_registry = match config.filter(|path| path.exists()) {
            Some(path) => docker_auths(&path)?,
            None => HashMap::new(),
        };
        Ok(Credentials {
            everywhere,
            by_registry,
        })
    }

    /// Credentials for every registry (tests, and `push --username`).
    pub fn everywhere(user: &str, password: &str) -> Self {
        Credentials {
            everywhere: Some((user.to_string(), password.to_string())),
            by_registry: HashMap::new(),
        }
    }

    fn auth(&self, registry: &str) -> RegistryAuth {
        match self
            .everywhere
            .as_ref()
            .or_else(|| self.by_registry.get(registry))
        {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }
}

/// The `auths` of a Docker config: `{"auths": {"<registry>": {"auth": base64(user:pass)}}}`
/// (keys may be written as URLs).
fn docker_auths(path: &std::path::Path) -> Result<HashMap<String, (String, String)>, String> {
    let fail = |e: String| {
        format!(
            "cannot read registry credentials from {}: {e}",
            path.display()
        )
    };
    let bytes = crate::config::read_limited(path, 1 << 20).map_err(fail)?;
    let config: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
    let mut auths = HashMap::new();
    let Some(entries) = config.get("auths").and_then(|a| a.as_object()) else {
        return Ok(auths);
    };
    for (key, entry) in entries {
        let registry = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let pair = match entry.get("auth").and_then(|a| a.as_str()) {
            Some(auth) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth)
                    .map_err(|e| fail(format!("`auth` of {key}: {e}")))?;
                let text = String::from_utf8(decoded)
                    .map_err(|_| fail(format!("`auth` of {key} is not UTF-8")))?;
                let (user, password) = text
                    .split_once(':')
                    .ok_or_else(|| fail(format!("`auth` of {key} is not user:password")))?;
                (user.to_string(), password.to_string())
            }
            None => match (
                entry.get("username").and_then(|u| u.as_str()),
                entry.get("password").and_then(|p| p.as_str()),
            ) {
                (Some(user), Some(password)) => (user.to_string(), password.to_string()),
                _ => continue,
            },
        };
        auths.insert(registry, pair);
    }
    Ok(auths)
}

/// The clients for the registries of one resolve.
pub(super) struct Remote {
    client: oci_client::Client,
    /// For manifests: no redirects, the same timeouts.
    http: reqwest::Client,
    credentials: super::Credentials,
    insecure: Vec<String>,
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
        crate::tls::install_provider();
        let insecure = plain_http(settings, references);
        let connect = Duration::from_secs(5);
        let read = Duration::from_secs(10);
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(insecure.clone()),
            platform_resolver: None,
            connect_timeout: Some(connect),
            read_timeout: Some(read),
            user_agent: concat!("toolhost/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        let client = oci_client::Client::try_from(config)
            .map_err(|e| RegistryError::Other(format!("cannot set up the registry client: {e}")))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect)
            .read_timeout(read)
            .user_agent(concat!("toolhost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RegistryError::Other(format!("cannot set up the registry client: {e}")))?;
        Ok(Remote {
            client,
            http,
            credentials: settings.credentials.clone(),
            insecure,
        })
    }

    fn scheme(&self, reference: &Reference) -> &'static str {
        if self.insecure.iter().any(|r| r == reference.registry()) {
            "http"
        } else {
            "https"
        }
    }

    /// Authenticates for `operation` (oci-client keeps the token for its own requests) and
    /// returns the `Authorization` value for toolhost's own.
    pub(super) async fn authorize(
        &self,
        reference: &Reference,
        operation: RegistryOperation,
    ) -> Result<(RegistryAuth, Option<String>), RegistryError> {
        let auth = self.credentials.auth(reference.registry());
        let token = self
            .client
            .auth(&reference.client(), &auth, operation)
            .await
            .map_err(|e| self.error(reference, "authentication", e))?;
        let header = match (&token, &auth) {
            (Some(token), _) => Some(format!("Bearer {token}")),
            (None, RegistryAuth::Basic(user, password)) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
            _ => None,
        };
        Ok((auth, header))
    }

    /// The manifest at `tag_or_digest`, read no further than `limit` bytes; a digest asked
    /// for is checked.
    pub(super) async fn manifest(
        &self,
        reference: &Reference,
        tag_or_digest: &str,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let (_, authorization) = self.authorize(reference, RegistryOperation::Pull).await?;
        let url = format!(
            "{}://{}/v2/{}/manifests/{tag_or_digest}",
            self.scheme(reference),
            reference.registry(),
            reference.repository()
        );
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
            let detail = read_bounded(&mut response, 4096)
                .await
                .map(|body| format!(": {}", printable(&String::from_utf8_lossy(&body))))
                .unwrap_or_default();
            return Err(RegistryError::Refused {
                registry: reference.registry().to_string(),
                what,
                status: status.as_u16(),
                detail,
            });
        }
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large(&what, limit, "[host.registry] max-manifest-kib"));
        }
        let body = read_bounded(&mut response, limit)
            .await
            .map_err(|e| match e {
                Read::TooLarge => too_large(&what, limit, "[host.registry] max-manifest-kib"),
                Read::Failed(e) => self.unreachable(reference, &e),
            })?;
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
        layer: &OciDescriptor,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        self.authorize(reference, RegistryOperation::Pull).await?;
        let declared = u64::try_from(layer.size).unwrap_or(u64::MAX).min(limit);
        let what = format!("the component of {reference}");
        let mut stream = self
            .client
            .pull_blob_stream(&reference.client(), layer)
            .await
            .map_err(|e| self.error(reference, &what, e))?;
        if stream.content_length.is_some_and(|n| n > declared) {
            return Err(too_large(&what, declared, "the size its manifest declares"));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(declared.min(1 << 20)).unwrap_or(0));
        let expected = Digest::parse(&layer.digest).map_err(RegistryError::Other)?;
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                // oci-client checks the digest too, failing the stream's end: said as ours.
                Err(_) if bytes.len() as u64 == declared && Digest::of(&bytes) != expected => {
                    break;
                }
                Err(e) => {
                    return Err(RegistryError::Unreachable {
                        registry: reference.registry().to_string(),
                        reason: format!("{what}: {}", printable(&e.to_string())),
                    });
                }
            };
            if (bytes.len() + chunk.len()) as u64 > declared {
                return Err(too_large(&what, declared, "the size its manifest declares"));
            }
            bytes.extend_from_slice(&chunk);
        }
        let actual = Digest::of(&bytes);
        if actual != expected {
            return Err(RegistryError::DigestMismatch { expected, actual });
        }
        Ok(bytes)
    }

    pub(super) fn client(&self) -> &oci_client::Client {
        &self.client
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

    /// An oci-client error, as toolhost's.
    pub(super) fn error(
        &self,
        reference: &Reference,
        what: &str,
        e: oci_client::errors::OciDistributionError,
    ) -> RegistryError {
        use oci_client::errors::OciDistributionError as E;
        match e {
            E::RequestError(e) => self.unreachable(reference, &e),
            E::ServerError { code, message, .. } => RegistryError::Refused {
                registry: reference.registry().to_string(),
                what: what.to_string(),
                status: code,
                detail: format!(": {}", printable(&message)),
            },
            E::AuthenticationFailure(message) => RegistryError::Refused {
                registry: reference.registry().to_string(),
                what: format!("{what} (authentication)"),
                status: 401,
                detail: format!(": {}", printable(&message)),
            },
            E::UnauthorizedError { .. } => RegistryError::Refused {
                registry: reference.registry().to_string(),
                what: format!("{what} (check the credentials)"),
                status: 401,
                detail: String::new(),
            },
            other => RegistryError::Other(format!("{what}: {}", printable(&other.to_string()))),
        }
    }
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
