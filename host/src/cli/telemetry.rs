//! telemetry: traces and metrics exported over OTLP (issue #57), set up when the process
//! starts from OpenTelemetry's standard variables and `[telemetry]` of `toolhost.toml`
//! ([`check`]: a variable that is set wins over the file), and nothing at all when neither
//! names an endpoint.
//!
//! What is read, and by whom: `OTEL_SDK_DISABLED` and which of `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `..._TRACES_ENDPOINT` and `..._METRICS_ENDPOINT` are set, here; the endpoint,
//! `OTEL_EXPORTER_OTLP_HEADERS` (its values never logged) and `OTEL_EXPORTER_OTLP_TIMEOUT` by
//! `opentelemetry-otlp`; `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` by the SDK's
//! resource (the service is `toolhost` unless named); `OTEL_TRACES_SAMPLER` / `_ARG` by the
//! SDK's configuration (parent-based, always on, by default), a sampler asked once where a
//! request enters ([`toolhost::trace::entry`]), the provider's own keeping all that is made;
//! `OTEL_BSP_*` by its batch processor. Export is OTLP over HTTP/protobuf
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
    BatchSpanProcessor, Sampler, SdkTracerProvider, ShouldSample, Span, SpanData, SpanExporter,
    SpanProcessor,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolhost::config::access::Unset;
use toolhost::config::telemetry::{Sampler as Written, TelemetrySection};
use toolhost::config::{Diagnostic, SourceFile};
use toolhost::trace::DROPPED_SPANS;

/// The providers of a process that exports traces or metrics, to flush when it ends.
pub(crate) struct Telemetry {
    provider: Option<SdkTracerProvider>,
    meters: Option<opentelemetry_sdk::metrics::SdkMeterProvider>,
}

impl Drop for Telemetry {
    /// What is queued is sent, within the processor's own timeout.
    fn drop(&mut self) {
        if let Some(provider) = &self.provider {
            let _ = provider.shutdown_with_timeout(Duration::from_secs(5));
        }
        if let Some(meters) = &self.meters {
            let _ = meters.shutdown_with_timeout(Duration::from_secs(5));
        }
    }
}

/// A variable's value, when set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether a signal (`TRACES`, `METRICS`) has an endpoint: its own variable or the general
/// one.
fn exported(signal: &str) -> bool {
    var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).is_some()
}

/// `[telemetry]` of `toolhost.toml`, checked: what the environment's variables leave unsaid.
/// No `Debug`: it holds the collector's headers, credentials that are never printed.
#[derive(Clone)]
pub(crate) struct FromFile {
    /// The collector's base address (`/v1/traces`, `/v1/metrics` added).
    endpoint: Option<String>,
    /// The headers `headers-env` holds, as written there.
    headers: Option<String>,
    service_name: Option<String>,
    sampler: Option<Sampler>,
    /// Whether metrics are exported too (true unless the file says false).
    metrics: bool,
    /// Whether a call's span has the sizes of its arguments and result.
    record_sizes: bool,
}

/// No `[telemetry]`: the variables alone say what is exported.
impl Default for FromFile {
    fn default() -> Self {
        FromFile {
            endpoint: None,
            headers: None,
            service_name: None,
            sampler: None,
            metrics: true,
            record_sizes: false,
        }
    }
}

