//! An imported MCP server as an ensemble's `[ensemble.mcp]` names it: how to reach it
//! ([`McpTarget`]) and the bounds of its import ([`McpSpec`]), checked here; the server is
//! started when the ensemble is bound (`toolhost-import`).

use super::McpDraft;
use super::settings::{DEFAULT_MCP_MAX_TOOLS, DEFAULT_MCP_STARTUP_TIMEOUT_MS};
use crate::EnvVarName;
use crate::v1::{McpOauthSection, McpSection};
use crate::{Diagnostic, SourceFile, Span, written_or};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;
use toolhost_contract::SourceHash;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum McpTarget {
    /// A child process speaking MCP on its stdin and stdout.
    Command {
        program: String,
        args: Vec<String>,
        /// The complete environment of the process.
        env: Vec<(String, String)>,
        /// Its working directory: the ensemble file's directory.
        cwd: PathBuf,
    },
    /// A streamable HTTP endpoint.
    Url(String),
}

/// This host's OAuth client at an imported server's authorization server: an access token by
/// client credentials, for the server's URL as the resource. Never the token of a caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct McpOauth {
    /// Always set for client credentials; with sign-in, `None` registers a client.
    pub client_id: Option<String>,
    pub credential: McpCredential,
    pub scopes: Vec<String>,
}

/// How the client proves itself; `Debug` never shows the secret or the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum McpCredential {
    /// `client_secret_post`, or `client_secret_basic` where that is all the server takes.
    Secret(String),
    /// `private_key_jwt`: assertions signed with this key (PEM) and algorithm.
    PrivateKey { pem: String, algorithm: String },
    /// A person signs in (`toolhost login`); a pre-registered confidential client proves
    /// itself with its secret; an unregistered one is known by its client ID metadata
    /// document where the authorization server takes one (`metadata_url`), else registers.
    SignIn {
        client_secret: Option<String>,
        metadata_url: Option<String>,
    },
}

impl std::fmt::Debug for McpCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpCredential::Secret(_) => f.write_str("Secret(<redacted>)"),
            McpCredential::SignIn {
                client_secret,
                metadata_url,
            } => {
                let secret = client_secret.as_ref().map(|_| "<redacted>");
                write!(f, "SignIn({secret:?}, {metadata_url:?})")
            }
            McpCredential::PrivateKey { algorithm, .. } => {
                write!(f, "PrivateKey(<redacted>, {algorithm})")
            }
        }
    }
}

/// The algorithms a `private_key_jwt` assertion may be signed with (what rmcp signs).
pub const ASSERTION_ALGORITHMS: &[&str] = &["ES256", "ES384", "RS256", "RS384", "RS512"];

/// One imported server's settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct McpSpec {
    pub target: McpTarget,
    /// How it gets an access token, if the server needs one.
    #[serde(skip)]
    pub oauth: Option<McpOauth>,
    #[serde(skip)]
    pub startup_timeout: Duration,
    /// The most tools taken from the server (`max-tools`).
    #[serde(skip)]
    pub max_tools: usize,
    /// What the server may ask of whoever calls its tools (`sampling`, `elicitation`);
    /// its progress and log messages are passed on always.
    #[serde(skip)]
    pub talk: toolhost_contract::TalkGrants,
}

impl McpSpec {
    /// Identifies the server's settings (what `list` shows where a component shows its hash).
    pub fn hash(&self) -> SourceHash {
        let text = serde_json::to_string(&self.target).unwrap_or_default();
        SourceHash(*blake3::hash(text.as_bytes()).as_bytes())
    }

    /// Identifies every setting of the import, its bounds included: an import is reused only
    /// when this is the same, so a changed `max-tools` or `startup-timeout-ms` takes effect
    /// at the reload that reads it (with a new server process).
    /// What makes two imports the same server (its hash, and the bounds of its start).
    pub fn key(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.hash().0);
        hasher.update(&(self.startup_timeout.as_millis() as u64).to_le_bytes());
        hasher.update(&(self.max_tools as u64).to_le_bytes());
        // The client's capabilities are declared when its session opens.
        hasher.update(&[
            u8::from(self.talk.sampling),
            u8::from(self.talk.elicitation),
        ]);
        if let Some(oauth) = &self.oauth {
            let (kind, credential) = match &oauth.credential {
                McpCredential::Secret(secret) => ("secret", [secret.as_str(), ""]),
                McpCredential::PrivateKey { pem, algorithm } => {
                    ("private key", [pem.as_str(), algorithm.as_str()])
                }
                McpCredential::SignIn {
                    client_secret,
                    metadata_url,
                } => (
                    "sign-in",
                    [
                        client_secret.as_deref().unwrap_or(""),
                        metadata_url.as_deref().unwrap_or(""),
                    ],
                ),
            };
            let client_id = oauth.client_id.as_deref().unwrap_or("");
            for part in [kind, client_id]
                .into_iter()
                .chain(credential)
                .chain(oauth.scopes.iter().map(String::as_str))
            {
                hasher.update(&(part.len() as u64).to_le_bytes());
                hasher.update(part.as_bytes());
            }
        }
        *hasher.finalize().as_bytes()
    }

    /// The command line or URL, for messages.
    pub fn describe(&self) -> String {
        match &self.target {
            McpTarget::Command { program, args, .. } => std::iter::once(program.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            McpTarget::Url(url) => url.clone(),
        }
    }
}

