//! engine: the Redis a fleet shares, reached through one multiplexed connection (for a Redis
//! Cluster, the `redis` crate's cluster connection, which holds one per node) that this
//! module makes again when it breaks. Every request is bounded by the host's
//! `redis-timeout-ms`, counted when it fails, and marks the engine up or down for `/readyz`,
//! `/metrics` and `status`; an error is kept without the URL's password.
//!
//! Each connection is the `redis` crate's, over a socket made by [`crate::dial`] and held to
//! the bounds of [`crate::bounded`] (the crate sets none). A reply past the bound, a broken
//! socket or a connection that stopped answering pings ends the connection; the next request
//! makes a new one (one attempt at a time; after a failed one, requests fail at once for
//! [`RETRY_AFTER`] instead of each trying again).
//!
//! Redis's own clock decides what a script does with time (a quota's refill, a lease's
//! expiry, a request's deadline). Each ping reads it (`TIME`), so that a request can carry
//! the moment its caller stops waiting as Redis counts time ([`Redis::deadline`]): a script
//! that reaches Redis after that (it was queued behind a stall) takes nothing.

use crate::cluster::Node;
use crate::dial::{dial, without_url};
use crate::watch::Watch;
use crate::{EngineHealth, RedisSettings};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, ConnectionInfo, IntoConnectionInfo};
use redis::{Pipeline, RedisFuture, Value};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// After a connection attempt fails, how long requests fail at once instead of trying again.
pub const RETRY_AFTER: Duration = Duration::from_millis(250);

/// Pings in a row that a connection may leave unanswered before it is replaced (a Redis host
/// gone without a reset would otherwise hold the connection until TCP gives up, minutes).
const UNANSWERED_PINGS: u32 = 3;

/// The Redis of one host.
pub struct Redis {
    /// Where and how to connect; `None` only for a URL the crate cannot read, which
    /// [`RedisSettings::new`] already refused.
    info: Option<ConnectionInfo>,
    /// For a cluster (`redis-cluster-env`): the client that finds its nodes from the seeds.
    cluster: Option<redis::cluster::ClusterClient>,
    timeout: Duration,
    /// Shown in errors instead of the URL.
    shown: String,
    /// For `rediss://`: TLS, as the settings say.
    tls: Option<Arc<rustls::ClientConfig>>,
    watch: Watch,
    link: Mutex<Link>,
    /// Held while a connection is made: one attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    /// Redis's clock minus this host's, in milliseconds, as the last ping measured it.
    offset_ms: AtomicI64,
    /// Whether a ping measured it yet (until then the two clocks are taken to agree).
    offset_known: AtomicBool,
    /// The last round trip a ping measured, in microseconds.
    round_trip_us: AtomicU64,
    /// Pings in a row the current connection did not answer in time.
    unanswered: AtomicU32,
    /// Numbers the connections, so that a failure ends only the one it happened on.
    made: AtomicU64,
    /// Itself, for the task that watches each connection's end.
    this: Weak<Redis>,
}

#[derive(Default)]
struct Link {
    current: Option<Connected>,
    /// When the last attempt failed, and why.
    failed: Option<(Instant, String)>,
}

