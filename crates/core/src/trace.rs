//! trace: the spans a request makes (issue #57) and the W3C trace context it carries in.
//!
//! Spans are `tracing` spans of the target [`TARGET`]; the host's telemetry turns them into
//! OpenTelemetry spans and exports them when an OTLP endpoint is set (`host::cli::telemetry`).
//! Without one no layer takes [`TARGET`], so each span is a disabled callsite: creating one
//! costs a filter check, no allocation, and the global propagator is OpenTelemetry's no-op.
//! With one, the sampler is asked once, where a request enters ([`entry`]); a trace it drops
//! makes no span at all, and a step's span ([`step_span!`]) is made only inside a kept one.
//!
//! A request's context comes from MCP's `_meta` (`traceparent`, `tracestate`, `baggage`,
//! SEP-414), else from the HTTP request's headers of the same names. Each value is taken
//! only as a string within the W3C sizes ([`MAX_TRACEPARENT`], [`MAX_TRACESTATE`],
//! [`MAX_BAGGAGE`]); anything else is ignored, never an error, and a malformed one is the
//! propagator's to ignore (W3C rules).
//!
//! No span records a tool's arguments or results, a token or an identity's claims: a call's
//! span holds the tool's name, the identity's kind and name, and sizes where they matter.

use opentelemetry::propagation::Extractor;
use std::sync::atomic::{AtomicU64, Ordering};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every span made for tracing (the log's filters never take it).
pub const TARGET: &str = "trace";

/// The longest `traceparent` read: W3C's version 00 is 55 bytes; a later version may be
/// longer, so some room is left.
pub const MAX_TRACEPARENT: usize = 128;
/// The longest `tracestate` read (W3C: 32 members; 512 bytes is what propagators must take).
pub const MAX_TRACESTATE: usize = 512;
/// The longest `baggage` read (W3C: 8,192 bytes, 180 members).
pub const MAX_BAGGAGE: usize = 8192;

/// Whether spans are exported: set once by the host's telemetry. Until then no span of
/// [`TARGET`] is made (see [`entry`] and [`within`]).
pub static TRACES_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the trace a request continues (its parent's context, empty for none) is kept:
/// the configured sampler, asked once at the request's entry. Set once by the host's
/// telemetry; its spans are then all kept (the exporter's own sampler keeps everything made).
pub type Decide = Box<dyn Fn(&opentelemetry::Context) -> bool + Send + Sync>;

static DECIDE: std::sync::OnceLock<Decide> = std::sync::OnceLock::new();

/// Sets the sampler [`entry`] asks (once; a second call is ignored).
pub fn set_sampler(decide: Decide) {
    let _ = DECIDE.set(decide);
}

/// Whether a span made now would be part of a kept trace: spans are exported and the current
/// span is one of [`TARGET`] (only kept traces have any). A step of a request (`validate`,
/// `run`, a model's request...) is made only then; elsewhere it would cost a span for
/// nothing.
pub fn within() -> bool {
    TRACES_ON.load(Ordering::Relaxed)
        && (tracing::Span::current().metadata()).is_some_and(|m| m.target() == TARGET)
}

/// The span `make` makes, where a request or a run enters this host (an MCP request's server
/// span, a chat request's, a run of the agent): a child of the current span when that is
/// traced; else, the root of this host's part of the trace `carrier` names (or of a new one),
/// made only if the sampler keeps that trace. [`tracing::Span::none`] otherwise, and then
/// nothing under it is made either: a trace the sampler drops costs a request one check of its
/// context.
pub fn entry(carrier: &Carrier<'_>, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if !TRACES_ON.load(Ordering::Relaxed) {
        return tracing::Span::none();
    }
    if within() {
        return make();
    }
    // The caller's context, read only if it sent one.
    let parent = match carrier.get("traceparent") {
        Some(_) => opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier)),
        None => opentelemetry::Context::new(),
    };
    if !DECIDE.get().is_none_or(|decide| decide(&parent)) {
        return tracing::Span::none();
    }
    let span = make();
    let _ = span.set_parent(parent);
    span
}

/// A step's span: `tracing::info_span!(target: TARGET, ...)` when the current span is traced
/// ([`within`]), or when `when = <bool>;` (asked before entering a span of the log's own)
/// says so; [`tracing::Span::none`] otherwise, its fields not even evaluated.
#[macro_export]
macro_rules! step_span {
    (when = $traced:expr; $($fields:tt)*) => {
        if $traced {
            tracing::info_span!(target: $crate::trace::TARGET, $($fields)*)
        } else {
            tracing::Span::none()
        }
    };
    ($($fields:tt)*) => {
        $crate::step_span!(when = $crate::trace::within(); $($fields)*)
    };
}

