//! trace: the spans a request makes (issue #57) and the W3C trace context it carries in.
//!
//! Spans are OpenTelemetry's own, made with the SDK's tracer ([`set_tracer`], by the host's
//! telemetry when an OTLP endpoint is set) and held in a [`Traced`]: the OpenTelemetry
//! context that holds the span, attached to the thread while the request's future is polled
//! ([`Traced::carry`]), so that a step inside it ([`step`]) finds its parent, and a log
//! line or an audit record its ids ([`current_ids`]). Not through `tracing` and
//! `tracing-opentelemetry`: a call's spans cost a sixth as much this way (`cargo bench -p
//! toolhost --bench spans`, docs/decisions.md). Without a tracer nothing is made: each
//! [`entry`] and [`step`] is one atomic load, and no builder is even made. With one, the
//! sampler is asked once, where a request enters ([`entry`]); a trace it drops makes no span
//! at all, and a step's span is made only inside a kept one.
//!
//! A request's context comes from MCP's `_meta` (`traceparent`, `tracestate`, `baggage`,
//! SEP-414), else from the HTTP request's headers of the same names. Each value is taken
//! only as a string within the W3C sizes ([`MAX_TRACEPARENT`], [`MAX_TRACESTATE`],
//! [`MAX_BAGGAGE`]); anything else is ignored, never an error, and a malformed one is the
//! propagator's to ignore (W3C rules).
//!
//! No span records a tool's arguments or results, a token or an identity's claims: a call's
//! span holds the tool's name, the identity's kind and name, and sizes where they matter.

use futures_util::future::Either;
use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{Status, TraceContextExt};
use std::sync::atomic::{AtomicU64, Ordering};

pub use opentelemetry::KeyValue;
pub use opentelemetry::trace::{SpanBuilder, SpanKind};

/// The longest `traceparent` read: W3C's version 00 is 55 bytes; a later version may be
/// longer, so some room is left.
pub const MAX_TRACEPARENT: usize = 128;
/// The longest `tracestate` read (W3C: 32 members; 512 bytes is what propagators must take).
pub const MAX_TRACESTATE: usize = 512;
/// The longest `baggage` read (W3C: 8,192 bytes, 180 members).
pub const MAX_BAGGAGE: usize = 8192;

/// Whether spans are exported: set once, with the tracer ([`set_tracer`]). Until then no
/// span is made (see [`entry`] and [`within`]).
pub static TRACES_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

static TRACER: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracer> =
    std::sync::OnceLock::new();

/// Sets the tracer spans are made with (once; a second call is ignored) and turns spans on.
pub fn set_tracer(tracer: opentelemetry_sdk::trace::SdkTracer) {
    if TRACER.set(tracer).is_ok() {
        TRACES_ON.store(true, Ordering::Relaxed);
    }
}

/// The tracer, when spans are exported.
fn tracer() -> Option<&'static opentelemetry_sdk::trace::SdkTracer> {
    match TRACES_ON.load(Ordering::Relaxed) {
        true => TRACER.get(),
        false => None,
    }
}

/// Whether the trace a request continues (its parent's context, empty for none) is kept:
/// the configured sampler, asked once at the request's entry, and the trace id it decided on
/// (the parent's, or a new one for a new trace). Set once by the host's telemetry; its spans
/// are then all kept (the exporter's own sampler keeps everything made).
pub type Decide = Box<dyn Fn(&Context) -> Option<opentelemetry::trace::TraceId> + Send + Sync>;

thread_local! {
    /// The trace id the sampler decided a new trace on, for [`RootIds`] to give its root span.
    static DECIDED_ON: std::cell::Cell<Option<opentelemetry::trace::TraceId>> =
        const { std::cell::Cell::new(None) };
}

/// The ids of this host's spans (the tracer's id generator): random, except that the root of
/// a new trace gets the trace id the sampler decided on ([`entry`]). A ratio sampler's choice
/// is a function of the trace id (so that every service sampling by the same ratio keeps the
/// same traces): decided on one id and given another, it would be a coin of its own.
#[derive(Debug, Default)]
pub struct RootIds(opentelemetry_sdk::trace::RandomIdGenerator);

impl opentelemetry_sdk::trace::IdGenerator for RootIds {
    fn new_trace_id(&self) -> opentelemetry::trace::TraceId {
        (DECIDED_ON.take()).unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        self.0.new_span_id()
    }
}

