//! oauth_http: every HTTP request a sign-in makes (discovery, registration, the token
//! exchange and each refresh), as toolhost bounds it and checks it, for rmcp's OAuth client
//! to send ([`OAuthHttpClient`]). The authorization server and the imported server are
//! hostile until proven otherwise:
//!
//! - each answer is read to [`MAX_ANSWER_BYTES`] within [`REQUEST_TIMEOUT`], and follows at
//!   most [`MAX_REDIRECTS`] redirects, on the same origin, where rmcp asks for them; one step
//!   of a sign-in (discovery, starting it, the exchange, a refresh), and any minute of a
//!   `serve` renewing its tokens, sends at most [`MAX_REQUESTS_PER_STEP`] requests, however
//!   many authorization servers a hostile resource names;
//! - nothing goes over plain `http` for an import reached over `https`;
//! - no request goes to a link-local, unspecified, multicast or reserved address, or to a
//!   cloud's metadata host (names are resolved here and each address checked, literals
//!   before anything is sent); loopback only for an import reached at a loopback address;
//! - a registration answer that does not register the redirect URI asked for is refused
//!   (RFC 7591 §3.2.1: the client checks what it was registered with);
//! - a token answer whose access token says it is for another audience (a JWT's `aud`,
//!   RFC 8707), or that is not a bearer token, is refused before rmcp keeps it; its
//!   `expires_in` is held between a minute and a day (rmcp would renew a token of 1 s at
//!   every request, and never one of `u64::MAX` s).
//!
//! rmcp says little of why a request failed ("discovery failed", "request failed"): the last
//! refusal here is kept ([`Guarded::refusals`]) for the sign-in's error to say.

use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The most of one answer read: metadata, registration and token answers are a few KiB.
pub const MAX_ANSWER_BYTES: usize = 256 << 10;
/// How long one request may take, its answer read whole.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed, where rmcp follows them (registration, some discovery).
pub const MAX_REDIRECTS: usize = 5;
/// Requests one step of a sign-in sends (discovery tries a few URLs per authorization server).
pub const MAX_REQUESTS_PER_STEP: usize = 24;
/// The lifetime a token answer is taken to give, at least and at most.
const LIFETIME_SECONDS: std::ops::RangeInclusive<u64> = 60..=86_400;
/// Names that resolve to a cloud's instance metadata, whatever their address.
const METADATA_HOSTS: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.azure.internal",
];

/// Which addresses a sign-in may reach, decided by the import's own address.
#[derive(Clone, Copy)]
struct Reach {
    loopback: bool,
    /// The import is reached over `https`: so is everything else.
    https: bool,
}

impl Reach {
    /// Why `address` may not be reached, if it may not.
    fn refuses(self, address: IpAddr) -> Option<&'static str> {
        match toolhost_config::sandbox::network::internal_kind(address) {
            None => None,
            Some("loopback") if self.loopback => None,
            Some(kind) if kind.starts_with("private") => None,
            Some(kind) => Some(kind),
        }
    }

    /// Why `url` may not be reached, as far as its text says.
    fn refuses_url(self, url: &url::Url) -> Option<String> {
        if !matches!(url.scheme(), "https" | "http") || (self.https && url.scheme() != "https") {
            return Some(format!(
                "`{}`, where the import is reached over {}",
                url.scheme(),
                if self.https { "https" } else { "http" }
            ));
        }
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.refuses(IpAddr::V4(ip)).map(str::to_string),
            Some(url::Host::Ipv6(ip)) => self.refuses(IpAddr::V6(ip)).map(str::to_string),
            Some(url::Host::Domain(name)) => (METADATA_HOSTS
                .contains(&name.trim_end_matches('.').to_ascii_lowercase().as_str()))
            .then(|| "a cloud's metadata host".to_string()),
            None => Some("no host".to_string()),
        }
    }
}