/// `section` checked against `source`, each mistake an error at its place; the variable
/// `headers-env` names read through `env` (one that is not set is what `unset` says).
pub(crate) fn check(
    section: &TelemetrySection,
    source: &SourceFile,
    env: &dyn Fn(&str) -> Option<String>,
    mut unset: Unset<'_>,
    errors: &mut Vec<Diagnostic>,
) -> FromFile {
    // Said with the rest: the CLI puts a file's errors in file order.
    let mut not_set = None;
    let mut error = |span: std::ops::Range<usize>, message: String| {
        errors.push(Diagnostic::new(source.at(span), message));
    };
    let endpoint = section.endpoint.as_ref().and_then(|endpoint| {
        let text = endpoint.get_ref().trim_end_matches('/');
        match url::Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.password().is_none() => {
                Some(text.to_string())
            }
            Ok(_) => {
                error(
                    endpoint.span(),
                    format!(
                        "`{text}` is no collector's address: write http(s)://host:port \
                         (OTLP over HTTP, port 4318 by default), without a password \
                         (credentials go in the variable `headers-env` names)"
                    ),
                );
                None
            }
            Err(e) => {
                error(endpoint.span(), format!("`{text}` is not a URL: {e}"));
                None
            }
        }
    });
    let headers = section.headers_env.as_ref().and_then(|name| {
        let Some(value) = env(name.get_ref().as_str()) else {
            let at = source.at(name.span());
            not_set = unset.not_set(at, "headers-env", name.get_ref().as_str());
            return None;
        };
        let malformed = (value.split(',')).any(|pair| {
            !pair.trim().is_empty()
                && pair
                    .split_once('=')
                    .is_none_or(|(key, _)| key.trim().is_empty())
        });
        if malformed {
            // Its value is a secret: said by name, never shown.
            error(
                name.span(),
                format!(
                    "`{}` does not hold headers as key=value pairs separated by commas",
                    name.get_ref()
                ),
            );
            return None;
        }
        Some(value)
    });
    let ratio = section.sampler_ratio.as_ref().and_then(|ratio| {
        let uses_ratio = section.sampler.as_ref().is_some_and(|s| {
            matches!(
                s.get_ref(),
                Written::TraceIdRatio | Written::ParentBasedTraceIdRatio
            )
        });
        if !(0.0..=1.0).contains(ratio.get_ref()) {
            error(
                ratio.span(),
                format!(
                    "sampler-ratio is a share of traces, 0 to 1; got {}",
                    ratio.get_ref()
                ),
            );
            None
        } else if !uses_ratio {
            error(
                ratio.span(),
                "sampler-ratio applies to the sampler `traceidratio` or \
                 `parentbased_traceidratio`: set `sampler` to one of them"
                    .to_string(),
            );
            None
        } else {
            Some(*ratio.get_ref())
        }
    });
    let sampler = section.sampler.as_ref().map(|sampler| {
        let ratio = ratio.unwrap_or(1.0);
        let parent = |root: Sampler| Sampler::ParentBased(Box::new(root));
        match sampler.get_ref() {
            Written::AlwaysOn => Sampler::AlwaysOn,
            Written::AlwaysOff => Sampler::AlwaysOff,
            Written::TraceIdRatio => Sampler::TraceIdRatioBased(ratio),
            Written::ParentBasedAlwaysOn => parent(Sampler::AlwaysOn),
            Written::ParentBasedAlwaysOff => parent(Sampler::AlwaysOff),
            Written::ParentBasedTraceIdRatio => parent(Sampler::TraceIdRatioBased(ratio)),
        }
    });
    errors.extend(not_set);
    FromFile {
        endpoint,
        headers,
        service_name: section.service_name.as_ref().map(|n| n.get_ref().clone()),
        sampler,
        metrics: section.metrics.unwrap_or(true),
        record_sizes: section.record_sizes.unwrap_or(false),
    }
}

