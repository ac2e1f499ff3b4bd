//! engine: the Redis a fleet shares, reached through one multiplexed connection that this
//! module makes again when it breaks. Every request is bounded by the host's
//! `redis-timeout-ms`, counted when it fails, and marks the engine up or down for `/readyz`,
//! `/metrics` and `status`; an error is kept without the URL's password.
//!
//! The connection is the `redis` crate's, over a socket made here and wrapped in
//! [`Bounded`], which holds each reply to a bound before the crate buffers it (the crate sets
//! none). A reply past the bound, a broken socket or a connection that stopped answering
//! pings ends the connection; the next request makes a new one (one attempt at a time; after
//! a failed one, requests fail at once for [`RETRY_AFTER`] instead of each trying again).
//!
//! Redis's own clock decides what a script does with time (a quota's refill, a lease's
//! expiry, a request's deadline). Each ping reads it (`TIME`), so that a request can carry
//! the moment its caller stops waiting as Redis counts time ([`Redis::deadline`]): a script
//! that reaches Redis after that (it was queued behind a stall) takes nothing.

use crate::bounded::Bounded;
use crate::watch::Watch;
use crate::{EngineHealth, RedisSettings};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
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

#[derive(Clone)]
struct Connected {
    connection: MultiplexedConnection,
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
        Arc::new_cyclic(|this| Redis {
            info: settings.url().into_connection_info().ok(),
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
        F: FnOnce(MultiplexedConnection) -> Fut,
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

    /// A new connection, its handshake (password, database) done.
    async fn connect(&self) -> Result<Connected, String> {
        let cannot = |detail: &dyn std::fmt::Display| {
            format!("Redis at {} cannot be reached: {detail}", self.shown)
        };
        let Some(info) = &self.info else {
            return Err(cannot(&"the URL makes no client"));
        };
        // No timeout of the crate's: each request is bounded by the host's.
        let config = config_of();
        let number = self.made.fetch_add(1, Ordering::Relaxed);
        let (connection, refused) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| cannot(&io_reason(&e)))?;
                // A call sends a script while another is unanswered (a quota's admission
                // beside a dedup lookup, a result stored in the background); with Nagle's
                // algorithm the second would wait for the first's answer: a round trip more.
                let _ = socket.set_nodelay(true);
                self.handshake(info, socket, config, number).await
            }
            ConnectionAddr::Unix(path) => {
                let socket = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| cannot(&io_reason(&e)))?;
                self.handshake(info, socket, config, number).await
            }
            ConnectionAddr::TcpTls { host, port, .. } => {
                let Some(tls) = &self.tls else {
                    return Err(cannot(&"its URL asks for TLS and none is set up"));
                };
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| cannot(&io_reason(&e)))?;
                let _ = socket.set_nodelay(true);
                let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|_| {
                    cannot(&format!("`{host}` is no name to check a certificate for"))
                })?;
                // The handshake is bounded by the request's own timeout, as every wait here.
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
                let stream = connector
                    .connect(name, socket)
                    .await
                    .map_err(|e| cannot(&tls_reason(&e)))?;
                self.handshake(info, stream, config, number).await
            }
            _ => Err("the URL names a kind of address toolhost does not reach".to_string()),
        }
        .map_err(|why| cannot(&why))?;
        self.unanswered.store(0, Ordering::Relaxed);
        Ok(Connected {
            connection,
            number,
            refused,
        })
    }

    /// The crate's connection over `socket`, bounded, its handshake (password, database)
    /// done; its task runs until the socket ends, and then the connection is forgotten.
    async fn handshake<S>(
        &self,
        info: &ConnectionInfo,
        socket: S,
        config: AsyncConnectionConfig,
        number: u64,
    ) -> Result<(MultiplexedConnection, Arc<OnceLock<String>>), String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let stream = Bounded::new(socket);
        let refused = stream.refusal();
        let made = MultiplexedConnection::new_with_config(info.redis_settings(), stream, config);
        let (connection, driver) = made.await.map_err(|e| without_url(&e))?;
        let this = self.this.clone();
        tokio::spawn(async move {
            driver.await;
            if let Some(redis) = this.upgrade() {
                redis.forget(number);
            }
        });
        Ok((connection, refused))
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
                    return Ok(());
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

/// Why a TLS handshake failed, said plainly (a certificate that does not verify, a server
/// that is no TLS server).
fn tls_reason(error: &std::io::Error) -> String {
    let said = match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(why)) => {
            format!("its TLS certificate is refused ({why:?})")
        }
        Some(other) => format!("TLS failed: {other}"),
        None if error.kind() == std::io::ErrorKind::InvalidData => {
            "TLS failed: it does not answer as a TLS server".to_string()
        }
        None => format!("TLS failed: {}", io_reason(error)),
    };
    toolhost_contract::cut(&said, 200, |_| "...".into()).into_owned()
}

/// This host's wall clock, in milliseconds since 1970.
fn wall_ms() -> i64 {
    (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |d| d.as_millis() as i64)
}

/// Why a socket could not be made, without an address.
fn io_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::NotFound => "no such socket".into(),
        _ => toolhost_contract::cut(&error.to_string(), 200, |_| "...".into()).into_owned(),
    }
}

/// A Redis error as said to clients and logs: its kind and detail, never the URL it was
/// reached by.
fn without_url(error: &redis::RedisError) -> String {
    let detail = error.detail().unwrap_or_default();
    let kind = error.category();
    let text = if error.is_io_error() || error.is_connection_refusal() {
        "the connection failed".to_string()
    } else if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {detail}")
    };
    toolhost_contract::cut(&text, 200, |_| "...".into()).into_owned()
}
