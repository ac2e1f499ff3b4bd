//! Logging on stderr (stdout carries results and, under `serve`, the MCP protocol): text by
//! default, or one JSON object per line with `--log-format json` / `TOOLHOST_LOG_FORMAT=json`
//! for log shippers; and the relay that `serve` forwards to MCP sessions.
//!
//! A JSON line has `time` (RFC 3339, UTC), `level`, `target` and `message`, the event's own
//! fields, and the fields of the spans it happened in: `session`, `tool` and `ensemble` for
//! anything logged during a call, `invoker` and `session` on a plugin's own lines; and, in a
//! traced request (docs/traces.md), its `trace_id` and `span_id`.
//!
//! What the commands themselves write on stderr (the address `serve` listens on, a compile
//! still running, a refused ensemble, the last error) goes through [`say`], so that in JSON
//! every line on stderr is one JSON object too (target `toolhost`). `chat`'s conversation
//! on a terminal is the one exception: it is the program's face, not its log.

use serde_json::{Map, Value};
use std::io::{IsTerminal, Write};
use toolhost::mcp::log::LogRelay;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterExt, LevelFilter};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// For people: one line per event, coloured on a terminal.
    #[default]
    Text,
    /// For log shippers: one JSON object per line.
    Json,
}

/// The filter of each verbosity: `-v` and `-vv` raise toolhost's own lines and its plugins'
/// (target `plugin`, bounded per call) only. Other crates stay at warnings until `-vvv`: their info lines are per message (rmcp logs every
/// notification it receives), so an imported server's flood would otherwise write what it
/// sends to the log, 120 to 340 MB in seconds at `-v`. `TOOLHOST_LOG` replaces the filter.
fn default_filter(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn,toolhost_runtime=info",
        1 => "warn,toolhost=info,plugin=info",
        2 => "warn,toolhost=debug,plugin=debug",
        _ => "debug,cranelift=info,wasmtime=info",
    }
}

/// The format chosen at start, for what [`say`] writes.
static FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// Writes one line of a command's own on stderr: `line` as it is in text; in JSON, an object
/// with `time`, `level`, `target` (`toolhost`) and `message` (the line without a leading
/// `error: `, `warning: ` or `toolhost: `, which the level says).
pub(crate) fn say(level: tracing::Level, line: &str) {
    let mut stderr = std::io::stderr().lock();
    if !is_json() {
        let _ = writeln!(stderr, "{line}");
        return;
    }
    let message = ["error: ", "warning: ", "toolhost: "]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))
        .unwrap_or(line);
    let mut object = Map::new();
    object.insert("time".into(), now().into());
    object.insert("level".into(), level.as_str().into());
    object.insert("target".into(), "toolhost".into());
    object.insert("message".into(), message.into());
    let _ = writeln!(stderr, "{}", Value::Object(object));
}

/// Whether lines on stderr are JSON (then nothing is drawn on a terminal either).
pub(crate) fn is_json() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Installs the stderr logger and returns the relay for MCP sessions.
pub(crate) fn init(verbose: u8, format: LogFormat) -> LogRelay {
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = FORMAT.set(format);
    let relay = LogRelay::default();
    subscriber(verbose, format, &relay).init();
    relay
}

