//! `toolhost push`: a component published in the Wasm OCI artifact layout (what `wkg` and
//! Spin publish and pull): an OCI image manifest, a config of `application/vnd.wasm.config.v0+json`
//! naming the component's imports and exports, and the component as its one layer; and, with
//! a key, its cosign signature at the `sha256-<hex>.sig` tag beside it.

use super::reference::{Digest, Reference};
use super::remote::{Operation, Remote};
use super::trust::{self, SigningKey};
use super::{CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, RegistryError, RegistrySettings};
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;

/// What a push published.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pushed {
    /// The reference pinned to the manifest pushed (`oci://...:tag@sha256:...`).
    pub reference: String,
    pub manifest: Digest,
    pub component: Digest,
    pub bytes: usize,
    /// True when its cosign signature was pushed too.
    pub signed: bool,
}

/// The config of a Wasm component artifact (the fields wkg reads).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig<'a> {
    created: String,
    architecture: &'static str,
    os: &'static str,
    layer_digests: Vec<String>,
    component: ComponentWorld<'a>,
}

#[derive(serde::Serialize)]
struct ComponentWorld<'a> {
    exports: &'a [String],
    imports: &'a [String],
    target: Option<String>,
}

/// Publishes `component` (its bytes, and the names of what it imports and exports) at
/// `reference`, which must name a tag; with `sign`, its cosign signature too. All of it (the
/// token, the uploads, the read-back, the signature) within `pull-timeout-s`.
pub async fn push(
    settings: &RegistrySettings,
    reference: &Reference,
    component: Vec<u8>,
    imports: &[String],
    exports: &[String],
    sign: Option<&SigningKey>,
) -> Result<Pushed, RegistryError> {
    let deadline = settings.pull_timeout;
    let pushing = publish(settings, reference, component, imports, exports, sign);
    tokio::time::timeout(deadline, pushing)
        .await
        .map_err(|_| RegistryError::Timeout {
            what: format!("pushing to {reference}"),
            after: deadline,
        })?
}

async fn publish(
    settings: &RegistrySettings,
    reference: &Reference,
    component: Vec<u8>,
    imports: &[String],
    exports: &[String],
    sign: Option<&SigningKey>,
) -> Result<Pushed, RegistryError> {
    let Some(tag) = reference.tag() else {
        return Err(RegistryError::Other(format!(
            "{reference} names no tag: a push publishes under a tag"
        )));
    };
    if reference.digest().is_some() {
        return Err(RegistryError::Other(format!(
            "{reference} names a digest: a push publishes under a tag, and the digest is \
             what the registry computes"
        )));
    }
    let remote = Remote::new(settings, std::iter::once(reference))?;
    let auth = remote.authorize(reference, Operation::Push).await?;
    let component_digest = Digest::of(&component);
    let config = WasmConfig {
        created: toolhost_audit::now_rfc3339(),
        architecture: "wasm",
        os: "wasip2",
        layer_digests: vec![component_digest.to_string()],
        component: ComponentWorld {
            exports,
            imports,
            target: None,
        },
    };
    let config = serde_json::to_vec(&config).map_err(|e| RegistryError::Other(e.to_string()))?;
    let config = Config::new(config, CONFIG_MEDIA_TYPE.to_string(), None);
    let bytes = component.len();
    let layers = [ImageLayer::new(
        component,
        LAYER_MEDIA_TYPE.to_string(),
        None,
    )];
    let what = format!("pushing to {reference}");
    upload(
        settings,
        &remote,
        reference,
        &layers,
        config,
        auth.as_deref(),
        &what,
    )
    .await?;
    // What the tag names now, read back: the digest to pin.
    let body = remote
        .manifest(reference, tag, settings.max_manifest_bytes)
        .await?;
    let manifest = Digest::of(&body);
    if let Some(key) = sign {
        push_signature(
            settings,
            &remote,
            reference,
            &manifest,
            key,
            auth.as_deref(),
        )
        .await?;
    }
    Ok(Pushed {
        reference: reference.at(&manifest).to_string(),
        manifest,
        component: component_digest,
        bytes,
        signed: sign.is_some(),
    })
}

/// Publishes the cosign signature of `manifest` (in `reference`'s repository) at its
/// `sha256-<hex>.sig` tag: one simple-signing payload, its signature in an annotation.
async fn push_signature(
    settings: &RegistrySettings,
    remote: &Remote,
    reference: &Reference,
    manifest: &Digest,
    key: &SigningKey,
    auth: Option<&str>,
) -> Result<(), RegistryError> {
    let payload = trust::payload(reference, manifest);
    let signature = key.sign(&payload).map_err(RegistryError::Other)?;
    let annotations =
        std::collections::BTreeMap::from([(trust::SIGNATURE_ANNOTATION.to_string(), signature)]);
    let layers = [ImageLayer::new(
        payload,
        trust::PAYLOAD_MEDIA_TYPE.to_string(),
        Some(annotations),
    )];
    let config = Config::oci_v1(b"{}".to_vec(), None);
    let target = reference.with_tag(&trust::signature_tag(manifest));
    let what = format!("pushing the signature of {}", reference.at(manifest));
    upload(settings, remote, &target, &layers, config, auth, &what).await
}

/// Pushes `layers` and `config` under an OCI image manifest at `target`'s tag, within the
/// pull deadline: each blob the registry does not have yet, then the manifest.
async fn upload(
    settings: &RegistrySettings,
    remote: &Remote,
    target: &Reference,
    layers: &[ImageLayer],
    config: Config,
    auth: Option<&str>,
    what: &str,
) -> Result<(), RegistryError> {
    let mut manifest = OciImageManifest::build(layers, &config, None);
    manifest.media_type = Some(MANIFEST_MEDIA_TYPE.to_string());
    let tag = target.tag().unwrap_or("latest").to_string();
    let blobs = layers
        .iter()
        .map(|layer| layer.data.clone())
        .chain(std::iter::once(config.data.clone()));
    let work = async {
        for bytes in blobs {
            let digest = Digest::of(&bytes);
            if !remote.has_blob(target, &digest, auth).await? {
                remote.upload_blob(target, &digest, bytes, auth).await?;
            }
        }
        let body =
            serde_json::to_vec(&manifest).map_err(|e| RegistryError::Other(e.to_string()))?;
        remote
            .put_manifest(target, &tag, body, MANIFEST_MEDIA_TYPE, auth)
            .await
    };
    let deadline = settings.pull_timeout;
    tokio::time::timeout(deadline, work)
        .await
        .map_err(|_| RegistryError::Timeout {
            what: what.to_string(),
            after: deadline,
        })?
}

/// The media type of the manifests a push writes.
const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