/// Whether OTLP metrics are exported: set once by the host's telemetry. Until then no
/// measurement is made (not even the no-op meter's).
pub static METRICS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a call's span records the sizes of its arguments and result (`[telemetry]
/// record-sizes`): set once by the host's telemetry. Never their contents.
pub static RECORD_SIZES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `mcp.server.operation.duration` and `mcp.client.operation.duration` (seconds), as the MCP
/// semantic conventions name them, made once the meter provider is set.
struct Durations {
    server: opentelemetry::metrics::Histogram<f64>,
    client: opentelemetry::metrics::Histogram<f64>,
}

fn durations() -> &'static Durations {
    static DURATIONS: std::sync::OnceLock<Durations> = std::sync::OnceLock::new();
    DURATIONS.get_or_init(|| {
        let meter = opentelemetry::global::meter("toolhost");
        Durations {
            server: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("Duration of an MCP request as the server saw it.")
                .build(),
            client: meter
                .f64_histogram("mcp.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of an MCP request to an imported server.")
                .build(),
        }
    })
}

/// One MCP operation measured: `method`, the tool (only a tool of the catalog: a name a
/// client made up is not a label), and its error type if it failed. Nothing when metrics are
/// not exported.
pub fn measured(
    server: bool,
    seconds: f64,
    method: &'static str,
    tool: Option<&str>,
    error: Option<&str>,
) {
    if !METRICS_ON.load(Ordering::Relaxed) {
        return;
    }
    use opentelemetry::KeyValue;
    let mut labels = vec![KeyValue::new("mcp.method.name", method)];
    if let Some(tool) = tool {
        labels.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
    }
    if let Some(error) = error {
        labels.push(KeyValue::new("error.type", error.to_string()));
    }
    let histogram = match server {
        true => &durations().server,
        false => &durations().client,
    };
    histogram.record(seconds, &labels);
}

/// Spans the exporter had no room for (its queue full: a collector down or slow), counted by
/// the host's telemetry and shown on `/metrics`.
pub static DROPPED_SPANS: AtomicU64 = AtomicU64::new(0);

/// Spans the exporter dropped so far.
pub fn dropped_spans() -> u64 {
    DROPPED_SPANS.load(Ordering::Relaxed)
}

/// Exports of spans that failed in a row (0 once one succeeds), and why the last one failed.
static EXPORTS_FAILING: AtomicU64 = AtomicU64::new(0);
static LAST_EXPORT_ERROR: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Notes how an export of spans ended (by the host's exporter, on its own thread).
pub fn exported(outcome: Result<(), String>) {
    match outcome {
        Ok(()) => EXPORTS_FAILING.store(0, Ordering::Relaxed),
        Err(why) => {
            EXPORTS_FAILING.fetch_add(1, Ordering::Relaxed);
            let mut why = why;
            why.truncate(why.floor_char_boundary(256));
            if let Ok(mut last) = LAST_EXPORT_ERROR.lock() {
                *last = Some(why);
            }
        }
    }
}

/// The collector as the exporter last saw it, when spans are exported: whether the last
/// export reached it, and why not. Like a shared engine, a collector that does not answer
/// stops no call (its spans wait in the bounded queue, then are dropped and counted).
pub fn collector() -> Option<(bool, Option<String>)> {
    if !TRACES_ON.load(Ordering::Relaxed) {
        return None;
    }
    let up = EXPORTS_FAILING.load(Ordering::Relaxed) == 0;
    let why = match up {
        true => None,
        false => LAST_EXPORT_ERROR.lock().ok().and_then(|last| last.clone()),
    };
    Some((up, why))
}

/// What a collector that does not take spans stops, for `/readyz`, `/metrics` and `status`.
pub const COLLECTOR_STOPS: &str =
    "no call: spans wait in a bounded queue, then are dropped and counted";

/// Where a request's trace context is read from: its `_meta`, then its HTTP headers (the
/// headers first for a request another replica forwarded: they name the hop's span).
pub struct Carrier<'a> {
    pub meta: Option<&'a serde_json::Map<String, serde_json::Value>>,
    pub headers: Option<&'a http::HeaderMap>,
}

/// The header a request forwarded by another replica of the fleet carries (its name).
pub const FORWARDED_BY: &str = "toolhost-forwarded-by";

