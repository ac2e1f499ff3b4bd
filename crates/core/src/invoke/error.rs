//! How a call fails, as callers and the model see it: an [`ErrorKind`] and a message (with
//! every schema violation for `invalid-arguments`), mapped from each layer's typed cause.

use serde::Serialize;
use std::fmt;
use toolhost_contract::{RunError, ToolFailure};

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
    /// The invoker's `max-concurrency` calls are running and `max-queue` are waiting, or the
    /// host ran out of a pooled resource for a moment; worth trying again shortly.
    Busy,
    /// The host could not give the call what it needs (its sandbox: a granted directory is
    /// gone, its audit log refuses writes) or is shutting down; an operator has to fix it, or
    /// the call goes to another host.
    Unavailable,
    /// The host shut down before the call finished (its drain deadline passed).
    Cancelled,
    /// The caller's identity passed its quota (`[[access.quotas]]`); the message says when
    /// to try again.
    RateLimited,
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
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::RateLimited => "rate-limited",
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
    /// The message with the offending value masked, for the audit log (a violation must not
    /// copy a password into it).
    #[serde(skip)]
    pub masked: String,
}

/// Violations named in a message, at most; the rest are counted.
const MESSAGE_VIOLATIONS: usize = 20;
/// One violation's message is cut at this many bytes (it may quote a long value).
const VIOLATION_BYTES: usize = 300;

/// `text` cut at `limit` bytes (on a character boundary), saying how much was cut.
pub(crate) fn cut(text: &str, limit: usize) -> String {
    toolhost_contract::cut(text, limit, |n| format!("... [{n} more bytes cut]")).into_owned()
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
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CallError {
            kind,
            message: message.into(),
            violations: Vec::new(),
        }
    }

    /// The error a backend's failure is for the caller of `tool`, its text cut at `limit`
    /// bytes (the invoker's `max-output-bytes`: an error is output too).
    pub(crate) fn from_backend(tool: &str, error: RunError, limit: usize) -> Self {
        let kind = match &error {
            RunError::Timeout { .. } => ErrorKind::Timeout,
            RunError::MemoryLimit { .. }
            | RunError::OutputLimit { .. }
            | RunError::TooManyResources { .. } => ErrorKind::ResourceLimit,
            RunError::Crashed { .. } | RunError::ServerUnavailable { .. } => ErrorKind::Crashed,
            RunError::CapabilityDenied { .. } => ErrorKind::CapabilityDenied,
            RunError::SandboxUnavailable { .. } | RunError::NeedsSignIn { .. } => {
                ErrorKind::Unavailable
            }
            RunError::HostCapacity { .. } => ErrorKind::Busy,
            RunError::Tool(ToolFailure::InvalidArguments(_)) => ErrorKind::InvalidArguments,
            RunError::Tool(ToolFailure::Failed(_)) => ErrorKind::ToolError,
        };
        let message = match error {
            RunError::Tool(failure) => failure.to_string(),
            other => format!("tool `{tool}` {other}"),
        };
        CallError::new(kind, cut(&message, limit))
    }

    /// The message as the audit log keeps it: with schema violations, their masked form, so
    /// that no offending value is copied into the log.
    pub(crate) fn audit_message(&self) -> String {
        if self.violations.is_empty() {
            return self.message.clone();
        }
        let (head, _) = self
            .message
            .split_once(": ")
            .unwrap_or((self.message.as_str(), ""));
        format!("{head}: {}", listing(&self.violations, |v| &v.masked))
    }

    /// Every violation of `schema` by `arguments`, each with its JSON pointer, or `None`.
    pub(crate) fn violations(
        tool: &str,
        validator: &jsonschema::Validator,
        arguments: &serde_json::Value,
    ) -> Option<Self> {
        if validator.is_valid(arguments) {
            return None;
        }
        let mut count = 0usize;
        let mut violations: Vec<Violation> = Vec::new();
        for e in validator.iter_errors(arguments) {
            count += 1;
            if violations.len() < MESSAGE_VIOLATIONS {
                violations.push(Violation {
                    pointer: e.instance_path().to_string(),
                    message: cut(&e.to_string(), VIOLATION_BYTES),
                    masked: cut(&e.masked().to_string(), VIOLATION_BYTES),
                });
            }
        }
        let mut listed = listing(&violations, |v| &v.message);
        if count > violations.len() {
            listed.push_str(&format!("; and {} more", count - violations.len()));
        }
        Some(CallError {
            kind: ErrorKind::InvalidArguments,
            message: format!("the arguments do not match the schema of `{tool}`: {listed}"),
            violations,
        })
    }
}

/// `pointer: message; ...` of `violations`, with `text` choosing the message.
fn listing(violations: &[Violation], text: impl Fn(&Violation) -> &String) -> String {
    let lines: Vec<String> = violations
        .iter()
        .map(|v| {
            let at = if v.pointer.is_empty() {
                "(root)"
            } else {
                &v.pointer
            };
            format!("{at}: {}", text(v))
        })
        .collect();
    lines.join("; ")
}
