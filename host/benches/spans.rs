//! What a traced call's spans cost the thread that makes them (issue #57): the four spans of a
//! session-less `tools/call` (the server span with the MCP conventions' attributes, then
//! `validate`, `quota` and `run` under it), made the way the host makes them, against the same
//! spans made through `tracing-opentelemetry` (how the host made them before), in one run.
//! Both end in the same tracer provider, whose processor drops each span as it ends: what the
//! exporter's thread costs (the batch, the protobuf, the HTTP request) is `http-load.py`'s to
//! measure, not this.
//!
//! Run: `cargo bench -p toolhost --bench spans`.

use criterion::{Criterion, criterion_group, criterion_main};
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
use std::time::Duration;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

/// A processor that drops every span as it ends.
#[derive(Debug)]
struct Dropping;

impl SpanProcessor for Dropping {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
    fn on_end(&self, span: SpanData) {
        std::hint::black_box(span);
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn provider() -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_span_processor(Dropping)
        .build()
}

const TARGET: &str = "trace";

/// The four spans through `tracing` and `tracing-opentelemetry`, as the host made them.
fn through_tracing() {
    let server = tracing::info_span!(
        target: TARGET,
        "mcp.server",
        otel.name = %format!("{} {}", "tools/call", "echo"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = "tools/call",
        gen_ai.tool.name = "echo",
        gen_ai.operation.name = "execute_tool",
        jsonrpc.request.id = %7,
        mcp.protocol.version = "2026-07-28",
        network.transport = "tcp",
        network.protocol.name = "http",
        error.type = tracing::field::Empty,
        toolhost.identity.kind = tracing::field::Empty,
        toolhost.identity.name = tracing::field::Empty,
    );
    let _server = server.enter();
    server.record("toolhost.identity.kind", "anonymous");
    {
        let _validate = tracing::info_span!(target: TARGET, "validate").entered();
    }
    {
        let _quota = tracing::info_span!(target: TARGET, "quota").entered();
    }
    {
        let _run = tracing::info_span!(
            target: TARGET,
            "run",
            otel.name = %format!("run {}", "echo"),
            gen_ai.tool.name = %"echo",
            toolhost.ensemble = %"echo",
            toolhost.component = %"0123456789abcdef",
        )
        .entered();
    }
}

/// The same four spans made with the SDK's tracer directly.
fn through_sdk(tracer: &opentelemetry_sdk::trace::SdkTracer) {
    let server = tracer
        .span_builder("tools/call echo")
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("gen_ai.tool.name", "echo".to_string()),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("jsonrpc.request.id", "7".to_string()),
            KeyValue::new("mcp.protocol.version", "2026-07-28"),
            KeyValue::new("network.transport", "tcp"),
            KeyValue::new("network.protocol.name", "http"),
        ])
        .start(tracer);
    let server = opentelemetry::Context::current_with_span(server);
    let _server = server.clone().attach();
    server
        .span()
        .set_attribute(KeyValue::new("toolhost.identity.kind", "anonymous"));
    for name in ["validate", "quota"] {
        let span = tracer
            .span_builder(name)
            .start_with_context(tracer, &server);
        let _step = opentelemetry::Context::current_with_span(span).attach();
    }
    let run = tracer
        .span_builder("run echo")
        .with_attributes([
            KeyValue::new("gen_ai.tool.name", "echo".to_string()),
            KeyValue::new("toolhost.ensemble", "echo".to_string()),
            KeyValue::new("toolhost.component", "0123456789abcdef".to_string()),
        ])
        .start_with_context(tracer, &server);
    let _run = opentelemetry::Context::current_with_span(run).attach();
}

fn spans(c: &mut Criterion) {
    let mut group = c.benchmark_group("a call's four spans");
    let provider = provider();
    let tracer = provider.tracer("toolhost");
    group.bench_function("sdk directly", |b| b.iter(|| through_sdk(&tracer)));
    // The host's logger before: a text layer at info (which takes none of these spans) and
    // the exporter's layer for the spans of TARGET.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("toolhost"))
        .with_threads(false)
        .with_location(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.is_span() && m.target() == TARGET
        }));
    let text = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::registry().with(text).with(layer);
    tracing::subscriber::with_default(subscriber, || {
        group.bench_function("tracing-opentelemetry", |b| b.iter(through_tracing));
    });
    group.finish();
}

criterion_group!(benches, spans);
criterion_main!(benches);
