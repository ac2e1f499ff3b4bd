//! access: who a request over HTTP comes from, and what they may list and call.
//!
//! ```text
//! request -> authenticate: no token (loopback, where allowed: the local operator)
//!                          | a named static token (SHA-256, compared in constant time)
//!                          | an access token of the trusted provider ([`oidc`])
//!         -> a Caller: the identity, and its grant under the rules in force ([`policy`])
//!         -> or a Refusal: 400/401/403 with the RFC 6750 challenge the client acts on
//! ```
//!
//! The settings come from `[access]` of `toolhost.toml` (checked by toolhost-config);
//! [`Access::replace`] swaps them on a reload, and the next request sees the new rules,
//! sessions opened before included (a [`Grant`] asks the rules in force each time). The
//! provider's keys and validated tokens survive a reload that keeps the same provider.
//! Quotas are counted by toolhost-state, in this process or in the fleet's Redis.

pub mod oidc;
pub mod policy;

pub use oidc::{Invalid, MAX_TOKEN_BYTES, Oidc};
pub use policy::Policy;

use arc_swap::ArcSwap;
use http::{HeaderMap, StatusCode, Uri};
use std::sync::Arc;
use subtle::ConstantTimeEq;
use toolhost_config::access::{AccessSettings, StaticToken, sha256_of};
use toolhost_contract::{Identity, IdentityKind};
use toolhost_core::catalog::Tool;
use toolhost_core::invoke::{Admission, Admitted, Caller, Permits};
use toolhost_state::quota::Quotas;

/// The name `--token-env`'s token goes by in rules, audit records and metrics.
pub const LEGACY_TOKEN_NAME: &str = toolhost_contract::OPERATOR_TOKEN;

/// The settings in force.
struct State {
    require_token: bool,
    metrics_identities: usize,
    tokens: Vec<StaticToken>,
    oidc: Option<Arc<Oidc>>,
    /// `[access.oidc] challenge-scopes`: what a `401` names (`None`: every scope of the rules).
    challenge: Option<Vec<String>>,
    policy: Policy,
}

/// Authentication and the rules of one `serve --http`.
pub struct Access {
    state: Arc<ArcSwap<State>>,
    /// What each identity used of its quota, across reloads (here or in the fleet's Redis).
    quotas: Arc<Quotas>,
}

/// A request refused before it reaches a tool.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: StatusCode,
    /// RFC 6750's error code: `invalid_request`, `invalid_token` or `insufficient_scope`.
    pub error: &'static str,
    pub description: String,
    /// The scopes that would do (a `403 insufficient_scope`).
    pub scope: Option<String>,
}

/// The longest `error_description` sent back (it can quote what the client sent: a key id).
const MAX_DESCRIPTION_BYTES: usize = 300;

impl Refusal {
    fn invalid_token(description: impl Into<String>) -> Self {
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_token",
            description: printable(description.into()),
            scope: None,
        }
    }

    fn invalid_request(description: impl Into<String>) -> Self {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            error: "invalid_request",
            description: printable(description.into()),
            scope: None,
        }
    }
}

/// `text` as a challenge may carry it (RFC 6750 §3: printable ASCII, no quote or backslash),
/// other characters as `?`, cut at [`MAX_DESCRIPTION_BYTES`].
fn printable(text: String) -> String {
    let mut text: String = (text.chars())
        .map(|c| match c {
            '"' | '\\' => '\'',
            ' '..='~' => c,
            _ => '?',
        })
        .collect();
    if text.len() > MAX_DESCRIPTION_BYTES {
        toolhost_contract::cut_in_place(&mut text, MAX_DESCRIPTION_BYTES - 3, |_| "...".into());
    }
    text
}

impl Access {
    /// The access of `settings`, with `--token-env`'s token (if given) as one more static
    /// token named [`LEGACY_TOKEN_NAME`].
    pub fn new(settings: AccessSettings, legacy: Option<&str>) -> Result<Self, Invalid> {
        let state = State::of(settings, legacy, None)?;
        Ok(Access {
            state: Arc::new(ArcSwap::from_pointee(state)),
            quotas: Arc::new(Quotas::embedded()),
        })
    }