impl Carrier<'_> {
    /// Nothing carried: a run that starts here (`toolhost chat`'s), not a request's.
    pub const NONE: Carrier<'static> = Carrier {
        meta: None,
        headers: None,
    };

    /// The header `key`, if there is exactly one.
    fn header<'h>(headers: &'h http::HeaderMap, key: &str) -> Option<&'h str> {
        let mut all = headers.get_all(key).iter();
        match (all.next(), all.next()) {
            (Some(one), None) => one.to_str().ok(),
            _ => None,
        }
    }
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let bound = match key {
            "traceparent" => MAX_TRACEPARENT,
            "tracestate" => MAX_TRACESTATE,
            "baggage" => MAX_BAGGAGE,
            _ => return None,
        };
        // Forwarded: the replica that forwarded it continued the caller's trace in a span of
        // its own, and names that span in the headers (the body is sent as it came).
        if let Some(headers) = self.headers
            && headers.contains_key(FORWARDED_BY)
            && headers.contains_key("traceparent")
        {
            return Self::header(headers, key).filter(|v| v.len() <= bound);
        }
        let from_meta = (self.meta)
            .and_then(|meta| meta.get(key))
            .and_then(|value| value.as_str());
        let value = match from_meta {
            Some(value) => Some(value),
            // `_meta` names none: the HTTP header, if there is exactly one.
            None if self.meta.is_none_or(|meta| !meta.contains_key(key)) => {
                Self::header(self.headers?, key)
            }
            None => None,
        };
        value.filter(|v| v.len() <= bound)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate", "baggage"]
    }
}

pub use opentelemetry::trace::SpanContext;
pub use toolhost_runtime::trace::injected;

/// Notes on a call's `run` span the sizes `measure` gives (its arguments as JSON, its result
/// or error as text, in bytes) when `[telemetry] record-sizes` asks for them and the span is
/// exported; never their contents, and nothing measured otherwise.
pub fn sizes(span: &tracing::Span, measure: impl FnOnce() -> (usize, usize)) {
    if span.is_disabled() || !RECORD_SIZES.load(Ordering::Relaxed) {
        return;
    }
    let (arguments, result) = measure();
    span.record("toolhost.arguments.size", arguments as i64);
    span.record("toolhost.result.size", result as i64);
}

/// The trace and span ids of the current span, as W3C writes them (32 and 16 hex digits),
/// when it is traced: for audit records and log lines.
pub fn current_ids() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt;
    if !within() {
        return None;
    }
    let span = tracing::Span::current();
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// The current span's context, when it is traced: what the later rounds of a call that asks
/// link to.
pub fn current_context() -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::TraceContextExt;
    if !within() {
        return None;
    }
    let span_context = tracing::Span::current()
        .context()
        .span()
        .span_context()
        .clone();
    span_context.is_valid().then_some(span_context)
}

/// Marks the current span (the server span of a follow-up that answers a tool's question) as
/// round `round` of the call: `toolhost.round`, and a link to `origin`, the span of the
/// request that started the call (the call itself runs on in that request's trace, under
/// that span, whichever trace each follow-up belongs to).
pub fn follow_up(origin: Option<&opentelemetry::trace::SpanContext>, round: u32) {
    if !within() {
        return;
    }
    let span = tracing::Span::current();
    span.set_attribute("toolhost.round", i64::from(round));
    if let Some(origin) = origin {
        let kind = opentelemetry::KeyValue::new("toolhost.link", "started-by");
        span.add_link_with_attributes(origin.clone(), vec![kind]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn meta_comes_first_and_only_strings_within_their_bound_are_read() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", http::HeaderValue::from_static("00-header"));
        let m = meta(json!({"traceparent": parent}));
        let carrier = Carrier {
            meta: Some(&m),
            headers: Some(&headers),
        };
        assert_eq!(carrier.get("traceparent"), Some(parent));
        // Named in `_meta` but not a string: ignored, and the header is not taken instead.
        let m = meta(json!({"traceparent": 12}));
        let carrier = Carrier {
            meta: Some(&m),
            headers: Some(&headers),
        };
        assert_eq!(carrier.get("traceparent"), None);
        // Not in `_meta`: the header.
        let m = meta(json!({}));
        let carrier = Carrier {
            meta: Some(&m),
            headers: Some(&headers),
        };
        assert_eq!(carrier.get("traceparent"), Some("00-header"));
        // Past its bound: ignored.
        let long = "0".repeat(10_000);
        let m = meta(json!({"traceparent": long, "baggage": "a=b,".repeat(10_000)}));
        let carrier = Carrier {
            meta: Some(&m),
            headers: None,
        };
        assert_eq!(carrier.get("traceparent"), None);
        assert_eq!(carrier.get("baggage"), None);
        assert_eq!(carrier.get("other"), None);
    }

    #[test]
    fn without_a_tracer_nothing_is_traced() {
        let carrier = Carrier {
            meta: None,
            headers: None,
        };
        let span = entry(
            &carrier,
            || tracing::info_span!(target: TARGET, "tools/call"),
        );
        assert!(span.is_disabled());
        assert_eq!(span.in_scope(current_ids), None);
        assert!(step_span!("validate").is_disabled());
    }
}
