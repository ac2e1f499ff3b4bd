//! An invoker's limits, dedup mode and admission: its own `[limits]`, else its ensemble's
//! `[defaults]`, else the built-ins. The one place the three are merged.

use crate::v1::{Defaults, Limits};
use crate::{DedupMode, written_or};
use std::time::Duration;
use toolhost_contract::CallLimits;

/// Built-in limits, used when neither the invoker nor its ensemble's `[defaults]` set one.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_MEMORY_MIB: u64 = 64;
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1 << 20;
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 << 20;
pub const DEFAULT_MCP_STARTUP_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_MCP_MAX_TOOLS: u64 = 1_000;
pub const DEFAULT_MAX_CONCURRENCY: u64 = 8;
pub const DEFAULT_MAX_QUEUE: u64 = 64;

/// The limits, dedup mode and admission of one invoker, defaults applied.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub limits: CallLimits,
    pub dedup: DedupMode,
    pub max_running: usize,
    pub max_waiting: usize,
    /// Instances kept prepared ahead of calls; `None`: decided from the instantiation time.
    pub prepared: Option<usize>,
}

impl Settings {
    /// The invoker's own `[limits]` (and `dedup`), else the ensemble's `[defaults]`, else the
    /// built-ins.
    pub fn merge(own: &Limits, dedup: Option<DedupMode>, defaults: &Defaults) -> Self {
        Settings {
            limits: CallLimits {
                timeout: written_or(
                    own.timeout_ms.or(defaults.timeout_ms),
                    Duration::from_millis(DEFAULT_TIMEOUT_MS),
                ),
                memory_bytes: written_or(
                    own.memory_mib.or(defaults.memory_mib),
                    (DEFAULT_MEMORY_MIB << 20) as usize,
                ),
                max_output_bytes: written_or(
                    own.max_output_bytes.or(defaults.max_output_bytes),
                    DEFAULT_MAX_OUTPUT_BYTES as usize,
                ),
                max_response_bytes: written_or(
                    own.max_response_bytes.or(defaults.max_response_bytes),
                    DEFAULT_MAX_RESPONSE_BYTES,
                ),
            },
            dedup: dedup.or(defaults.dedup).unwrap_or_default(),
            max_running: written_or(
                own.max_concurrency.or(defaults.max_concurrency),
                DEFAULT_MAX_CONCURRENCY as usize,
            ),
            max_waiting: written_or(
                own.max_queue.or(defaults.max_queue),
                DEFAULT_MAX_QUEUE as usize,
            ),
            prepared: own
                .prepared
                .or(defaults.prepared)
                .map(crate::Setting::value),
        }
    }
}
