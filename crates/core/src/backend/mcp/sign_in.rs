//! sign_in: an imported server that a person signs in to (`[ensemble.mcp] oauth = { sign-in =
//! true }`). `toolhost login ENSEMBLE` runs the authorization code flow with PKCE as the MCP
//! authorization spec has a client do it, all of it rmcp's (`OAuthState`, with the oauth2
//! crate): the server's `401` names its protected resource metadata, that names the
//! authorization server; the client is the one configured, else one registered by a client
//! ID metadata document or dynamic registration, whichever the server offers, in the spec's
//! order; the person is sent to the authorization URL and comes back to a loopback redirect
//! with the code and the state, which are checked and exchanged, with the server's URL as the
//! `resource` (RFC 8707). The tokens (the refresh token with them) are kept in a file of this
//! host's state, readable by its user alone ([`FileStore`]); `serve` reads them and rmcp's
//! [`AuthClient`] sends the access token with each request and renews it by the refresh token
//! before it expires, saving what it gets. No tokens, or a refresh the server refuses, is
//! "needs sign-in", with the command to run.

use super::oauth_http::{Guarded, Refusals};
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, CredentialStore,
    OAuthClientConfig, OAuthState, StoredCredentials,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolhost_config::draft::{McpCredential, McpOauth};

/// The largest credentials file read: a token response with a refresh token and an ID token
/// is a few KiB.
const MAX_STORED_BYTES: u64 = 64 << 10;

/// Where the tokens for the server at `url` are kept in `dir`: one file per server URL.
pub fn store_path(dir: &Path, url: &str) -> PathBuf {
    let hash = blake3::hash(url.as_bytes()).to_hex();
    dir.join(format!("{}.json", &hash[..32]))
}

/// The tokens of one server, in a file readable by this host's user alone (mode 0600, in a
/// folder of mode 0700), replaced whole at each save. rmcp loads them for every request it
/// sends; they are read again only when the file changed (a `stat` per request), as when
/// `toolhost login` wrote new ones.
pub struct FileStore {
    path: PathBuf,
    read: std::sync::Mutex<Option<(FileStamp, StoredCredentials)>>,
}

/// What tells one version of the file from the next.
type FileStamp = (std::time::SystemTime, u64);

impl FileStore {
    pub fn new(path: PathBuf) -> Self {
        FileStore {
            path,
            read: std::sync::Mutex::default(),
        }
    }

    fn stamp(&self) -> std::io::Result<FileStamp> {
        let metadata = std::fs::metadata(&self.path)?;
        Ok((metadata.modified()?, metadata.len()))
    }

    fn remember(&self, stamp: Option<FileStamp>, credentials: &StoredCredentials) {
        let mut read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *read = stamp.map(|stamp| (stamp, credentials.clone()));
    }

    fn remembered(&self, stamp: FileStamp) -> Option<StoredCredentials> {
        let read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        read.as_ref()
            .filter(|(seen, _)| *seen == stamp)
            .map(|(_, credentials)| credentials.clone())
    }
}

fn store_error(what: &str, path: &Path, error: impl std::fmt::Display) -> AuthError {
    AuthError::InternalError(format!("cannot {what} {}: {error}", path.display()))
}

impl FileStore {
    /// The credentials in the file, read again only when it changed.
    fn read(&self) -> Result<Option<StoredCredentials>, AuthError> {
        use std::io::Read;
        let stamp = match self.stamp() {
            Ok(stamp) => stamp,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error("read", &self.path, e)),
        };
        if let Some(credentials) = self.remembered(stamp) {
            return Ok(Some(credentials));
        }
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error("read", &self.path, e)),
        };
        let mut text = String::new();
        file.take(MAX_STORED_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| store_error("read", &self.path, e))?;
        if text.len() as u64 > MAX_STORED_BYTES {
            return Err(store_error("read", &self.path, "larger than 64 KiB"));
        }
        let credentials: StoredCredentials =
            serde_json::from_str(&text).map_err(|e| store_error("read", &self.path, e))?;
        self.remember(Some(stamp), &credentials);
        Ok(Some(credentials))
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.read()
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let text = serde_json::to_vec_pretty(&credentials)
            .map_err(|e| store_error("write", &self.path, e))?;
        write_private(&self.path, &text).map_err(|e| store_error("write", &self.path, e))?;
        self.remember(self.stamp().ok(), &credentials);
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remember(
            None,
            &StoredCredentials::new(String::new(), None, Vec::new(), None),
        );
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(store_error("remove", &self.path, e)),
        }
    }
}

