//! `[access]` of `toolhost.toml`: who may reach `serve --http`, and what each identity may
//! list and call. Read and checked here (every mistake at file:line:col, before the host
//! serves); toolhost-access authenticates requests and applies the rules.
//!
//! Identities come three ways: named static tokens (`[[access.tokens]]`, kept as a SHA-256,
//! never the token itself), access tokens of one OpenID provider (`[access.oidc]`), and a
//! loopback request without a token (the local operator, unless `require-token`). Rules
//! (`[[access.rules]]`) grant tools; once one rule exists, what no rule grants is denied.

mod challenge;
mod sign_in;
mod unset;

pub use unset::Unset;

use crate::names::{EnvVarName, Setting, written_or};
use crate::{Diagnostic, SourceFile};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use toml::Spanned;

/// The signature algorithms an access token may use: public-key ones only (never `none`,
/// never an HMAC algorithm, whose key would be the provider's public key).
pub const ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The algorithms accepted when `algorithms` is not written.
pub const DEFAULT_ALGORITHMS: &[&str] = &["RS256", "ES256"];

bounded!(
    /// `[access.oidc] leeway-s`: how far `exp` and `nbf` may be off the host's clock, 0 to 300 s.
    LeewayS, "leeway-s", 0, 300, seconds
);
bounded!(
    /// `[[access.quotas]] calls-per-minute`: calls one identity may start a minute (a burst of
    /// as many, refilled at that rate), 1 to 1,000,000.
    CallsPerMinute, "calls-per-minute", 1, 1_000_000, number u32
);
bounded!(
    /// `[[access.quotas]] concurrent-calls`: calls of one identity running at once, 1 to 10,000.
    ConcurrentCalls, "concurrent-calls", 1, 10_000, number usize
);
bounded!(
    /// `[access] metrics-identities`: identities named in `/metrics`, 0 to 10,000.
    MetricsIdentities, "metrics-identities", 0, 10_000, number usize
);

/// Identities named in `/metrics` when `metrics-identities` is not written; the rest are
/// counted as `other`.
pub const DEFAULT_METRICS_IDENTITIES: usize = 100;

/// `[access]` of `toolhost.toml`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AccessSection {
    /// Requests from loopback must carry a token too. Default: true once a token or a
    /// provider is named, false otherwise (a loopback request without a token is then the
    /// local operator, who may do everything).
    pub require_token: Option<bool>,
    /// Named static tokens, for scripts and simple set-ups.
    #[serde(default)]
    #[schemars(with = "Vec<TokenEntry>")]
    pub tokens: Vec<Spanned<TokenEntry>>,
    /// The OpenID provider whose access tokens (JWT) are accepted.
    #[schemars(with = "Option<OidcSection>")]
    pub oidc: Option<Spanned<OidcSection>>,
    /// What identities may list and call; once one rule is written, the rest is denied.
    #[serde(default)]
    #[schemars(with = "Vec<RuleEntry>")]
    pub rules: Vec<Spanned<RuleEntry>>,
    /// How many calls an identity may make: the first quota that applies to it holds.
    #[serde(default)]
    #[schemars(with = "Vec<QuotaEntry>")]
    pub quotas: Vec<Spanned<QuotaEntry>>,
    /// Identities named in `/metrics` (default 100); the rest are counted as `other`.
    pub metrics_identities: Option<MetricsIdentities>,
}

/// One `[[access.quotas]]`: whom it holds (any of `identities`, `groups`, `scopes`; none
/// written: everyone but the local operator) and its limits.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct QuotaEntry {
    #[serde(default)]
    pub identities: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Calls one identity may start a minute: a burst of as many, refilled at that rate.
    pub calls_per_minute: Option<CallsPerMinute>,
    /// Calls of one identity running at once.
    pub concurrent_calls: Option<ConcurrentCalls>,
}

