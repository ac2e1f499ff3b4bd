//! cluster: a Redis Cluster as the fleet's Redis (`[fleet] redis-cluster-env`). The `redis`
//! crate's cluster client finds the nodes from the seeds, keeps the slot map, follows `MOVED`
//! and `ASK` and refreshes the map when a primary fails over; this module gives it the
//! connections it makes to each node, made as the single engine's are ([`crate::engine`]):
//! over a socket of ours, TLS as the settings say, each reply held to the bounds of
//! [`crate::bounded`].
//!
//! Every key toolhost writes names one hash tag per thing it is about (an identity's bucket
//! and running calls, a result and its claim), so a script's keys are on one node and a call
//! takes one round trip on its path, as on one Redis. What spans identities (renewing this
//! host's leases) is grouped by slot ([`slot`]).
//!
//! The crate asks for a node's connection through a function without a receiver
//! ([`redis::cluster_async::Connect`]), so what it needs of the host (the TLS settings, the
//! timeout) is set once per process in [`NODES`]: a host has one `[fleet]`, read at start.

use crate::dial::dial;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How this process reaches a cluster's nodes: set when its engine is made.
static NODES: OnceLock<NodeSettings> = OnceLock::new();

/// What a node's connection needs of the host.
#[derive(Clone)]
pub(crate) struct NodeSettings {
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// Bounds making a node's connection (socket, TLS, handshake).
    pub(crate) timeout: Duration,
}

/// Sets how this process reaches cluster nodes; the first settings stay (a host reads
/// `[fleet]` once, at start).
pub(crate) fn set_nodes(settings: NodeSettings) {
    let _ = NODES.set(settings);
}

/// One node's connection, as the cluster client holds it: the crate's multiplexed
/// connection over a bounded stream of ours.
#[derive(Clone)]
pub struct Node(MultiplexedConnection);

impl ConnectionLike for Node {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

impl redis::cluster_async::Connect for Node {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let info = info.into_connection_info()?;
            let settings = NODES.get().cloned().unwrap_or(NodeSettings {
                tls: None,
                timeout: crate::DEFAULT_REDIS_TIMEOUT,
            });
            let dialed =
                tokio::time::timeout(settings.timeout, dial(&info, settings.tls.as_ref(), config))
                    .await
                    .map_err(|_| {
                        redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "a cluster node did not finish a connection's handshake in time",
                        ))
                    })?
                    .map_err(|why| {
                        redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "a cluster node cannot be reached",
                            why,
                        ))
                    })?;
            // The node's connection lives as long as its socket; the cluster client drops it
            // and asks for another when it fails.
            tokio::spawn(dialed.driver);
            Ok(Node(dialed.connection))
        })
    }
}

/// The cluster client for `seeds` (checked by [`crate::RedisSettings::cluster`]): no retry
/// waits longer than the host's timeout, and every request bounded by it.
pub(crate) fn client(
    seeds: &[String],
    timeout: Duration,
) -> redis::RedisResult<redis::cluster::ClusterClient> {
    redis::cluster::ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        // A request moved by a failover is tried again on the promoted node, but never
        // after its caller stopped waiting (the engine's timeout drops it first).
        .retries(3)
        .min_retry_wait(10)
        .max_retry_wait((timeout.as_millis() as u64 / 4).max(10))
        .build()
}

/// The cluster slot `key` is kept in (by its hash tag, as Redis computes it).
pub(crate) fn slot(key: &str) -> redis::cluster_routing::Slot {
    redis::cluster_routing::Slot::for_key(key)
}

/// What `CLUSTER INFO` says of the cluster's health: `None` when it serves every slot, else
/// why not (`cluster_state:fail`, slots not served).
pub(crate) fn unhealthy(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
    };
    let state = field("cluster_state")?;
    if state == "ok" {
        return None;
    }
    let served = field("cluster_slots_ok").unwrap_or_else(|| "?".into());
    Some(format!(
        "the cluster says cluster_state:{state} ({served} of 16384 slots served)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identitys_keys_share_a_slot_and_identities_spread() {
        let tag = "ab".repeat(32);
        let bucket = slot(&format!("toolhost:quota:{{{tag}}}:bucket"));
        assert_eq!(bucket, slot(&format!("toolhost:quota:{{{tag}}}:running")));
        assert_eq!(bucket, slot(&tag));
        let other = slot(&format!("toolhost:quota:{{{}}}:bucket", "cd".repeat(32)));
        assert_ne!(bucket, other);
    }

    #[test]
    fn cluster_info_says_when_slots_are_not_served() {
        assert_eq!(
            unhealthy("cluster_state:ok\r\ncluster_slots_ok:16384\r\n"),
            None
        );
        let said = unhealthy("cluster_state:fail\r\ncluster_slots_ok:10923\r\n");
        assert_eq!(
            said.as_deref(),
            Some("the cluster says cluster_state:fail (10923 of 16384 slots served)")
        );
        assert_eq!(unhealthy("garbage"), None);
    }
}
