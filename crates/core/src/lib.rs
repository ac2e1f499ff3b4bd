//! The core of the host: what a tool is and how one call runs, whoever makes it.
//!
//! ```text
//! reload    watch -> debounce -> resolve -> keep the last good version of what failed -> swap
//! resolve   raw descriptors -> a Catalog: draft (files read, every check that needs no
//!           engine), bind (the only step that loads components or starts MCP servers),
//!           names across ensembles
//! invoke    one call: prepare (lookup -> allow/deny -> validate -> dedup key, on one
//!           snapshot) -> run (dedup single-flight -> admission -> backend) -> audit; the
//!           drain a shutdown waits on; prompts and resources for a session (offers), and
//!           the watch that tells which resources changed
//! catalog   tools and ensembles, the live catalog behind an atomic pointer, its subscribers
//! prompts   an ensemble's `[[prompts]]`: arguments checked, messages rendered (sandboxed)
//! resources an ensemble's `[[resources]]`: files under a directory, read-only; passed-on
//!           resources; one owner per URI
//! import    the seam of imported MCP servers: what core asks of one and of a host's set
//!           (the client itself is `toolhost-import`, above core, wired in by the binary)
//! backend   one trait for every kind of tool: a sandboxed component, an imported MCP server;
//!           what every kind shares (a tool's version, the admission gate, the URI bound)
//! content   a tool's result to and from MCP's content blocks
//! metrics   calls by tool and outcome, durations, dedup hits, validation failures; gauges
//! trace     the spans a request makes and the W3C trace context it carries in (exported by
//!           the host's telemetry when an OTLP endpoint is set)
//! ```
//!
//! Imports point down this list. Below the core: the runtime (the engine and the sandbox),
//! the registry, the configuration, the audit log and the contract every caller shares;
//! above it, every caller (the MCP server, the agent loop, the web chat, the CLI) and the
//! client of imported servers.

pub mod backend;
pub mod catalog;
pub mod content;
pub mod import;
pub mod invoke;
pub mod metrics;
pub mod prompts;
pub mod reload;
pub mod resolve;
pub mod resources;
pub mod trace;
