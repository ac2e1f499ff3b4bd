//! step_up: a server's `403 insufficient_scope` to an import a person signed in to. The
//! scopes it asks for beyond the sign-in's are kept for the next `toolhost login` to ask for;
//! a challenge for scopes already granted keeps nothing.

use super::needs_sign_in;
use super::store::{FileStore, store_path, wanted_path, write_private};
use std::path::Path;

/// The most scopes a server's step-up challenge is taken with, and the most bytes of them:
/// they go into the authorization URL the person is sent to next.
const MAX_WANTED_SCOPES: usize = 32;
const MAX_WANTED_BYTES: usize = 1 << 10;

/// The scopes of a server's `403 insufficient_scope` challenge, if `error` (or one of the
/// errors that caused it) is one; `Some` of an empty list when the challenge names none.
pub(crate) fn insufficient_scope(error: &(dyn std::error::Error + 'static)) -> Option<Vec<String>> {
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
pub(crate) fn step_up(dir: &Path, url: &str, required: &[String]) -> String {
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
pub(super) fn wanted(dir: &Path, url: &str) -> Vec<String> {
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
    use super::super::store::forget;
    use super::*;
    use rmcp::transport::auth::{CredentialStore, StoredCredentials};
    use std::os::unix::fs::PermissionsExt;

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
