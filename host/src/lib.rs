//! toolhost: a host for LLM tools. Tools are sandboxed WebAssembly components (or the tools
//! of imported MCP servers) that operators describe in TOML; every call is validated,
//! deduplicated, limited and audited.
//!
//! # Layout
//!
//! One crate per layer under `crates/`, listed from the top down. A crate depends only on
//! crates below it (Cargo refuses cycles; `tests/all/layers.rs` checks the order and that no
//! layer skips to one it must not see). This crate is the binary (`src/main.rs`, `src/cli/`)
//! and a facade that re-exports the layers under the module names they had when they were one
//! crate, so `toolhost::invoke::Host` is where it always was.
//!
//! ```text
//! toolhost           the CLI (the only place that prints for people and uses anyhow): check,
//!                    describe, run, serve, chat, pull, push; running as a service (signals,
//!                    drain, SIGHUP, systemd notifications); the text and JSON log lines
//! toolhost-http      the HTTP front of `serve --http`: the accept loop with its connection,
//!                    header and body bounds; the guard (origins, identity, sessions bound to
//!                    it, quotas, step-up); the web chat's sign-in; probes and metrics; the
//!                    routes to MCP and the web chat
//! toolhost-web       the agent loop over HTTP: a run streamed as Server-Sent Events,
//!                    approvals, conversations in SQLite (bounded), the page (assets built in)
//! toolhost-mcp       the catalog served to MCP clients over stdio and streamable HTTP, at
//!                    2026-07-28 and the handshake revisions; paging, list_changed, listen,
//!                    dedup scopes, tasks, the log relay, talking back (talk); prompts and
//!                    resources (subscriptions, completion, notify)
//! toolhost-agent     the agent loop (prepare -> approve -> run over several steps), its
//!                    bounds (limits), built-in tools, events; the LLM APIs behind one trait
//!                    (provider: openai, anthropic, prompted; streaming, retries)
//! toolhost-access    who a request over HTTP comes from (named static tokens, OAuth 2.1
//!                    access tokens checked against an OpenID provider's keys, loopback) and
//!                    what the rules of `[access]` let each identity list and call
//! toolhost-import    the client of imported MCP servers (`[ensemble.mcp]`): sessions over
//!                    stdio and HTTP, OAuth (client credentials, a person's sign-in, step-up,
//!                    revocation), prompts and resources passed on; plugs into core's
//!                    `import` seam, wired in by this crate
//! toolhost-core      reload (watch -> resolve -> keep the last good -> swap), resolve (drafts
//!                    from toolhost-config; bind: components and MCP servers; names), invoke
//!                    (one call: prepare -> dedup -> admission -> backend -> audit; the drain),
//!                    catalog (the live catalog behind an atomic pointer), backend (component;
//!                    the import seam an imported server plugs into), prompts and resources
//!                    (an ensemble's `[[prompts]]` and `[[resources]]`: rendering, bounded
//!                    reads, the watch), content (results to and from MCP), metrics
//! toolhost-state     state a fleet shares, one interface per kind (quotas so far): kept in
//!                    this process, or in Redis when `[fleet]` names one (engine: the
//!                    connection, its bounded waits and its health)
//! toolhost-registry  `oci://` references, bounded pulls into a content store by digest,
//!                    push, cosign keys, credentials
//! toolhost-runtime   the wasmtime Engine, the compile cache and worker, a fresh Store per call
//!                    with limits and an epoch deadline; the three plugin versions and typed
//!                    components adapted to one result, 0.3.0's prompts and resources
//!                    (offers) run the same way; prepared (instances made ahead of
//!                    their calls, bounded); inspect; sandbox (capabilities -> WASI context,
//!                    wasi:http checks, bounded stdio capture)
//! toolhost-config    TOML -> raw descriptor types with file:line:col errors (Diagnostic); draft
//!                    (every check of an ensemble without an engine: entries, limits, grants
//!                    into a sandbox spec, argument schemas, MCP import settings, prompts and
//!                    resource sets); template (the prompts' sandboxed engine); the files
//!                    the host reads and keeps (bounded reads, private directories)
//! toolhost-audit     one redacted JSON line per call, written through, reopened after rotation
//! toolhost-contract  what every caller and backend share: results and content items, talking
//!                    back (the link, grants, bounds), RunError, call limits, source hashes, TLS
//! ```
//!
//! Where a change goes: a new kind of tool is a module in `backend` (toolhost-core)
//! implementing [`backend::Backend`], plus the arm in `resolve::bind` that its TOML selects; a
//! new check of a descriptor goes in `config::draft` (no engine; with a golden case in
//! `tests/ui/config`) or `resolve::bind` (needs the component; `tests/ui/resolve`); a new caller of tools goes through [`invoke::Host::prepare`] and
//! [`invoke::Host::run`]. The runtime never sees TOML.

pub use toolhost_access as access;
pub use toolhost_agent as agent;
pub use toolhost_agent::provider;
pub use toolhost_audit as audit;
pub use toolhost_config as config;
pub use toolhost_contract as contract;
pub use toolhost_contract::tls;
pub use toolhost_core::{
    backend, catalog, content, invoke, metrics, prompts, reload, resolve, resources, trace,
};
pub use toolhost_http as http;
pub use toolhost_import as import;
pub use toolhost_mcp as mcp;
pub use toolhost_registry as registry;
pub use toolhost_runtime as runtime;
pub use toolhost_runtime::sandbox;
pub use toolhost_state as state;
pub use toolhost_web as web;
