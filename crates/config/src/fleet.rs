//! `[fleet]` of `toolhost.toml`, as serde reads it: where the replicas of a fleet share their
//! state (a Redis or a Redis Cluster, TLS files for it, the address a replica advertises).
//! Checked into `toolhost-state`'s settings by the host's `check`.

use crate::names::{EnvVarName, RedisTimeoutMs};
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `[fleet]` of `toolhost.toml`: the engines the replicas of a fleet share their state on.
/// Without it every host keeps its state in its own process, as one host does.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FleetSection {
    /// The Redis the replicas share quotas on: `redis://host:port/db`, without a password
    /// (a URL with one goes in the environment variable `redis-env` names).
    #[schemars(with = "Option<String>")]
    pub redis: Option<Spanned<String>>,
    /// The environment variable that holds the Redis URL (it may carry a password).
    #[schemars(with = "Option<EnvVarName>")]
    pub redis_env: Option<Spanned<EnvVarName>>,
    /// A Redis Cluster instead: the environment variable holding its seed URLs, separated
    /// by commas (`redis://host:port,...` or `rediss://`; any node, more than one in case one
    /// is down).
    #[schemars(with = "Option<EnvVarName>")]
    pub redis_cluster_env: Option<Spanned<EnvVarName>>,
    /// A Redis Cluster's seed URLs written here instead (no password).
    #[schemars(with = "Option<String>")]
    pub redis_cluster: Option<Spanned<String>>,
    /// The longest a call waits on Redis before it is refused (default 500).
    pub redis_timeout_ms: Option<RedisTimeoutMs>,
    /// `rediss://`: CA certificates (PEM file) for Redis's, instead of the system's roots.
    #[schemars(with = "Option<String>")]
    pub redis_ca_file: Option<Spanned<String>>,
    /// `rediss://`: this host's certificate chain (PEM file), with `redis-key-file`.
    #[schemars(with = "Option<String>")]
    pub redis_cert_file: Option<Spanned<String>>,
    /// The private key (PEM file) of `redis-cert-file`; never logged.
    #[schemars(with = "Option<String>")]
    pub redis_key_file: Option<Spanned<String>>,
    /// Where the other replicas reach this one, `http://host:port` (its `--http` address as
    /// they see it): with it, a request for a session, a task or a waiting call another
    /// replica holds is forwarded there. Needs a Redis (`redis`, `redis-env` or a cluster).
    #[schemars(with = "Option<String>")]
    pub advertise: Option<Spanned<String>>,
    /// The environment variable that holds that address instead (a pod's, say).
    #[schemars(with = "Option<EnvVarName>")]
    pub advertise_env: Option<Spanned<EnvVarName>>,
}