impl reqwest::dns::Resolve for Reach {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = *self;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = (found.iter())
                .filter(|a| reach.refuses(a.ip()).is_none())
                .copied()
                .collect();
            if allowed.is_empty() {
                let kind = found.first().and_then(|a| reach.refuses(a.ip()));
                let why = format!(
                    "`{host}` resolves to no address a sign-in may reach ({})",
                    kind.unwrap_or("none found")
                );
                return Err(why.into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The HTTP client of one import's sign-in.
pub struct Guarded {
    follow: reqwest::Client,
    stop: reqwest::Client,
    reach: Reach,
    /// The import's URL: the audience its tokens must be for.
    resource: String,
    step: Arc<Mutex<Step>>,
}

/// What one step of a sign-in has sent, and refused last. A step is also a window of
/// [`STEP_WINDOW`]: a `serve` renewing its tokens for days counts its refreshes per window.
#[derive(Default)]
struct Step {
    requests: usize,
    since: Option<std::time::Instant>,
    refusal: Option<String>,
}

/// How long the requests of one step are counted together.
const STEP_WINDOW: Duration = Duration::from_secs(60);

impl Guarded {
    /// The client for the sign-in of the import at `resource`.
    pub fn new(resource: &str) -> Result<Guarded, String> {
        let parsed = url::Url::parse(resource).map_err(|e| format!("`{resource}`: {e}"))?;
        let reach = Reach {
            loopback: toolhost_config::access::is_loopback_host(&parsed),
            https: parsed.scheme() == "https",
        };
        let step = Arc::new(Mutex::new(Step::default()));
        let noted = Arc::clone(&step);
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            let first = attempt.previous().first().map(url::Url::origin);
            let why = match reach.refuses_url(attempt.url()) {
                Some(kind) => Some(format!("a redirect to {} ({kind})", attempt.url())),
                None if first.is_some_and(|origin| origin != attempt.url().origin()) => {
                    Some(format!("a redirect to {}, another origin", attempt.url()))
                }
                None if attempt.previous().len() > MAX_REDIRECTS => {
                    Some(format!("more than {MAX_REDIRECTS} redirects"))
                }
                None => None,
            };
            match why {
                Some(why) => {
                    note(&noted, &why);
                    attempt.error(why)
                }
                None => attempt.follow(),
            }
        });
        let build = |redirect| {
            reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .connect_timeout(REQUEST_TIMEOUT)
                .redirect(redirect)
                .dns_resolver(Arc::new(reach))
                .build()
                .map_err(|e| format!("cannot build its HTTP client: {e}"))
        };
        Ok(Guarded {
            follow: build(follow)?,
            stop: build(reqwest::redirect::Policy::none())?,
            reach,
            resource: resource.to_string(),
            step,
        })
    }

    /// A handle to the refusals of this client, for after it is handed to rmcp.
    pub fn refusals(&self) -> Refusals {
        Refusals(Arc::clone(&self.step))
    }

    /// Sends `asked` (following redirects when `follow`), within every bound and check.
    pub async fn send(
        &self,
        asked: http::Request<Vec<u8>>,
        follow: bool,
    ) -> Result<http::Response<Vec<u8>>, String> {
        let url = url::Url::parse(&asked.uri().to_string()).map_err(|e| e.to_string())?;
        let sent = {
            let mut step = self.step.lock().unwrap_or_else(PoisonError::into_inner);
            let now = std::time::Instant::now();
            if step
                .since
                .is_none_or(|since| now.duration_since(since) > STEP_WINDOW)
            {
                (step.requests, step.since) = (0, Some(now));
            }
            step.requests += 1;
            step.requests
        };
        if sent > MAX_REQUESTS_PER_STEP {
            return Err(format!(
                "more than {MAX_REQUESTS_PER_STEP} requests in one step of the sign-in (the last \
                 to {url})"
            ));
        }
        if let Some(kind) = self.reach.refuses_url(&url) {
            return Err(format!(
                "{url} is not an address a sign-in may reach ({kind})"
            ));
        }
        let client = if follow { &self.follow } else { &self.stop };
        let registration = registration_redirects(asked.method(), asked.body());
        let token_request = is_token_request(asked.method(), asked.body());
        let request = reqwest::Request::try_from(asked).map_err(|e| e.to_string())?;
        let mut response = client.execute(request).await.map_err(|e| {
            let mut said = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                said = format!("{said}: {cause}");
                source = cause.source();
            }
            format!("{url}: {said}")
        })?;
        let mut answer = http::Response::builder()
            .status(response.status())
            .version(response.version());
        for (name, value) in response.headers() {
            answer = answer.header(name, value);
        }
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) if chunk.len() > MAX_ANSWER_BYTES - body.len() => {
                    return Err(format!(
                        "{url}: its answer exceeds {} KiB, the most a sign-in reads",
                        MAX_ANSWER_BYTES >> 10
                    ));
                }
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(e) => return Err(format!("{url}: its answer: {e}")),
            }
        }
        if response.status().is_redirection() {
            // Not followed where rmcp asks so (discovery, the token endpoint): said, in case
            // it is why the sign-in fails.
            let to = response.headers().get(http::header::LOCATION);
            let to = to.and_then(|l| l.to_str().ok()).unwrap_or("nowhere");
            note(
                &self.step,
                &format!("{url} redirects to {}, which is not followed", cut(to)),
            );
        }
        let success = response.status().is_success();
        if success && let Some(asked) = registration {
            check_registration(&asked, &body)?;
        }
        if success && token_request {
            body = checked_token(body, &self.resource)?;
        }
        answer.body(body).map_err(|e| e.to_string())
    }
}