    /// The settings of a reload, in force from the next request; the provider's keys and
    /// validated tokens are kept when the provider is the same.
    pub fn replace(&self, settings: AccessSettings, legacy: Option<&str>) -> Result<(), Invalid> {
        let current = self.state.load();
        let state = State::of(settings, legacy, current.oidc.as_ref())?;
        self.state.store(Arc::new(state));
        Ok(())
    }

    /// Whether any identity source is configured (else only loopback requests are served).
    pub fn has_identities(&self) -> bool {
        let state = self.state.load();
        !state.tokens.is_empty() || state.oidc.is_some()
    }

    /// Whether a request without a token from loopback is the local operator.
    pub fn local_allowed(&self) -> bool {
        !self.state.load().require_token
    }

    /// The trusted provider, if any (to fetch its keys ahead of the first token).
    pub fn oidc(&self) -> Option<Arc<Oidc>> {
        self.state.load().oidc.clone()
    }

    /// The caller a request comes from: `headers`, its `uri` (a token in the query string is
    /// refused), and whether it came from loopback.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
        loopback: bool,
    ) -> Result<Caller, Refusal> {
        if uri.query().is_some_and(|q| {
            q.split('&')
                .any(|pair| pair.split('=').next() == Some("access_token"))
        }) {
            return Err(Refusal::invalid_request(
                "an access token in the query string is refused (it ends up in logs): send it \
                 as Authorization: Bearer",
            ));
        }
        let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
        let (value, second) = (values.next(), values.next());
        if second.is_some() {
            return Err(Refusal::invalid_request(
                "more than one Authorization header",
            ));
        }
        let state = self.state.load_full();
        let local = loopback && !state.require_token;
        // Without a token or provider to check against, a loopback request is the local
        // operator's whatever it carries (as before `[access]` existed).
        if local && state.tokens.is_empty() && state.oidc.is_none() {
            return Ok(Caller::local());
        }
        let Some(value) = value else {
            if local {
                return Ok(Caller::local());
            }
            return Err(Refusal::invalid_token("a bearer token is required"));
        };
        if value.len() > MAX_TOKEN_BYTES + "Bearer ".len() {
            return Err(Refusal::invalid_token(format!(
                "the Authorization header is longer than {} KiB",
                MAX_TOKEN_BYTES >> 10
            )));
        }
        let token = (value.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                Refusal::invalid_request("the Authorization header is not `Bearer <token>`")
            })?;
        let identity = match state.static_token(token) {
            Some(found) => Arc::new(Identity {
                kind: IdentityKind::Token,
                name: found.name.clone(),
                client: None,
                groups: found.groups.clone(),
                scopes: Vec::new(),
            }),
            None => match &state.oidc {
                Some(oidc) if token.matches('.').count() == 2 => oidc
                    .identify(token)
                    .await
                    .map_err(|e| Refusal::invalid_token(e.0))?,
                _ => {
                    return Err(Refusal::invalid_token(
                        "the token is not one this server knows",
                    ));
                }
            },
        };
        Ok(self.caller(identity))
    }

    /// The caller of `identity` under the rules in force at each of its calls.
    pub fn caller(&self, identity: impl Into<Arc<Identity>>) -> Caller {
        let identity = identity.into();
        let grant = Grant {
            key: identity.key(),
            identity: Arc::clone(&identity),
            state: Arc::clone(&self.state),
            quotas: Arc::clone(&self.quotas),
        };
        Caller {
            identity,
            access: Arc::new(grant),
        }
    }

    /// Whether any rule is written (then what none grants is denied).
    pub fn is_restrictive(&self) -> bool {
        self.state.load().policy.is_restrictive()
    }

    /// The named static token `name`'s identity (for `toolhost list --as`).
    pub fn token_identity(&self, name: &str) -> Option<Identity> {
        let state = self.state.load();
        let found = state.tokens.iter().find(|t| t.name == name)?;
        Some(Identity {
            kind: IdentityKind::Token,
            name: found.name.clone(),
            client: None,
            groups: found.groups.clone(),
            scopes: Vec::new(),
        })
    }

    /// The `WWW-Authenticate` value of `refusal` (RFC 6750 §3, with RFC 9728's
    /// `resource_metadata` when a provider is trusted).
    pub fn challenge(&self, refusal: &Refusal) -> String {
        let state = self.state.load();
        let mut parts = vec![format!("error=\"{}\"", refusal.error)];
        parts.push(format!(
            "error_description=\"{}\"",
            printable(refusal.description.clone())
        ));
        if let Some(oidc) = &state.oidc {
            parts.push(format!(
                "resource_metadata=\"{}\"",
                metadata_url(&oidc.settings.resource)
            ));
        }
        let scopes = match &refusal.scope {
            Some(scope) => Some(scope.clone()),
            None => match &state.challenge {
                Some(chosen) => Some(chosen.join(" ")),
                None => Some(state.policy.scopes().join(" ")),
            }
            .filter(|s| !s.is_empty()),
        };
        if let Some(scope) = scopes {
            parts.push(format!("scope=\"{scope}\""));
        }
        format!("Bearer {}", parts.join(", "))
    }

    /// The refusal of a call to `tool` that a scope would allow (step-up): `403
    /// insufficient_scope` naming it; `None` when no scope would (the tool stays unknown).
    pub fn step_up(&self, caller: &Caller, tool: &Tool) -> Option<Refusal> {
        let state = self.state.load();
        let scopes = state.policy.scopes_for(&caller.identity, tool);
        if scopes.is_empty() {
            return None;
        }
        Some(Refusal {
            status: StatusCode::FORBIDDEN,
            error: "insufficient_scope",
            description: format!(
                "calling `{}` needs the scope {}",
                tool.name(),
                scopes.join(" or ")
            ),
            scope: Some(scopes.join(" ")),
        })
    }

    /// The quotas of the fleet (`[fleet] redis`) instead of this host's own.
    pub fn with_quotas(mut self, quotas: Arc<Quotas>) -> Self {
        self.quotas = quotas;
        self
    }

    /// `caller`'s next call admitted ahead under its quota (a request without a session),
    /// or `None` when no quota applies. The request carries the admission to its call
    /// ([`Admitted`]); one that ends without a call drops it, which gives the token back, and
    /// a follow-up waives it. The guard answers its refusal (`429` or `503`, with
    /// [`Admitted::refusal`]) once the request is done. The fleet's quotas are asked on their
    /// own, while the request goes on.
    pub fn admit_ahead(&self, caller: &Caller) -> Option<Admitted> {
        let state = self.state.load_full();
        let quota = state.policy.quota_for(&caller.identity)?;
        let (quotas, key, quota) = (
            Arc::clone(&self.quotas),
            caller.identity.key(),
            quota.clone(),
        );
        if self.quotas.is_shared() {
            // A round trip to Redis: it goes on while the request does (see `Admitted`).
            return Some(Admitted::pending(async move {
                quotas.admit(key, &quota, true).await
            }));
        }
        // Counted in this process: decided at once.
        let decided = quotas.admit_now(key, &quota, true)?;
        Some(Admitted::known(decided))
    }

    /// Identities named in `/metrics`; the rest are `other`.
    pub fn metrics_identities(&self) -> usize {
        self.state.load().metrics_identities
    }

    /// Whether `caller` may read `/metrics`.
    pub fn may_read_metrics(&self, caller: &Caller) -> bool {
        self.state.load().policy.may_read_metrics(&caller.identity)
    }

    /// The protected resource metadata (RFC 9728), when a provider is trusted.
    pub fn metadata(&self) -> Option<serde_json::Value> {
        let state = self.state.load();
        let oidc = state.oidc.as_ref()?;
        Some(serde_json::json!({
            "resource": oidc.settings.resource,
            "authorization_servers": [oidc.settings.issuer],
            "scopes_supported": state.policy.scopes(),
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": oidc.settings.algorithms,
            "resource_name": "toolhost",
        }))
    }

    /// The paths the metadata is served at: the root form, and the one with the resource's
    /// path inserted (`/.well-known/oauth-protected-resource/mcp`).
    pub fn metadata_paths(&self) -> Vec<String> {
        let state = self.state.load();
        let mut paths = vec![WELL_KNOWN.to_string()];
        if let Some(oidc) = &state.oidc
            && let Ok(url) = url::Url::parse(&oidc.settings.resource)
            && url.path() != "/"
        {
            paths.push(format!("{WELL_KNOWN}{}", url.path().trim_end_matches('/')));
        }
        paths
    }
}