/// Writes `bytes` to `path` readable by this user alone: a new file of mode 0600 beside it,
/// renamed over it, in a folder made with mode 0700.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let partial = path.with_extension(format!("partial.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

/// The message of an import that has no usable tokens (said of the ensemble that imports
/// it, whose name the command takes).
fn needs_sign_in(why: impl std::fmt::Display) -> String {
    format!("{NEEDS_SIGN_IN}{why}): run `toolhost login` with this ensemble's name")
}

/// How the refusal of an import that needs a person to sign in begins (what `status` and
/// `/readyz` count).
pub const NEEDS_SIGN_IN: &str = "needs sign-in (";

/// A manager for the server at `url` with its authorization server found and its tokens
/// kept in `dir`, every request of it made by a [`Guarded`] client; the server's challenge
/// (its `WWW-Authenticate`) that found it; and what that client refused, for the errors.
async fn manager(
    url: &str,
    dir: &Path,
) -> Result<(AuthorizationManager, Option<String>, Refusals), String> {
    let guarded = Guarded::new(url)?;
    let refusals = guarded.refusals();
    let mut manager = AuthorizationManager::new_with_oauth_http_client(url, Arc::new(guarded))
        .await
        .map_err(|e| format!("cannot prepare its OAuth client: {e}"))?;
    let challenge = super::oauth::probe(url).await;
    refusals.clear();
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| {
            format!(
                "its authorization server could not be found: {e}{}",
                because(&refusals)
            )
        })?;
    manager.set_metadata(resolution.metadata);
    manager.set_credential_store(FileStore::new(store_path(dir, url)));
    Ok((manager, challenge, refusals))
}

/// What the sign-in's HTTP client refused last, said after rmcp's error (which rarely says).
fn because(refusals: &Refusals) -> String {
    refusals
        .last()
        .map_or(String::new(), |why| format!(" ({why})"))
}

/// The HTTP client of the import at `url`, with the tokens a person's sign-in left in `dir`;
/// "needs sign-in" when there are none or they cannot be renewed.
pub(super) async fn client(
    url: &str,
    oauth: &McpOauth,
    dir: &Path,
) -> Result<AuthClient<reqwest::Client>, String> {
    let (mut manager, _, refusals) = manager(url, dir).await?;
    let stored = manager
        .initialize_from_store()
        .await
        .map_err(needs_sign_in)?;
    if !stored {
        return Err(needs_sign_in("no one has signed in"));
    }
    if let McpCredential::SignIn {
        client_secret: Some(secret),
        ..
    } = &oauth.credential
        && let Some(id) = &oauth.client_id
    {
        let config = OAuthClientConfig::new(id.clone(), "http://127.0.0.1/callback")
            .with_client_secret(secret.clone());
        manager
            .configure_client(config)
            .map_err(|e| format!("cannot use its authorization server: {e}"))?;
    }
    // The token now (renewed if it is due), so that an import nobody can use stays out.
    refusals.clear();
    manager
        .get_access_token()
        .await
        .map_err(|e| needs_sign_in(format!("{e}{}", because(&refusals))))?;
    Ok(AuthClient::new(reqwest::Client::default(), manager))
}

/// A sign-in under way: the URL to send the person to, and what checks and exchanges the
/// code that comes back.
pub struct SignIn {
    state: OAuthState,
    url: String,
    /// The step-up scopes this sign-in asks for, forgotten once it is done.
    wanted: PathBuf,
    refusals: Refusals,
}

