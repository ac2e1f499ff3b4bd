//! State a fleet shares. Each kind of state whose promise must hold across replicas gets one
//! interface here with two engines behind it: embedded (this process's memory, the default:
//! nothing to run) and shared (Redis, when `[fleet]` names one). The layers above ask the
//! interface and never know which engine answers.
//!
//! Built so far: quotas per identity ([`quota`]) and the results of a conversation's calls
//! ([`dedup`]; embedded, they stay in core's per-session memory), on Redis; and the engine
//! the chat keeps its conversations on when `[chat] database` names a PostgreSQL
//! ([`postgres`]; the tables are `toolhost-web`'s). Redis is reached through one multiplexed
//! connection made again when it breaks ([`engine`], each reply held to a bound by
//! [`bounded`]); every wait on it is bounded by `redis-timeout-ms`. A shared engine that does
//! not answer fails the requests that need it, within their timeout, and is said in
//! `/readyz`'s body (which stays `200`: every replica shares it), on `/metrics`, in `status`
//! and in each refusal. Both engines' health is kept the same way ([`watch`]).
//!
//! With `[fleet] advertise`, each replica also says in Redis where it is reached and which
//! MCP sessions it holds ([`routes`]), so that the HTTP front forwards a request for what
//! another replica holds to it.
//!
//! On a Redis Cluster (`redis-cluster-env`), the engine holds the `redis` crate's cluster
//! client, its connection to each node made as the single Redis's is ([`cluster`]).
//!
//! Layers: `lib` (settings, [`Shared`]) over `quota`, `dedup` and `routes` over `engine` and
//! `postgres`, over `cluster`, over `dial`, over `bounded` and `watch`.

pub mod bounded;
pub mod cluster;
pub mod dedup;
mod dial;
pub mod engine;
pub mod postgres;
pub mod quota;
pub mod routes;
mod sslmode;
pub mod tls;
pub mod watch;

pub use postgres::PostgresSettings;

use redis::IntoConnectionInfo;
use std::sync::Arc;
use std::time::Duration;

/// A call refused by its identity's quota, or because the engine that keeps the quota did
/// not answer.
#[derive(Debug, Clone)]
pub struct Limited {
    /// When a call may be tried again (`Retry-After`).
    pub retry_after: Duration,
    pub message: String,
    /// The quota could not be asked (the shared engine is down or slow): `503`, not `429`.
    pub unavailable: bool,
}

/// This process's name among the replicas: 16 hex digits of a hash of its pid, the clock
/// and an address on its stack, new at each start. It prefixes what this replica holds and
/// a client may bring to another replica (a quota lease, a `requestState`, a task id), so
/// that the other replica knows whose it is.
pub fn replica() -> &'static str {
    static REPLICA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    REPLICA.get_or_init(|| {
        let mut hasher = blake3::Hasher::new_derive_key("toolhost replica id v1");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        hasher.update(&now.as_nanos().to_le_bytes());
        hasher.update(&std::process::id().to_le_bytes());
        let here = 0u8;
        hasher.update(&(std::ptr::addr_of!(here) as usize).to_le_bytes());
        hasher.finalize().to_hex()[..16].to_string()
    })
}

