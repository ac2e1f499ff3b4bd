//! toolhost: a host for LLM tools. Tools are sandboxed WebAssembly components (or the tools
//! of imported MCP servers) that operators describe in TOML; every call is validated,
//! deduplicated, limited and audited.
//!
//! # Layout
//!
//! A pipeline of types from file to call, one module per concern:
//!
//! ```text
//! config    TOML text -> raw descriptor types (serde, deny_unknown_fields, versioned),
//!           errors with file:line:col (Diagnostic)
//! resolve   raw descriptors -> a Catalog: paths made absolute, defaults applied, capabilities
//!           checked against grants, schemas compiled, names checked for collisions
//! runtime   the wasmtime Engine, the compiled-component cache, a fresh Store per call with
//!           limits, an epoch deadline and captured stdio
//! sandbox   capabilities -> WASI context and wasi:http checks (host:port grants, no SSRF
//!           through DNS); deny by default
//! catalog   the resolved tools, and the live catalog behind an atomic pointer
//! invoke    one call: lookup -> allow/deny -> validate -> dedup (single-flight) -> run -> audit
//! mcp       the catalog served to MCP clients (stdio, streamable HTTP) through invoke, and
//!           MCP servers imported as ensembles (mcp::client)
//! agent     the agent loop: a model calls tools over several steps through invoke; the
//!           canonical conversation, built-in loop-breaking tools, approvals, events
//! provider  the LLM APIs behind one trait: openai (chat completions), anthropic (messages),
//!           prompted (<tool> blocks in text); streaming, retries with backoff
//! reload    watch -> debounce -> rebuild -> diff -> swap; last good version kept on failure
//! audit     one JSON line per call, secrets redacted, appended and flushed
//! tls       the rustls crypto provider every HTTPS client of the host uses
//! ```
//!
//! The command-line interface lives in the binary (`src/main.rs`, `src/cli/`), the only place
//! that prints for people and uses `anyhow`. The runtime never sees TOML; callers (the CLI, the
//! MCP server and the agent loop) all go through [`invoke::Host::invoke`].

pub mod agent;
pub mod audit;
pub mod catalog;
pub mod config;
pub mod invoke;
pub mod mcp;
pub mod provider;
pub mod reload;
pub mod resolve;
pub mod runtime;
pub mod sandbox;
pub mod tls;
