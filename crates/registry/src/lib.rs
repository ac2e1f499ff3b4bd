//! registry: components named by `oci://` references. A reference resolves to a digest (a
//! tag by one manifest request with a short deadline; a digest is its own answer), and the
//! component is read from the local content store ([`store`]) or pulled into it first. A
//! registry is as untrusted as the tools it serves: every request has a deadline, manifests
//! and blobs have maximum sizes, every byte is checked against its digest before it is kept,
//! and a tag whose registry cannot be reached keeps the digest it last resolved to (with a
//! warning), so a host starts, checks and reloads offline once its components are pulled.
//!
//! The layout is the CNCF Wasm OCI artifact (what wkg, Spin and Wassette use): an image
//! manifest whose config is `application/vnd.wasm.config.v0+json` and whose one layer is
//! `application/wasm`; an image index picks its `wasm`/`wasip2` entry. Every request of the
//! distribution protocol is toolhost's own ([`remote`]), so that every response a registry
//! sends (tokens and error bodies included) is read no further than a bound.

mod credentials;
mod push;
mod reference;
mod remote;
mod store;
pub mod trust;

pub use credentials::Credentials;
pub use push::push;
pub use reference::{Digest, Reference, SCHEME};
pub use store::{Store, TagRecord};
pub use trust::{SigningKey, TrustedKey};

use oci_client::manifest::{OciImageManifest, OciManifest};
use remote::Remote;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The config media type of a Wasm component artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer, the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// References resolved (and pulled) at once in one resolve; the others wait their turn.
const PULLS_AT_ONCE: usize = 8;

/// Why a reference could not be resolved or pulled.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "components from registries are kept in the cache directory, and there is none \
         (--no-cache): set a cache directory"
    )]
    NoStore,
    #[error("the content store: {0}")]
    Store(String),
    #[error("cannot reach registry {registry}: {reason}")]
    Unreachable { registry: String, reason: String },
    #[error("registry {registry} answered {status} for {what}{detail}")]
    Refused {
        registry: String,
        what: String,
        status: u16,
        detail: String,
    },
    #[error(
        "registry {registry} redirected the manifest request to {location}; toolhost does not \
         follow a redirect for a manifest"
    )]
    Redirected { registry: String, location: String },
    #[error("{what} is larger than the {limit} bytes allowed ({setting})")]
    TooLarge {
        what: String,
        limit: u64,
        setting: &'static str,
    },
    #[error("{what} did not finish within {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("content with digest {actual} arrived where {expected} was expected; nothing kept")]
    DigestMismatch { expected: Digest, actual: Digest },
    #[error("{reference} is not a Wasm component artifact: {reason}")]
    NotWasm { reference: String, reason: String },
    #[error(
        "{reference} is not pulled yet (component {digest}, {size} bytes): `toolhost pull` \
         fetches it"
    )]
    NotPulled {
        reference: String,
        digest: Digest,
        size: u64,
    },
    #[error("{0}")]
    Other(String),
}

/// How far resolving a reference may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// Resolve tags and pull what is missing (`serve`, reloads, `pull`, `list`, `call`).
    Missing,
    /// Resolve tags (manifests are small) but pull no component: one not in the store is
    /// [`RegistryError::NotPulled`] (`check`).
    ManifestsOnly,
}

/// Bounds and access for registries, from `[host.registry]` and the environment.
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// The content store's directory (`<cache>/oci`); `None` refuses every reference.
    pub store: Option<PathBuf>,
    /// Registries reached over plain HTTP besides those on loopback (`host:port`).
    pub insecure: Vec<String>,
    pub max_manifest_bytes: u64,
    pub max_blob_bytes: u64,
    /// The deadline of a tag's resolution (its manifest request, with authentication).
    pub resolve_timeout: Duration,
    /// The deadline of a whole pull of one reference.
    pub pull_timeout: Duration,
    pub credentials: Credentials,
    /// The keys a component may be signed with (cosign public keys); with none, signatures
    /// are not looked at.
    pub trusted_keys: Vec<TrustedKey>,
    /// Every `oci://` component must be signed by one of `trusted_keys` (`[trust]
    /// require-signatures`); an ensemble may ask the same for its own.
    pub require_signatures: bool,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        RegistrySettings {
            store: None,
            insecure: Vec::new(),
            max_manifest_bytes: 1 << 20,
            max_blob_bytes: 64 << 20,
            resolve_timeout: Duration::from_secs(5),
            pull_timeout: Duration::from_secs(120),
            credentials: Credentials::default(),
            trusted_keys: Vec::new(),
            require_signatures: false,
        }
    }
}