/// The refusals of one [`Guarded`] client, and the steps of its sign-in.
#[derive(Clone)]
pub struct Refusals(Arc<Mutex<Step>>);

impl Refusals {
    /// The last one since [`Refusals::clear`], if there was one.
    pub fn last(&self) -> Option<String> {
        let step = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        step.refusal.clone()
    }

    /// Starts a step of rmcp's: its refusals and requests counted anew, so that a step's
    /// error is said with its own refusal, not one an earlier step recovered from.
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Step::default();
    }
}

fn note(step: &Mutex<Step>, why: &str) {
    step.lock().unwrap_or_else(PoisonError::into_inner).refusal = Some(why.to_string());
}

impl OAuthHttpClient for Guarded {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let follow = request.redirect_policy != OAuthHttpRedirectPolicy::Stop;
            self.send(request.request, follow).await.map_err(|why| {
                note(&self.step, &why);
                OAuthHttpClientError::from(why)
            })
        })
    }
}

/// The redirect URIs a registration request (a JSON POST naming `redirect_uris`) asks for.
fn registration_redirects(method: &http::Method, body: &[u8]) -> Option<Vec<String>> {
    if method != http::Method::POST {
        return None;
    }
    let asked: serde_json::Value = serde_json::from_slice(body).ok()?;
    let uris = asked.get("redirect_uris")?.as_array()?;
    Some(
        uris.iter()
            .filter_map(|u| u.as_str().map(str::to_string))
            .collect(),
    )
}

/// Whether a request is one to a token endpoint (a form with a `grant_type`).
fn is_token_request(method: &http::Method, body: &[u8]) -> bool {
    method == http::Method::POST
        && url::form_urlencoded::parse(body).any(|(key, _)| key == "grant_type")
}

/// A registration answer must register every redirect URI asked for (when it says which).
fn check_registration(asked: &[String], answer: &[u8]) -> Result<(), String> {
    let answer: serde_json::Value = serde_json::from_slice(answer)
        .map_err(|e| format!("the registration answer is not JSON: {e}"))?;
    let Some(registered) = answer.get("redirect_uris").and_then(|r| r.as_array()) else {
        return Ok(());
    };
    let registered: Vec<&str> = registered.iter().filter_map(|u| u.as_str()).collect();
    match asked.iter().find(|uri| !registered.contains(&uri.as_str())) {
        None => Ok(()),
        Some(missing) => Err(format!(
            "the authorization server registered the client for other redirect URIs than \
             `{missing}`, the one asked for ({}): refused",
            cut(&registered.join(", "))
        )),
    }
}

/// An access token that says whom it is for (a JWT's `aud`) must be for `resource`: the
/// import's URL, or a prefix of it (an origin, a path above it).
fn check_audience(
    answer: &serde_json::Map<String, serde_json::Value>,
    resource: &str,
) -> Result<(), String> {
    use base64::Engine;
    let Some(token) = answer.get("access_token").and_then(|t| t.as_str()) else {
        return Ok(());
    };
    let mut parts = token.split('.');
    let (Some(_), Some(claims), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ok(());
    };
    let Some(claims) = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
    else {
        return Ok(());
    };
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(serde_json::Value::String(one)) => vec![one.as_str()],
        Some(serde_json::Value::Array(many)) => many.iter().filter_map(|a| a.as_str()).collect(),
        _ => return Ok(()),
    };
    let this = resource.trim_end_matches('/');
    let ours = |audience: &&str| {
        let audience = audience.trim_end_matches('/');
        this == audience || this.starts_with(&format!("{audience}/"))
    };
    match audiences.iter().any(ours) {
        true => Ok(()),
        false => Err(format!(
            "the access token is for another audience ({}), not {resource}: refused",
            cut(&audiences.join(", "))
        )),
    }
}

