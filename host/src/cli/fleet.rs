//! fleet: the engines a fleet of hosts shares, as `toolhost.toml` names them (`[fleet]`'s
//! Redis and the address a replica advertises, `[chat]`'s PostgreSQL), checked with every
//! mistake at its file:line:col; a URL or an address may come from the environment, and a
//! password only from there.

use toolhost::config::access::Unset;
use toolhost::config::v1::{ChatSection, FleetSection};
use toolhost::config::{Diagnostic, EnvVarName, SourceFile, written_or};

/// The engines a fleet shares, checked, every mistake at its file:line:col: `[fleet]`'s Redis,
/// and `[chat] database` when it names a PostgreSQL. `env` reads an environment variable, and
/// one that is not set is what `unset` says.
pub(super) fn check_fleet(
    fleet: &FleetSection,
    chat: &ChatSection,
    source: &SourceFile,
    env: &dyn Fn(&str) -> Option<String>,
    mut unset: Unset<'_>,
) -> Result<toolhost::state::FleetSettings, Vec<Diagnostic>> {
    use toolhost::state::{DEFAULT_REDIS_TIMEOUT, FleetSettings, PostgresSettings, RedisSettings};
    let timeout = written_or(fleet.redis_timeout_ms, DEFAULT_REDIS_TIMEOUT);
    let mut errors = Vec::new();
    let redis = Url {
        engine: "Redis",
        written: fleet.redis.as_ref(),
        key: "redis",
        var: fleet.redis_env.as_ref(),
    }
    .read(source, env, &mut unset, &mut errors, |url| {
        RedisSettings::new(url, timeout).map_err(|e| e.to_string())
    });
    let cluster = Url {
        engine: "Redis Cluster",
        written: fleet.redis_cluster.as_ref(),
        key: "redis-cluster",
        var: fleet.redis_cluster_env.as_ref(),
    }
    .read(source, env, &mut unset, &mut errors, |seeds| {
        RedisSettings::cluster(seeds, timeout).map_err(|e| e.to_string())
    });
    let one =
        (fleet.redis.as_ref().map(|r| r.span())).or(fleet.redis_env.as_ref().map(|v| v.span()));
    let many = (fleet.redis_cluster.as_ref().map(|r| r.span()))
        .or(fleet.redis_cluster_env.as_ref().map(|v| v.span()));
    if let (Some(_), Some(span)) = (&one, &many) {
        errors.push(Diagnostic::new(
            source.at(span.clone()),
            "name one Redis (`redis`, `redis-env`) or a Redis Cluster (`redis-cluster`, \
             `redis-cluster-env`), not both"
                .to_string(),
        ));
    }
    let redis = redis.or(cluster);
    let redis = match (redis, redis_tls(fleet, source, &mut errors)) {
        (Some(redis), Some((files, span))) => match redis.with_tls(&files) {
            Ok(redis) => Some(redis),
            Err(e) => {
                errors.push(Diagnostic::new(source.at(span), e.to_string()));
                None
            }
        },
        (redis, None) => redis,
        (None, Some((_, span))) => {
            if !names_redis(fleet) {
                errors.push(Diagnostic::new(
                    source.at(span),
                    "the Redis TLS files need a Redis (`redis`, `redis-env` or a cluster's \
                     seeds, rediss://)"
                        .to_string(),
                ));
            }
            None
        }
    };
    // A `database` is a SQLite file unless it is a URL.
    let postgres = Url {
        engine: "PostgreSQL",
        written: chat.database.as_ref(),
        key: "database",
        var: chat.database_env.as_ref(),
    }
    .read(source, env, &mut unset, &mut errors, |url| {
        if !url.contains("://") {
            return Ok(None);
        }
        (PostgresSettings::new(url).map(Some)).map_err(|e| e.to_string())
    })
    .flatten();
    let advertise = Url {
        engine: "advertised",
        written: fleet.advertise.as_ref(),
        key: "advertise",
        var: fleet.advertise_env.as_ref(),
    }
    .read(source, env, &mut unset, &mut errors, |address| {
        let address = address.trim_end_matches('/').to_string();
        if !toolhost::state::routes::is_address(&address) {
            Err(format!(
                "`{address}` is not an address to advertise: write http://host:port, the \
                 address the other replicas reach this one's --http at"
            ))
        } else if !names_redis(fleet) {
            Err(
                "`advertise` needs a Redis (`redis`, `redis-env` or a cluster) to say it in"
                    .to_string(),
            )
        } else {
            Ok(address)
        }
    });
    if !errors.is_empty() {
        return Err(errors);
    }
    // A Redis and no address: what one replica holds cannot be reached from another.
    if let Some(span) = one.or(many)
        && fleet.advertise.is_none()
        && fleet.advertise_env.is_none()
    {
        let diagnostic = Diagnostic::new(
            source.at(span),
            "a fleet without `advertise`: a request naming what another replica holds (a \
             2025-11-25 client's MCP session, a task, a tool's question) is not forwarded to \
             it, and behind a round-robin balancer most of such a session's requests get 404; \
             set `advertise-env` to a variable holding each replica's own http://host:port, or \
             give such clients affinity (docs/fleet.md)"
                .to_string(),
        );
        match unset {
            Unset::Warn(warnings) => warnings.push(diagnostic),
            Unset::Refuse => eprintln!("toolhost: {}", super::settings::as_warning(&diagnostic)),
        }
    }
    Ok(FleetSettings {
        redis,
        postgres,
        advertise,
    })
}