const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// Where a resource's metadata is: the well-known path inserted before its path (RFC 9728 §3.1).
fn metadata_url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            let mut base = url.clone();
            base.set_path(&format!("{WELL_KNOWN}{path}"));
            base.set_query(None);
            base.to_string()
        }
        Err(_) => WELL_KNOWN.to_string(),
    }
}

impl State {
    fn of(
        settings: AccessSettings,
        legacy: Option<&str>,
        keep: Option<&Arc<Oidc>>,
    ) -> Result<Self, Invalid> {
        let mut tokens = settings.tokens;
        if let Some(token) = legacy {
            tokens.push(StaticToken {
                name: LEGACY_TOKEN_NAME.into(),
                groups: Vec::new(),
                sha256: sha256_of(token.as_bytes()),
            });
        }
        // Read from the settings of each reload, also when the provider is kept.
        let challenge = (settings.oidc.as_ref()).and_then(|o| o.challenge_scopes.clone());
        let oidc = match settings.oidc {
            None => None,
            Some(oidc) => match keep.filter(|kept| same_provider(&kept.settings, &oidc)) {
                Some(kept) => Some(Arc::clone(kept)),
                None => Some(Arc::new(Oidc::new(oidc)?)),
            },
        };
        // As before `[access]`: a token source named means every request needs a token, unless
        // the operator lets loopback in without one.
        let require_token =
            (settings.require_token).unwrap_or(!tokens.is_empty() || oidc.is_some());
        Ok(State {
            require_token,
            metrics_identities: settings.metrics_identities,
            tokens,
            oidc,
            challenge,
            policy: Policy::new(settings.rules, settings.quotas),
        })
    }

