//! `oci://` references as the TOML writes them: a registry named explicitly, a repository,
//! and a tag, a digest, or both (the digest wins; the tag is then documentation).

use std::fmt;

/// The prefix that makes a `component` a registry reference rather than a path.
pub const SCHEME: &str = "oci://";

/// A sha256 digest, `sha256:` and 64 lowercase hex digits: the only algorithm accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 hex>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(format!(
                "`{text}` is not a sha256 digest (`sha256:` and 64 hex digits)"
            ));
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "`{text}` is not a sha256 digest (`sha256:` and 64 hex digits)"
            ));
        }
        Ok(Digest(format!("sha256:{}", hex.to_ascii_lowercase())))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        let hash = sha2::Sha256::digest(bytes);
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        Digest(format!("sha256:{hex}"))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Digest::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A component in a registry: `oci://REGISTRY/REPOSITORY:TAG`, `...@sha256:DIGEST`, or both.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference written with its `oci://` prefix. The registry must be named (a
    /// host with a dot or a port, or `localhost`): nothing is implied, not Docker Hub and
    /// not `latest`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix(SCHEME) else {
            return Err(format!("`{text}` does not start with `{SCHEME}`"));
        };
        let usage = "write oci://REGISTRY/REPOSITORY:TAG, oci://REGISTRY/REPOSITORY@sha256:DIGEST \
                     or both";
        let Some((registry, _)) = rest.split_once('/') else {
            return Err(format!("`{text}` names no repository: {usage}"));
        };
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(format!(
                "`{text}` names no registry: `{registry}` is not a host (it needs a dot, a port \
                 or to be localhost); {usage}"
            ));
        }
        let parsed = oci_client::Reference::try_from(rest)
            .map_err(|e| format!("`{text}` is not a valid reference ({e}): {usage}"))?;
        if parsed.registry() != registry {
            return Err(format!("`{text}` is not a valid reference: {usage}"));
        }
        let digest = parsed.digest().map(Digest::parse).transpose()?;
        // oci-spec implies `latest` where no tag is written; toolhost implies nothing.
        let last = rest.rsplit('/').next().unwrap_or_default();
        let written = last.split('@').next().unwrap_or_default().contains(':');
        let tag = parsed.tag().filter(|_| written).map(str::to_string);
        if tag.is_none() && digest.is_none() {
            return Err(format!(
                "`{text}` names neither a tag nor a digest (no tag is implied): {usage}"
            ));
        }
        Ok(Reference {
            registry: parsed.registry().to_string(),
            repository: parsed.repository().to_string(),
            tag,
            digest,
        })
    }

    pub fn registry(&self) -> &str {
        &self.registry
    }

    pub fn repository(&self) -> &str {
        &self.repository
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The pinned digest, if the reference names one.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The same repository at `digest` (the tag kept, for messages).
    pub fn at(&self, digest: &Digest) -> Reference {
        Reference {
            digest: Some(digest.clone()),
            ..self.clone()
        }
    }

    /// The same repository at `tag` (no digest).
    pub fn with_tag(&self, tag: &str) -> Reference {
        Reference {
            tag: Some(tag.to_string()),
            digest: None,
            ..self.clone()
        }
    }

    /// True for a registry on this machine: reached over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => self.registry.as_str(),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tags_digests_and_both_parse_and_print_back() {
        let tag = Reference::parse("oci://127.0.0.1:5000/tools/echo:1.0").unwrap();
        assert_eq!(tag.registry(), "127.0.0.1:5000");
        assert_eq!(tag.repository(), "tools/echo");
        assert_eq!(tag.tag(), Some("1.0"));
        assert!(tag.digest().is_none() && tag.is_loopback());
        let both = format!("oci://ghcr.io/acme/echo:1.0@sha256:{HEX}");
        let parsed = Reference::parse(&both).unwrap();
        assert_eq!(parsed.to_string(), both);
        assert_eq!(parsed.digest().unwrap().hex(), HEX);
        assert!(!parsed.is_loopback());
        assert!(
            Reference::parse("oci://localhost/echo:1")
                .unwrap()
                .is_loopback()
        );
    }

    #[test]
    fn what_is_not_written_is_refused_with_the_reason() {
        let sha512 = format!("oci://ghcr.io/acme/echo@sha512:{HEX}{HEX}");
        for (text, reason) in [
            ("ghcr.io/acme/echo:1", "does not start with `oci://`"),
            ("oci://acme/echo:1", "names no registry"),
            ("oci://ghcr.io", "names no repository"),
            ("oci://ghcr.io/acme/echo", "neither a tag nor a digest"),
            (sha512.as_str(), "not a sha256 digest"),
            ("oci://ghcr.io/acme/Echo:1", "not a valid reference"),
        ] {
            let error = Reference::parse(text).unwrap_err();
            assert!(error.contains(reason), "{text}: {error}");
        }
    }

    #[test]
    fn a_digest_is_the_sha256_of_the_bytes() {
        assert_eq!(
            Digest::of(b"").hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
