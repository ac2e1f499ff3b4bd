//! routes: where each replica of a fleet can be reached, and which replica holds each MCP
//! session, in Redis, so that a request that reaches another replica is forwarded to the one
//! that holds what it names (`[fleet] advertise`).
//!
//! - `toolhost:replica:<id>`: the address a replica advertises (`http://host:port`), set by
//!   that replica every second and expiring after [`REPLICA_TTL`]: a replica that dies is
//!   gone from the routes within it.
//! - `toolhost:session:<hash>`: the replica that made an MCP session, under a blake3 hash of
//!   the session id (no session id in Redis), kept [`SESSION_TTL`] after its last use.
//! - `toolhost:run:<hash>`: the replica running a web chat run of a conversation (hashed
//!   likewise), from the run's start to its end (at most [`RUN_TTL`]).
//!
//! Only replicas write these keys; a client names at most a replica id (in a `requestState`,
//! a task id) or a session id, never an address: an address is only ever read from a key a
//! replica wrote. Addresses read are kept [`CACHE_FOR`], so a forward costs no Redis round
//! trip in the common case.

use crate::engine::{Down, Redis};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a replica's address outlives its last renewal.
pub const REPLICA_TTL: Duration = Duration::from_secs(15);
/// How long a session's route outlives its last use (a session idle longer is closed by its
/// replica anyway: `[host]` session idle is 5 minutes by default).
pub const SESSION_TTL: Duration = Duration::from_secs(3600);
/// How long a chat run's route is kept if its replica never says it ended (a replica
/// killed mid-run): past it, or once that replica's address is gone, the conversation is
/// served anywhere.
pub const RUN_TTL: Duration = Duration::from_secs(3600);
/// How long an address read from Redis is used before it is read again.
pub const CACHE_FOR: Duration = Duration::from_secs(5);
/// The longest address taken from Redis.
pub const MAX_ADDRESS_BYTES: usize = 256;
/// Sessions whose route this replica remembers renewing (past it, the oldest are forgotten
/// and renewed again at their next use).
const MAX_RENEWALS: usize = 100_000;

/// The routes of one replica.
pub struct Routes {
    redis: Arc<Redis>,
    /// Where this replica is reached by the others.
    address: String,
    /// Addresses read, and when.
    cache: Mutex<HashMap<String, (String, Instant)>>,
    /// Sessions of this replica whose route was set, and when.
    renewed: Mutex<HashMap<String, Instant>>,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This replica holds it (or nobody does: this replica answers as it would alone).
    Here,
    /// The replica `replica` holds it, at `address`.
    There { replica: String, address: String },
    /// The replica that held it is gone (its address expired).
    Gone { replica: String },
}

impl Routes {
    pub(crate) fn new(redis: Arc<Redis>, address: String) -> Arc<Self> {
        Arc::new(Routes {
            redis,
            address,
            cache: Mutex::new(HashMap::new()),
            renewed: Mutex::new(HashMap::new()),
        })
    }

