//! The client of imported MCP servers: an external MCP server imported as an ensemble
//! (`[ensemble.mcp]`), as a client of it, plugged into core's seam
//! ([`toolhost_core::import`]) by the binary.
//!
//! An [`McpImport`] ([`server`]) is one server: a child process (`command`, `args`, `env`) or
//! a streamable HTTP endpoint (`url`). It is started when it is first needed (when the catalog
//! lists its tools, or a call finds it down), shared by every catalog version that names the
//! same server ([`ImportedServers`], in [`servers`], the [`Importer`] the resolver is given),
//! and dropped with the last of them; `serve` starts it in the background. A server that dies
//! (or cannot be started) makes only its own tools fail, with `crashed`; the next call starts
//! it again, right away after a crash, then with a doubling backoff (1 s up to 60 s) while
//! starting keeps failing. A server at either MCP revision is taken: `server/discover` first
//! (2026-07-28), the `initialize` handshake for one that does not know it. A server's tool
//! list changes (`notifications/tools/list_changed` in a session, or on the
//! `subscriptions/listen` stream held open to a 2026-07-28 server, [`watcher`]) are broadcast,
//! and the reloader rebuilds the catalog from the new list. Its prompts and resources are
//! passed through ([`offers`]); its requests to the caller (sampling, elicitation, progress)
//! go back to the call that caused them ([`talk`]).
//!
//! A server over HTTP that needs an OAuth access token gets this host's own ([`oauth`]: client
//! credentials, discovered from its `401`), or a person's ([`sign_in`]: `toolhost login`);
//! every request of either goes through toolhost's own bounded client ([`oauth_http`]). A
//! caller's token is never sent to it. Each request over HTTP carries the call's trace context
//! in its headers as well as its `_meta` ([`trace_headers`]).
//!
//! An imported server is a native process (or a remote service), not a sandboxed component:
//! toolhost validates, deduplicates, limits in time and size, and audits its calls, but what
//! the server itself can reach is up to the operator.
//!
//! Layers: `servers` over `connection` (a session over time: backoff, a sign-in followed),
//! `server`, `offers` and `watcher`, over `talk`, `sign_in`, `oauth` and `trace_headers`,
//! over `oauth_http` and `stderr`.

mod connection;
mod oauth;
pub mod oauth_http;
pub mod offers;
mod server;
mod servers;
pub mod sign_in;
mod stderr;
mod talk;
mod trace_headers;
mod watcher;

pub use server::{MAX_LISTED_BYTES, McpImport};
pub use servers::ImportedServers;
pub use toolhost_core::import::{
    Background, ImportedServer, Importer, McpError, McpSpec, McpTarget, NEEDS_SIGN_IN,
};

pub(crate) use server::{AbortOnDrop, alive, sign_in_target};

/// A dependency's error as people and models read it: its text without the Rust type paths
/// rmcp's transport errors carry.
pub(crate) fn said(error: &impl std::fmt::Display) -> String {
    toolhost_contract::without_type_paths(&error.to_string()).into_owned()
}
pub(crate) use watcher::Watcher;