/// The logger of `init`: stderr's lines at `verbose` in `format`, and `relay`. (Spans that
/// are exported are OpenTelemetry's own, not `tracing`'s: `toolhost::trace`.)
fn subscriber(
    verbose: u8,
    format: LogFormat,
    relay: &LogRelay,
) -> impl Subscriber + Send + Sync + 'static {
    use tracing_subscriber::layer::SubscriberExt;
    let default = default_filter(verbose);
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
    };
    // The layers present, and no other: an absent layer (`Option::None`) among layers with
    // filters of their own would enable every span callsite, so that each span of a call
    // would be made and dropped.
    let mut layers: Vec<Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>> = Vec::new();
    match format {
        LogFormat::Text => layers.push(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_target(false)
                .with_filter(filter())
                .boxed(),
        ),
        // The `call` span always: its fields go on every line logged during a call, whatever
        // the level of the line.
        LogFormat::Json => layers.push(
            JsonLines
                .with_filter(
                    filter().or(tracing_subscriber::filter::filter_fn(|metadata| {
                        metadata.is_span()
                            && metadata.name() == "call"
                            && metadata.target() == "toolhost_core::invoke"
                    })
                    .with_max_level_hint(LevelFilter::INFO)),
                )
                .boxed(),
        ),
    }
    // The relay sees host and plugin events down to info, and no other crate's; each session
    // filters further. No spans: it does not read them, and a call's span then costs nothing
    // unless a log line shows it. The filters say the most verbose level they take: without
    // it every crate's `log` records at any level (wasmtime's debug lines at each
    // instantiation) would be turned into events only to be filtered out.
    layers.push(
        relay
            .clone()
            .with_filter(
                tracing_subscriber::filter::filter_fn(|metadata| {
                    metadata.is_event()
                        && *metadata.level() <= tracing::Level::INFO
                        && toolhost::mcp::log::relayed(metadata.target())
                })
                .with_max_level_hint(LevelFilter::INFO),
            )
            .boxed(),
    );
    tracing_subscriber::registry().with(layers)
}

/// Writes each event as one JSON object on one line of stderr.
struct JsonLines;

/// A span's or an event's fields, as JSON.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            Value::String(format!("{value:?}")),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_string(), Value::String(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), value.into());
    }
}

impl<S> Layer<S> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let mut fields = Fields::default();
        attributes.record(&mut fields);
        if let Some(span) = context.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        if let Some(span) = context.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, context: Context<'_, S>) {
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert("time".into(), now().into());
        line.insert("level".into(), metadata.level().as_str().into());
        line.insert("target".into(), metadata.target().into());
        // Outer spans first: an inner span's field, then the event's own, win.
        if let Some(scope) = context.event_scope(event) {
            for span in scope.from_root() {
                if let Some(fields) = span.extensions().get::<Fields>() {
                    line.extend(fields.0.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        line.extend(fields.0);
        line.entry("message").or_insert_with(|| "".into());
        // Inside a traced request: the ids that find its trace (the span current on this
        // thread as the line is written).
        if let Some((trace_id, span_id)) = toolhost::trace::current_ids() {
            line.insert("trace_id".into(), trace_id.into());
            line.insert("span_id".into(), span_id.into());
        }
        let Ok(mut bytes) = serde_json::to_vec(&Value::Object(line)) else {
            return;
        };
        bytes.push(b'\n');
        // One write per line: lines from several threads do not interleave.
        let _ = std::io::stderr().lock().write_all(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logger_takes_no_record_more_verbose_than_its_filters_show() {
        // Its most verbose level is what `log` records are let through at (wasmtime writes
        // debug records at every instantiation): info unless a -v asks for more.
        let hint =
            |verbose, format| subscriber(verbose, format, &LogRelay::default()).max_level_hint();
        for format in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(hint(0, format), Some(LevelFilter::INFO), "{format:?}");
            assert_eq!(hint(1, format), Some(LevelFilter::INFO), "{format:?}");
            assert_eq!(hint(2, format), Some(LevelFilter::DEBUG), "{format:?}");
        }
    }

    #[test]
    fn a_span_no_layer_takes_is_never_made() {
        // A span no line shows is a disabled callsite, never an entry of the registry (a
        // `None` layer in the wrong place enabled them all, at a cost to every call).
        for format in [LogFormat::Text, LogFormat::Json] {
            let logger = subscriber(0, format, &LogRelay::default());
            tracing::subscriber::with_default(logger, || {
                let other = tracing::info_span!(target: "another_crate", "request");
                assert!(other.is_disabled(), "{format:?}");
            });
        }
    }
}
