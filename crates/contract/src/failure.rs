//! How a call fails, whatever ran it: one error for every kind of tool (a component in the
//! sandbox, an imported MCP server), limits and traps kept apart from the tool's own error
//! ([`RunError::Tool`]). Callers map it to the error kind their callers see.

use std::time::Duration;

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("did not finish within {} ms", limit.as_millis())]
    Timeout { limit: Duration },
    #[error("reached its memory limit of {} MiB", limit_bytes >> 20)]
    MemoryLimit { limit_bytes: usize },
    #[error("returned {bytes} bytes, more than its limit of {limit} bytes")]
    OutputLimit { bytes: usize, limit: usize },
    /// The call held as many host resources (files, streams, HTTP fields) as one call may.
    #[error("held {limit} resources (files, streams, HTTP headers) at once, the most a call may")]
    TooManyResources { limit: usize },
    #[error("crashed: {message}")]
    Crashed { message: String },
    #[error("was refused network access: {message}")]
    CapabilityDenied { message: String },
    /// The call's sandbox could not be built (a granted directory is gone, say).
    #[error("could not be given its sandbox: {message}")]
    SandboxUnavailable { message: String },
    /// The engine ran out of a pooled resource other than instances (which calls wait for):
    /// tables, memories, stacks.
    #[error("could not be started: the host is at its limit ({detail}); try again shortly")]
    HostCapacity { detail: String },
    /// An imported server that is not running, and could not be started or is in backoff.
    #[error("crashed: {message}")]
    ServerUnavailable { message: String },
    /// An imported server that needs a person to sign in (`toolhost login`) before it
    /// serves: no one is signed in, or its tokens were refused.
    #[error("cannot be called: {message}")]
    NeedsSignIn { message: String },
    #[error("{0}")]
    Tool(ToolFailure),
}

/// The tool's own error, as it returned it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolFailure {
    #[error("{0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Failed(String),
}
