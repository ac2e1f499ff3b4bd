//! invoke: one call, the single path that the CLI, the MCP server and the agent loop share.
//!
//! lookup in a catalog snapshot -> allow/deny -> parse and validate the arguments (every
//! violation, with its JSON pointer) -> dedup (single-flight, per session) -> run in a fresh
//! instance -> audit. Every failure is a typed [`CallError`]; none of them ends the host.

mod dedup;

pub use dedup::{DedupCache, DedupKey, canonical_json};

use crate::audit::{self, AuditLog, AuditRecord};
use crate::catalog::{Backend, Catalog, LiveCatalog, Tool};
use crate::config::DedupMode;
use crate::runtime::{RunError, Runtime, ToolFailure};
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The kinds of failure a call can end in, as callers and the model see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// No enabled tool has that name.
    UnknownTool,
    /// The caller's allow/deny lists refuse the tool.
    Denied,
    /// Malformed JSON, a schema violation, or the plugin's own `invalid-arguments`.
    InvalidArguments,
    /// The tool ran past its `timeout-ms`.
    Timeout,
    /// Memory or output size limit reached.
    ResourceLimit,
    /// A trap: panic, stack overflow, abort.
    Crashed,
    /// The tool reached for something it was not granted.
    CapabilityDenied,
    /// The plugin's own `failed` error.
    ToolError,
    /// The invoker's `max-concurrency` calls are running and `max-queue` are waiting, or
    /// the call's sandbox could not be set up.
    Busy,
}

impl ErrorKind {
    /// The kebab-case name used in JSON output and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTool => "unknown-tool",
            ErrorKind::Denied => "denied",
            ErrorKind::InvalidArguments => "invalid-arguments",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ResourceLimit => "resource-limit",
            ErrorKind::Crashed => "crashed",
            ErrorKind::CapabilityDenied => "capability-denied",
            ErrorKind::ToolError => "tool-error",
            ErrorKind::Busy => "busy",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One schema violation: where in the arguments, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// A JSON pointer into the arguments; `""` is the arguments object itself.
    pub pointer: String,
    pub message: String,
}

/// Why a call failed, with a message written for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct CallError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
}

impl CallError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CallError {
            kind,
            message: message.into(),
            violations: Vec::new(),
        }
    }
}

/// The arguments of a call, as text (checked here) or as a value already parsed.
#[derive(Debug, Clone)]
pub enum Arguments {
    Text(String),
    Value(Value),
}

impl From<Value> for Arguments {
    fn from(value: Value) -> Self {
        Arguments::Value(value)
    }
}

impl From<&str> for Arguments {
    fn from(text: &str) -> Self {
        Arguments::Text(text.to_string())
    }
}

/// Which tools a caller (an agent run, an MCP session) may use. Patterns are tool names, or
/// a prefix ending in `*`. Deny wins over allow; no allow list allows everything.
#[derive(Debug, Clone, Default)]
pub struct CallPolicy {
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
}

impl CallPolicy {
    fn matches(pattern: &str, name: &str) -> bool {
        match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => pattern == name,
        }
    }

    /// Whether `tool` may be called.
    pub fn permits(&self, tool: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|p| Self::matches(p, tool)));
        allowed && !self.deny.iter().any(|p| Self::matches(p, tool))
    }
}

/// One caller's scope: its id (in audit records), its policy and its dedup memory.
pub struct Session {
    pub id: String,
    pub policy: CallPolicy,
    dedup: DedupCache,
}

impl Session {
    pub fn new(id: impl Into<String>) -> Self {
        Session::with_policy(id, CallPolicy::default())
    }

    pub fn with_policy(id: impl Into<String>, policy: CallPolicy) -> Self {
        Session {
            id: id.into(),
            policy,
            dedup: DedupCache::default(),
        }
    }

    /// The results this session remembers.
    pub fn dedup(&self) -> &DedupCache {
        &self.dedup
    }
}

/// What a call ended in.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub tool: String,
    pub result: Result<Arc<str>, CallError>,
    /// True when the result is an earlier identical call's, and the tool did not run.
    pub deduplicated: bool,
    pub duration: Duration,
}

/// The host's calling side: the live catalog, the runtime and the audit log.
pub struct Host {
    catalog: Arc<LiveCatalog>,
    runtime: Arc<Runtime>,
    audit: Option<AuditLog>,
    /// One permit per instance the runtime's pool can hold; calls past it wait their turn.
    slots: Semaphore,
}