    /// The static token `token` is, compared with every one in constant time.
    fn static_token(&self, token: &str) -> Option<&StaticToken> {
        // With no static tokens there is nothing to compare (and no secret to time).
        if self.tokens.is_empty() {
            return None;
        }
        let presented = sha256_of(token.as_bytes());
        let mut found = None;
        for candidate in &self.tokens {
            if bool::from(candidate.sha256.ct_eq(&presented)) {
                found = Some(candidate);
            }
        }
        found
    }
}

fn same_provider(
    a: &toolhost_config::access::OidcSettings,
    b: &toolhost_config::access::OidcSettings,
) -> bool {
    a.issuer == b.issuer
        && a.resource == b.resource
        && a.algorithms == b.algorithms
        && a.leeway == b.leeway
        && a.groups_claim == b.groups_claim
        && same_sign_in(a.sign_in.as_ref(), b.sign_in.as_ref())
}

/// Whether two `[access.oidc.sign-in]`s are the same (the web chat's sign-in reads the kept
/// provider's: a changed one makes a new provider).
fn same_sign_in(
    a: Option<&toolhost_config::access::SignInSettings>,
    b: Option<&toolhost_config::access::SignInSettings>,
) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.client_id == b.client_id
                && a.client_secret == b.client_secret
                && a.scopes == b.scopes
                && a.redirect_uri == b.redirect_uri
        }
        _ => false,
    }
}

/// What an identity may call and how much: asked of the rules and quotas in force each time.
struct Grant {
    identity: Arc<Identity>,
    key: [u8; 32],
    state: Arc<ArcSwap<State>>,
    quotas: Arc<Quotas>,
}

impl Permits for Grant {
    fn permits(&self, tool: &Tool) -> bool {
        self.state.load().policy.may_call(&self.identity, tool)
    }

    fn permits_named(&self, ensemble: &str, name: &str) -> bool {
        self.state
            .load()
            .policy
            .may_use(&self.identity, ensemble, name)
    }

    fn may_approve(&self) -> bool {
        self.state.load().policy.may_approve(&self.identity)
    }

    fn may_answer(&self) -> bool {
        self.state.load().policy.may_answer(&self.identity)
    }

