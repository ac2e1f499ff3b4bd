//! trace: the spans a request makes (issue #57) and the W3C trace context it carries in.
//!
//! Spans are `tracing` spans of the target [`TARGET`]; the host's telemetry turns them into
//! OpenTelemetry spans and exports them when an OTLP endpoint is set (`host::cli::telemetry`).
//! Without one no layer takes [`TARGET`], so each span is a disabled callsite: creating one
//! costs a filter check, no allocation, and the global propagator is OpenTelemetry's no-op.
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

/// Whether OTLP metrics are exported: set once by the host's telemetry. Until then no
/// measurement is made (not even the no-op meter's).
pub static METRICS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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

/// Where a request's trace context is read from: its `_meta`, then its HTTP headers.
pub struct Carrier<'a> {
    pub meta: Option<&'a serde_json::Map<String, serde_json::Value>>,
    pub headers: Option<&'a http::HeaderMap>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let bound = match key {
            "traceparent" => MAX_TRACEPARENT,
            "tracestate" => MAX_TRACESTATE,
            "baggage" => MAX_BAGGAGE,
            _ => return None,
        };
        let from_meta = (self.meta)
            .and_then(|meta| meta.get(key))
            .and_then(|value| value.as_str());
        let value = match from_meta {
            Some(value) => Some(value),
            // `_meta` names none: the HTTP header, if there is exactly one.
            None if self.meta.is_none_or(|meta| !meta.contains_key(key)) => {
                let headers = self.headers?;
                let mut all = headers.get_all(key).iter();
                match (all.next(), all.next()) {
                    (Some(one), None) => one.to_str().ok(),
                    _ => None,
                }
            }
            None => None,
        };
        value.filter(|v| v.len() <= bound)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate", "baggage"]
    }
}

/// Makes `span`'s parent the trace context `carrier` holds, if it holds a valid one (and
/// tracing is on: otherwise the propagator is a no-op and the span disabled).
pub fn continue_trace(span: &tracing::Span, carrier: &Carrier<'_>) {
    if span.is_disabled() {
        return;
    }
    let parent =
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(carrier));
    let _ = span.set_parent(parent);
}

pub use toolhost_runtime::trace::injected;

/// The trace and span ids of the current span, as W3C writes them (32 and 16 hex digits),
/// when it is traced: for audit records and log lines.
pub fn current_ids() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt;
    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
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
        let span = tracing::info_span!(target: TARGET, "tools/call");
        continue_trace(
            &span,
            &Carrier {
                meta: None,
                headers: None,
            },
        );
        assert_eq!(span.in_scope(current_ids), None);
    }
}
