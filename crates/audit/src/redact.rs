//! What the audit log must not keep: the values of secret-looking keys, and secret-shaped
//! values wherever they are (a JWT, `Bearer ...`, a password in a URL, `API_KEY=...` in a
//! line of text, well-known token formats), in arguments, result summaries and error texts.

use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

/// Parts of keys whose values never reach the audit log, matched in the key lowercased with
/// `_`, `-`, `.` and spaces removed (`API_KEY`, `apiKey` and `api-key` are all `apikey`).
const SECRET_KEY_PARTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "authorization",
    "credential",
    "cookie",
    "bearer",
    "sessionid",
];
/// Whole words of a key that mark a secret (too short to match inside other words:
/// `auth` is not `author`).
const SECRET_KEY_WORDS: &[&str] = &["auth", "pwd", "pin", "otp", "jwt"];

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// True when a value under `key` is secret by its name.
pub fn secret_key(key: &str) -> bool {
    let squashed: String = key
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    if SECRET_KEY_PARTS.iter().any(|part| squashed.contains(part)) {
        return true;
    }
    words(key).any(|word| SECRET_KEY_WORDS.contains(&word.as_str()))
}

/// The words of a key: split at `_`, `-`, `.`, spaces and lower-to-upper case changes.
fn words(key: &str) -> impl Iterator<Item = String> + '_ {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in key.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            words.push(std::mem::take(&mut word));
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_lowercase();
        word.extend(c.to_lowercase());
    }
    words.push(word);
    words.into_iter().filter(|w| !w.is_empty())
}

/// Secret-shaped text, and what replaces each match (`$1`: the part kept before the secret).
static SHAPES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        // A JSON Web Token.
        (r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}", "[redacted]"),
        // An Authorization value.
        (r"(?i)\b((?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}", "$1[redacted]"),
        // A password in a URL: scheme://user:password@host.
        (r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@", "$1[redacted]@"),
        // KEY=value or KEY: value where KEY names a secret (env files, config lines); a
        // value does not start with `:`, so that a path (`transport::auth::AuthClient`) is
        // no key.
        (
            r#"(?i)\b([A-Z0-9_.-]*(?:PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API[_-]?KEY|ACCESS[_-]?KEY|PRIVATE[_-]?KEY|CREDENTIALS?|AUTH)[A-Z0-9_.-]*["']?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&:][^\s,;&]*)"#,
            "$1[redacted]",
        ),
        // Well-known token formats.
        (
            r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk_live_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,})",
            "[redacted]",
        ),
    ]
    .into_iter()
    .filter_map(|(pattern, replacement)| Regex::new(pattern).ok().map(|re| (re, replacement)))
    .collect()
});

/// `text` with every secret-shaped part replaced by `[redacted]`.
pub fn redact_text(text: &str) -> String {
    let mut text = text.to_string();
    for (shape, replacement) in SHAPES.iter() {
        if shape.is_match(&text) {
            text = shape.replace_all(&text, *replacement).into_owned();
        }
    }
    text
}

/// A copy of `value` with the values of secret-looking keys, and secret-shaped strings
/// anywhere, replaced by `"[redacted]"`.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    if secret_key(key) {
                        (key.clone(), Value::String(REDACTED.into()))
                    } else {
                        (key.clone(), redact(value))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::String(text) => Value::String(redact_text(text)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_keys_by_part_and_by_word() {
        for key in [
            "access_key",
            "auth",
            "bearer",
            "passphrase",
            "privateKey",
            "pwd",
            "session_id",
            "X-Auth",
            "userPassword",
            "API_KEY",
            "apiKey",
            "client-secret",
            "otp",
        ] {
            assert!(secret_key(key), "{key}");
        }
        for key in ["author", "path", "query", "keyword", "spin", "description"] {
            assert!(!secret_key(key), "{key}");
        }
    }

    #[test]
    fn secret_shaped_values_under_innocent_keys() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        let redacted = redact(&json!({
            "note": format!("token is {jwt} ok"),
            "header": "Authorization: Bearer abcdefghijklmnop",
            "url": "https://alice:hunter22@db.example.org/x",
            "env": "HOME=/root\nAPI_KEY=sk-abcdefghijklmnopqrstuvwx\nDB_PASSWORD='p@ss w0rd'",
            "github": "use ghp_abcdefghijklmnopqrstuvwxyz0123 here",
            "fine": "nothing to hide",
        }))
        .to_string();
        for secret in [
            jwt,
            "abcdefghijklmnop",
            "hunter22",
            "sk-abcdefghijklmnop",
            "p@ss w0rd",
            "ghp_abcdefghijklmnopqrstuvwxyz0123",
        ] {
            assert!(!redacted.contains(secret), "{secret} in {redacted}");
        }
        for kept in [
            "https://alice:",
            "@db.example.org/x",
            "HOME=/root",
            "nothing to hide",
        ] {
            assert!(redacted.contains(kept), "{kept} not in {redacted}");
        }
    }

    #[test]
    fn a_path_through_a_module_named_auth_is_no_secret_and_auth_colon_a_value_is() {
        let path =
            "crashed: rmcp::transport::auth::AuthClient<reqwest::Client> error: Auth required";
        assert_eq!(redact_text(path), path);
        assert_eq!(redact_text("AUTH: s3cr3t-value"), "AUTH: [redacted]");
        assert_eq!(redact_text("x_auth=abc"), "x_auth=[redacted]");
    }
}
