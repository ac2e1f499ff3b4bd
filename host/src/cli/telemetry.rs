//! telemetry: traces exported over OTLP (issue #57), set up from OpenTelemetry's standard
//! variables when the process starts, and nothing at all when none names an endpoint.
//!
//! What is read, and by whom: `OTEL_SDK_DISABLED` and whether `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, here; the endpoint, `OTEL_EXPORTER_OTLP_HEADERS`
//! (its values never logged) and `OTEL_EXPORTER_OTLP_TIMEOUT` by `opentelemetry-otlp`;
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` by the SDK's resource (the service is
//! `toolhost` unless named); `OTEL_TRACES_SAMPLER` / `_ARG` by the SDK (parent-based, always
//! on, by default); `OTEL_BSP_*` by its batch processor. Export is OTLP over HTTP/protobuf
//! (`OTEL_EXPORTER_OTLP_PROTOCOL` `http/protobuf`, the default); gRPC is not built in.
//!
//! The queue of spans waiting to be sent is bounded by `OTEL_BSP_MAX_QUEUE_SIZE` (2,048 by
//! default) here as well as in the SDK: a span ended while as many wait is dropped and
//! counted ([`toolhost::trace::DROPPED_SPANS`], `toolhost_trace_spans_dropped` on
//! `/metrics`), so a collector that is down, slow or answers garbage holds at most that many
//! spans and never slows a call: spans are handed to the processor's own thread, which
//! alone waits on the collector (each export within `OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s).
//!
//! Metrics go the same way ([`meters`]): the MCP conventions' operation durations, by method,
//! tool and error type (labels bounded by the catalog), exported periodically beside the
//! Prometheus `/metrics`.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolhost::trace::DROPPED_SPANS;

/// The tracer of a process that exports, and the providers to flush when it ends.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    meters: Option<opentelemetry_sdk::metrics::SdkMeterProvider>,
    pub(crate) tracer: opentelemetry_sdk::trace::Tracer,
}

impl Drop for Telemetry {
    /// What is queued is sent, within the processor's own timeout.
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(5));
        if let Some(meters) = &self.meters {
            let _ = meters.shutdown_with_timeout(Duration::from_secs(5));
        }
    }
}

/// A variable's value, when set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The telemetry the environment asks for: `None` when no endpoint is named or
/// `OTEL_SDK_DISABLED` is `true`; an error that says what is wrong otherwise.
pub(crate) fn from_env() -> Result<Option<Telemetry>, String> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    if var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    if protocol != "http/protobuf" {
        return Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL is `{protocol}`: toolhost exports OTLP over \
             http/protobuf only (a collector's port 4318); unset it or set http/protobuf"
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("the OTLP exporter cannot be made: {e}"))?;
    let max_queue = var("OTEL_BSP_MAX_QUEUE_SIZE")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2048);
    let queued = Arc::new(AtomicUsize::new(0));
    let exporter = Counted {
        inner: exporter,
        queued: Arc::clone(&queued),
    };
    let processor = Bounded {
        inner: BatchSpanProcessor::builder(exporter).build(),
        queued,
        max_queue,
    };
    let mut resource = opentelemetry_sdk::Resource::builder();
    if var("OTEL_SERVICE_NAME").is_none() && !resource_names_service() {
        resource = resource.with_service_name("toolhost");
    }
    let resource = resource.build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.clone())
        .build();
    let meters = meters(resource)?;
    opentelemetry::global::set_text_map_propagator(
        opentelemetry::propagation::TextMapCompositePropagator::new(vec![
            Box::new(opentelemetry_sdk::propagation::TraceContextPropagator::new()),
            Box::new(opentelemetry_sdk::propagation::BaggagePropagator::new()),
        ]),
    );
    let tracer = provider.tracer("toolhost");
    Ok(Some(Telemetry {
        provider,
        meters,
        tracer,
    }))
}

/// The MCP conventions' metrics (`mcp.server.operation.duration`,
/// `mcp.client.operation.duration`) over OTLP, every `OTEL_METRIC_EXPORT_INTERVAL` (60 s by
/// default), unless `OTEL_METRICS_EXPORTER` is `none`. `/metrics` (Prometheus) is there
/// either way.
fn meters(
    resource: opentelemetry_sdk::Resource,
) -> Result<Option<opentelemetry_sdk::metrics::SdkMeterProvider>, String> {
    if var("OTEL_METRICS_EXPORTER").is_some_and(|v| v == "none") {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("the OTLP metric exporter cannot be made: {e}"))?;
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter).build();
    let meters = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_meter_provider(meters.clone());
    (toolhost::trace::METRICS_ON).store(true, Ordering::Relaxed);
    Ok(Some(meters))
}

/// Whether `OTEL_RESOURCE_ATTRIBUTES` names the service itself.
fn resource_names_service() -> bool {
    var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
        (attributes.split(',')).any(|pair| pair.trim_start().starts_with("service.name="))
    })
}

/// The batch processor, with the spans it holds counted and bounded: a span ended while
/// `max_queue` wait is dropped and counted.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    queued: Arc<AtomicUsize>,
    max_queue: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let taken = (self.queued).fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < self.max_queue).then_some(n + 1)
        });
        if taken.is_err() {
            DROPPED_SPANS.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, giving back the places of the spans it sent (or failed to send).
#[derive(Debug)]
struct Counted {
    inner: opentelemetry_otlp::SpanExporter,
    queued: Arc<AtomicUsize>,
}

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let sent = self.inner.export(batch).await;
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        sent
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}