/// Whether `[fleet]` names a Redis: one, or a cluster's seeds.
fn names_redis(fleet: &FleetSection) -> bool {
    fleet.redis.is_some()
        || fleet.redis_env.is_some()
        || fleet.redis_cluster.is_some()
        || fleet.redis_cluster_env.is_some()
}

/// The TLS files `[fleet]` names for Redis (`redis-ca-file`, `redis-cert-file` with
/// `redis-key-file`), read (64 KiB each at most, relative to `toolhost.toml`), and where the
/// first is named; `None` when none is, or a mistake was pushed on `errors`.
fn redis_tls(
    fleet: &FleetSection,
    source: &SourceFile,
    errors: &mut Vec<Diagnostic>,
) -> Option<(toolhost::state::tls::TlsFiles, std::ops::Range<usize>)> {
    let base = source.path.parent().unwrap_or(std::path::Path::new("."));
    let mut failed = false;
    let mut read = |named: Option<&toml::Spanned<String>>, what: &str| -> Option<Vec<u8>> {
        let named = named?;
        let path = base.join(named.get_ref());
        match toolhost::config::read_limited(&path, 64 << 10) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                errors.push(Diagnostic::new(
                    source.at(named.span()),
                    format!("cannot read the {what} {}: {e}", path.display()),
                ));
                failed = true;
                None
            }
        }
    };
    let ca = read(fleet.redis_ca_file.as_ref(), "CA file");
    let cert = read(fleet.redis_cert_file.as_ref(), "client certificate");
    let key = read(fleet.redis_key_file.as_ref(), "client key");
    let named = [
        &fleet.redis_ca_file,
        &fleet.redis_cert_file,
        &fleet.redis_key_file,
    ];
    let span = named.iter().find_map(|n| n.as_ref().map(|n| n.span()))?;
    let one_without_other = match (&fleet.redis_cert_file, &fleet.redis_key_file) {
        (Some(cert), None) => Some((cert.span(), "`redis-cert-file` needs `redis-key-file`")),
        (None, Some(key)) => Some((key.span(), "`redis-key-file` needs `redis-cert-file`")),
        _ => None,
    };
    if let Some((at, problem)) = one_without_other {
        errors.push(Diagnostic::new(source.at(at), problem.to_string()));
        failed = true;
    }
    if failed {
        return None;
    }
    let client = cert.zip(key);
    Some((toolhost::state::tls::TlsFiles { ca, client }, span))
}

/// A shared engine's URL as `toolhost.toml` may give it: written under `key` (never with a
/// password), or in the environment variable `key-env` names.
struct Url<'a> {
    engine: &'static str,
    written: Option<&'a toml::Spanned<String>>,
    key: &'static str,
    var: Option<&'a toml::Spanned<EnvVarName>>,
}

impl Url<'_> {
    /// What `check` makes of the URL, or `None`: nothing named, or a mistake (of the keys, or
    /// the reason `check` gives, at the place the URL was named) pushed on `errors`; a
    /// variable not set is what `unset` says.
    fn read<T>(
        &self,
        source: &SourceFile,
        env: &dyn Fn(&str) -> Option<String>,
        unset: &mut Unset<'_>,
        errors: &mut Vec<Diagnostic>,
        check: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let (url, span) = self.named(source, env, unset, errors)?;
        check(&url)
            .map_err(|problem| errors.push(Diagnostic::new(source.at(span), problem)))
            .ok()
    }

    /// The URL and where it was named, or `None` (as [`Url::read`] says).
    fn named(
        &self,
        source: &SourceFile,
        env: &dyn Fn(&str) -> Option<String>,
        unset: &mut Unset<'_>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<(String, std::ops::Range<usize>)> {
        let (engine, key) = (self.engine, self.key);
        match (self.written, self.var) {
            (Some(_), Some(var)) => {
                errors.push(Diagnostic::new(
                    source.at(var.span()),
                    format!("write one of `{key}` and `{key}-env`, not both"),
                ));
                None
            }
            (Some(url), None) if toolhost::state::has_password(url.get_ref()) => {
                errors.push(Diagnostic::new(
                    source.at(url.span()),
                    format!(
                        "a {engine} password is never read from toolhost.toml: put the whole \
                         URL in an environment variable and name it with `{key}-env`"
                    ),
                ));
                None
            }
            (Some(url), None) => Some((url.get_ref().clone(), url.span())),
            (None, Some(var)) => match env(var.get_ref().as_str()).filter(|v| !v.is_empty()) {
                Some(url) => Some((url, var.span())),
                None => {
                    let (at, key) = (source.at(var.span()), format!("{key}-env"));
                    errors.extend(unset.not_set(at, &key, var.get_ref().as_str()));
                    None
                }
            },
            (None, None) => None,
        }
    }
}
