//! backend: what runs a tool's calls. One trait, [`Backend`], for every kind of tool: a
//! sandboxed WebAssembly component ([`component`]) or an imported MCP server (the crate
//! `toolhost-import`, through [`crate::import`]).
//!
//! The catalog holds an `Arc<dyn Backend>` per tool and `invoke` calls it; neither names a
//! kind. A backend says how to call it, what identifies its code (a [`SourceHash`], part of
//! every tool version), which file to watch for changes, and how to describe it in listings.
//! What tools it offers ([`ToolOffer`]) is learnt when `resolve` binds a descriptor to it.
//!
//! A third kind of tool is a module here implementing [`Backend`], plus the one place in
//! `resolve::bind` that turns its TOML into one.

pub mod component;
pub mod gate;

use serde_json::Value;
use std::fmt;
use std::path::Path;
use toolhost_contract::{BoxFuture, CallLimits, CallerLink, RunError, SourceHash, ToolResult};
use toolhost_runtime::sandbox::SandboxSpec;
use toolhost_runtime::{Preparation, Stock};

/// The longest resource URI taken, in a request or from a server's listing.
pub const MAX_URI_BYTES: usize = 2048;

/// Identifies one version of one invoker: blake3 over its backend's [`SourceHash`] and
/// everything the descriptor decides (tool, schema, limits, capabilities). Dedup keys include
/// it, so a reloaded tool never answers from its old version's results.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct VersionHash(pub [u8; 32]);

impl fmt::Display for VersionHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().take(8).try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for VersionHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VersionHash({self})")
    }
}

/// One tool as its backend offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOffer {
    /// The tool's name inside its backend: what an invoker's `tool` names.
    pub name: String,
    /// Another name an invoker's `tool` may use, and the name the tool goes by when an
    /// ensemble lists no invokers: a typed export's `get_forecast` for `weather/get-forecast`.
    pub alias: Option<String>,
    /// What a typed export's result looks like (for MCP's `outputSchema` and
    /// `structuredContent`).
    pub output: Option<ToolOutput>,
    pub description: std::sync::Arc<str>,
    /// JSON Schema of the arguments, as JSON text.
    pub input_schema: String,
    pub hints: ToolHints,
}

/// The JSON Schema of a tool's result, and where its object comes from (the result carries
/// it: see [`ToolResult::structured`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub schema: std::sync::Arc<serde_json::Map<String, Value>>,
    pub shape: toolhost_runtime::OutputShape,
}

/// What a backend says of a tool's effects (an MCP server's annotations; a component says
/// nothing). The operator's `destructive = true` adds to them, never removes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHints {
    pub destructive: bool,
    pub read_only: bool,
}

/// One call as a backend receives it: arguments that already passed the tool's schema.
#[derive(Clone, Copy)]
pub struct BackendCall<'a> {
    /// The invoker's name, to tag log lines and captured output.
    pub invoker: &'a str,
    /// The caller's session: the only one that sees the call's log lines.
    pub session: &'a str,
    /// The tool's name inside the backend.
    pub tool: &'a str,
    pub arguments: &'a Value,
    pub limits: CallLimits,
    pub sandbox: &'a SandboxSpec,
    /// The way back to the caller: progress reports and questions go there and nowhere else.
    pub link: &'a std::sync::Arc<dyn CallerLink>,
    /// The invoker's prepared instances, when its backend makes instances.
    pub stock: Option<&'a Stock>,
}

/// Runs calls of the tools bound to it.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Runs one call and returns what the tool returned.
    fn call<'a>(&'a self, call: BackendCall<'a>) -> BoxFuture<'a, Result<ToolResult, RunError>>;

    /// What this backend runs; a different hash is a different version of every tool on it.
    fn source_hash(&self) -> SourceHash;

    /// The file whose change should reload the catalog, if there is one.
    fn watched_file(&self) -> Option<&Path>;

    /// The component file, or `mcp: <command or URL>`, for listings.
    fn describe(&self) -> String;

    /// Whether a backend that is another process (an imported MCP server) has a live
    /// session now; `None` for one that runs in the host.
    fn is_up(&self) -> Option<bool> {
        None
    }

    /// The stock of instances prepared ahead of the calls of invokers with these `limits`,
    /// `sandbox` and `want`; `None` for a backend that makes no instances.
    fn stock(
        &self,
        _limits: CallLimits,
        _sandbox: &SandboxSpec,
        _want: Preparation,
    ) -> Option<Stock> {
        None
    }
}