impl SignIn {
    /// Starts signing in to the server at `url` for `oauth`, the person to come back to
    /// `redirect_uri` (a loopback address of `toolhost login`); the tokens will be kept in
    /// `dir`.
    pub async fn begin(
        url: &str,
        oauth: &McpOauth,
        dir: &Path,
        redirect_uri: &str,
    ) -> Result<SignIn, String> {
        let (manager, challenge, refusals) = manager(url, dir).await?;
        let mut request = AuthorizationRequest::new(redirect_uri).with_client_name("toolhost");
        // The scopes configured, with those a server's step-up asked for since the last
        // sign-in (which include what that one was granted).
        let mut scopes = oauth.scopes.clone();
        for scope in wanted(dir, url) {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        request = match scopes.is_empty() {
            // The challenge's `scope`, else the server's `scopes_supported` (rmcp's choice,
            // as the spec orders it).
            true => request.with_initial_scope_selection(),
            false => request.with_scopes(scopes),
        };
        if let Some(id) = &oauth.client_id {
            request = request.with_preregistered_client(id.clone());
        }
        if let McpCredential::SignIn {
            client_secret,
            metadata_url,
        } = &oauth.credential
        {
            if let Some(secret) = client_secret {
                request = request.with_client_secret(secret.clone());
            }
            // Used where the authorization server takes client ID metadata documents, before
            // dynamic registration (rmcp keeps the spec's order).
            if let Some(document) = metadata_url {
                request = request.with_client_metadata_url(document.clone());
            }
        }
        if let Some(challenge) = challenge {
            request = request.with_challenge(challenge);
        }
        let mut state = OAuthState::Unauthorized(manager);
        refusals.clear();
        state
            .start_authorization(request)
            .await
            .map_err(|e| format!("cannot start signing in: {e}{}", because(&refusals)))?;
        let address = state
            .get_authorization_url()
            .await
            .map_err(|e| format!("cannot start signing in: {e}"))?;
        Ok(SignIn {
            state,
            url: address,
            wanted: wanted_path(dir, url),
            refusals,
        })
    }

    /// The authorization URL to open.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Checks the redirect the person came back with (`callback`, the whole URL: the state
    /// must be this sign-in's) and exchanges its code for tokens, which are then kept.
    pub async fn finish(mut self, callback: &str) -> Result<(), String> {
        self.refusals.clear();
        self.state
            .handle_callback_url(callback)
            .await
            .map_err(|e| format!("signing in failed: {e}{}", because(&self.refusals)))?;
        let _ = std::fs::remove_file(&self.wanted);
        Ok(())
    }
}

/// Forgets the tokens kept for the server at `url` (`toolhost logout`): whether there were
/// any.
pub fn forget(dir: &Path, url: &str) -> std::io::Result<bool> {
    let _ = std::fs::remove_file(wanted_path(dir, url));
    match std::fs::remove_file(store_path(dir, url)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// How `toolhost logout` ended at the authorization server.
pub enum Revoked {
    /// Nobody was signed in: nothing to revoke or forget.
    NobodySignedIn,
    /// The grant was revoked there (RFC 7009), and the tokens are forgotten here.
    Revoked,
    /// The tokens are forgotten here; there they lapse when they expire (the server offers
    /// no revocation, or refused it: said why).
    ForgottenOnly(String),
}

/// `toolhost logout`: revokes the sign-in's refresh token (else its access token) at the
/// authorization server where it offers revocation (RFC 7009), sent by the sign-in's
/// [`Guarded`] client, then forgets the tokens here whatever it answered.
pub async fn revoke(url: &str, oauth: &McpOauth, dir: &Path) -> std::io::Result<Revoked> {
    let store = FileStore::new(store_path(dir, url));
    let Ok(Some(kept)) = store.read() else {
        forget(dir, url)?;
        return Ok(Revoked::NobodySignedIn);
    };
    let revoked = revoke_at_server(url, oauth, &kept).await;
    forget(dir, url)?;
    Ok(match revoked {
        Ok(()) => Revoked::Revoked,
        Err(why) => Revoked::ForgottenOnly(why),
    })
}

/// The RFC 7009 request, written here: the oauth2 crate's refuses an `http` endpoint even on
/// a loopback address, where the rest of a sign-in allows one (as in the tests); any other
/// endpoint must be `https`, as the RFC asks.
async fn revoke_at_server(
    url: &str,
    oauth: &McpOauth,
    kept: &StoredCredentials,
) -> Result<(), String> {
    use oauth2::TokenResponse;
    let tokens = kept.token_response.as_ref().ok_or("no tokens were kept")?;
    let (token, hint) = match tokens.refresh_token() {
        Some(refresh) => (refresh.secret().clone(), "refresh_token"),
        None => (tokens.access_token().secret().clone(), "access_token"),
    };
    let guarded = Arc::new(Guarded::new(url)?);
    let manager = AuthorizationManager::new_with_oauth_http_client(url, guarded.clone())
        .await
        .map_err(|e| format!("cannot prepare its OAuth client: {e}"))?;
    let challenge = super::oauth::probe(url).await;
    let metadata = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("its authorization server could not be found: {e}"))?
        .metadata;
    let endpoint = (metadata.additional_fields.get("revocation_endpoint"))
        .and_then(|e| e.as_str())
        .ok_or("its authorization server offers no revocation")?;
    let parsed = url::Url::parse(endpoint)
        .map_err(|e| format!("its revocation endpoint `{endpoint}`: {e}"))?;
    let loopback = matches!(parsed.host(), Some(url::Host::Ipv4(ip)) if ip.is_loopback())
        || matches!(parsed.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback())
        || parsed.host_str() == Some("localhost");
    if parsed.scheme() != "https" && !loopback {
        return Err(format!("its revocation endpoint `{endpoint}` is not https"));
    }
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("token", &token)
        .append_pair("token_type_hint", hint);
    let mut request = http::Request::post(endpoint)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json");
    match &oauth.credential {
        McpCredential::SignIn {
            client_secret: Some(secret),
            ..
        } => {
            use base64::Engine;
            let pair = format!("{}:{secret}", kept.client_id);
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header(http::header::AUTHORIZATION, format!("Basic {basic}"));
        }
        // A public client names itself in the request's body.
        _ => {
            form.append_pair("client_id", &kept.client_id);
        }
    }
    let request = request
        .body(form.finish().into_bytes())
        .map_err(|e| format!("cannot revoke: {e}"))?;
    let answer = guarded.send(request, false).await?;
    match answer.status() {
        status if status.is_success() => Ok(()),
        status => Err(format!(
            "its authorization server answered the revocation {status}"
        )),
    }
}

/// The most scopes a server's step-up challenge is taken with, and the most bytes of them:
/// they go into the authorization URL the person is sent to next.
const MAX_WANTED_SCOPES: usize = 32;
const MAX_WANTED_BYTES: usize = 1 << 10;

/// Where the scopes a server asked for beyond the sign-in's are kept until the next
/// `toolhost login` asks for them.
fn wanted_path(dir: &Path, url: &str) -> PathBuf {
    store_path(dir, url).with_extension("wanted")
}

/// The scopes of a server's `403 insufficient_scope` challenge, if `error` (or one of the
/// errors that caused it) is one; `Some` of an empty list when the challenge names none.
pub(super) fn insufficient_scope(error: &(dyn std::error::Error + 'static)) -> Option<Vec<String>> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(StreamableHttpError::InsufficientScope(refusal)) =
            error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            let scope = refusal.required_scope.as_deref().unwrap_or_default();
            return Some(bounded_scopes(scope));
        }
        // rmcp's errors that carry a transport's error without naming it as their source.
        current = match (
            error.downcast_ref::<rmcp::ServiceError>(),
            error.downcast_ref::<rmcp::service::ClientInitializeError>(),
        ) {
            (Some(rmcp::ServiceError::TransportSend(inner)), _)
            | (
                _,
                Some(rmcp::service::ClientInitializeError::TransportError { error: inner, .. }),
            ) => Some(inner as &(dyn std::error::Error + 'static)),
            _ => error.source(),
        };
    }
    None
}

/// `scope` (space-separated, from a server) cut to what is taken of it.
fn bounded_scopes(scope: &str) -> Vec<String> {
    let mut scopes = Vec::new();
    let mut bytes = 0;
    for one in scope.split_ascii_whitespace() {
        bytes += one.len() + 1;
        if scopes.len() == MAX_WANTED_SCOPES || bytes > MAX_WANTED_BYTES {
            break;
        }
        if one
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
        {
            scopes.push(one.to_string());
        }
    }
    scopes
}

/// What a call refused for scope (`required`, from the server's challenge) tells its caller,
/// for the import at `url` signed in to with the tokens in `dir`: the scopes the sign-in was
/// not granted are kept for the next `toolhost login` to ask for, once; a challenge for
/// scopes it was granted is the server's to answer (signing in again would not help).
pub(super) fn step_up(dir: &Path, url: &str, required: &[String]) -> String {
    let granted = FileStore::new(store_path(dir, url))
        .read()
        .ok()
        .flatten()
        .map(|credentials| credentials.granted_scopes)
        .unwrap_or_default();
    let missing: Vec<&String> = required.iter().filter(|s| !granted.contains(s)).collect();
    if required.is_empty() || missing.is_empty() {
        return format!(
            "it refuses for want of scope `{}`, which the sign-in was granted: signing in \
             again would not help",
            required.join(" ")
        );
    }
    let wanted: Vec<&str> =
        granted
            .iter()
            .chain(required)
            .map(String::as_str)
            .fold(Vec::new(), |mut all, s| {
                if !all.contains(&s) {
                    all.push(s);
                }
                all
            });
    let kept = write_private(&wanted_path(dir, url), wanted.join(" ").as_bytes());
    let missing = missing
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    match kept {
        Ok(()) => needs_sign_in(format!(
            "it asks for scope `{missing}`, which the sign-in was not granted; signing in \
             again asks for it"
        )),
        Err(e) => needs_sign_in(format!(
            "it asks for scope `{missing}`, which the sign-in was not granted, and it \
             could not be kept for the next sign-in ({e}): add it to `oauth.scopes`"
        )),
    }
}

/// The scopes a server asked for beyond the last sign-in's ([`step_up`]), for this one to
/// ask for; read to a bound.
fn wanted(dir: &Path, url: &str) -> Vec<String> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open(wanted_path(dir, url))
        .and_then(|file| file.take(MAX_WANTED_BYTES as u64).read_to_string(&mut text));
    match read {
        Ok(_) => bounded_scopes(&text),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn tokens_are_kept_for_this_user_alone_and_a_huge_file_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = store_path(&dir.path().join("sign-in"), "https://example.com/mcp");
        let store = FileStore::new(path.clone());
        assert!(store.load().await.expect("load").is_none());
        let credentials = StoredCredentials::new("client".into(), None, vec!["a".into()], Some(1));
        store.save(credentials).await.expect("save");
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let folder = std::fs::metadata(path.parent().expect("parent")).expect("dir");
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
        let loaded = store.load().await.expect("load").expect("kept");
        assert_eq!(loaded.client_id, "client");
        // Written by another process (`toolhost login`): read again.
        let other = FileStore::new(path.clone());
        let newer = StoredCredentials::new("newer client".into(), None, Vec::new(), Some(2));
        other.save(newer).await.expect("save");
        let loaded = store.load().await.expect("load").expect("kept");
        assert_eq!(loaded.client_id, "newer client");
        std::fs::write(&path, vec![b' '; 70 << 10]).expect("huge");
        assert!(store.load().await.is_err());
        store.clear().await.expect("clear");
        assert!(store.load().await.expect("load").is_none());
        assert!(!forget(path.parent().expect("dir"), "https://example.com/mcp").expect("forget"));
    }

    #[tokio::test]
    async fn a_step_up_keeps_the_scopes_asked_for_once_and_only_when_they_were_not_granted() {
        let dir = tempfile::tempdir().expect("dir");
        let url = "https://example.com/mcp";
        let store = FileStore::new(store_path(dir.path(), url));
        let granted = vec!["read".to_string()];
        store
            .save(StoredCredentials::new("c".into(), None, granted, Some(1)))
            .await
            .expect("save");
        // Granted already: the server's to answer, nothing kept.
        let said = step_up(dir.path(), url, &["read".to_string()]);
        assert!(said.contains("signing in again would not help"), "{said}");
        assert!(wanted(dir.path(), url).is_empty());
        // Not granted: kept with what was, for the next sign-in, readable by this user alone.
        let said = step_up(dir.path(), url, &["read".to_string(), "write".to_string()]);
        assert!(
            said.contains("needs sign-in") && said.contains("scope `write`"),
            "{said}"
        );
        assert_eq!(wanted(dir.path(), url), ["read", "write"]);
        let mode = std::fs::metadata(wanted_path(dir.path(), url)).expect("kept");
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        assert!(forget(dir.path(), url).expect("forget"));
        assert!(wanted(dir.path(), url).is_empty());
    }

    #[test]
    fn a_servers_scopes_are_taken_to_a_bound_and_without_quotes() {
        let many = (0..100)
            .map(|i| format!("s{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(bounded_scopes(&many).len(), MAX_WANTED_SCOPES);
        let long = format!("{} b", "a".repeat(MAX_WANTED_BYTES));
        assert!(bounded_scopes(&long).is_empty());
        assert_eq!(bounded_scopes("a \"b c\\d e"), ["a", "e"]);
    }
}