/// A connection to the fleet's Redis: one server's, or a cluster's (which holds one per node
/// and routes each request by its keys' slot).
#[derive(Clone)]
pub enum Connection {
    One(MultiplexedConnection),
    Cluster(ClusterConnection<Node>),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::One(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::One(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::One(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

#[derive(Clone)]
struct Connected {
    connection: Connection,
    number: u64,
    /// Why the stream refused a reply, once it did.
    refused: Arc<OnceLock<String>>,
}

/// A connection being made: noted as failed when it ends without one (an error, or its
/// caller's timeout dropping it).
struct Attempt<'a> {
    redis: &'a Redis,
    why: Option<String>,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(why) = self.why.take() {
            self.redis.lock().failed = Some((Instant::now(), why));
        }
    }
}

/// Redis did not answer, or refused: what to say.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Down(pub String);

impl Redis {
    pub(crate) fn new(settings: &RedisSettings) -> Arc<Self> {
        let cluster = settings.seeds().and_then(|seeds| {
            crate::cluster::set_nodes(crate::cluster::NodeSettings {
                tls: settings.tls().cloned(),
                timeout: settings.timeout,
            });
            crate::cluster::client(seeds, settings.timeout).ok()
        });
        Arc::new_cyclic(|this| Redis {
            info: settings.url().into_connection_info().ok(),
            cluster,
            timeout: settings.timeout,
            shown: settings.shown(),
            tls: settings.tls().cloned(),
            // Quotas ask it before a call runs: while it is down, calls under one are refused.
            watch: Watch::new(
                "redis",
                settings.shown(),
                "calls under a quota answer 503 (Retry-After: 1); shared dedup results and \
                 routes to other replicas' sessions wait",
            ),
            link: Mutex::default(),
            connecting: tokio::sync::Mutex::new(()),
            offset_ms: AtomicI64::new(0),
            offset_known: AtomicBool::new(false),
            round_trip_us: AtomicU64::new(0),
            unanswered: AtomicU32::new(0),
            made: AtomicU64::new(0),
            this: this.clone(),
        })
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The URL as logs and errors show it (no password).
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// This host's name among the replicas (the prefix of its quota leases).
    pub fn replica(&self) -> &str {
        crate::replica()
    }

    /// The moment, in milliseconds of Redis's clock, after which a request sent now is one
    /// its caller no longer waits for: its timeout from now, less the last measured round
    /// trip (the answer must still come back in time) and a millisecond. `0` (no deadline)
    /// until a ping has measured Redis's clock: a script never refuses on a guess.
    pub(crate) fn deadline(&self) -> i64 {
        if !self.offset_known.load(Ordering::Relaxed) {
            return 0;
        }
        let now = wall_ms() + self.offset_ms.load(Ordering::Relaxed);
        let round_trip = (self.round_trip_us.load(Ordering::Relaxed) / 1000) as i64;
        let timeout = self.timeout.as_millis() as i64;
        now + (timeout - round_trip - 1).max(timeout / 2)
    }

    /// Runs `request` on the connection within the timeout, and notes how it went.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, request: F) -> Result<T, Down>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let answer = tokio::time::timeout(self.timeout, async {
            let connected = self.connected().await.map_err(Err)?;
            let answer = request(connected.connection.clone()).await;
            answer.map_err(|e| Ok((connected, e)))
        })
        .await;
        match answer {
            Ok(Ok(value)) => {
                self.watch.answered();
                Ok(value)
            }
            Ok(Err(Err(why))) => Err(self.failed(why)),
            Ok(Err(Ok((connected, error)))) => {
                let breaks = error.is_io_error()
                    || error.is_unrecoverable_error()
                    || error.kind() == redis::ErrorKind::Parse;
                if breaks {
                    self.forget(connected.number);
                }
                let why = match connected.refused.get() {
                    Some(refused) => {
                        format!("Redis at {} sent a reply refused: {refused}", self.shown)
                    }
                    None => format!(
                        "Redis at {} failed to {what}: {}",
                        self.shown,
                        without_url(&error)
                    ),
                };
                Err(self.failed(why))
            }
            Err(_) => Err(self.failed(format!(
                "Redis at {} did not answer within {} ms ({what})",
                self.shown,
                self.timeout.as_millis()
            ))),
        }
    }

    /// The connection, made if there is none (one attempt at a time).
    async fn connected(&self) -> Result<Connected, String> {
        if let Some(connected) = &self.lock().current {
            return Ok(connected.clone());
        }
        let _one = self.connecting.lock().await;
        {
            let link = self.lock();
            if let Some(connected) = &link.current {
                return Ok(connected.clone());
            }
            if let Some((at, why)) = &link.failed
                && at.elapsed() < RETRY_AFTER
            {
                return Err(why.clone());
            }
        }
        // An attempt its caller stops waiting for (a Redis that accepts and never answers)
        // counts as failed: the next requests do not each open a socket to it.
        let mut attempt = Attempt {
            redis: self,
            why: Some(format!(
                "Redis at {} did not finish a connection's handshake within {} ms",
                self.shown,
                self.timeout.as_millis()
            )),
        };
        match self.connect().await {
            Ok(connected) => {
                attempt.why = None;
                let mut link = self.lock();
                link.failed = None;
                link.current = Some(connected.clone());
                Ok(connected)
            }
            Err(why) => {
                attempt.why = Some(why.clone());
                Err(why)
            }
        }
    }