/// A reference resolved to a component in the store.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference as written.
    pub reference: Reference,
    /// The digest it resolved to: the manifest's, or the index's when it names one.
    pub digest: Digest,
    /// The component's own digest (its layer).
    pub component: Digest,
    pub bytes: Arc<[u8]>,
    /// True when this resolve pulled the component (it was not in the store).
    pub fetched: bool,
    /// Set when a tag could not be resolved and its last resolved digest was used.
    pub warning: Option<String>,
    /// Every digest it keeps in use in the store (index, manifest, component, signature).
    pub digests: Vec<Digest>,
    /// With trusted keys: the key that signed it, or why none did. `None` without keys.
    pub signature: Option<Result<String, String>>,
}

/// Resolves references through the content store and the registries.
#[derive(Debug)]
pub struct Registry {
    settings: RegistrySettings,
    store: Option<Store>,
    store_error: Option<String>,
    /// The clients of the last resolve, kept while the registries reached over plain HTTP
    /// stay the same (building one costs more than a manifest request on loopback; kept,
    /// they also keep their connections and tokens).
    remote: std::sync::Mutex<Option<Arc<Remote>>>,
}

impl Registry {
    /// A registry client keeping what it pulls in `settings.store`.
    pub fn new(settings: RegistrySettings) -> Self {
        toolhost_contract::tls::install_provider();
        let (store, store_error) = match settings.store.as_deref().map(Store::open) {
            Some(Ok(store)) => (Some(store), None),
            Some(Err(e)) => (None, Some(e.to_string())),
            None => (None, None),
        };
        Registry {
            settings,
            store,
            store_error,
            remote: std::sync::Mutex::default(),
        }
    }