impl Host {
    pub fn new(
        catalog: Arc<LiveCatalog>,
        runtime: Arc<Runtime>,
        audit: Option<AuditLog>,
        max_instances: u32,
    ) -> Self {
        Host {
            catalog,
            runtime,
            audit,
            slots: Semaphore::new(max_instances.max(1) as usize),
        }
    }

    /// The live catalog.
    pub fn catalog(&self) -> &Arc<LiveCatalog> {
        &self.catalog
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Calls `tool` with `arguments` on behalf of `session`.
    pub async fn invoke(
        &self,
        session: &Session,
        tool: &str,
        arguments: impl Into<Arguments>,
    ) -> CallOutcome {
        let started = Instant::now();
        let catalog = self.catalog.snapshot();
        let parsed = parse_arguments(arguments.into());
        let found = self.lookup(&catalog, session, tool);
        let (result, deduplicated) = match (&found, &parsed) {
            (Err(e), _) | (Ok(_), Err(e)) => (Err(e.clone()), false),
            (Ok(found), Ok(value)) => match validate(found, value) {
                Err(e) => (Err(e), false),
                Ok(()) => self.run_deduplicated(session, found, value).await,
            },
        };
        let outcome = CallOutcome {
            tool: tool.to_string(),
            result,
            deduplicated,
            duration: started.elapsed(),
        };
        self.audit(
            session,
            found.ok().map(|t| t.as_ref()),
            parsed.ok().as_ref(),
            &outcome,
        );
        outcome
    }

    /// Records a call that its caller refused before it ran (a destructive call the user did
    /// not approve): audited like any other call, with `error` as its outcome.
    pub fn refuse(
        &self,
        session: &Session,
        tool: &str,
        arguments: &Arguments,
        error: CallError,
    ) -> CallOutcome {
        let catalog = self.catalog.snapshot();
        let outcome = CallOutcome {
            tool: tool.to_string(),
            result: Err(error),
            deduplicated: false,
            duration: Duration::ZERO,
        };
        let parsed = parse_arguments(arguments.clone()).ok();
        self.audit(
            session,
            catalog.get(tool).map(|t| t.as_ref()),
            parsed.as_ref(),
            &outcome,
        );
        outcome
    }

    fn lookup<'c>(
        &self,
        catalog: &'c Catalog,
        session: &Session,
        name: &str,
    ) -> Result<&'c Arc<Tool>, CallError> {
        let Some(tool) = catalog.get(name) else {
            let mut names: Vec<&str> = catalog
                .tools()
                .map(|t| t.name.as_str())
                .filter(|n| session.policy.permits(n))
                .collect();
            names.truncate(50);
            return Err(CallError::new(
                ErrorKind::UnknownTool,
                format!(
                    "there is no tool named `{name}`; available tools: {}",
                    names.join(", ")
                ),
            ));
        };
        if !session.policy.permits(name) {
            return Err(CallError::new(
                ErrorKind::Denied,
                format!("tool `{name}` is not allowed in this session"),
            ));
        }
        Ok(tool)
    }

    async fn run_deduplicated(
        &self,
        session: &Session,
        tool: &Arc<Tool>,
        arguments: &Value,
    ) -> (Result<Arc<str>, CallError>, bool) {
        match tool.dedup {
            DedupMode::Off => (self.run(tool, arguments).await, false),
            DedupMode::Exact => {
                let key = DedupKey::new(&tool.name, &tool.version, arguments);
                session.dedup.run(key, self.run(tool, arguments)).await
            }
        }
    }

    async fn run(&self, tool: &Tool, arguments: &Value) -> Result<Arc<str>, CallError> {
        let _turn = tool.gate.enter().await.map_err(|_| {
            CallError::new(
                ErrorKind::Busy,
                format!(
                    "tool `{}` is busy: {} call(s) running and {} waiting, its limits; try again shortly",
                    tool.name, tool.gate.max_running, tool.gate.max_waiting
                ),
            )
        })?;
        let _permit = self
            .slots
            .acquire()
            .await
            .map_err(|_| CallError::new(ErrorKind::Busy, "the host is shutting down"))?;
        let ran = match &tool.backend {
            Backend::Component { component, .. } => {
                self.runtime
                    .call(
                        component,
                        &tool.name,
                        &tool.component_tool,
                        &arguments.to_string(),
                        tool.limits,
                        &tool.sandbox,
                    )
                    .await
            }
            Backend::Mcp(server) => {
                server
                    .call(
                        &tool.component_tool,
                        arguments,
                        tool.limits.timeout,
                        tool.limits.max_output_bytes,
                    )
                    .await
            }
        };
        ran.map(Arc::from).map_err(|e| run_error(&tool.name, e))
    }

    fn audit(
        &self,
        session: &Session,
        tool: Option<&Tool>,
        arguments: Option<&Value>,
        outcome: &CallOutcome,
    ) {
        let Some(log) = &self.audit else { return };
        let (outcome_name, error, bytes, summary) = match &outcome.result {
            Ok(text) => (
                "ok".to_string(),
                None,
                text.len(),
                audit::summarize_result(text),
            ),
            Err(e) => (
                e.kind.as_str().to_string(),
                Some(e.message.clone()),
                0,
                String::new(),
            ),
        };
        let record = AuditRecord {
            time: audit::now_rfc3339(),
            session: session.id.clone(),
            tool: outcome.tool.clone(),
            ensemble: tool.map(|t| t.ensemble.clone()),
            component: tool.map(|t| t.component_hash().to_string()),
            arguments: arguments.map_or(Value::Null, audit::redact),
            outcome: outcome_name,
            error,
            duration_ms: outcome.duration.as_secs_f64() * 1000.0,
            deduplicated: outcome.deduplicated,
            result_bytes: bytes,
            summary,
        };
        if let Err(e) = log.append(&record) {
            tracing::error!("{e}");
        }
    }
}