/// Checks `[ensemble.mcp]` and builds the server's settings; the server is started later,
/// when the ensemble is bound.
pub(super) fn draft(
    source: &Arc<SourceFile>,
    section: Spanned<McpSection>,
    component: Option<std::ops::Range<usize>>,
    pin: Option<std::ops::Range<usize>>,
    no_grants: bool,
    errors: &mut Vec<Diagnostic>,
) -> McpDraft {
    let at = Span::new(source, section.span());
    let before = errors.len();
    if let Some(component) = component {
        errors.push(Diagnostic::new(
            source.at(component),
            "an ensemble names either a `component` or an MCP server ([ensemble.mcp]), not both",
        ));
    }
    if let Some(pin) = pin {
        errors.push(Diagnostic::new(
            source.at(pin),
            "a `blake3` pin applies to a component; an MCP server has none",
        ));
    }
    if !no_grants {
        errors.push(Diagnostic::new(
            at.location(),
            "[grants] do not apply to an MCP server: it is its own process, outside the sandbox; \
             remove them",
        ));
    }
    let mcp = section.into_inner();
    let target = match (&mcp.command, &mcp.url) {
        (Some(command), None) => {
            let program = command.get_ref();
            // A path is relative to this file; a bare name is looked up on PATH.
            let program = if program.contains('/') {
                source.relative(program).display().to_string()
            } else {
                program.clone()
            };
            let mut env: Vec<(String, String)> = Vec::new();
            if let Ok(path) = std::env::var("PATH") {
                env.push(("PATH".into(), path));
            }
            for variable in &mcp.inherit_env {
                if let Ok(value) = std::env::var(variable.get_ref().as_str()) {
                    env.push((variable.get_ref().to_string(), value));
                }
            }
            env.extend(mcp.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            Some(McpTarget::Command {
                program,
                args: mcp.args.clone(),
                env,
                cwd: source
                    .path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
            })
        }
        (None, Some(url)) => {
            let text = url.get_ref();
            if !(text.starts_with("http://") || text.starts_with("https://")) {
                errors.push(Diagnostic::new(
                    source.at(url.span()),
                    format!("{text:?} is not an http:// or https:// URL"),
                ));
            }
            Some(McpTarget::Url(text.clone()))
        }
        _ => {
            errors.push(Diagnostic::new(
                at.location(),
                "[ensemble.mcp] needs either `command` (with `args`, `env`) or `url`, not both",
            ));
            None
        }
    };
    let oauth = mcp.oauth.as_ref().and_then(|oauth| {
        if mcp.url.is_none() {
            errors.push(Diagnostic::new(
                source.at(oauth.span()),
                "`oauth` is for a server reached at a `url`; a server started with `command` \
                 takes its credentials from `env` or `inherit-env`",
            ));
            return None;
        }
        let section = oauth.get_ref();
        let credential = oauth_credential(section, oauth.span(), source, errors)?;
        Some(McpOauth {
            client_id: section.client_id.clone(),
            credential,
            scopes: section.scopes.clone(),
        })
    });
    let spec = target
        .filter(|_| errors.len() == before)
        .map(|target| McpSpec {
            target,
            oauth,
            startup_timeout: written_or(
                mcp.startup_timeout_ms,
                Duration::from_millis(DEFAULT_MCP_STARTUP_TIMEOUT_MS),
            ),
            max_tools: written_or(mcp.max_tools, DEFAULT_MCP_MAX_TOOLS as usize),
            talk: toolhost_contract::TalkGrants {
                sampling: mcp.sampling,
                elicitation: mcp.elicitation,
                ..Default::default()
            },
        });
    McpDraft { spec, at }
}

/// `client-metadata-url`, checked as the client ID metadata document draft asks: an `https`
/// URL with a path, no fragment, no `.` or `..` segments (its text is the client ID).
fn client_metadata_url(
    url: &Spanned<String>,
    source: &SourceFile,
    errors: &mut Vec<Diagnostic>,
) -> Option<String> {
    let text = url.get_ref();
    let wrong = match url::Url::parse(text) {
        Err(e) => Some(format!("is not a URL ({e})")),
        Ok(parsed) if parsed.scheme() != "https" => Some("must be an https URL".to_string()),
        Ok(parsed) if parsed.path() == "/" => {
            Some("needs a path (the document's, as `/client.json`)".to_string())
        }
        Ok(_) if text.contains('#') => Some("may not have a fragment".to_string()),
        Ok(_) if text.split('/').any(|s| s == "." || s == "..") => {
            Some("may not have `.` or `..` segments".to_string())
        }
        Ok(_) => None,
    };
    match wrong {
        None => Some(text.clone()),
        Some(why) => {
            let message = format!("`client-metadata-url` `{text}` {why}: it is the client's ID");
            errors.push(Diagnostic::new(source.at(url.span()), message));
            None
        }
    }
}

/// The credential `oauth` names: a secret or a private key, read from its variable.
fn oauth_credential(
    section: &McpOauthSection,
    span: std::ops::Range<usize>,
    source: &SourceFile,
    errors: &mut Vec<Diagnostic>,
) -> Option<McpCredential> {
    let read = |variable: &Spanned<EnvVarName>, what: &str, errors: &mut Vec<Diagnostic>| {
        match std::env::var(variable.get_ref().as_str()) {
            Ok(value) if !value.is_empty() => Some(value),
            _ => {
                let message = format!(
                    "the {what} is read from ${}, which is not set or empty",
                    variable.get_ref()
                );
                errors.push(Diagnostic::new(source.at(variable.span()), message));
                None
            }
        }
    };
    if section.sign_in {
        if let Some(key) = &section.private_key_env {
            let message = "a client that signs people in proves itself with a secret \
                           (`client-secret-env`) or nothing; `private-key-env` is for client \
                           credentials";
            errors.push(Diagnostic::new(source.at(key.span()), message));
            return None;
        }
        let client_secret = match &section.client_secret_env {
            Some(secret) => Some(read(secret, "client secret", errors)?),
            None => None,
        };
        let metadata_url = match &section.client_metadata_url {
            Some(url) => Some(client_metadata_url(url, source, errors)?),
            None => None,
        };
        return Some(McpCredential::SignIn {
            client_secret,
            metadata_url,
        });
    }
    if let Some(url) = &section.client_metadata_url {
        let message = "`client-metadata-url` names the client a person signs in with \
                       (`sign-in = true`); a client using client credentials is registered \
                       beforehand (`client-id`)";
        errors.push(Diagnostic::new(source.at(url.span()), message));
        return None;
    }
    if section.client_id.is_none() {
        let message = "`oauth` needs `client-id`: the client registered at the authorization \
                       server (or `sign-in = true`, for a server a person signs in to, which \
                       registers one)";
        errors.push(Diagnostic::new(source.at(span), message));
        return None;
    }
    match (&section.client_secret_env, &section.private_key_env) {
        (Some(_), None) if section.algorithm.is_some() => {
            let at = section.algorithm.as_ref().map_or(span, |a| a.span());
            let message = "`algorithm` is the signature of a `private-key-env` assertion; a \
                           client secret has none";
            errors.push(Diagnostic::new(source.at(at), message));
            None
        }
        (Some(secret), None) => read(secret, "client secret", errors).map(McpCredential::Secret),
        (None, Some(key)) => {
            let algorithm = section.algorithm.as_ref();
            let name = algorithm.map_or("ES256", |a| a.get_ref().as_str());
            if !ASSERTION_ALGORITHMS.contains(&name) {
                let at = algorithm.map_or(span.clone(), |a| a.span());
                let message = format!(
                    "`{name}` is not an algorithm this host signs assertions with: one of {}",
                    ASSERTION_ALGORITHMS.join(", ")
                );
                errors.push(Diagnostic::new(source.at(at), message));
                return None;
            }
            let pem = read(key, "private key", errors)?;
            if !(pem.contains("-----BEGIN") && pem.contains("PRIVATE KEY-----")) {
                let message = format!(
                    "${} does not hold a private key in PEM (-----BEGIN ... PRIVATE KEY-----)",
                    key.get_ref()
                );
                errors.push(Diagnostic::new(source.at(key.span()), message));
                return None;
            }
            Some(McpCredential::PrivateKey {
                pem,
                algorithm: name.to_string(),
            })
        }
        _ => {
            errors.push(Diagnostic::new(
                source.at(span),
                "`oauth` needs one of `client-secret-env` (a secret) and `private-key-env` (a \
                 private key, private_key_jwt)",
            ));
            None
        }
    }
}