/// Whether `text` is a replica's name as [`replica`] makes them (16 lowercase hex digits).
pub fn is_replica(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The default of `[fleet] redis-timeout-ms`.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(500);

/// `[fleet]`, checked: where the replicas share their state.
#[derive(Debug, Default, Clone)]
pub struct FleetSettings {
    pub redis: Option<RedisSettings>,
    /// The chat's database when `[chat] database` names a PostgreSQL.
    pub postgres: Option<PostgresSettings>,
    /// Where the other replicas reach this one (`[fleet] advertise`, `http://host:port`):
    /// with Redis, requests for what another replica holds are forwarded to it.
    pub advertise: Option<String>,
}

/// A Redis to share state on.
#[derive(Clone)]
pub struct RedisSettings {
    /// The URL as written (it may carry a password: never logged, see [`Self::shown`]).
    url: String,
    /// The longest one step on the call path waits for Redis.
    pub timeout: Duration,
    /// For `rediss://`: how the server is checked, and this host's certificate if it has one.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// For a Redis Cluster: every seed URL (`url` is the first).
    seeds: Vec<String>,
}

/// The most seed URLs `redis-cluster-env` may name.
pub const MAX_CLUSTER_SEEDS: usize = 64;

/// A Redis URL that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidUrl(String);

impl RedisSettings {
    /// `url` checked: `redis://[user[:password]@]host[:port][/db]`, `rediss://...` (TLS, the
    /// server checked against the system's roots until [`Self::with_tls`] names others) or
    /// `redis+unix:///path`.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, InvalidUrl> {
        let tls = url.starts_with("rediss://");
        if tls && url.contains('#') {
            return Err(InvalidUrl(
                "a rediss:// URL with a fragment (`#insecure` turns the server's check off): \
                 leave it out; name the CA its certificate chains to with `redis-ca-file`"
                    .into(),
            ));
        }
        redis::Client::open(url).map_err(|e| {
            InvalidUrl(format!(
                "`{}` is not a Redis URL ({}): write redis://host:port/db",
                shown(url),
                e.category()
            ))
        })?;
        let tls = match tls {
            true => Some(
                tls::client_config(&tls::TlsFiles::default(), tls::Verify::Full)
                    .map_err(InvalidUrl)?,
            ),
            false => None,
        };
        Ok(RedisSettings {
            url: url.to_string(),
            timeout,
            tls,
            seeds: Vec::new(),
        })
    }

    /// A Redis Cluster, found from `seeds`: URLs separated by commas (at most
    /// [`MAX_CLUSTER_SEEDS`]), all `redis://` or all `rediss://`, one user and password,
    /// database 0 (a cluster has no other). The client finds every node from any one seed.
    pub fn cluster(seeds: &str, timeout: Duration) -> Result<Self, InvalidUrl> {
        let seeds: Vec<&str> = (seeds.split(',').map(str::trim))
            .filter(|s| !s.is_empty())
            .collect();
        let Some(first) = seeds.first() else {
            return Err(InvalidUrl(
                "no seed URL: write redis://host:port,redis://host:port,... (any node of the \
                 cluster; more than one in case one is down)"
                    .into(),
            ));
        };
        if seeds.len() > MAX_CLUSTER_SEEDS {
            return Err(InvalidUrl(format!(
                "{} seed URLs: at most {MAX_CLUSTER_SEEDS} (the client finds every node from \
                 any one of them)",
                seeds.len()
            )));
        }
        let mut checked = Self::new(first, timeout)?;
        for seed in &seeds {
            if !seed.starts_with("redis://") && !seed.starts_with("rediss://") {
                return Err(InvalidUrl(format!(
                    "`{}`: a cluster's seeds are redis:// or rediss:// URLs",
                    shown(seed)
                )));
            }
            let one = Self::new(seed, timeout)?;
            let db = seed
                .into_connection_info()
                .map_or(0, |i| i.redis_settings().db());
            if db != 0 {
                return Err(InvalidUrl(format!(
                    "`{}` names database {db}: a Redis Cluster has only database 0",
                    shown(seed)
                )));
            }
            if one.tls.is_some() != checked.tls.is_some() {
                return Err(InvalidUrl(
                    "the seeds mix redis:// and rediss://: a cluster is reached one way".into(),
                ));
            }
        }
        let seeds: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
        cluster::client(&seeds, timeout).map_err(|e| {
            InvalidUrl(format!(
                "the seeds make no cluster client: {}",
                e.detail().unwrap_or(e.category())
            ))
        })?;
        checked.seeds = seeds;
        Ok(checked)
    }

    /// A cluster's seed URLs (none for one Redis).
    pub(crate) fn seeds(&self) -> Option<&[String]> {
        (!self.seeds.is_empty()).then_some(self.seeds.as_slice())
    }

    /// The same Redis, its server checked against `files`' CA (else the system's roots) and
    /// this host presenting `files`' certificate, if any: only for a `rediss://` URL.
    pub fn with_tls(mut self, files: &tls::TlsFiles) -> Result<Self, InvalidUrl> {
        if self.tls.is_none() {
            return Err(InvalidUrl(
                "TLS files are for a rediss:// URL; this one is reached in plain text".into(),
            ));
        }
        self.tls = Some(tls::client_config(files, tls::Verify::Full).map_err(InvalidUrl)?);
        Ok(self)
    }

    pub(crate) fn tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.tls.as_ref()
    }

    /// The URL (a cluster's seeds) with any password replaced by `***`, as logs and `status`
    /// show it.
    pub fn shown(&self) -> String {
        match self.seeds() {
            Some(seeds) => {
                let shown: Vec<String> = seeds.iter().map(|s| shown(s)).collect();
                format!("cluster {}", shown.join(","))
            }
            None => shown(&self.url),
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &self.shown())
            .field("timeout", &self.timeout)
            .field("tls", &self.tls.is_some())
            .field("cluster", &self.seeds.len())
            .finish()
    }
}

