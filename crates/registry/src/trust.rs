//! cosign signatures, verified offline against the operator's keys. A signature is what
//! `cosign sign --key` (and `toolhost push --sign`) publishes: a manifest at the tag
//! `sha256-<hex>.sig` of the same repository, each layer a simple-signing payload
//! (`application/vnd.dev.cosign.simplesigning.v1+json`) naming the signed manifest's digest,
//! with its signature in the annotation `dev.cosignproject.cosign/signature`. The signature
//! is pulled with the component and kept in the store beside it, so it is checked again at
//! every load, registry or not. The keys and the cryptography are sigstore's; keyless
//! signatures (Fulcio certificates, Rekor entries) are not accepted.

use super::reference::{Digest, Reference};
use sigstore::crypto::{CosignVerificationKey, SigStoreSigner, Signature, SigningScheme};
use std::sync::Arc;

/// The media type of a simple-signing payload layer.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a payload layer that holds its signature (base64).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The largest payload read (a cosign payload is a few hundred bytes).
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

/// The tag a signature of `digest` is published under.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}

/// A public key components may be signed with, and the name messages give it (its file).
#[derive(Clone)]
pub struct TrustedKey {
    pub name: String,
    key: Arc<CosignVerificationKey>,
}

impl std::fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedKey")
            .field("name", &self.name)
            .finish()
    }
}

impl TrustedKey {
    /// A PEM public key, as `cosign generate-key-pair` writes it (`cosign.pub`).
    pub fn from_pem(name: &str, pem: &[u8]) -> Result<Self, String> {
        let key = CosignVerificationKey::try_from_pem(pem)
            .map_err(|e| format!("{name} is not a public key cosign makes: {e}"))?;
        Ok(TrustedKey {
            name: name.to_string(),
            key: Arc::new(key),
        })
    }

    fn verifies(&self, signature: &str, payload: &[u8]) -> bool {
        self.key
            .verify_signature(Signature::Base64Encoded(signature.as_bytes()), payload)
            .is_ok()
    }
}

/// The simple-signing payload (only what is checked).
#[derive(serde::Serialize, serde::Deserialize)]
struct Payload {
    critical: Critical,
    #[serde(default)]
    optional: Option<serde_json::Value>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The payload a signature of `digest` in `reference`'s repository signs.
pub fn payload(reference: &Reference, digest: &Digest) -> Vec<u8> {
    let payload = Payload {
        critical: Critical {
            identity: Identity {
                docker_reference: format!("{}/{}", reference.registry(), reference.repository()),
            },
            image: Image {
                docker_manifest_digest: digest.to_string(),
            },
            kind: "cosign container image signature".to_string(),
        },
        optional: None,
    };
    serde_json::to_vec(&payload).unwrap_or_default()
}

/// Which trusted key signed `digest`, given the payloads and signatures the signature
/// manifest holds; or why none did.
pub fn verify(
    keys: &[TrustedKey],
    digest: &Digest,
    signatures: &[(Vec<u8>, String)],
) -> Result<String, String> {
    if signatures.is_empty() {
        return Err("its signature manifest holds no signature".to_string());
    }
    let mut other_digest = None;
    for (payload, signature) in signatures {
        let Some(key) = keys.iter().find(|key| key.verifies(signature, payload)) else {
            continue;
        };
        let Ok(payload) = serde_json::from_slice::<Payload>(payload) else {
            continue;
        };
        if payload.critical.image.docker_manifest_digest == digest.as_str() {
            return Ok(key.name.clone());
        }
        other_digest = Some(payload.critical.image.docker_manifest_digest);
    }
    Err(match other_digest {
        Some(other) => format!(
            "its signature is for {other}, not for {digest}: a signature copied from \
             another component"
        ),
        None => format!(
            "it is signed, but by none of the trusted keys ({})",
            keys.iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// A private key to sign with, as `cosign generate-key-pair` writes it (`cosign.key`,
/// encrypted with a password).
pub struct SigningKey(SigStoreSigner);

impl SigningKey {
    pub fn from_encrypted_pem(pem: &[u8], password: &[u8]) -> Result<Self, String> {
        let pair =
            sigstore::crypto::signing_key::SigStoreKeyPair::from_encrypted_pem(pem, password)
                .map_err(|e| {
                    format!("cannot open the signing key (is the password right?): {e}")
                })?;
        let scheme = match &pair {
            sigstore::crypto::signing_key::SigStoreKeyPair::ED25519(_) => SigningScheme::ED25519,
            _ => SigningScheme::ECDSA_P256_SHA256_ASN1,
        };
        let signer = pair
            .to_sigstore_signer(&scheme)
            .map_err(|e| format!("cannot sign with this key: {e}"))?;
        Ok(SigningKey(signer))
    }

    /// The base64 signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Result<String, String> {
        use base64::Engine as _;
        let signature = self.0.sign(payload).map_err(|e| e.to_string())?;
        Ok(base64::engine::general_purpose::STANDARD.encode(signature))
    }

    /// A new ECDSA P-256 key pair (what `cosign generate-key-pair` makes): the private key
    /// encrypted with `password`, and the public key, both PEM.
    pub fn generate(password: &[u8]) -> Result<(String, String), String> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .map_err(|e| e.to_string())?;
        let pair = signer.to_sigstore_keypair().map_err(|e| e.to_string())?;
        let private = pair
            .private_key_to_encrypted_pem(password)
            .map_err(|e| e.to_string())?;
        let public = pair.public_key_to_pem().map_err(|e| e.to_string())?;
        Ok((private.to_string(), public))
    }
}
