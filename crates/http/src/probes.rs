//! probes: `/healthz`, `/readyz` and `/metrics`. The probes come from kubelets and load
//! balancers, which carry no token: they are outside the guard and say nothing but whether
//! this host serves. `/metrics` is inside it (the rules say who may read it); its gauges are
//! read when it is scraped.

use axum::http::{StatusCode, header};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use toolhost_core::invoke::Host;
use toolhost_core::reload::Reloader;
use toolhost_runtime::Runtime;
use toolhost_state::Shared;

/// What `/metrics` reads its gauges from when it is scraped, and `/readyz` its answer.
pub struct Scrape {
    pub(crate) host: Arc<Host>,
    reloader: Arc<Reloader>,
    runtime: Arc<Runtime>,
    /// The engines the fleet shares state on (none: embedded).
    shared: Arc<Shared>,
    /// Set once the first load's compiles have all ended: later reloads keep serving the
    /// previous versions while they compile, so they do not make the host unready.
    loaded: std::sync::atomic::AtomicBool,
}

impl Scrape {
    /// True once the first load ended: every component it named compiled, or was refused.
    fn loaded(&self) -> bool {
        if self.loaded.load(Ordering::SeqCst) {
            return true;
        }
        let loaded = self.reloader.status().loading.is_empty();
        if loaded {
            self.loaded.store(true, Ordering::SeqCst);
        }
        loaded
    }

    /// Every metric, gauges set to what they are now.
    fn render(&self) -> String {
        let Some(metrics) = self.host.metrics() else {
            return String::new();
        };
        let pool = self.runtime.pool();
        metrics.instances_in_use.set(pool.in_use as i64);
        metrics.instances_waiting.set(pool.waiting as i64);
        metrics.instances_capacity.set(pool.capacity as i64);
        let prepared = self.runtime.prepared();
        metrics.prepared_instances.set(prepared.instances as i64);
        metrics.prepared_bytes.set(prepared.bytes as i64);
        for (outcome, count) in [
            ("made", prepared.made),
            ("used", prepared.used),
            ("evicted", prepared.evicted),
            ("failed", prepared.failed),
        ] {
            (metrics.prepared_outcomes.with_label_values(&[outcome])).set(count as i64);
        }
        for tier in self.runtime.tiers() {
            let labels = [tier.tier.name()];
            (metrics.components_by_tier.with_label_values(&labels)).set(tier.components as i64);
            (metrics.compiles_by_tier.with_label_values(&labels)).set(tier.compiles as i64);
            (metrics.compile_seconds_by_tier.with_label_values(&labels)).set(tier.compile_seconds);
        }
        let status = self.reloader.status();
        metrics.catalog_generation.set(status.generation as i64);
        metrics.refused_ensembles.set(status.refused.len() as i64);
        let catalog = self.reloader.catalog().snapshot();
        metrics.catalog_tools.set(catalog.tools().count() as i64);
        // Imported servers by ensemble; an ensemble gone since the last scrape drops out.
        metrics.mcp_servers_up.reset();
        let mut seen = std::collections::HashSet::new();
        for tool in catalog.tools() {
            if let Some(up) = tool.backend().is_up()
                && seen.insert(tool.ensemble())
            {
                (metrics.mcp_servers_up.with_label_values(&[tool.ensemble()])).set(i64::from(up));
            }
        }
        if let Some(log) = self.host.audit_log() {
            let health = log.health();
            metrics.audit_held.set(health.held as i64);
            metrics.audit_lost.set(health.lost as i64);
            metrics
                .audit_reopen_failures
                .set(health.reopen_failures as i64);
        }
        metrics.draining.set(i64::from(self.host.is_draining()));
        for engine in self.shared.health() {
            let labels = [engine.engine];
            metrics
                .shared_engine_up
                .with_label_values(&labels)
                .set(i64::from(engine.up));
            (metrics.shared_engine_failures.with_label_values(&labels)).set(engine.failures as i64);
        }
        (metrics.trace_spans_dropped).set(toolhost_core::trace::dropped_spans() as i64);
        if let Some((up, _)) = toolhost_core::trace::collector() {
            let labels = ["otlp-collector"];
            (metrics.shared_engine_up.with_label_values(&labels)).set(i64::from(up));
        }
        metrics.render()
    }
}

impl Scrape {
    /// The engines the fleet shares state on.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub fn new(
        host: Arc<Host>,
        reloader: Arc<Reloader>,
        runtime: Arc<Runtime>,
        shared: Arc<Shared>,
    ) -> Self {
        Scrape {
            host,
            reloader,
            runtime,
            shared,
            loaded: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// `GET /metrics`: every metric in the Prometheus text format.
pub(crate) fn metrics(scrape: Arc<Scrape>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let scrape = scrape.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    scrape.render(),
                )
            }
        }),
    )
}

/// `/healthz` and `/readyz`: outside every guard (kubelets and load balancers carry no
/// token), saying nothing but whether this host serves. A shared engine (Redis, PostgreSQL)
/// that does not answer is said in the body, with what it stops, and the host stays ready:
/// every replica shares the engine, so taking this one out of the balancer for it would take
/// them all, and the rest of what each serves (tools without a quota, `tools/list`, probes)
/// with them. The requests that need the engine fail on their own, within its timeout.
pub(crate) fn probes(ready: Arc<Scrape>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let answer = if ready.host.is_draining() {
                    (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string())
                } else if ready.loaded() {
                    let mut text = "ready".to_string();
                    // Which engine and what it stops, not why: the reason (an address) is for
                    // /metrics' readers, `status` and the log.
                    for engine in ready.shared.health().iter().filter(|e| !e.up) {
                        text.push_str(&format!(
                            "; {} does not answer: {}",
                            engine.engine, engine.stops
                        ));
                    }
                    if let Some((false, _)) = toolhost_core::trace::collector() {
                        text.push_str(&format!(
                            "; the OTLP collector does not take spans: {}",
                            toolhost_core::trace::COLLECTOR_STOPS
                        ));
                    }
                    // How many, not which: `toolhost status` names them, for the operator.
                    let signing_in = (ready.reloader.status().refused.iter())
                        .filter(|refused| refused.needs_sign_in())
                        .count();
                    if signing_in > 0 {
                        text.push_str(&format!(
                            "; {signing_in} ensemble(s) need a person to sign in (`toolhost \
                             status` names them)"
                        ));
                    }
                    text.push('\n');
                    (StatusCode::OK, text)
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "loading\n".to_string())
                };
                async move { answer }
            }),
        )
}