static DECIDE: std::sync::OnceLock<Decide> = std::sync::OnceLock::new();

/// Sets the sampler [`entry`] asks (once; a second call is ignored).
pub fn set_sampler(decide: Decide) {
    let _ = DECIDE.set(decide);
}

/// Whether a span made now would be part of a kept trace: spans are exported and a span of
/// this host's is current (only kept traces have any). A step of a request (`validate`,
/// `run`, a model's request...) is made only then; elsewhere it would cost a span for
/// nothing.
pub fn within() -> bool {
    TRACES_ON.load(Ordering::Relaxed) && Context::map_current(|cx| cx.has_active_span())
}

/// A span this host made, or none: the OpenTelemetry context that holds it (with its
/// parent's baggage). The span ends when the last clone is dropped.
#[derive(Clone, Default)]
pub struct Traced(Option<Context>);

impl Traced {
    /// Not traced.
    pub fn none() -> Traced {
        Traced(None)
    }

    /// The current span, when it is one of this host's ([`within`]).
    pub fn current() -> Traced {
        Traced(within().then(Context::current))
    }

    /// Whether there is a span (spans are exported and its trace is kept).
    pub fn is_traced(&self) -> bool {
        self.0.is_some()
    }

    /// Sets an attribute of the span (nothing when there is none).
    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(cx) = &self.0 {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Marks the span as failed: `error.type` (a kind, never a message that may hold data)
    /// and the status `Error`.
    pub fn failed(&self, error_type: impl Into<opentelemetry::StringValue>) {
        if let Some(cx) = &self.0 {
            let span = cx.span();
            span.set_attribute(KeyValue::new("error.type", error_type.into()));
            span.set_status(Status::error(""));
        }
    }

    /// `f`, with the span current.
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _attached = self.0.clone().map(Context::attach);
        f()
    }

    /// The span current until the guard is dropped (the guard holds it open). Not `Send`:
    /// for a synchronous scope.
    pub fn entered(self) -> Option<opentelemetry::ContextGuard> {
        self.0.map(Context::attach)
    }

    /// `work` with the span current while it is polled (a step made inside it is its child).
    pub fn carry<F: std::future::Future>(&self, work: F) -> Carried<F> {
        // No async block around `work`: it would be moved once more (a debug build's stack
        // overflowed on a large request's future).
        match &self.0 {
            Some(cx) => Either::Left(work.with_context(cx.clone())),
            None => Either::Right(work),
        }
    }
}

/// `work` with the current span (if any) current while it is polled, wherever it runs: for
/// a task spawned to go on with a request's work.
pub fn carried<F: std::future::Future>(work: F) -> Carried<F> {
    Traced::current().carry(work)
}

/// A future [`Traced::carry`] made: `work`, with its span current while it is polled, or as
/// it is when there is none.
pub type Carried<F> = Either<opentelemetry::context::WithContext<F>, F>;

/// `span` started under `parent`, in a context of its own.
fn started(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    span: SpanBuilder,
    parent: &Context,
) -> Traced {
    let span = span.start_with_context(tracer, parent);
    Traced(Some(parent.with_span(span)))
}

/// The span `span` builds, where a request or a run enters this host (an MCP request's
/// server span, a chat request's, a run of the agent): a child of the current span when that
/// is traced; else, the root of this host's part of the trace `carrier` names (or of a new
/// one), made only if the sampler keeps that trace. None otherwise, and then nothing under
/// it is made either: a trace the sampler drops costs a request one check of its context.
pub fn entry(carrier: &Carrier<'_>, span: impl FnOnce() -> SpanBuilder) -> Traced {
    let Some(tracer) = tracer() else {
        return Traced::none();
    };
    if within() {
        return Context::map_current(|cx| started(tracer, span(), cx));
    }
    // The caller's context, read only if it sent one.
    let parent = match carrier.get("traceparent") {
        Some(_) => opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier)),
        None => Context::new(),
    };
    let decided = match DECIDE.get().map(|decide| decide(&parent)) {
        Some(None) => return Traced::none(),
        decided => decided.flatten(),
    };
    // A new trace's root span gets the id the sampler decided on (`RootIds`; the SDK asks
    // for a trace id only for a span with no parent).
    DECIDED_ON.set(decided);
    let traced = started(tracer, span(), &parent);
    DECIDED_ON.set(None);
    traced
}