/// A token answer for `resource` ([`check_audience`]) with a bearer token, its `expires_in`
/// held within [`LIFETIME_SECONDS`] (rewritten where it was not): the answer read once.
fn checked_token(body: Vec<u8>, resource: &str) -> Result<Vec<u8>, String> {
    let Ok(serde_json::Value::Object(mut answer)) = serde_json::from_slice(&body) else {
        return Ok(body);
    };
    check_audience(&answer, resource)?;
    let kind = answer.get("token_type").and_then(|t| t.as_str());
    if kind.is_some_and(|kind| !kind.eq_ignore_ascii_case("bearer")) {
        return Err(format!(
            "the token is of type `{}`, not a bearer token: refused",
            cut(kind.unwrap_or_default())
        ));
    }
    let Some(given) = answer.get("expires_in") else {
        return Ok(body);
    };
    let held = held_lifetime(given);
    if given.as_u64() == Some(held) {
        return Ok(body);
    }
    answer.insert("expires_in".into(), held.into());
    serde_json::to_vec(&answer).map_err(|e| e.to_string())
}

/// A token answer's `expires_in` as a number of seconds within [`LIFETIME_SECONDS`],
/// whatever the server wrote: an integer of any size or sign, a number with a fraction
/// (rounded), or a number in a string (as some providers send it); anything else is the
/// shortest lifetime, so that the token is renewed soon rather than trusted for long.
fn held_lifetime(given: &serde_json::Value) -> u64 {
    let (least, most) = (*LIFETIME_SECONDS.start(), *LIFETIME_SECONDS.end());
    let seconds = match given {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(text) => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    match seconds {
        Some(s) if s.is_finite() => s.round().clamp(least as f64, most as f64) as u64,
        _ => least,
    }
}

/// `text` from a server, cut to a length an error line may quote.
fn cut(text: &str) -> String {
    let mut text = text.to_string();
    toolhost_contract::cut_in_place(&mut text, 300, |_| "...".to_string());
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_reaches_public_and_private_addresses_and_loopback_only_from_loopback() {
        let remote = Reach {
            loopback: false,
            https: true,
        };
        let local = Reach {
            loopback: true,
            https: false,
        };
        let ip = |text: &str| text.parse::<IpAddr>().expect("ip");
        assert!(remote.refuses(ip("93.184.216.34")).is_none());
        assert!(remote.refuses(ip("10.0.0.9")).is_none());
        assert_eq!(remote.refuses(ip("127.0.0.1")), Some("loopback"));
        assert!(local.refuses(ip("127.0.0.1")).is_none());
        assert_eq!(local.refuses(ip("169.254.169.254")), Some("link-local"));
        assert!(local.refuses(ip("0.0.0.0")).is_some());
        let url = |text: &str| url::Url::parse(text).expect("url");
        assert!(
            local
                .refuses_url(&url("http://metadata.google.internal/"))
                .is_some()
        );
        assert!(local.refuses_url(&url("http://[fe80::1]/")).is_some());
        // No weaker than the import's own scheme.
        assert!(
            remote
                .refuses_url(&url("http://example.com/token"))
                .is_some()
        );
        assert!(
            remote
                .refuses_url(&url("https://example.com/token"))
                .is_none()
        );
        assert!(local.refuses_url(&url("file:///etc/passwd")).is_some());
    }

    #[test]
    fn a_token_answer_is_a_bearer_token_and_its_lifetime_is_held_between_a_minute_and_a_day() {
        let lifetime = |given: serde_json::Value| {
            let body = serde_json::json!({"access_token": "t", "token_type": "Bearer", "expires_in": given});
            let held = checked_token(body.to_string().into_bytes(), "r").expect("taken");
            serde_json::from_slice::<serde_json::Value>(&held).expect("JSON")["expires_in"].clone()
        };
        assert_eq!(lifetime(serde_json::json!(3600)), 3600);
        assert_eq!(lifetime(serde_json::json!(1)), 60);
        assert_eq!(lifetime(serde_json::json!(u64::MAX)), 86_400);
        // What providers send besides a plain integer, and what a hostile one might.
        assert_eq!(lifetime(serde_json::json!(-100)), 60);
        assert_eq!(lifetime(serde_json::json!(1e30)), 86_400);
        assert_eq!(lifetime(serde_json::json!(3600.0)), 3600);
        assert_eq!(lifetime(serde_json::json!(3599.6)), 3600);
        assert_eq!(lifetime(serde_json::json!("3599")), 3599);
        assert_eq!(lifetime(serde_json::json!(-1e300)), 60);
        assert_eq!(lifetime(serde_json::json!("soon")), 60);
        assert_eq!(lifetime(serde_json::json!(null)), 60);
        let other = br#"{"access_token":"t","token_type":"DPoP","expires_in":60}"#.to_vec();
        assert!(checked_token(other, "r").is_err());
    }

    #[tokio::test]
    async fn a_step_sends_at_most_its_share_of_requests_and_a_new_window_counts_anew() {
        let guarded = Guarded::new("http://127.0.0.1:9/mcp").expect("client");
        let request = || {
            http::Request::get("http://127.0.0.1:9/.well-known/oauth-authorization-server")
                .body(Vec::new())
                .expect("request")
        };
        for _ in 0..MAX_REQUESTS_PER_STEP {
            // Nothing listens there: each fails, but is sent.
            let failed = guarded.send(request(), false).await.expect_err("refused");
            assert!(!failed.contains("requests in one step"), "{failed}");
        }
        let over = guarded.send(request(), false).await.expect_err("over");
        assert!(over.contains("more than 24 requests in one step"), "{over}");
        // A new step (or a minute later, for a serve renewing its tokens) counts anew.
        guarded.refusals().clear();
        let again = guarded.send(request(), false).await.expect_err("refused");
        assert!(!again.contains("requests in one step"), "{again}");
        let past = std::time::Instant::now().checked_sub(STEP_WINDOW + Duration::from_secs(1));
        guarded.step.lock().expect("step").since = past;
        guarded.step.lock().expect("step").requests = MAX_REQUESTS_PER_STEP;
        let later = guarded.send(request(), false).await.expect_err("refused");
        assert!(!later.contains("requests in one step"), "{later}");
    }

    #[test]
    fn a_registration_for_other_redirects_and_a_token_for_another_audience_are_refused() {
        let asked = vec!["http://127.0.0.1:5000/callback".to_string()];
        let same = br#"{"client_id":"c","redirect_uris":["http://127.0.0.1:5000/callback"]}"#;
        assert!(check_registration(&asked, same).is_ok());
        assert!(check_registration(&asked, br#"{"client_id":"c"}"#).is_ok());
        let other = br#"{"client_id":"c","redirect_uris":["https://evil.example/cb"]}"#;
        let refused = check_registration(&asked, other).expect_err("refused");
        assert!(refused.contains("https://evil.example/cb"), "{refused}");

        use base64::Engine;
        let token = |aud: serde_json::Value| {
            let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(serde_json::json!({"aud": aud}).to_string());
            serde_json::json!({"access_token": format!("e30.{claims}.sig")}).to_string()
        };
        let resource = "https://mcp.example.com/mcp";
        for fine in [
            serde_json::json!("https://mcp.example.com/mcp"),
            serde_json::json!("https://mcp.example.com"),
            serde_json::json!(["other", "https://mcp.example.com/mcp/"]),
        ] {
            assert!(checked_token(token(fine).into_bytes(), resource).is_ok());
        }
        for wrong in [
            serde_json::json!("https://mcp.example.com.evil.example"),
            serde_json::json!("https://mcp.example.com/mc"),
            serde_json::json!(["https://elsewhere.example"]),
        ] {
            assert!(checked_token(token(wrong).into_bytes(), resource).is_err());
        }
        // An opaque token says nothing of its audience.
        assert!(checked_token(br#"{"access_token":"opaque"}"#.to_vec(), resource).is_ok());
    }
}