/// The telemetry the environment and `[telemetry]` (`file`) ask for, a variable that is set
/// winning over the file: `None` when neither names an endpoint or `OTEL_SDK_DISABLED` is
/// `true`; traces when `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
/// the file's `endpoint` names one, metrics when one of those or
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` does (and neither `metrics = false` nor
/// `OTEL_METRICS_EXPORTER=none` says no); an error that says what is wrong otherwise.
pub(crate) fn start(file: &FromFile) -> Result<Option<Telemetry>, String> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let in_file = file.endpoint.is_some();
    let traces = exported("TRACES") || in_file;
    let metrics = (exported("METRICS") || in_file)
        && file.metrics
        && var("OTEL_METRICS_EXPORTER").is_none_or(|v| v != "none");
    if !traces && !metrics {
        return Ok(None);
    }
    (toolhost::trace::RECORD_SIZES).store(file.record_sizes, Ordering::Relaxed);
    for signal in ["TRACES", "METRICS"] {
        let protocol = var(&format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"))
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        if protocol != "http/protobuf" {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL is `{protocol}`: toolhost exports OTLP over \
                 http/protobuf only (a collector's port 4318); unset it or set http/protobuf"
            ));
        }
    }
    let mut resource = opentelemetry_sdk::Resource::builder();
    if var("OTEL_SERVICE_NAME").is_none() && !resource_names_service() {
        let name = file.service_name.as_deref().unwrap_or("toolhost");
        resource = resource.with_service_name(name.to_string());
    }
    let resource = resource.build();
    let meters = match metrics {
        true => Some(meters(resource.clone(), file)?),
        false => None,
    };
    let provider = match traces {
        true => Some(spans(resource, file)?),
        false => None,
    };
    Ok(Some(Telemetry { provider, meters }))
}

/// The spans' provider: OTLP/HTTP through a bounded batch processor, and the W3C propagators
/// (trace context and baggage) for what comes in and goes out.
fn spans(
    resource: opentelemetry_sdk::Resource,
    file: &FromFile,
) -> Result<SdkTracerProvider, String> {
    let exporter = configured(
        opentelemetry_otlp::SpanExporter::builder().with_http(),
        "TRACES",
        file,
    )
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
    // The sampler decides once, where a request enters (`toolhost::trace::entry`): a trace
    // it drops has no span made at all. What is made is kept.
    let sampler: Box<dyn ShouldSample> = match (&file.sampler, var("OTEL_TRACES_SAMPLER")) {
        (Some(sampler), None) => Box::new(sampler.clone()),
        // The variables (or the default, parent-based always on), as the SDK reads them.
        _ => opentelemetry_sdk::trace::Config::default().sampler,
    };
    toolhost::trace::set_sampler(Box::new(move |parent| keeps(&*sampler, parent)));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .with_sampler(Sampler::AlwaysOn)
        .with_id_generator(toolhost::trace::RootIds::default())
        .build();
    toolhost::trace::set_tracer(provider.tracer("toolhost"));
    opentelemetry::global::set_text_map_propagator(
        opentelemetry::propagation::TextMapCompositePropagator::new(vec![
            Box::new(opentelemetry_sdk::propagation::TraceContextPropagator::new()),
            Box::new(opentelemetry_sdk::propagation::BaggagePropagator::new()),
        ]),
    );
    Ok(provider)
}

/// The MCP conventions' metrics (`mcp.server.operation.duration`,
/// `mcp.client.operation.duration`) over OTLP, every `OTEL_METRIC_EXPORT_INTERVAL` (60 s by
/// default), unless `OTEL_METRICS_EXPORTER` is `none`. `/metrics` (Prometheus) is there
/// either way.
fn meters(
    resource: opentelemetry_sdk::Resource,
    file: &FromFile,
) -> Result<opentelemetry_sdk::metrics::SdkMeterProvider, String> {
    let exporter = configured(
        opentelemetry_otlp::MetricExporter::builder().with_http(),
        "METRICS",
        file,
    )
    .build()
    .map_err(|e| format!("the OTLP metric exporter cannot be made: {e}"))?;
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter).build();
    let meters = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_meter_provider(meters.clone());
    (toolhost::trace::METRICS_ON).store(true, Ordering::Relaxed);
    Ok(meters)
}

/// An exporter's builder for `signal` (`TRACES`, `METRICS`) given the file's endpoint and
/// headers where no variable names them (a variable wins; the exporter reads it itself).
fn configured<B>(builder: B, signal: &str, file: &FromFile) -> B
where
    B: opentelemetry_otlp::WithExportConfig + opentelemetry_otlp::WithHttpConfig,
{
    let mut builder = builder;
    if let Some(endpoint) = &file.endpoint
        && !exported(signal)
    {
        let path = signal.to_ascii_lowercase();
        builder = builder.with_endpoint(format!("{endpoint}/v1/{path}"));
    }
    if let Some(headers) = &file.headers
        && var("OTEL_EXPORTER_OTLP_HEADERS").is_none()
    {
        let pairs = (headers.split(',')).filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            Some((key.trim().to_string(), value.trim().to_string()))
        });
        builder = builder.with_headers(pairs.collect());
    }
    builder
}

/// Whether `sampler` keeps a trace entering here, continuing `parent` (an empty context: a
/// new trace, its id drawn as the SDK draws one): the id it decided on when it does, which a
/// new trace's root span is then given (`toolhost::trace::RootIds`).
fn keeps(
    sampler: &dyn ShouldSample,
    parent: &opentelemetry::Context,
) -> Option<opentelemetry::trace::TraceId> {
    use opentelemetry::trace::{SpanKind, TraceContextExt};
    use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
    let context = parent.span().span_context().clone();
    let (parent, trace_id) = match context.is_valid() {
        true => (Some(parent), context.trace_id()),
        false => (None, RandomIdGenerator::default().new_trace_id()),
    };
    let decided = sampler.should_sample(parent, trace_id, "", &SpanKind::Server, &[], &[]);
    (decided.decision == opentelemetry_sdk::trace::SamplingDecision::RecordAndSample)
        .then_some(trace_id)
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
        toolhost::trace::exported(sent.as_ref().map(|_| ()).map_err(|e| e.to_string()));
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