/// A step's span (`validate`, `run`, a model's request...): a child of the current span when
/// that is traced ([`within`]); none otherwise, and `span` is not even called.
pub fn step(span: impl FnOnce() -> SpanBuilder) -> Traced {
    match tracer() {
        Some(tracer) if within() => Context::map_current(|cx| started(tracer, span(), cx)),
        _ => Traced::none(),
    }
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

/// The buckets of both histograms (seconds): the MCP conventions' advice. The SDK's default
/// ones are for milliseconds (0, 5, 10... 10,000): in seconds, every call would fall in one.
pub const DURATION_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

fn durations() -> &'static Durations {
    static DURATIONS: std::sync::OnceLock<Durations> = std::sync::OnceLock::new();
    DURATIONS.get_or_init(|| {
        let meter = opentelemetry::global::meter("toolhost");
        Durations {
            server: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("Duration of an MCP request as the server saw it.")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            client: meter
                .f64_histogram("mcp.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of an MCP request to an imported server.")
                .with_boundaries(DURATION_BOUNDS.to_vec())
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
    fn header<'h>(headers: &'h http::HeaderMap, key: &http::HeaderName) -> Option<&'h str> {
        let mut all = headers.get_all(key).iter();
        match (all.next(), all.next()) {
            (Some(one), None) => one.to_str().ok(),
            _ => None,
        }
    }
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        // Names made once: a header looked up by a string is parsed at each lookup.
        use http::HeaderName;
        const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
        const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
        const BAGGAGE: HeaderName = HeaderName::from_static("baggage");
        const FORWARDED: HeaderName = HeaderName::from_static(FORWARDED_BY);
        let (name, bound) = match key {
            "traceparent" => (TRACEPARENT, MAX_TRACEPARENT),
            "tracestate" => (TRACESTATE, MAX_TRACESTATE),
            "baggage" => (BAGGAGE, MAX_BAGGAGE),
            _ => return None,
        };
        // Forwarded: the replica that forwarded it continued the caller's trace in a span of
        // its own, and names that span in the headers (the body is sent as it came).
        if let Some(headers) = self.headers
            && headers.contains_key(FORWARDED)
            && headers.contains_key(TRACEPARENT)
        {
            return Self::header(headers, &name).filter(|v| v.len() <= bound);
        }
        let from_meta = (self.meta)
            .and_then(|meta| meta.get(key))
            .and_then(|value| value.as_str());
        let value = match from_meta {
            Some(value) => Some(value),
            // `_meta` names none: the HTTP header, if there is exactly one.
            None if self.meta.is_none_or(|meta| !meta.contains_key(key)) => {
                Self::header(self.headers?, &name)
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
pub fn sizes(span: &Traced, measure: impl FnOnce() -> (usize, usize)) {
    if !span.is_traced() || !RECORD_SIZES.load(Ordering::Relaxed) {
        return;
    }
    let (arguments, result) = measure();
    span.set("toolhost.arguments.size", arguments as i64);
    span.set("toolhost.result.size", result as i64);
}

/// The trace and span ids of the current span, as W3C writes them (32 and 16 hex digits),
/// when it is traced: for audit records and log lines.
pub fn current_ids() -> Option<(String, String)> {
    let context = current_context()?;
    Some((
        context.trace_id().to_string(),
        context.span_id().to_string(),
    ))
}

/// The current span's context, when it is traced: what the later rounds of a call that asks
/// link to.
pub fn current_context() -> Option<SpanContext> {
    if !within() {
        return None;
    }
    Context::map_current(|cx| {
        let span_context = cx.span().span_context().clone();
        span_context.is_valid().then_some(span_context)
    })
}

/// Marks the current span (the server span of a follow-up that answers a tool's question) as
/// round `round` of the call: `toolhost.round`, and a link to `origin`, the span of the
/// request that started the call (the call itself runs on in that request's trace, under
/// that span, whichever trace each follow-up belongs to).
pub fn follow_up(origin: Option<&SpanContext>, round: u32) {
    if !within() {
        return;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        span.set_attribute(KeyValue::new("toolhost.round", i64::from(round)));
        if let Some(origin) = origin {
            let kind = KeyValue::new("toolhost.link", "started-by");
            span.add_link(origin.clone(), vec![kind]);
        }
    });
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
        let span = entry(&carrier, || unreachable!("no builder is made"));
        assert!(!span.is_traced());
        assert_eq!(span.in_scope(current_ids), None);
        assert!(!step(|| unreachable!("no builder is made")).is_traced());
    }
}
