//! metrics: what the host counts for Prometheus (`GET /metrics` of `serve --http`): calls by
//! tool and outcome, their durations, dedup hits and validation failures, counted as each
//! call ends; reloads by outcome; gauges the caller sets when it is scraped (the instance
//! pool, the catalog, imported MCP servers up or down, the audit log). Text format, from the
//! `prometheus` crate.
//!
//! Tool names become label values only for tools of the catalog: a call of an unknown tool is
//! counted under the tool `""`, so callers cannot grow the label set with made-up names.
//! Identities (over HTTP) are named for the first [`Metrics::set_identity_cap`] of them seen
//! since start; later ones are counted as `other`.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Buckets of the call duration histogram, in seconds: from a dedup hit to a minute-long call.
const DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0,
];

/// Identities named in the metrics unless told otherwise.
pub const DEFAULT_IDENTITY_CAP: usize = 100;
/// The label of the identities past the cap.
const OTHER: &str = "other";

/// The host's metrics and the registry they are encoded from.
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    durations: HistogramVec,
    dedup_hits: IntCounterVec,
    validation_failures: IntCounterVec,
    reloads: IntCounterVec,
    identity_calls: IntCounterVec,
    /// The identities named so far, and how many may be.
    identities: std::sync::Mutex<std::collections::HashSet<String>>,
    identity_cap: std::sync::atomic::AtomicUsize,
    /// Set at each scrape, by ensemble: 1 while its imported MCP server has a session.
    pub mcp_servers_up: IntGaugeVec,
    /// MCP requests over HTTP, by how they were answered: `direct` (a session-less request
    /// that needs one answer, in its own request) or `service` (rmcp's streamable HTTP
    /// service: sessions, streams, and whatever the direct path declines).
    pub mcp_http_requests: IntCounterVec,
    /// Set at each scrape.
    pub instances_in_use: IntGauge,
    pub instances_waiting: IntGauge,
    pub instances_capacity: IntGauge,
    /// Instances prepared ahead of calls, and the linear memory they hold.
    pub prepared_instances: IntGauge,
    pub prepared_bytes: IntGauge,
    /// Since start, by outcome: made, used (by a call), evicted (for a call that needed the
    /// slot), failed.
    pub prepared_outcomes: IntGaugeVec,
    pub catalog_generation: IntGauge,
    pub catalog_tools: IntGauge,
    pub refused_ensembles: IntGauge,
    pub audit_held: IntGauge,
    pub audit_lost: IntGauge,
    pub audit_reopen_failures: IntGauge,
    pub draining: IntGauge,
    /// Set at each scrape, by engine (`redis`): 1 while the fleet's shared engine answers.
    pub shared_engine_up: IntGaugeVec,
    /// Set at each scrape, by engine: its requests that failed or timed out since start.
    pub shared_engine_failures: IntGaugeVec,
    /// Spans the trace exporter had no room for (its queue full), since start.
    pub trace_spans_dropped: IntGauge,
    /// Components loaded now by the compiler tier whose code their new calls run; compiles
    /// since start by tier, and the seconds they took.
    pub components_by_tier: IntGaugeVec,
    pub compiles_by_tier: IntGaugeVec,
    pub compile_seconds_by_tier: prometheus::GaugeVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Fails only if a metric's name or labels were malformed (they are constants here).
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntGaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let gauge = |name: &str, help: &str| {
            let metric = IntGauge::new(name, help)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let calls = counter(
            "toolhost_calls_total",
            "Calls that ended, by tool and outcome (ok or the error kind).",
            &["tool", "outcome"],
        )?;
        let dedup_hits = counter(
            "toolhost_dedup_hits_total",
            "Calls answered from an identical earlier call's result, by tool.",
            &["tool"],
        )?;
        let validation_failures = counter(
            "toolhost_validation_failures_total",
            "Calls whose arguments were refused (malformed, against the schema, or by the tool itself), by tool.",
            &["tool"],
        )?;
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "toolhost_call_duration_seconds",
                "How long calls took, from their arrival to their result, by tool.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["tool"],
        )?;
        registry.register(Box::new(durations.clone()))?;
        let identity_calls = counter(
            "toolhost_identity_calls_total",
            "Calls that ended over HTTP, by identity (a static token's name or an access token's subject; past the cap `other`) and outcome.",
            &["identity", "outcome"],
        )?;
        let reloads = counter(
            "toolhost_reloads_total",
            "Reloads of the catalog, by outcome: ok, or refused when an ensemble file was refused (its last good version kept).",
            &["outcome"],
        )?;
        let mcp_http_requests = counter(
            "toolhost_mcp_http_requests_total",
            "MCP requests over HTTP, by how they were answered: direct (a session-less request that needs one answer, in its own request) or service (rmcp's streamable HTTP service).",
            &["path"],
        )?;
        let mcp_servers_up = gauge_vec(
            "toolhost_mcp_server_up",
            "1 while the imported MCP server of the ensemble has a live session, 0 while it is down.",
            &["ensemble"],
        )?;
        let prepared_outcomes = gauge_vec(
            "toolhost_prepared_since_start",
            "Instances prepared ahead of calls since start, by outcome: made, used by a call, \
             evicted for a call that needed the slot, failed.",
            &["outcome"],
        )?;
        let shared_engine_up = gauge_vec(
            "toolhost_shared_engine_up",
            "1 while the engine the fleet shares its state on ([fleet]) answers in time, 0 while it does not.",
            &["engine"],
        )?;
        let shared_engine_failures = gauge_vec(
            "toolhost_shared_engine_failures",
            "Requests to the fleet's shared engine that failed or timed out since start.",
            &["engine"],
        )?;
        let trace_spans_dropped = gauge(
            "toolhost_trace_spans_dropped",
            "Spans the OTLP exporter had no room for since start (its queue full: a collector down or slow); 0 without an exporter.",
        )?;
        let components_by_tier = gauge_vec(
            "toolhost_components",
            "Components loaded now, by the compiler whose code their new calls run: winch \
             (the first tier, until Cranelift's code replaces it) or cranelift.",
            &["tier"],
        )?;
        let compiles_by_tier = gauge_vec(
            "toolhost_compiles_since_start",
            "Components compiled since start, by compiler (read from the cache not counted).",
            &["tier"],
        )?;
        let compile_seconds_by_tier = prometheus::GaugeVec::new(
            Opts::new(
                "toolhost_compile_seconds_since_start",
                "Seconds the compiles since start took on the clock, by compiler.",
            ),
            &["tier"],
        )?;
        registry.register(Box::new(compile_seconds_by_tier.clone()))?;
        Ok(Metrics {
            components_by_tier,
            compiles_by_tier,
            compile_seconds_by_tier,
            trace_spans_dropped,
            shared_engine_up,
            shared_engine_failures,
            prepared_outcomes,
            identity_calls,
            identities: Default::default(),
            identity_cap: std::sync::atomic::AtomicUsize::new(DEFAULT_IDENTITY_CAP),
            calls,
            durations,
            dedup_hits,
            validation_failures,
            reloads,
            mcp_servers_up,
            mcp_http_requests,
            instances_in_use: gauge(
                "toolhost_instances_in_use",
                "Instances of the pool running a call now.",
            )?,
            instances_waiting: gauge(
                "toolhost_instances_waiting",
                "Calls waiting for an instance of the pool.",
            )?,
            instances_capacity: gauge(
                "toolhost_instances_capacity",
                "Instances the pool has (max-concurrent-calls).",
            )?,
            prepared_instances: gauge(
                "toolhost_prepared_instances",
                "Instances instantiated ahead of calls and not yet taken by one.",
            )?,
            prepared_bytes: gauge(
                "toolhost_prepared_bytes",
                "Linear memory of the prepared instances, in bytes (an upper bound of what is resident).",
            )?,
            catalog_generation: gauge(
                "toolhost_catalog_generation",
                "The catalog's version: 0 at start, one more per reload.",
            )?,
            catalog_tools: gauge("toolhost_catalog_tools", "Tools the catalog serves now.")?,
            refused_ensembles: gauge(
                "toolhost_refused_ensembles",
                "Ensemble files the last reload refused (their previous version may serve).",
            )?,
            audit_held: gauge(
                "toolhost_audit_records_held",
                "Audit records held in memory because the audit file refuses writes.",
            )?,
            audit_lost: gauge(
                "toolhost_audit_records_lost",
                "Audit records lost since start: the file refused them past the memory bound.",
            )?,
            audit_reopen_failures: gauge(
                "toolhost_audit_reopen_failures",
                "Reopens of the audit log (SIGHUP) that failed since start; the old file stayed in use.",
            )?,
            draining: gauge(
                "toolhost_draining",
                "1 once a shutdown began: no new calls are taken.",
            )?,
            registry,
        })
    }

    /// Counts one call that ended. `tool` is `None` for a tool the catalog does not have.
    pub fn call(
        &self,
        tool: Option<&str>,
        outcome: &str,
        seconds: f64,
        deduplicated: bool,
        invalid: bool,
    ) {
        let tool = tool.unwrap_or("");
        self.calls.with_label_values(&[tool, outcome]).inc();
        self.durations.with_label_values(&[tool]).observe(seconds);
        if deduplicated {
            self.dedup_hits.with_label_values(&[tool]).inc();
        }
        if invalid {
            self.validation_failures.with_label_values(&[tool]).inc();
        }
    }

    /// How many identities `/metrics` names (`[access] metrics-identities`); the rest are
    /// counted as `other`.
    pub fn set_identity_cap(&self, cap: usize) {
        (self.identity_cap).store(cap, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts one call of `identity` that ended in `outcome`.
    pub fn identity_call(&self, identity: &str, outcome: &str) {
        let named = {
            let mut seen = self
                .identities
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let cap = self.identity_cap.load(std::sync::atomic::Ordering::Relaxed);
            seen.contains(identity)
                || (seen.len() < cap && identity != OTHER && seen.insert(identity.to_string()))
        };
        let label = if named { identity } else { OTHER };
        self.identity_calls
            .with_label_values(&[label, outcome])
            .inc();
    }

    /// Counts one reload of the catalog; `refused` when it refused an ensemble file.
    pub fn reload(&self, refused: bool) {
        let outcome = if refused { "refused" } else { "ok" };
        self.reloads.with_label_values(&[outcome]).inc();
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut text = Vec::new();
        // Encoding into memory fails only for metrics the registry would not have taken.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut text);
        String::from_utf8_lossy(&text).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_tool_and_outcome_and_unknown_tools_share_one_label() {
        let metrics = Metrics::new().expect("metrics");
        metrics.call(Some("echo"), "ok", 0.001, false, false);
        metrics.call(Some("echo"), "ok", 0.0001, true, false);
        metrics.call(Some("echo"), "invalid-arguments", 0.0, false, true);
        metrics.call(None, "unknown-tool", 0.0, false, false);
        metrics.call(None, "unknown-tool", 0.0, false, false);
        let text = metrics.render();
        for line in [
            "toolhost_calls_total{outcome=\"ok\",tool=\"echo\"} 2",
            "toolhost_calls_total{outcome=\"invalid-arguments\",tool=\"echo\"} 1",
            "toolhost_calls_total{outcome=\"unknown-tool\",tool=\"\"} 2",
            "toolhost_dedup_hits_total{tool=\"echo\"} 1",
            "toolhost_validation_failures_total{tool=\"echo\"} 1",
            "toolhost_call_duration_seconds_count{tool=\"echo\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