    /// Clients for `references`: the last ones, if they reach the same registries over plain
    /// HTTP, else new ones.
    fn remote<'a>(
        &self,
        references: impl Iterator<Item = &'a Reference> + Clone,
    ) -> Result<Arc<Remote>, RegistryError> {
        let mut kept = self
            .remote
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(remote) = kept
            .as_ref()
            .filter(|r| r.serves(&self.settings, references.clone()))
        {
            return Ok(Arc::clone(remote));
        }
        let remote = Arc::new(Remote::new(&self.settings, references)?);
        *kept = Some(Arc::clone(&remote));
        Ok(remote)
    }

    pub fn settings(&self) -> &RegistrySettings {
        &self.settings
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    fn store_or_error(&self) -> Result<&Store, RegistryError> {
        match (&self.store, &self.store_error) {
            (Some(store), _) => Ok(store),
            (None, Some(e)) => Err(RegistryError::Store(e.clone())),
            (None, None) => Err(RegistryError::NoStore),
        }
    }

    /// Resolves every reference at once (each pull in its own task).
    pub async fn pull_all(
        self: &Arc<Self>,
        references: Vec<Reference>,
        fetch: Fetch,
    ) -> Vec<(Reference, Result<Pulled, RegistryError>)> {
        if references.is_empty() {
            return Vec::new();
        }
        let remote = match self.remote(references.iter()) {
            Ok(remote) => remote,
            Err(e) => {
                return references
                    .into_iter()
                    .map(|r| (r, Err(e.clone())))
                    .collect();
            }
        };
        let mut pulls = tokio::task::JoinSet::new();
        let slots = Arc::new(tokio::sync::Semaphore::new(PULLS_AT_ONCE));
        for (i, reference) in references.iter().enumerate() {
            let registry = Arc::clone(self);
            let remote = Arc::clone(&remote);
            let reference = reference.clone();
            let slots = Arc::clone(&slots);
            pulls.spawn(async move {
                let _slot = slots.acquire_owned().await;
                (i, registry.pull_with(&remote, &reference, fetch).await)
            });
        }
        let mut results: Vec<Option<Result<Pulled, RegistryError>>> =
            references.iter().map(|_| None).collect();
        while let Some(done) = pulls.join_next().await {
            if let Ok((i, result)) = done {
                results[i] = Some(result);
            }
        }
        references
            .into_iter()
            .zip(results)
            .map(|(reference, result)| {
                let result = result
                    .unwrap_or_else(|| Err(RegistryError::Other("the pull task failed".into())));
                (reference, result)
            })
            .collect()
    }

    /// Resolves one reference.
    pub async fn pull(
        self: &Arc<Self>,
        reference: &Reference,
        fetch: Fetch,
    ) -> Result<Pulled, RegistryError> {
        let remote = self.remote(std::iter::once(reference))?;
        self.pull_with(&remote, reference, fetch).await
    }

    async fn pull_with(
        &self,
        remote: &Remote,
        reference: &Reference,
        fetch: Fetch,
    ) -> Result<Pulled, RegistryError> {
        let store = self.store_or_error()?;
        let deadline = self.settings.pull_timeout;
        let work = self.resolve_and_pull(store, remote, reference, fetch);
        tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| {
                Err(RegistryError::Timeout {
                    what: format!("pulling {reference}"),
                    after: deadline,
                })
            })
    }

    async fn resolve_and_pull(
        &self,
        store: &Store,
        remote: &Remote,
        reference: &Reference,
        fetch: Fetch,
    ) -> Result<Pulled, RegistryError> {
        let (digest, warning) = self.resolve(store, remote, reference).await?;
        let mut digests = vec![digest.clone()];
        let mut manifest = self.manifest(store, remote, reference, &digest).await?;
        if let OciManifest::ImageIndex(index) = &manifest {
            let entry = index
                .manifests
                .iter()
                .find(|entry| {
                    entry.platform.as_ref().is_some_and(|p| {
                        p.architecture.to_string() == "wasm" && p.os.to_string() == "wasip2"
                    })
                })
                .ok_or_else(|| not_wasm(reference, "an image index without a wasm/wasip2 entry"))?;
            let inner = Digest::parse(&entry.digest).map_err(|e| not_wasm(reference, &e))?;
            manifest = self.manifest(store, remote, reference, &inner).await?;
            digests.push(inner);
        }
        let OciManifest::Image(image) = manifest else {
            return Err(not_wasm(reference, "an image index inside an image index"));
        };
        let layer = self.layer(reference, &image)?;
        let component = Digest::parse(&layer.digest).map_err(|e| not_wasm(reference, &e))?;
        digests.push(component.clone());
        let limit = self.settings.max_blob_bytes;
        let (bytes, fetched) = match store.read(&component, limit) {
            Some(bytes) => (bytes, false),
            None if fetch == Fetch::ManifestsOnly => {
                return Err(RegistryError::NotPulled {
                    reference: reference.to_string(),
                    digest: component,
                    size: u64::try_from(layer.size).unwrap_or(0),
                });
            }
            None => {
                let bytes = remote.blob(reference, layer, limit).await?;
                store.write(&component, &bytes)?;
                (bytes, true)
            }
        };
        let signature = match self.settings.trusted_keys.is_empty() {
            true => None,
            false => Some(
                self.signature(store, remote, reference, &digest, &mut digests)
                    .await,
            ),
        };
        Ok(Pulled {
            reference: reference.clone(),
            digest,
            component,
            bytes: Arc::from(bytes),
            fetched,
            warning,
            digests,
            signature,
        })
    }

    /// Which trusted key signed `digest` (its cosign signature pulled into the store, or
    /// read from it), or why none did.
    async fn signature(
        &self,
        store: &Store,
        remote: &Remote,
        reference: &Reference,
        digest: &Digest,
        digests: &mut Vec<Digest>,
    ) -> Result<String, String> {
        let tag = trust::signature_tag(digest);
        let signed = reference.with_tag(&tag);
        let found = match self.resolve(store, remote, &signed).await {
            Ok((found, _)) => found,
            Err(RegistryError::Refused { status: 404, .. }) => {
                return Err(format!("it is not signed (the registry has no `{tag}`)"));
            }
            Err(e) => return Err(format!("its signature cannot be fetched: {e}")),
        };
        digests.push(found.clone());
        let manifest = self
            .manifest(store, remote, &signed, &found)
            .await
            .map_err(|e| format!("its signature cannot be read: {e}"))?;
        let OciManifest::Image(image) = manifest else {
            return Err(format!("`{tag}` is an index, not a signature"));
        };
        let mut signatures = Vec::new();
        let layers = image
            .layers
            .iter()
            .filter(|l| l.media_type == trust::PAYLOAD_MEDIA_TYPE);
        // cosign adds a layer per signature; a few are plenty to find the operator's.
        for layer in layers.take(16) {
            let Some(signature) =
                (layer.annotations.as_ref()).and_then(|a| a.get(trust::SIGNATURE_ANNOTATION))
            else {
                continue;
            };
            let Ok(payload_digest) = Digest::parse(&layer.digest) else {
                continue;
            };
            let payload = match store.read(&payload_digest, trust::MAX_PAYLOAD_BYTES) {
                Some(payload) => payload,
                None => {
                    let payload = (remote.blob(&signed, layer, trust::MAX_PAYLOAD_BYTES).await)
                        .map_err(|e| format!("its signature cannot be fetched: {e}"))?;
                    store
                        .write(&payload_digest, &payload)
                        .map_err(|e| e.to_string())?;
                    payload
                }
            };
            digests.push(payload_digest);
            signatures.push((payload, signature.clone()));
        }
        trust::verify(&self.settings.trusted_keys, digest, &signatures)
    }

    /// The digest `reference` names: its own, or its tag's now, or (the registry out of
    /// reach) the tag's last one, with a warning.
    async fn resolve(
        &self,
        store: &Store,
        remote: &Remote,
        reference: &Reference,
    ) -> Result<(Digest, Option<String>), RegistryError> {
        if let Some(digest) = reference.digest() {
            return Ok((digest.clone(), None));
        }
        let deadline = self.settings.resolve_timeout;
        let tag = reference.tag().unwrap_or_default().to_string();
        let asked = remote.manifest(reference, &tag, self.settings.max_manifest_bytes);
        let answer = tokio::time::timeout(deadline, asked)
            .await
            .unwrap_or_else(|_| {
                Err(RegistryError::Timeout {
                    what: format!("resolving {reference}"),
                    after: deadline,
                })
            });
        match answer {
            Ok(body) => {
                let digest = Digest::of(&body);
                store.write(&digest, &body)?;
                store.set_tag(reference, &digest)?;
                Ok((digest, None))
            }
            // Only a registry out of reach falls back; one that answers "no" is believed.
            Err(
                e @ (RegistryError::Unreachable { .. }
                | RegistryError::Timeout { .. }
                | RegistryError::Refused { status: 500.., .. }),
            ) => match store.tag(reference) {
                Some(record) => {
                    let warning = format!(
                        "{e}; using {}, what the tag resolved to at {}",
                        record.digest, record.resolved_at
                    );
                    tracing::warn!("{reference}: {warning}");
                    Ok((record.digest, Some(warning)))
                }
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// The manifest (or index) `digest`, from the store or else the registry.
    async fn manifest(
        &self,
        store: &Store,
        remote: &Remote,
        reference: &Reference,
        digest: &Digest,
    ) -> Result<OciManifest, RegistryError> {
        let limit = self.settings.max_manifest_bytes;
        let body = match store.read(digest, limit) {
            Some(body) => body,
            None => {
                let body = remote.manifest(reference, digest.as_str(), limit).await?;
                store.write(digest, &body)?;
                body
            }
        };
        serde_json::from_slice(&body)
            .map_err(|e| not_wasm(reference, &format!("its manifest does not parse: {e}")))
    }

    /// The one layer of a Wasm artifact's manifest, checked.
    fn layer<'m>(
        &self,
        reference: &Reference,
        image: &'m OciImageManifest,
    ) -> Result<&'m oci_client::manifest::OciDescriptor, RegistryError> {
        if image.config.media_type != CONFIG_MEDIA_TYPE {
            return Err(not_wasm(
                reference,
                &format!(
                    "its config is `{}`, not `{CONFIG_MEDIA_TYPE}`",
                    image.config.media_type
                ),
            ));
        }
        let [layer] = image.layers.as_slice() else {
            return Err(not_wasm(
                reference,
                &format!(
                    "it has {} layers; a Wasm component artifact has one",
                    image.layers.len()
                ),
            ));
        };
        if layer.media_type != LAYER_MEDIA_TYPE {
            return Err(not_wasm(
                reference,
                &format!(
                    "its layer is `{}`, not `{LAYER_MEDIA_TYPE}`",
                    layer.media_type
                ),
            ));
        }
        let limit = self.settings.max_blob_bytes;
        if u64::try_from(layer.size).map_or(true, |size| size > limit) {
            return Err(RegistryError::TooLarge {
                what: format!("the component of {reference} ({} bytes)", layer.size),
                limit,
                setting: "[host] max-component-mib",
            });
        }
        Ok(layer)
    }
}

fn not_wasm(reference: &Reference, reason: &str) -> RegistryError {
    RegistryError::NotWasm {
        reference: reference.to_string(),
        reason: reason.to_string(),
    }
}