    /// This replica's name.
    pub fn me(&self) -> &'static str {
        crate::replica()
    }

    /// Where this replica says it is reached.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sets this replica's address for [`REPLICA_TTL`] (every second, from the upkeep).
    pub(crate) async fn register(&self) {
        let (key, address) = (replica_key(self.me()), self.address.clone());
        self.set("register this replica", key, address, REPLICA_TTL)
            .await;
    }

    /// Sets `key` to `value` for `ttl` (a failure is the engine's to note and log).
    async fn set(&self, what: &str, key: String, value: String, ttl: Duration) {
        let ttl = ttl.as_millis() as u64;
        let _ = self
            .redis
            .run(what, |mut c| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("PX")
                    .arg(ttl)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await;
    }

    /// Where requests for what `replica` holds go.
    pub async fn to_replica(&self, replica: &str) -> Result<Route, Down> {
        if replica == self.me() || !crate::is_replica(replica) {
            return Ok(Route::Here);
        }
        if let Some(address) = self.cached(replica) {
            return Ok(Route::There {
                replica: replica.to_string(),
                address,
            });
        }
        let key = replica_key(replica);
        let found: Option<Vec<u8>> = self
            .redis
            .run("find a replica", |mut c| async move {
                // The length first: a value past its bound is not read.
                let (length, value): (usize, Option<Vec<u8>>) = redis::pipe()
                    .cmd("STRLEN")
                    .arg(&key)
                    .cmd("GETRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(MAX_ADDRESS_BYTES as i64)
                    .query_async(&mut c)
                    .await?;
                Ok(value.filter(|_| length <= MAX_ADDRESS_BYTES && length > 0))
            })
            .await?;
        let address = found
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .filter(|address| is_address(address));
        Ok(match address {
            Some(address) => {
                let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                // Replicas come and go: entries past their time are dropped as others come.
                cache.retain(|_, (_, read)| read.elapsed() < CACHE_FOR);
                cache.insert(replica.to_string(), (address.clone(), Instant::now()));
                Route::There {
                    replica: replica.to_string(),
                    address,
                }
            }
            None => Route::Gone {
                replica: replica.to_string(),
            },
        })
    }

    fn cached(&self, replica: &str) -> Option<String> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let (address, read) = cache.get(replica)?;
        (read.elapsed() < CACHE_FOR).then(|| address.clone())
    }

    /// Where requests of the MCP session `session` go: asked of Redis only for a session
    /// this replica does not hold.
    pub async fn to_session(&self, session: &str) -> Result<Route, Down> {
        self.to_holder("find a session", session_key(session)).await
    }

    /// Where requests go for what the replica named under `key` holds; here when none is.
    /// No more than a replica's name is read of the value (a longer one names none).
    async fn to_holder(&self, what: &str, key: String) -> Result<Route, Down> {
        let holder: Vec<u8> = self
            .redis
            .run(what, |mut c| async move {
                (redis::cmd("GETRANGE").arg(key).arg(0).arg(16))
                    .query_async(&mut c)
                    .await
            })
            .await?;
        match String::from_utf8(holder) {
            Ok(replica) if !replica.is_empty() => self.to_replica(&replica).await,
            _ => Ok(Route::Here),
        }
    }

    /// Whether the route of `session`, held here and used now, is due to be renewed (at most
    /// once in a tenth of [`SESSION_TTL`]): then it is counted as renewed, and the caller
    /// calls [`Routes::hold_session`]. No Redis in this.
    pub fn due(&self, session: &str) -> bool {
        let mut renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        if (renewed.get(session)).is_some_and(|at| at.elapsed() < SESSION_TTL / 10) {
            return false;
        }
        if renewed.len() >= MAX_RENEWALS {
            renewed.retain(|_, at| at.elapsed() < SESSION_TTL / 10);
        }
        if renewed.len() >= MAX_RENEWALS {
            renewed.clear();
        }
        renewed.insert(session.to_string(), Instant::now());
        true
    }

    /// Says in Redis that this replica holds `session` for [`SESSION_TTL`] (when it is made,
    /// and when [`Routes::due`] says so). A Redis that does not answer leaves the session
    /// unrouted until then: requests for it reaching other replicas are told it is not there.
    pub async fn hold_session(&self, session: &str) {
        let _ = self.due(session);
        let (key, me) = (session_key(session), self.me().to_string());
        self.set("route a session", key, me, SESSION_TTL).await;
    }

    /// Says in Redis that this replica runs a chat run of `conversation`, for
    /// [`RUN_TTL`] or until [`Routes::drop_run`] (before the run's first event goes out: its
    /// approvals may be answered through another replica at once).
    pub async fn hold_run(&self, conversation: &str) {
        let (key, me) = (run_key(conversation), self.me().to_string());
        self.set("route a chat run", key, me, RUN_TTL).await;
    }

    /// Forgets this replica's run of `conversation` (it ended), unless another replica's
    /// run has taken the key since.
    pub async fn drop_run(&self, conversation: &str) {
        let (key, me) = (run_key(conversation), self.me());
        let _ = self
            .redis
            .run("forget a chat run", |mut c| async move {
                redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                     return redis.call('DEL', KEYS[1]) end return 0",
                )
                .key(key)
                .arg(me)
                .invoke_async::<i64>(&mut c)
                .await
            })
            .await;
    }

    /// Where requests about `conversation` go while a run of it goes on: the replica that
    /// runs it; here when none does, or when the one that did is gone (the run died with it;
    /// the conversation as kept is served anywhere).
    pub async fn to_run(&self, conversation: &str) -> Result<Route, Down> {
        match self
            .to_holder("find a chat run", run_key(conversation))
            .await?
        {
            Route::Gone { .. } => Ok(Route::Here),
            route => Ok(route),
        }
    }

    /// Forgets `session` (it was closed here).
    pub async fn drop_session(&self, session: &str) {
        (self.renewed.lock().unwrap_or_else(PoisonError::into_inner)).remove(session);
        let key = session_key(session);
        let _ = self
            .redis
            .run("forget a session", |mut c| async move {
                redis::cmd("DEL").arg(key).query_async::<()>(&mut c).await
            })
            .await;
    }
}

fn replica_key(replica: &str) -> String {
    format!("toolhost:replica:{replica}")
}

fn run_key(conversation: &str) -> String {
    let hash = blake3::derive_key("toolhost chat run route v1", conversation.as_bytes());
    format!("toolhost:run:{}", blake3::Hash::from(hash).to_hex())
}

fn session_key(session: &str) -> String {
    let hash = blake3::derive_key("toolhost session route v1", session.as_bytes());
    format!("toolhost:session:{}", blake3::Hash::from(hash).to_hex())
}

/// Whether `address` is one a replica may advertise: `http://host:port`, nothing after it.
pub fn is_address(address: &str) -> bool {
    let Some(rest) = address.strip_prefix("http://") else {
        return false;
    };
    let Some((host, port)) = rest.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && host.len() <= MAX_ADDRESS_BYTES
        && !host.contains(['/', '@', '?', '#', ' '])
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_http_host_and_port_and_nothing_else() {
        for good in [
            "http://10.0.0.7:8750",
            "http://toolhost-0.toolhost:8750",
            "http://[::1]:8750",
        ] {
            assert!(is_address(good), "{good}");
        }
        for bad in [
            "https://a:1",
            "http://a",
            "http://a:0",
            "http://a:1/x",
            "http://u@a:1",
            "http://:1",
            "http://a:99999",
        ] {
            assert!(!is_address(bad), "{bad}");
        }
    }

    #[test]
    fn a_session_is_routed_under_a_hash_of_its_id() {
        let key = session_key("2b0f6b2c-secret");
        assert!(key.starts_with("toolhost:session:"));
        assert!(!key.contains("secret"));
        assert_eq!(key, session_key("2b0f6b2c-secret"));
    }
}