/// One `[[access.tokens]]`: a name, its groups, and how the host knows the token.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TokenEntry {
    /// What rules, audit records and metrics call whoever presents this token.
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// The token's SHA-256, 64 hexadecimal digits (`printf %s "$TOKEN" | sha256sum`).
    #[schemars(with = "Option<String>")]
    pub sha256: Option<Spanned<String>>,
    /// The environment variable that holds the token.
    #[schemars(with = "Option<EnvVarName>")]
    pub env: Option<Spanned<EnvVarName>>,
    /// Accepted only to be refused with a message that says where tokens go.
    #[schemars(skip)]
    pub token: Option<Spanned<toml::Value>>,
}

/// `[access.oidc]`: the provider (issuer) trusted, and the resource its tokens must be for.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OidcSection {
    /// The issuer's URL, as its tokens' `iss` claim says it.
    #[schemars(with = "Option<String>")]
    pub issuer: Option<Spanned<String>>,
    /// The environment variable that holds `issuer`.
    #[schemars(with = "Option<EnvVarName>")]
    pub issuer_env: Option<Spanned<EnvVarName>>,
    /// This server's canonical URI (its `/mcp` URL): tokens must name it in `aud`.
    #[schemars(with = "Option<String>")]
    pub resource: Option<Spanned<String>>,
    /// The environment variable that holds `resource`.
    #[schemars(with = "Option<EnvVarName>")]
    pub resource_env: Option<Spanned<EnvVarName>>,
    /// Signature algorithms accepted (default RS256 and ES256).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub algorithms: Vec<Spanned<String>>,
    /// How far `exp` and `nbf` may be off the host's clock (default 30).
    pub leeway_s: Option<LeewayS>,
    /// The claim that holds the groups (default `groups`).
    pub groups_claim: Option<String>,
    /// The scopes a `401` asks clients to get (default: every scope the rules name).
    #[schemars(with = "Option<Vec<String>>")]
    pub challenge_scopes: Option<Vec<Spanned<String>>>,
    /// The web chat signs people in with this provider (authorization code with PKCE).
    #[schemars(with = "Option<SignInSection>")]
    pub sign_in: Option<Spanned<SignInSection>>,
}

/// `[access.oidc.sign-in]`: the client the web chat signs people in as, registered with the
/// provider (redirect URI: `redirect-uri`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SignInSection {
    /// The client's id at the provider.
    pub client_id: String,
    /// The environment variable that holds the client's secret (a confidential client,
    /// `client_secret_basic`); without it the client is public and PKCE alone binds the code.
    #[schemars(with = "Option<EnvVarName>")]
    pub client_secret_env: Option<Spanned<EnvVarName>>,
    /// The scopes asked for (default `openid`).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Where the provider sends the browser back: this host's `/auth/callback`. Default: the
    /// resource's origin followed by `/auth/callback`.
    #[schemars(with = "Option<String>")]
    pub redirect_uri: Option<Spanned<String>>,
}

/// One `[[access.rules]]`: who (any of `identities`, `groups`, `scopes`) may do what.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RuleEntry {
    /// Static tokens' names and access tokens' subjects.
    #[serde(default)]
    pub identities: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Scopes of an access token.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Tools they may list and call: names, or globs with `*` and `?`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub tools: Vec<Spanned<String>>,
    /// Ensembles whose every tool they may list and call: names or globs.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub ensembles: Vec<Spanned<String>>,
    /// They may read `/metrics`.
    #[serde(default)]
    pub metrics: bool,
    /// They may answer the approvals of destructive calls in any chat conversation (not
    /// only in those they started).
    #[serde(default)]
    pub approve: bool,
    /// They may answer the tools' questions in any chat conversation.
    #[serde(default)]
    pub answer: bool,
}

/// `[access]`, checked: what toolhost-access builds its guard and policy from.
#[derive(Debug, Clone)]
pub struct AccessSettings {
    /// As written; unwritten, it follows whether any token source is named.
    pub require_token: Option<bool>,
    pub tokens: Vec<StaticToken>,
    pub oidc: Option<OidcSettings>,
    pub rules: Vec<Rule>,
    pub quotas: Vec<Quota>,
    /// Identities named in `/metrics`; the rest are `other`.
    pub metrics_identities: usize,
}