/// Parses text arguments; a value is taken as it is. Malformed JSON is never run as `{}`.
fn parse_arguments(arguments: Arguments) -> Result<Value, CallError> {
    let value = match arguments {
        Arguments::Value(value) => value,
        Arguments::Text(text) => serde_json::from_str(&text).map_err(|e| {
            CallError::new(
                ErrorKind::InvalidArguments,
                format!("the arguments are not valid JSON: {e}"),
            )
        })?,
    };
    if !value.is_object() {
        return Err(CallError::new(
            ErrorKind::InvalidArguments,
            "the arguments must be a JSON object",
        ));
    }
    Ok(value)
}

/// Checks `arguments` against the tool's schema and lists every violation.
pub fn validate(tool: &Tool, arguments: &Value) -> Result<(), CallError> {
    if tool.validator.is_valid(arguments) {
        return Ok(());
    }
    let violations: Vec<Violation> = tool
        .validator
        .iter_errors(arguments)
        .map(|e| Violation {
            pointer: e.instance_path().to_string(),
            message: e.to_string(),
        })
        .collect();
    let lines: Vec<String> = violations
        .iter()
        .map(|v| {
            format!(
                "{}: {}",
                if v.pointer.is_empty() {
                    "(root)"
                } else {
                    &v.pointer
                },
                v.message
            )
        })
        .collect();
    Err(CallError {
        kind: ErrorKind::InvalidArguments,
        message: format!(
            "the arguments do not match the schema of `{}`: {}",
            tool.name,
            lines.join("; ")
        ),
        violations,
    })
}

fn run_error(tool: &str, error: RunError) -> CallError {
    let kind = match &error {
        RunError::Timeout { .. } => ErrorKind::Timeout,
        RunError::MemoryLimit { .. } | RunError::OutputLimit { .. } => ErrorKind::ResourceLimit,
        RunError::Crashed { .. } => ErrorKind::Crashed,
        RunError::Sandbox(_) => ErrorKind::Busy,
        RunError::CapabilityDenied { .. } => ErrorKind::CapabilityDenied,
        RunError::Tool(ToolFailure::InvalidArguments(_)) => ErrorKind::InvalidArguments,
        RunError::Tool(ToolFailure::Failed(_)) => ErrorKind::ToolError,
    };
    let message = match error {
        RunError::Tool(failure) => failure.to_string(),
        other => format!("tool `{tool}` {other}"),
    };
    CallError::new(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_and_prefixes_match() {
        let policy = CallPolicy {
            allow: Some(vec!["calc*".into(), "echo".into()]),
            deny: vec!["calc_danger".into()],
        };
        assert!(policy.permits("calculate"));
        assert!(policy.permits("echo"));
        assert!(!policy.permits("calc_danger"));
        assert!(!policy.permits("other"));
        assert!(CallPolicy::default().permits("anything"));
    }
}
