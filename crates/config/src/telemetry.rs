//! `[telemetry]` of `toolhost.toml`, as serde reads it: where traces and metrics go over OTLP
//! (docs/traces.md), the same settings OpenTelemetry's standard variables give. A variable
//! that is set wins over the file; headers, which hold a collector's credentials, are read
//! only from the environment. Checked by the host's `check` (`host::cli::telemetry`).

use crate::names::EnvVarName;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `[telemetry]` of `toolhost.toml`. Without it (and without the `OTEL_` variables) nothing is
/// exported and nothing is measured for export.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TelemetrySection {
    /// The collector's OTLP/HTTP address, `http(s)://host:4318` (`/v1/traces` and
    /// `/v1/metrics` are added), as `OTEL_EXPORTER_OTLP_ENDPOINT` gives it.
    #[schemars(with = "Option<String>")]
    pub endpoint: Option<Spanned<String>>,
    /// The environment variable holding the headers sent with each export, `key=value` pairs
    /// separated by commas (an `authorization`, say), as `OTEL_EXPORTER_OTLP_HEADERS` does.
    #[schemars(with = "Option<EnvVarName>")]
    pub headers_env: Option<Spanned<EnvVarName>>,
    /// The service the spans and metrics are of (`OTEL_SERVICE_NAME`; default `toolhost`).
    #[schemars(with = "Option<String>")]
    pub service_name: Option<Spanned<String>>,
    /// Which traces are kept (`OTEL_TRACES_SAMPLER`; default `parentbased_always_on`).
    #[schemars(with = "Option<Sampler>")]
    pub sampler: Option<Spanned<Sampler>>,
    /// The share of traces kept, 0 to 1, for the `traceidratio` samplers
    /// (`OTEL_TRACES_SAMPLER_ARG`; default 1).
    #[schemars(with = "Option<f64>")]
    pub sampler_ratio: Option<Spanned<f64>>,
    /// Whether the MCP operation durations are exported too (default true;
    /// `OTEL_METRICS_EXPORTER=none` says false).
    pub metrics: Option<bool>,
    /// Whether a call's span records the sizes of its arguments and result, in bytes (default
    /// false). Never their contents.
    pub record_sizes: Option<bool>,
}

/// A sampler, as OpenTelemetry's `OTEL_TRACES_SAMPLER` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Sampler {
    #[serde(rename = "always_on")]
    AlwaysOn,
    #[serde(rename = "always_off")]
    AlwaysOff,
    #[serde(rename = "traceidratio")]
    TraceIdRatio,
    #[serde(rename = "parentbased_always_on")]
    ParentBasedAlwaysOn,
    #[serde(rename = "parentbased_always_off")]
    ParentBasedAlwaysOff,
    #[serde(rename = "parentbased_traceidratio")]
    ParentBasedTraceIdRatio,
}