impl Default for AccessSettings {
    fn default() -> Self {
        AccessSettings {
            require_token: None,
            tokens: Vec::new(),
            oidc: None,
            rules: Vec::new(),
            quotas: Vec::new(),
            metrics_identities: DEFAULT_METRICS_IDENTITIES,
        }
    }
}

/// Whom a rule or a quota is for: identities named (static tokens' names, access tokens'
/// subjects), groups, and (access tokens only) scopes; any one of them matches.
#[derive(Debug, Clone, Default)]
pub struct Who {
    pub identities: Vec<String>,
    pub groups: Vec<String>,
    pub scopes: Vec<String>,
}

impl Who {
    /// Nobody named at all.
    pub fn is_empty(&self) -> bool {
        self.identities.is_empty() && self.groups.is_empty() && self.scopes.is_empty()
    }
}

/// One quota, checked.
#[derive(Debug, Clone, Default)]
pub struct Quota {
    /// Empty: everyone but the local operator.
    pub who: Who,
    pub calls_per_minute: Option<u32>,
    pub concurrent_calls: Option<usize>,
}

/// A named static token, known by its SHA-256.
#[derive(Debug, Clone)]
pub struct StaticToken {
    pub name: String,
    pub groups: Vec<String>,
    pub sha256: [u8; 32],
}

/// `[access.oidc]`, with its variables read.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    pub issuer: String,
    pub resource: String,
    pub algorithms: Vec<String>,
    pub leeway: Duration,
    pub groups_claim: String,
    pub sign_in: Option<SignInSettings>,
    /// `challenge-scopes`, as written (`None`: every scope the rules name).
    pub challenge_scopes: Option<Vec<String>>,
}

/// `[access.oidc.sign-in]`, with its secret read (never printed).
#[derive(Clone)]
pub struct SignInSettings {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub scopes: Vec<String>,
    pub redirect_uri: url::Url,
}

impl std::fmt::Debug for SignInSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInSettings")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri.as_str())
            .finish()
    }
}

/// One rule, checked.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    pub who: Who,
    pub tools: Vec<String>,
    pub ensembles: Vec<String>,
    pub metrics: bool,
    pub approve: bool,
    pub answer: bool,
}

