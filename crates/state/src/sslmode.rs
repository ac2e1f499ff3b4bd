//! sslmode: libpq's TLS settings in a PostgreSQL URL, as every PostgreSQL user writes them
//! (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`), taken out of the URL that tokio-postgres
//! reads (it knows `disable`, `prefer` and `require` and no file) and made a rustls
//! configuration ([`crate::tls`]). What each mode promises, as libpq's:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked, unless `sslrootcert` names a CA (then its chain) |
//! | `require` | always | not checked, unless `sslrootcert` names a CA (then its chain) |
//! | `verify-ca` | always | its chain, to `sslrootcert` (or the system's roots) |
//! | `verify-full` | always | its chain and the host name |
//!
//! `sslrootcert=system` names the system's roots (as libpq 16 does). Files are read here, at
//! most 64 KiB each, relative to the working directory as libpq reads them; a key's content
//! is never part of an error.

use crate::tls::{TlsFiles, Verify, client_config};
use crate::{InvalidUrl, shown};
use std::sync::Arc;
use tokio_postgres::config::SslMode;

/// The TLS a PostgreSQL URL asks for.
pub(crate) struct Tls {
    /// What tokio-postgres is told (`Disable`, `Prefer` or `Require`).
    pub(crate) mode: SslMode,
    /// How the connection is made secure, when it is.
    pub(crate) config: Option<Arc<rustls::ClientConfig>>,
}

/// The largest certificate or key file read.
const MAX_FILE_BYTES: u64 = 64 << 10;

/// `url` without its TLS settings, and what they ask for.
pub(crate) fn split(url: &str) -> Result<(String, Tls), InvalidUrl> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let (mut mode, mut root, mut cert, mut key) = (None, None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8_lossy()
            .into_owned();
        match name {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            "sslcert" => cert = Some(value),
            "sslkey" => key = Some(value),
            _ => kept.push(pair),
        }
    }
    let mode = mode.unwrap_or_else(|| "prefer".into());
    let unchecked = |root: &Option<String>| match root {
        Some(_) => Verify::Chain,
        None => Verify::Nothing,
    };
    let (ssl, verify) = match mode.as_str() {
        "disable" => (SslMode::Disable, Verify::Nothing),
        "allow" | "prefer" => (SslMode::Prefer, unchecked(&root)),
        "require" => (SslMode::Require, unchecked(&root)),
        "verify-ca" => (SslMode::Require, Verify::Chain),
        "verify-full" => (SslMode::Require, Verify::Full),
        other => {
            return Err(InvalidUrl(format!(
                "`{}`: sslmode `{other}` is none of disable, allow, prefer, require, \
                 verify-ca, verify-full",
                shown(url)
            )));
        }
    };
    let url = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    };
    if ssl == SslMode::Disable {
        return Ok((
            url,
            Tls {
                mode: ssl,
                config: None,
            },
        ));
    }
    let read = |path: &str, what: &str| {
        toolhost_config::read_limited(std::path::Path::new(path), MAX_FILE_BYTES)
            .map_err(|e| InvalidUrl(format!("cannot read the {what} `{path}`: {e}")))
    };
    let files = TlsFiles {
        ca: match root.as_deref() {
            None | Some("system") => None,
            Some(path) => Some(read(path, "sslrootcert")?),
        },
        client: match (cert, key) {
            (Some(cert), Some(key)) => Some((read(&cert, "sslcert")?, read(&key, "sslkey")?)),
            (None, None) => None,
            _ => {
                return Err(InvalidUrl(
                    "sslcert and sslkey go together: name both, or neither".into(),
                ));
            }
        },
    };
    let config = client_config(&files, verify).map_err(InvalidUrl)?;
    Ok((
        url,
        Tls {
            mode: ssl,
            config: Some(config),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpqs_modes_are_taken_out_of_the_url_and_made_what_they_promise() {
        let (url, tls) = split("postgres://u@db/app?sslmode=verify-full&application_name=x")
            .expect("verify-full");
        assert_eq!(url, "postgres://u@db/app?application_name=x");
        assert_eq!(tls.mode, SslMode::Require);
        assert!(tls.config.is_some());
        let (url, tls) = split("postgres://u@db/app").expect("the default");
        assert_eq!(url, "postgres://u@db/app");
        assert_eq!(tls.mode, SslMode::Prefer);
        let (_, tls) = split("postgres://u@db/app?sslmode=disable").expect("disable");
        assert!(tls.config.is_none());
        let refused = split("postgres://u:pw@db/app?sslmode=maybe")
            .err()
            .expect("unknown");
        assert!(refused.0.contains("sslmode `maybe`") && !refused.0.contains("pw"));
        let missing = split("postgres://u@db/app?sslmode=verify-ca&sslrootcert=/no/such.crt");
        assert!(missing.err().expect("no file").0.contains("sslrootcert"));
        assert!(split("postgres://u@db/app?sslmode=require&sslcert=/a.crt").is_err());
    }
}
