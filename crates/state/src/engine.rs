//! engine: the Redis a fleet shares, reached through one multiplexed connection that
//! reconnects by itself. Every request is bounded by the host's `redis-timeout-ms`, counted
//! when it fails, and marks the engine up or down for `/readyz` and `/metrics`; an error is
//! kept without the URL's password.

use crate::watch::Watch;
use crate::{EngineHealth, RedisSettings};
use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use std::sync::Arc;
use std::time::Duration;

/// The Redis of one host.
pub struct Redis {
    /// Connected on first use; `None` only if the URL could not make a client, which
    /// [`RedisSettings::new`] already refused.
    connection: Option<ConnectionManager>,
    timeout: Duration,
    /// Shown in errors instead of the URL.
    shown: String,
    watch: Watch,
}

/// Redis did not answer, or refused: what to say.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Down(pub String);

impl Redis {
    pub(crate) fn new(settings: &RedisSettings) -> Arc<Self> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        // TCP_NODELAY: a call sends a script while another is unanswered (a quota's admission
        // beside a dedup lookup, a result stored in the background); with Nagle's algorithm on
        // (the crate's default) the second waits for the first's answer: a round trip more.
        let connection = (settings.url().into_connection_info())
            .map(|info| info.set_tcp_settings(TcpSettings::default().set_nodelay(true)))
            .and_then(redis::Client::open)
            .and_then(|client| ConnectionManager::new_lazy_with_config(client, config))
            .ok();
        Arc::new(Redis {
            connection,
            timeout: settings.timeout,
            shown: settings.shown(),
            // Quotas ask it before a call runs: a host without it refuses calls under one.
            watch: Watch::new("redis", settings.shown(), true),
        })
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// This host's name among the replicas (the prefix of its quota leases).
    pub fn replica(&self) -> &str {
        crate::replica()
    }

    /// Runs `request` on the connection within the timeout, and notes how it went.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, request: F) -> Result<T, Down>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let Some(connection) = self.connection.clone() else {
            return Err(self.failed(format!("Redis at {} has no client", self.shown)));
        };
        match tokio::time::timeout(self.timeout, request(connection)).await {
            Ok(Ok(value)) => {
                self.watch.answered();
                Ok(value)
            }
            // The connection's own response timeout (the same bound) is a timeout too.
            Ok(Err(e)) if !e.is_timeout() => Err(self.failed(format!(
                "Redis at {} failed to {what}: {}",
                self.shown,
                without_url(&e)
            ))),
            Ok(Err(_)) | Err(_) => Err(self.failed(format!(
                "Redis at {} did not answer within {} ms ({what})",
                self.shown,
                self.timeout.as_millis()
            ))),
        }
    }

    /// Pings Redis, waiting up to `timeout` (which may be longer than a call's wait: at start).
    pub(crate) async fn ping_within(&self, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let answer = self
                .run("ping", |mut c| async move {
                    redis::cmd("PING").query_async::<String>(&mut c).await
                })
                .await;
            match answer {
                Ok(_) => return Ok(()),
                Err(Down(why)) if tokio::time::Instant::now() + self.timeout >= deadline => {
                    return Err(why);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
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

/// A Redis error as said to clients and logs: its kind and detail, never the URL it was
/// reached by.
fn without_url(error: &redis::RedisError) -> String {
    let detail = error.detail().unwrap_or_default();
    let kind = error.category();
    let text = if error.is_io_error() || error.is_connection_refusal() {
        "cannot connect".to_string()
    } else if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {detail}")
    };
    toolhost_contract::cut(&text, 200, |_| "...".into()).into_owned()
}
