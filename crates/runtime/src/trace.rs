//! trace: the current span's W3C trace context, for a request this host makes on a call's
//! behalf (an imported server's `_meta`, a model's request, a component's `wasi:http`
//! request). The spans themselves are `toolhost_core::trace`'s; this sits in the runtime so
//! that a component's outgoing requests, made here, carry it too. `None` (and nothing
//! computed) when nothing is traced.

use opentelemetry::trace::TraceContextExt;

/// The current span's trace context as W3C fields (`traceparent`, and `tracestate` and
/// `baggage` when there are any), for a request this one makes (an imported server's
/// `_meta`); `None` when nothing is traced.
pub fn injected() -> Option<serde_json::Map<String, serde_json::Value>> {
    // Only a traced request attaches a context with a span (`toolhost_core::trace`).
    opentelemetry::Context::map_current(|context| {
        if !context.has_active_span() {
            return None;
        }
        let mut fields = Fields::default();
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(context, &mut fields)
        });
        (!fields.0.is_empty()).then_some(fields.0)
    })
}

/// What a propagator writes, as JSON fields.
#[derive(Default)]
struct Fields(serde_json::Map<String, serde_json::Value>);

impl opentelemetry::propagation::Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        self.0
            .insert(key.to_string(), serde_json::Value::String(value));
    }
}
