//! toolhost: a host for LLM tools. Tools are sandboxed WebAssembly components (or the tools
//! of imported MCP servers) that operators describe in TOML; every call is validated,
//! deduplicated, limited and audited.
//!
//! # Layout
//!
//! A pipeline of types from file to call, one module per concern. Listed from the top layer
//! down: a module imports only modules below it, never one above it, and no two import each
//! other (`tests/all/layers.rs` checks this).
//!
//! ```text
//! web       the agent loop over HTTP (a chat request's run streamed as Server-Sent Events,
//!           approvals answered by a request naming the call), conversations kept in SQLite,
//!           the catalog and its reload status live, the page (assets in the binary)
//! mcp       the catalog served to MCP clients (stdio, streamable HTTP) through invoke, at
//!           2026-07-28 (session-less) and the handshake revisions; paged tools/list with
//!           cache hints; list_changed and subscriptions/listen from the live catalog's
//!           subscription; dedup scopes without sessions (scope); long calls as tasks; the
//!           log relay; a call's progress and questions back to its own request (talk)
//! agent     the agent loop: a model calls tools over several steps through invoke
//!           (prepare -> approve -> run); built-in loop-breaking tools, approvals, events;
//!           a tool's sampling to the chat's model and its questions to the person (talk)
//! reload    watch -> debounce -> resolve -> keep the last good version of what failed -> swap
//! resolve   raw descriptors -> a Catalog, split along its data: draft (files read, every
//!           check that needs no engine: limits, grants, capabilities, schemas, names), bind
//!           (the only step that loads components or starts MCP servers), names across
//!           ensembles
//! registry  `oci://` references: a tag resolved by one manifest request (its last digest
//!           kept when the registry is out of reach), components pulled into a content store
//!           by digest (checked on write and read), bounded sizes and deadlines; push
//! invoke    one call: prepare (lookup -> allow/deny -> validate -> dedup key, on one
//!           snapshot) -> run (dedup single-flight -> admission -> backend) -> audit; the
//!           drain a shutdown waits on (calls in flight, cancelled at its deadline)
//! catalog   tools and ensembles, the live catalog behind an atomic pointer, its subscribers
//! backend   one trait for every kind of tool: component (a sandboxed instance per call,
//!           of the toolhost:plugin world or typed), mcp (an imported MCP server, as a
//!           client; content items between MCP and the host); typed RunError
//! runtime   the wasmtime Engine, the compiled-component cache (authenticated, pruned),
//!           admission to the instance pool, a fresh Store per call with limits, an epoch
//!           deadline and captured stdio; both plugin versions (0.1.0, 0.2.0) adapted to one
//!           result of content items (content); a call talking back to its caller through
//!           the link the caller gave it, bounded per call (talk); typed components (JSON
//!           Schema from WIT types, values both ways); inspecting a component for `describe`
//! sandbox   capabilities -> WASI context and wasi:http checks (host:port grants, no SSRF
//!           through DNS); bounded capture of a plugin's stdout/stderr; deny by default
//! config    TOML text -> raw descriptor types (serde, deny_unknown_fields, versioned),
//!           errors with file:line:col (Diagnostic), positions worked out only for messages
//! provider  the LLM APIs behind one trait: openai, anthropic, prompted; the canonical
//!           conversation they speak; streaming, retries with backoff
//! audit     one JSON line per call, secrets redacted, written through; records the file
//!           refuses held (bounded) and written first when it takes writes again; reopened
//!           after rotation
//! metrics   calls by tool and outcome, durations, dedup hits, validation failures; gauges
//!           set at each scrape; the Prometheus text format
//! tls       the rustls crypto provider every HTTPS client of the host uses
//! ```
//!
//! Where a change goes: a new kind of tool is a module in `backend` implementing
//! [`backend::Backend`], plus the arm in `resolve::bind` that its TOML selects; a new check
//! of a descriptor goes in `resolve::draft` (no engine) or `resolve::bind` (needs the
//! component); a new caller of tools goes through [`invoke::Host::prepare`] and
//! [`invoke::Host::run`].
//!
//! The command-line interface lives in the binary (`src/main.rs`, `src/cli/`), the only place
//! that prints for people and uses `anyhow`; `cli::service` holds what running as a service
//! needs (signals, the drain on a signal, SIGHUP, systemd notifications), `cli::logging` the
//! text and JSON log lines. The runtime never sees TOML; callers (the CLI, the
//! MCP server and the agent loop) all go through [`invoke::Host`].

pub mod agent;
pub mod audit;
pub mod backend;
pub mod catalog;
pub mod config;
pub mod invoke;
pub mod mcp;
pub mod metrics;
pub mod provider;
pub mod registry;
pub mod reload;
pub mod resolve;
pub mod runtime;
pub mod sandbox;
pub mod web;

pub use toolhost_contract as contract;
pub use toolhost_contract::tls;