    fn admit(&self) -> Admission<'_> {
        Box::pin(async move {
            let state = self.state.load_full();
            let Some(quota) = state.policy.quota_for(&self.identity) else {
                return Ok(None);
            };
            Ok(Some(self.quotas.admit(self.key, quota, false).await?))
        })
    }

    fn has_quota(&self) -> bool {
        self.state.load().policy.quota_for(&self.identity).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_goes_before_the_resources_path() {
        assert_eq!(
            metadata_url("https://tools.example/mcp"),
            "https://tools.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8750/"),
            "http://127.0.0.1:8750/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn a_reload_takes_the_challenges_scopes_and_the_sign_in_of_a_kept_provider() {
        let oidc = |challenge: Option<&str>, sign_in: bool| toolhost_config::access::OidcSettings {
            issuer: "https://id.example".into(),
            resource: "https://tools.example/mcp".into(),
            algorithms: vec!["RS256".into()],
            leeway: std::time::Duration::from_secs(30),
            groups_claim: "groups".into(),
            sign_in: sign_in.then(|| toolhost_config::access::SignInSettings {
                client_id: "web".into(),
                client_secret: None,
                scopes: vec!["openid".into()],
                redirect_uri: "https://tools.example/auth/callback".parse().expect("url"),
            }),
            challenge_scopes: challenge.map(|c| vec![c.to_string()]),
        };
        let settings = |challenge, sign_in| AccessSettings {
            oidc: Some(oidc(challenge, sign_in)),
            ..AccessSettings::default()
        };
        let access = Access::new(settings(None, false), None).expect("access");
        let refusal = Refusal::invalid_token("no token");
        assert!(!access.challenge(&refusal).contains("scope="));
        let kept = access.oidc().expect("provider");
        access
            .replace(settings(Some("tools:calculate"), false), None)
            .expect("reload");
        assert!(
            (access.challenge(&refusal)).contains("scope=\"tools:calculate\""),
            "{}",
            access.challenge(&refusal)
        );
        assert!(
            Arc::ptr_eq(&kept, &access.oidc().expect("provider")),
            "kept"
        );
        access
            .replace(settings(Some("tools:calculate"), true), None)
            .expect("reload");
        let signing_in = access.oidc().expect("provider");
        assert!(signing_in.settings.sign_in.is_some(), "the new sign-in");
    }

    #[tokio::test]
    async fn static_tokens_loopback_and_the_query_string() {
        let settings = AccessSettings {
            require_token: Some(false),
            tokens: vec![StaticToken {
                name: "ops".into(),
                groups: vec!["admins".into()],
                sha256: sha256_of(b"s3cret"),
            }],
            ..AccessSettings::default()
        };
        let access = Access::new(settings, Some("legacy")).expect("access");
        let uri: Uri = "/mcp".parse().expect("uri");
        let bearer = |token: &str| {
            let mut headers = HeaderMap::new();
            let value = format!("Bearer {token}").parse().expect("header");
            headers.insert(http::header::AUTHORIZATION, value);
            headers
        };
        let ops = access
            .authenticate(&bearer("s3cret"), &uri, false)
            .await
            .expect("ops");
        assert_eq!(ops.identity.name, "ops");
        assert_eq!(ops.identity.groups, ["admins"]);
        let legacy = access
            .authenticate(&bearer("legacy"), &uri, false)
            .await
            .expect("legacy");
        assert_eq!(legacy.identity.name, LEGACY_TOKEN_NAME);
        let wrong = access.authenticate(&bearer("s3cre"), &uri, true).await;
        assert_eq!(wrong.expect_err("refused").status, StatusCode::UNAUTHORIZED);
        let local = access
            .authenticate(&HeaderMap::new(), &uri, true)
            .await
            .expect("local");
        assert_eq!(local.identity.kind, IdentityKind::Local);
        let remote = access.authenticate(&HeaderMap::new(), &uri, false).await;
        assert_eq!(remote.expect_err("refused").error, "invalid_token");
        let query: Uri = "/mcp?access_token=s3cret".parse().expect("uri");
        let refused = access.authenticate(&bearer("s3cret"), &query, true).await;
        assert_eq!(
            refused.expect_err("refused").status,
            StatusCode::BAD_REQUEST
        );
        let challenge = access.challenge(&Refusal::invalid_token("say \"why\"\n"));
        assert_eq!(
            challenge,
            "Bearer error=\"invalid_token\", error_description=\"say 'why'?\""
        );
        let long = Refusal::invalid_token(format!("kid `{}`", "é".repeat(400)));
        assert_eq!(long.description.len(), MAX_DESCRIPTION_BYTES);
        assert!(long.description.ends_with("???..."), "{}", long.description);
    }
}
