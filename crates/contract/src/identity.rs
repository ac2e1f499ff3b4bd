//! Who a request comes from, as the host tells callers apart: the local operator, a named
//! static token, or the subject of an OpenID provider's access token. Carried by every call
//! into its audit record; never the token itself.

use serde::Serialize;
use std::fmt;

/// The name `--token-env`'s token goes by: a static token whose bearer is the operator, one
/// party with the local operator (their chat conversations are the same ones, as before
/// identities were told apart).
pub const OPERATOR_TOKEN: &str = "operator";

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityKind {
    /// A request without a token over stdio or from loopback: the operator of this machine.
    Local,
    /// A named static token (`[[access.tokens]]`, or `--token-env`).
    Token,
    /// An access token (JWT) of the trusted OpenID provider.
    Oauth,
}

/// One identity: what the access rules match, what audit records and metrics name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    pub kind: IdentityKind,
    /// The static token's name, the access token's subject, or `local`.
    pub name: String,
    /// The OAuth client the access token was issued to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The access token's scopes (not recorded: they are the token's, not the person's).
    #[serde(skip)]
    pub scopes: Vec<String>,
}

impl Identity {
    /// The operator of this machine: stdio, or loopback without a token.
    pub fn local() -> Self {
        Identity {
            kind: IdentityKind::Local,
            name: "local".into(),
            client: None,
            groups: Vec::new(),
            scopes: Vec::new(),
        }
    }

    /// The operator of this host: the local operator, or `--token-env`'s token.
    pub fn is_operator(&self) -> bool {
        self.kind == IdentityKind::Local
            || (self.kind == IdentityKind::Token && self.name == OPERATOR_TOKEN)
    }

    /// Whether `other` is the same identity (what [`Identity::key`] tells apart, without
    /// hashing: the same kind and name).
    pub fn is_same(&self, other: &Identity) -> bool {
        self.kind == other.kind && self.name == other.name
    }

    /// What sessions, conversations, dedup memory and tasks are keyed by: the same for every
    /// token of one identity, different for any two identities.
    pub fn key(&self) -> [u8; 32] {
        let kind = match self.kind {
            IdentityKind::Local => 0,
            IdentityKind::Token => 1,
            IdentityKind::Oauth => 2,
        };
        let mut hasher = blake3::Hasher::new_derive_key("toolhost identity key v1");
        hasher.update(&[kind]);
        hasher.update(self.name.as_bytes());
        *hasher.finalize().as_bytes()
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            IdentityKind::Local => f.write_str("local"),
            IdentityKind::Token => write!(f, "token `{}`", self.name),
            IdentityKind::Oauth => write!(f, "subject `{}`", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tell_kinds_and_names_apart() {
        let token = |name: &str| Identity {
            kind: IdentityKind::Token,
            name: name.into(),
            ..Identity::local()
        };
        assert_eq!(token("ops").key(), token("ops").key());
        assert!(token("ops").is_same(&token("ops")));
        assert_ne!(token("ops").key(), token("dev").key());
        assert!(!token("ops").is_same(&token("dev")));
        let subject = Identity {
            kind: IdentityKind::Oauth,
            ..token("ops")
        };
        assert_ne!(token("ops").key(), subject.key());
        assert!(!token("ops").is_same(&subject));
        let recorded = serde_json::to_value(&subject).expect("serializes");
        assert_eq!(recorded["kind"], "oauth");
        assert!(recorded.get("scopes").is_none());
    }
}