    /// A new connection, its handshake (password, database) done; for a cluster, the slot
    /// map read from a seed and a connection to each node the requests reach.
    async fn connect(&self) -> Result<Connected, String> {
        let cannot = |detail: &dyn std::fmt::Display| {
            format!("Redis at {} cannot be reached: {detail}", self.shown)
        };
        let number = self.made.fetch_add(1, Ordering::Relaxed);
        let (connection, refused) = if let Some(cluster) = &self.cluster {
            let connection = (cluster.get_async_generic_connection::<Node>().await)
                .map_err(|e| cannot(&without_url(&e)))?;
            // Each node's stream keeps its own refusal; the crate's error says which failed.
            (Connection::Cluster(connection), Arc::default())
        } else {
            let Some(info) = &self.info else {
                return Err(cannot(&"the URL makes no client"));
            };
            // No timeout of the crate's: each request is bounded by the host's.
            let dialed = dial(info, self.tls.as_ref(), config_of())
                .await
                .map_err(|why| cannot(&why))?;
            let this = self.this.clone();
            let driver = dialed.driver;
            tokio::spawn(async move {
                driver.await;
                if let Some(redis) = this.upgrade() {
                    redis.forget(number);
                }
            });
            (Connection::One(dialed.connection), dialed.refused)
        };
        self.unanswered.store(0, Ordering::Relaxed);
        Ok(Connected {
            connection,
            number,
            refused,
        })
    }

    /// Ends the connection `number`, if it is still the current one.
    fn forget(&self, number: u64) {
        let mut link = self.lock();
        if link.current.as_ref().is_some_and(|c| c.number == number) {
            link.current = None;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks Redis the time, waiting up to `timeout` (which may be longer than a call's wait:
    /// at start), and keeps how far its clock is from this host's. A connection that left
    /// [`UNANSWERED_PINGS`] pings in a row unanswered is replaced.
    pub(crate) async fn ping_within(&self, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (sent, started) = (wall_ms(), Instant::now());
            let answer = self
                .run("answer a ping", |mut c| async move {
                    redis::cmd("TIME").query_async::<(i64, i64)>(&mut c).await
                })
                .await;
            match answer {
                Ok((seconds, micros)) => {
                    let round_trip = started.elapsed();
                    let redis_ms = seconds * 1000 + micros / 1000;
                    let offset = redis_ms - (sent + round_trip.as_millis() as i64 / 2);
                    self.offset_ms.store(offset, Ordering::Relaxed);
                    self.offset_known.store(true, Ordering::Relaxed);
                    (self.round_trip_us).store(round_trip.as_micros() as u64, Ordering::Relaxed);
                    self.unanswered.store(0, Ordering::Relaxed);
                    return match self.cluster.is_some() {
                        true => self.cluster_serves().await,
                        false => Ok(()),
                    };
                }
                Err(Down(why)) => {
                    if why.contains("did not answer")
                        && self.unanswered.fetch_add(1, Ordering::Relaxed) + 1 >= UNANSWERED_PINGS
                    {
                        let current = self.lock().current.as_ref().map(|c| c.number);
                        if let Some(number) = current {
                            self.forget(number);
                        }
                        self.unanswered.store(0, Ordering::Relaxed);
                    }
                    if tokio::time::Instant::now() + self.timeout >= deadline {
                        return Err(why);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Whether the cluster serves every slot, as the node asked says (`CLUSTER INFO`): a
    /// primary down and not yet replaced is said in `/readyz`'s body, `/metrics` and `status`.
    async fn cluster_serves(&self) -> Result<(), String> {
        let info = self
            .run("say how the cluster is", |mut c| async move {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async::<String>(&mut c)
                    .await
            })
            .await
            .map_err(|Down(why)| why)?;
        match crate::cluster::unhealthy(&info) {
            Some(why) => Err(self.failed(format!("Redis at {}: {why}", self.shown)).0),
            None => Ok(()),
        }
    }

    /// Whether this is a Redis Cluster (a script's keys must then share a slot).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    fn failed(&self, why: String) -> Down {
        Down(self.watch.failed(why))
    }

    pub(crate) fn health(&self) -> EngineHealth {
        self.watch.health()
    }
}

/// The crate's settings for a connection: no timeout of its own (each request is bounded by
/// the host's).
fn config_of() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None)
}

/// This host's wall clock, in milliseconds since 1970.
fn wall_ms() -> i64 {
    (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |d| d.as_millis() as i64)
}