impl AccessSection {
    /// The section checked against `source` (where it was read), with environment variables
    /// read through `env`; every mistake is a diagnostic at its place, and a variable that is
    /// not set is what `unset` says.
    pub fn check(
        &self,
        source: &SourceFile,
        env: &dyn Fn(&str) -> Option<String>,
        unset: Unset<'_>,
    ) -> Result<AccessSettings, Vec<Diagnostic>> {
        // Every mistake in file order, each marked when it is a variable that is not set.
        let found = std::cell::RefCell::new(Vec::<(bool, Diagnostic)>::new());
        let error = |span: std::ops::Range<usize>, message: String| {
            (found.borrow_mut()).push((false, Diagnostic::new(source.at(span), message)));
        };
        let not_set = |span: std::ops::Range<usize>, message: String| {
            (found.borrow_mut()).push((true, Diagnostic::new(source.at(span), message)));
        };
        let warn = matches!(unset, Unset::Warn(_));
        let mut tokens: Vec<StaticToken> = Vec::new();
        for entry in &self.tokens {
            let token = entry.get_ref();
            let name = token.name.get_ref();
            if !is_identity_name(name) {
                error(
                    token.name.span(),
                    format!("token names use [A-Za-z0-9._@-], 1 to 64 characters; got {name:?}"),
                );
            } else if tokens.iter().any(|t| &t.name == name) {
                error(token.name.span(), format!("a second token named `{name}`"));
            }
            if let Some(written) = &token.token {
                error(
                    written.span(),
                    "tokens are never written in toolhost.toml: give its `sha256`, or put it in \
                     an environment variable and name that with `env`"
                        .into(),
                );
                continue;
            }
            let sha256 = match (&token.sha256, &token.env) {
                (Some(hex), None) => match parse_sha256(hex.get_ref()) {
                    Some(hash) => hash,
                    None => {
                        error(
                            hex.span(),
                            "`sha256` is the token's SHA-256 in 64 hexadecimal digits \
                             (printf %s \"$TOKEN\" | sha256sum)"
                                .into(),
                        );
                        continue;
                    }
                },
                (None, Some(var)) => match env(var.get_ref().as_str()) {
                    Some(value) if !value.is_empty() => sha256_of(value.as_bytes()),
                    _ => {
                        not_set(
                            var.span(),
                            format!(
                                "the token of `{name}` is read from ${}, which is not set or \
                                 empty: `serve` refuses to start without it",
                                var.get_ref()
                            ),
                        );
                        if !warn {
                            continue;
                        }
                        // No token hashes to zeros: the name and groups stay (`list --as`).
                        [0; 32]
                    }
                },
                _ => {
                    error(
                        entry.span(),
                        format!("token `{name}` needs one of `sha256` and `env`"),
                    );
                    continue;
                }
            };
            tokens.push(StaticToken {
                name: name.clone(),
                groups: token.groups.clone(),
                sha256,
            });
        }
        let oidc = self.oidc.as_ref().and_then(|oidc| {
            let section = oidc.get_ref();
            let read = |what: &str,
                        value: &Option<Spanned<String>>,
                        var: &Option<Spanned<EnvVarName>>|
             -> Option<String> {
                let text = match (value, var) {
                    (Some(value), None) => (value.get_ref().clone(), value.span()),
                    (None, Some(var)) => match env(var.get_ref().as_str()) {
                        Some(value) => (value, var.span()),
                        None => {
                            let key = format!("{what}-env");
                            not_set(var.span(), Unset::message(&key, var.get_ref().as_str()));
                            return None;
                        }
                    },
                    _ => {
                        error(
                            oidc.span(),
                            format!("[access.oidc] needs one of `{what}` and `{what}-env`"),
                        );
                        return None;
                    }
                };
                match url::Url::parse(&text.0) {
                    Ok(url) if is_https_or_loopback(&url) && url.fragment().is_none() => {
                        Some(text.0)
                    }
                    _ => {
                        error(
                            text.1,
                            format!(
                                "`{what}` must be an https URL (http only on loopback), without \
                                 a fragment; got {:?}",
                                text.0
                            ),
                        );
                        None
                    }
                }
            };
            let issuer = read("issuer", &section.issuer, &section.issuer_env);
            let resource = read("resource", &section.resource, &section.resource_env);
            let mut algorithms = Vec::new();
            for algorithm in &section.algorithms {
                let name = algorithm.get_ref();
                if ALGORITHMS.contains(&name.as_str()) {
                    algorithms.push(name.clone());
                } else {
                    error(
                        algorithm.span(),
                        format!(
                            "`{name}` is not accepted: access tokens are signed with a public \
                             key, one of {} (never `none`, never HMAC)",
                            ALGORITHMS.join(", ")
                        ),
                    );
                }
            }
            if section.algorithms.is_empty() {
                algorithms = DEFAULT_ALGORITHMS.iter().map(|a| a.to_string()).collect();
            }
            let named: Vec<&str> = (self.rules.iter())
                .flat_map(|rule| rule.get_ref().scopes.iter().map(String::as_str))
                .collect();
            let challenge_scopes =
                challenge::check(section.challenge_scopes.as_ref(), &named, &error);
            let sign_in = (section.sign_in.as_ref())
                .and_then(|s| sign_in::check(s, resource.as_deref()?, env, &error, &not_set));
            if section.sign_in.is_some() && sign_in.is_none() {
                return None;
            }
            Some(OidcSettings {
                sign_in,
                challenge_scopes,
                issuer: issuer?,
                resource: resource?,
                algorithms,
                leeway: written_or(section.leeway_s, Duration::from_secs(30)),
                groups_claim: section
                    .groups_claim
                    .clone()
                    .unwrap_or_else(|| "groups".into()),
            })
        });
        let mut rules = Vec::new();
        for entry in &self.rules {
            let rule = entry.get_ref();
            if rule.identities.is_empty() && rule.groups.is_empty() && rule.scopes.is_empty() {
                error(
                    entry.span(),
                    "a rule says whom it is for: `identities`, `groups` or `scopes`".into(),
                );
            }
            let grants_a_right = rule.metrics || rule.approve || rule.answer;
            if rule.tools.is_empty() && rule.ensembles.is_empty() && !grants_a_right {
                error(
                    entry.span(),
                    "a rule grants something: `tools`, `ensembles`, or one of `metrics`, \
                     `approve`, `answer` = true"
                        .into(),
                );
            }
            for pattern in rule.tools.iter().chain(&rule.ensembles) {
                let text = pattern.get_ref();
                if text.is_empty()
                    || !text
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-*?".contains(c))
                {
                    error(
                        pattern.span(),
                        format!(
                            "{text:?} is neither a name nor a glob: names use [a-zA-Z0-9_-], \
                             globs add `*` (any run) and `?` (one character)"
                        ),
                    );
                }
            }
            rules.push(Rule {
                who: Who {
                    identities: rule.identities.clone(),
                    groups: rule.groups.clone(),
                    scopes: rule.scopes.clone(),
                },
                tools: rule.tools.iter().map(|p| p.get_ref().clone()).collect(),
                ensembles: rule.ensembles.iter().map(|p| p.get_ref().clone()).collect(),
                metrics: rule.metrics,
                approve: rule.approve,
                answer: rule.answer,
            });
        }
        let mut quotas = Vec::new();
        for entry in &self.quotas {
            let quota = entry.get_ref();
            if quota.calls_per_minute.is_none() && quota.concurrent_calls.is_none() {
                error(
                    entry.span(),
                    "a quota limits something: `calls-per-minute` or `concurrent-calls`".into(),
                );
            }
            quotas.push(Quota {
                who: Who {
                    identities: quota.identities.clone(),
                    groups: quota.groups.clone(),
                    scopes: quota.scopes.clone(),
                },
                calls_per_minute: quota.calls_per_minute.map(Setting::value),
                concurrent_calls: quota.concurrent_calls.map(Setting::value),
            });
        }
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        for (is_unset, diagnostic) in found.into_inner() {
            if is_unset && warn {
                warnings.push(diagnostic);
            } else {
                errors.push(diagnostic);
            }
        }
        if let Unset::Warn(into) = unset {
            into.extend(warnings);
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(AccessSettings {
            require_token: self.require_token,
            tokens,
            oidc,
            rules,
            quotas,
            metrics_identities: written_or(self.metrics_identities, DEFAULT_METRICS_IDENTITIES),
        })
    }
}

/// A name for an identity: `[A-Za-z0-9._@-]`, 1 to 64 characters.
pub fn is_identity_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
}

/// The SHA-256 of `bytes`.
pub fn sha256_of(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut hash = [0; 32];
    for (byte, pair) in hash.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(hash)
}

/// True for an https URL, or an http one on a loopback host (a provider started by a test or
/// beside the host).
pub fn is_https_or_loopback(url: &url::Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => is_loopback_host(url),
        _ => false,
    }
}

/// True when `url`'s host is `localhost` or a loopback address (the parser lowercases names).
pub fn is_loopback_host(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sha256_is_64_hexadecimal_digits() {
        assert_eq!(
            parse_sha256(&"ab".repeat(32)).map(|h| h[0]),
            Some(0xab),
            "lower case"
        );
        assert!(parse_sha256(&"AB".repeat(32)).is_some());
        assert!(parse_sha256(&"ab".repeat(31)).is_none());
        assert!(parse_sha256(&"zz".repeat(32)).is_none());
        assert!(parse_sha256(&"é".repeat(32)).is_none());
    }
}
