//! tls: how a fleet's engines are reached over TLS (`rediss://`, PostgreSQL's `sslmode`):
//! rustls client configurations whose server certificates chain to the system's roots (as
//! `rustls-native-certs` reads them, `SSL_CERT_FILE` included) or to the CA certificates the
//! operator names, with a client certificate where the engine asks for one. Certificates and
//! keys are read by the caller (bounded, at `check`) and handed here as PEM; a key's content
//! is never part of an error.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The PEM files named for one engine's TLS.
#[derive(Default, Clone)]
pub struct TlsFiles {
    /// CA certificates the server's must chain to, instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its private key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.as_ref().map(Vec::len))
            .field("client", &self.client.is_some())
            .finish()
    }
}

/// How a server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The chain and the host name (`rediss://`, PostgreSQL's `verify-full`).
    Full,
    /// The chain only (PostgreSQL's `verify-ca`).
    Chain,
    /// Nothing: encrypted, not authenticated (PostgreSQL's `require` and `prefer` without a
    /// root certificate, as libpq does).
    Nothing,
}

/// A client configuration for `files`, checking the server as `verify` says.
pub fn client_config(
    files: &TlsFiles,
    verify: Verify,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS cannot be set up: {e}"))?;
    let builder = match verify {
        Verify::Full => builder.with_root_certificates(roots(files.ca.as_deref())?),
        Verify::Chain => {
            let roots = Arc::new(roots(files.ca.as_deref())?);
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly::new(roots, provider)?))
        }
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider))),
    };
    match &files.client {
        None => Ok(Arc::new(builder.with_no_client_auth())),
        Some((chain, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("the client certificate is not PEM: {e}"))?;
            if chain.is_empty() {
                return Err("the client certificate file holds no certificate".into());
            }
            // The key's own parse error could quote it: only its kind is said.
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|_| "the client key file holds no PEM private key".to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map(Arc::new)
                .map_err(|e| format!("the client certificate and key do not go together: {e}"))
        }
    }
}

/// The CA certificates in `ca` (PEM), or the system's.
fn roots(ca: Option<&[u8]>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("the CA file is not PEM: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("the CA file holds a certificate rustls refuses: {e}"))?;
            }
            if roots.is_empty() {
                return Err("the CA file holds no certificate".into());
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("the system has no root certificates (name a CA file)".into());
            }
        }
    }
    Ok(roots)
}

/// Checks the chain to the roots, not the name (PostgreSQL's `verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ChainOnly {
    fn new(
        roots: Arc<rustls::RootCertStore>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, String> {
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map(ChainOnly)
            .map_err(|e| format!("TLS cannot be set up: {e}"))
    }
}

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let verified =
            self.0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match verified {
            // The chain verified; only the name did not match, which verify-ca does not ask.
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate (the handshake's signatures still checked): encryption without
/// authentication, what libpq's `require` gives without a root certificate.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