/// Whether a Redis or PostgreSQL URL carries a password, in its user info or as a
/// `password=` option (then it belongs in the environment, not in `toolhost.toml`).
/// A cluster's seeds (URLs separated by commas) are each looked at.
pub fn has_password(url: &str) -> bool {
    (url.split(',')).any(|one| authority(one).is_some_and(|(userinfo, _)| userinfo.contains(':')))
        || url
            .split_once('?')
            .is_some_and(|(_, query)| query.split('&').any(|pair| pair.starts_with("password=")))
}

/// `url` with the password of its user info replaced by `***`.
fn shown(url: &str) -> String {
    match authority(url) {
        Some((userinfo, at)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let scheme_end = url.find("://").map_or(0, |i| i + 3);
            format!("{}{user}:***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// The user info of `url` and where the `@` after it is.
fn authority(url: &str) -> Option<(&str, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..end].rfind('@')?;
    Some((&rest[..at], start + at))
}

/// The state of one host, on the engines its `[fleet]` names.
pub struct Shared {
    redis: Option<Arc<engine::Redis>>,
    postgres: Option<Arc<postgres::Postgres>>,
    routes: Option<Arc<routes::Routes>>,
    quotas: Arc<quota::Quotas>,
    dedup: Option<Arc<dedup::SharedDedup>>,
    /// Pings each engine, and renews this host's quota leases; stopped when the host is
    /// dropped.
    upkeep: Vec<tokio::task::JoinHandle<()>>,
}

/// How one shared engine is doing, for `/readyz`, `/metrics` and `toolhost status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineHealth {
    /// `redis`.
    pub engine: &'static str,
    /// Whether it answered its last request in time.
    pub up: bool,
    /// Why not, when it did not (no password in it).
    pub error: Option<String>,
    /// Requests it failed or did not answer in time since the host started.
    pub failures: u64,
    /// What fails while it does not answer (the rest serves: a shared engine's fault never
    /// makes a host unready, since every replica would be at once).
    pub stops: &'static str,
}

impl Shared {
    /// Everything in this process (no `[fleet]`).
    pub fn embedded() -> Self {
        Shared {
            redis: None,
            postgres: None,
            routes: None,
            quotas: Arc::new(quota::Quotas::embedded()),
            dedup: None,
            upkeep: Vec::new(),
        }
    }

    /// The engines `settings` name. Nothing is reached yet: each is connected on first use
    /// and pinged every second from then on (must be called inside a tokio runtime).
    pub fn open(settings: &FleetSettings) -> Result<Self, InvalidUrl> {
        let postgres = settings
            .postgres
            .as_ref()
            .map(postgres::Postgres::new)
            .transpose()?;
        let redis = settings.redis.as_ref().map(engine::Redis::new);
        if redis.is_none() && postgres.is_none() {
            return Ok(Self::embedded());
        }
        let quotas = Arc::new(match &redis {
            Some(redis) => quota::Quotas::shared(Arc::clone(redis)),
            None => quota::Quotas::embedded(),
        });
        let routes = (redis.as_ref())
            .zip(settings.advertise.clone())
            .map(|(redis, address)| routes::Routes::new(Arc::clone(redis), address));
        // One task per engine: a PostgreSQL that hangs does not delay the quota leases.
        let mut upkeep = Vec::new();
        if let Some(redis) = &redis {
            let (redis, quotas) = (Arc::clone(redis), Arc::clone(&quotas));
            let routes = routes.clone();
            upkeep.push(tokio::spawn(every_second(async move || {
                let _ = redis.ping_within(redis.timeout()).await;
                quotas.renew().await;
                if let Some(routes) = &routes {
                    routes.register().await;
                }
            })));
        }
        if let Some(postgres) = &postgres {
            let postgres = Arc::clone(postgres);
            upkeep.push(tokio::spawn(every_second(async move || {
                postgres.ping().await
            })));
        }
        Ok(Shared {
            dedup: redis
                .as_ref()
                .map(|r| dedup::SharedDedup::new(Arc::clone(r))),
            redis,
            postgres,
            routes,
            quotas,
            upkeep,
        })
    }

    /// Where requests for what another replica holds go (with `[fleet] advertise`).
    pub fn routes(&self) -> Option<Arc<routes::Routes>> {
        self.routes.clone()
    }

    /// The PostgreSQL the chat keeps its conversations in, if `[chat] database` names one.
    pub fn postgres(&self) -> Option<Arc<postgres::Postgres>> {
        self.postgres.clone()
    }

    /// Quotas per identity, on this host's engine.
    pub fn quotas(&self) -> Arc<quota::Quotas> {
        Arc::clone(&self.quotas)
    }

    /// The fleet's shared dedup results (none for an embedded host: each session remembers
    /// its own).
    pub fn dedup(&self) -> Option<Arc<dedup::SharedDedup>> {
        self.dedup.clone()
    }

    /// Each shared engine's health (none for an embedded host).
    pub fn health(&self) -> Vec<EngineHealth> {
        let redis = self.redis.iter().map(|r| r.health());
        redis
            .chain(self.postgres.iter().map(|p| p.health()))
            .collect()
    }

    /// Waits up to `timeout` for every shared engine to answer once (at start, so that the
    /// first calls do not wait for the connection).
    pub async fn connect(&self, timeout: Duration) -> Result<(), String> {
        match &self.redis {
            Some(redis) => redis.ping_within(timeout).await,
            None => Ok(()),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        for upkeep in &self.upkeep {
            upkeep.abort();
        }
    }
}

/// How often each engine is pinged and this host's quota leases renewed.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(1);

async fn every_second(mut step: impl AsyncFnMut()) {
    let mut tick = tokio::time::interval(UPKEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        step().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_found_and_never_shown() {
        assert!(has_password("redis://:s3cret@redis:6379/0"));
        assert!(has_password("redis://app:s3cret@redis/0"));
        assert!(!has_password("redis://app@redis/0"));
        assert!(!has_password("redis://redis:6379/0"));
        assert!(!has_password("redis://redis:6379/0?x=a@b:c"));
        assert!(has_password("redis://a:7000,redis://app:s3cret@b:7001"));
        assert!(!has_password("redis://a:7000,redis://app@b:7001"));
        let settings = RedisSettings::new("redis://app:s3cret@redis:6379/0", DEFAULT_REDIS_TIMEOUT)
            .expect("a URL");
        assert_eq!(settings.shown(), "redis://app:***@redis:6379/0");
        assert!(!format!("{settings:?}").contains("s3cret"));
        let error = RedisSettings::new("http://:hunter2@x/", DEFAULT_REDIS_TIMEOUT)
            .expect_err("not Redis")
            .to_string();
        assert!(!error.contains("hunter2"), "{error}");
        assert!(error.contains("redis://host:port/db"), "{error}");
        assert!(RedisSettings::new("rediss://x/#insecure", DEFAULT_REDIS_TIMEOUT).is_err());
        let plain = RedisSettings::new("redis://x/", DEFAULT_REDIS_TIMEOUT).expect("plain");
        assert!(plain.with_tls(&tls::TlsFiles::default()).is_err());
    }
}
