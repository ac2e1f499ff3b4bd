//! invoke: one call, the single path that the CLI, the MCP server and the agent loop share.
//!
//! A call has two halves, so that a caller may decide in between (the agent loop asks a
//! person before a destructive call):
//!
//! - [`Host::prepare`], on one catalog snapshot: lookup -> allow/deny -> parse and validate
//!   the arguments (every violation, with its JSON pointer) -> dedup key. The result, a
//!   [`PreparedCall`], holds the exact tool version that will run.
//! - [`Host::run`]: dedup (single-flight, per session) -> the invoker's admission gate -> the
//!   tool's backend -> audit. Or [`Host::refuse`], which audits the call as refused.
//!
//! [`Host::call`] is both in one, for a call described by one value ([`Call`]: session, tool,
//! arguments, and optionally a cancellation and a link back to the caller);
//! [`Host::invoke`] is that with the defaults. [`Host::shutdown`] drains: no new call runs, the calls in
//! flight finish or are cancelled at a deadline (`drain`). Every failure is a typed
//! [`CallError`]; none of them ends the host. Prompts and resources reach a session through
//! `offers`, and [`watch`] tells subscribers which resources changed. The backend runs the call (a component in a fresh instance, or an imported MCP
//! server); this module never asks which.

mod call;
mod caller;
mod dedup;
mod drain;
mod error;
mod offers;
mod record;
mod session;
pub mod watch;

pub use call::{Attached, Call};
pub use caller::{Admission, Admitted, Caller, Limited, Permits};

pub use dedup::{
    DEFAULT_DEDUP_SESSION_MIB, DEFAULT_DEDUP_TOTAL_MIB, DedupBudget, DedupCache, DedupKey,
    canonical_json, canonical_object,
};
pub use drain::{Counted, DrainReport, OwnedCounted, Tally};
pub use error::{CallError, ErrorKind, Violation};
pub use session::{CallPolicy, Session};

use crate::backend::BackendCall;
use crate::catalog::{LiveCatalog, Schema, Tool};
use crate::metrics::Metrics;
use crate::trace::{KeyValue, SpanBuilder};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_audit::{AuditLog, OnAuditError};
use toolhost_config::DedupMode;
use toolhost_contract::{CallerLink, ToolResult};
use tracing::Instrument;

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

/// What a call ended in.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub tool: String,
    /// What the tool returned (its items; [`ToolResult::text`] for a reader of text alone).
    pub result: Result<Arc<ToolResult>, CallError>,
    /// True when the result is an earlier identical call's, and the tool did not run.
    pub deduplicated: bool,
    pub duration: Duration,
}

/// A call that passed every check and is ready to run: the tool version it will run (taken
/// from one catalog snapshot), its arguments and its dedup key.
#[derive(Debug)]
pub struct PreparedCall {
    tool: Arc<Tool>,
    arguments: Value,
    key: Option<DedupKey>,
    started: Instant,
}

impl PreparedCall {
    /// The tool, at the version that will run.
    pub fn tool(&self) -> &Arc<Tool> {
        &self.tool
    }

    /// The parsed, validated arguments.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }
}

/// The host's calling side: the live catalog, the audit log, the dedup budget its sessions
/// share, and the calls in flight (for a shutdown).
pub struct Host {
    catalog: Arc<LiveCatalog>,
    audit: Option<AuditLog>,
    dedup: Arc<DedupBudget>,
    /// The fleet's dedup results, which conversations share (`[fleet] redis`).
    shared_dedup: Option<Arc<toolhost_state::dedup::SharedDedup>>,
    drain: drain::Drain,
    metrics: Option<Arc<Metrics>>,
    /// The watch of the resource directories, started by the first who asks.
    resource_watch: std::sync::OnceLock<watch::ResourceWatch>,
}

impl Host {
    pub fn new(catalog: Arc<LiveCatalog>, audit: Option<AuditLog>) -> Self {
        Host {
            catalog,
            audit,
            dedup: Arc::default(),
            shared_dedup: None,
            drain: drain::Drain::default(),
            metrics: None,
            resource_watch: std::sync::OnceLock::new(),
        }
    }

    /// The same host counting every call that ends in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The metrics calls are counted in, if any.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// The audit log, if one is configured.
    pub fn audit_log(&self) -> Option<&AuditLog> {
        self.audit.as_ref()
    }

    /// Shuts the calling side down: no new call runs (each is refused as `unavailable` and
    /// audited), the calls in flight get until `deadline` to finish, and those still running
    /// then end as `cancelled` (audited). Returns when no call is in flight. Called again
    /// (a second signal) with a shorter deadline, it cancels sooner.
    pub async fn shutdown(&self, deadline: Duration) -> DrainReport {
        self.drain.shutdown(deadline).await
    }

    /// True once [`Host::shutdown`] began.
    pub fn is_draining(&self) -> bool {
        self.drain.is_draining()
    }

    /// Resolves when [`Host::shutdown`] begins: for what does not end by itself (a client's
    /// subscription to tool list changes).
    pub async fn stopping(&self) {
        self.drain.stopping().await;
    }

    /// The same host with the sessions' dedup memory bounded by `budget`.
    pub fn with_dedup_budget(mut self, budget: DedupBudget) -> Self {
        self.dedup = Arc::new(budget);
        self
    }

    /// The same host with conversations' dedup results shared by the fleet in `shared`.
    pub fn with_shared_dedup(
        mut self,
        shared: Option<Arc<toolhost_state::dedup::SharedDedup>>,
    ) -> Self {
        self.shared_dedup = shared;
        self
    }

    /// The fleet's dedup results, if the host shares them.
    pub fn shared_dedup(&self) -> Option<&Arc<toolhost_state::dedup::SharedDedup>> {
        self.shared_dedup.as_ref()
    }

    /// A session `id` with `policy`, whose remembered results count against this host's budget.
    pub fn session(&self, id: impl Into<String>, policy: CallPolicy) -> Session {
        Session::with_budget(id, policy, Arc::clone(&self.dedup))
    }

    /// The dedup budget the host's sessions share.
    pub fn dedup_budget(&self) -> &Arc<DedupBudget> {
        &self.dedup
    }

    /// The live catalog.
    pub fn catalog(&self) -> &Arc<LiveCatalog> {
        &self.catalog
    }

    /// Runs `call`: [`Host::prepare`], then [`Host::run`] with what the call attached.
    /// An admission the request holds and the call did not take is given back before the
    /// outcome is.
    pub async fn call(&self, call: Call<'_>) -> CallOutcome {
        let admitted = call.attached.admission().cloned();
        let outcome = match self.prepare(call.session, call.tool, call.arguments) {
            Ok(prepared) => self.run(call.session, prepared, call.attached).await,
            Err(outcome) => outcome,
        };
        if let Some(admitted) = admitted {
            admitted.give_back().await;
        }
        outcome
    }

    /// Calls `tool` with `arguments` on behalf of `session`, with the defaults: [`Host::call`]
    /// of [`Call::new`].
    pub async fn invoke(
        &self,
        session: &Session,
        tool: &str,
        arguments: impl Into<Arguments>,
    ) -> CallOutcome {
        self.call(Call::new(session, tool, arguments)).await
    }

    /// Checks a call on one snapshot of the catalog: the tool exists and is enabled, the
    /// session may call it, and its arguments are a JSON object that passes its schema. A call
    /// that fails a check is audited and returned as its outcome.
    pub fn prepare(
        &self,
        session: &Session,
        tool: &str,
        arguments: impl Into<Arguments>,
    ) -> Result<PreparedCall, CallOutcome> {
        let started = Instant::now();
        // Looking the tool up, its access rules and its arguments' schema: one span.
        let _traced = crate::trace::step(|| SpanBuilder::from_name("validate")).entered();
        let catalog = self.catalog.snapshot();
        let failed = |found: Option<&Arc<Tool>>, arguments: Option<&Value>, error| {
            let outcome = CallOutcome {
                tool: tool.to_string(),
                result: Err(error),
                deduplicated: false,
                duration: started.elapsed(),
            };
            self.record(session, found.map(|t| t.as_ref()), arguments, &outcome);
            outcome
        };
        match (
            lookup(&catalog, session, tool),
            parse_arguments(arguments.into()),
        ) {
            (Ok(found), Ok(arguments)) => match validate(found, &arguments) {
                Ok(()) => Ok(PreparedCall {
                    key: (found.policy.dedup == DedupMode::Exact)
                        .then(|| DedupKey::new(&found.name, &found.version, &arguments)),
                    tool: Arc::clone(found),
                    arguments,
                    started,
                }),
                Err(error) => Err(failed(Some(found), Some(&arguments), error)),
            },
            (Err(error), parsed) => Err(failed(None, parsed.as_ref().ok(), error)),
            (Ok(found), Err(error)) => Err(failed(Some(found), None, error)),
        }
    }

    /// Runs a prepared call: answered from the session's dedup memory if an identical call
    /// succeeded (or is in flight), else through the invoker's admission gate on its backend,
    /// ended as `cancelled` if what `attached` says comes first, and with the tool's progress
    /// reports and questions going to its link (a call answered by dedup does not run, so it
    /// reports nothing). A host that is shutting down refuses the call, and so does a host
    /// whose audit log refuses writes under `on-audit-error = "refuse"`; both refusals are
    /// audited.
    pub async fn run(
        &self,
        session: &Session,
        call: PreparedCall,
        attached: Attached<'_>,
    ) -> CallOutcome {
        let (cancel, link, admitted) = attached.into_parts();
        let admitted_ahead = admitted.is_some();
        let link = &link;
        let Some(_in_flight) = self.drain.enter() else {
            let error = CallError::new(
                ErrorKind::Unavailable,
                "the host is shutting down and takes no new calls; try again on another host or after it restarts",
            );
            return self.refuse(session, call, error);
        };
        if let Some(log) = &self.audit
            && log.policy() == OnAuditError::Refuse
            && let Err(e) = log.writable()
        {
            let error = CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "{e}; calls are refused until the audit log can be written (on-audit-error = \"refuse\")"
                ),
            );
            return self.refuse(session, call, error);
        }
        // The identity's quota: counted as running until the call ends, given up before its
        // answer (a cancelled call's is given up when dropped). In a fleet it is asked at the
        // same time as the fleet's dedup (one round trip for both).
        // A refusal of an admission ahead is the HTTP guard's to answer (and audit): the
        // call is not recorded here (`true`).
        let admission = async {
            match admitted {
                Some(ahead) => match ahead.take().await {
                    Ok(None) => admit(session).await.map_err(|l| (l, false)),
                    taken => taken.map_err(|l| (l, true)),
                },
                None => admit(session).await.map_err(|l| (l, false)),
            }
        };
        let run = async {
            tokio::select! {
                result = run_on_backend(&call.tool, &call.arguments, &session.id, link) => result,
                () = self.drain.cancelled() => {
                    self.drain.count_cancelled();
                    Err(CallError::new(
                        ErrorKind::Cancelled,
                        format!(
                            "tool `{}` was cancelled: the host shut down before the call finished",
                            call.tool.name
                        ),
                    ))
                }
                () = Attached::cancelled(cancel) => Err(CallError::new(
                    ErrorKind::Cancelled,
                    format!("tool `{}` was cancelled by its caller", call.tool.name),
                )),
            }
        };
        // Whatever is logged during the call carries these (`--log-format json`).
        let span = tracing::info_span!(
            "call",
            session = %session.id,
            tool = %call.tool.name,
            ensemble = %call.tool.ensemble
        );
        // Traced: the quota's admission, the run on the backend, and whether dedup answered,
        // each a child of the request's span; a call with no quota to count (none applies to
        // its identity, none was admitted ahead) has no `quota` span, nor one without dedup a
        // `dedup` span: a span says what happened.
        let counted = || admitted_ahead || session.caller().is_some_and(|c| c.has_quota());
        let quota = match crate::trace::within() && counted() {
            true => crate::trace::step(|| SpanBuilder::from_name("quota")),
            false => crate::trace::Traced::none(),
        };
        let admission = quota.carry(admission);
        let running = crate::trace::step(|| {
            SpanBuilder::from_name(format!("run {}", call.tool.name)).with_attributes([
                KeyValue::new("gen_ai.tool.name", call.tool.name.clone()),
                KeyValue::new("toolhost.ensemble", call.tool.ensemble.clone()),
                KeyValue::new("toolhost.component", call.tool.source_hash().to_string()),
            ])
        });
        let run = running.carry(run);
        let ran = match call.key {
            Some(key) => {
                let hold = call.tool.policy.limits.timeout;
                let traced = crate::trace::step(|| SpanBuilder::from_name("dedup"));
                let deduped = session.dedup().run(key, hold, admission, run);
                let ran = traced.carry(deduped).instrument(span).await;
                if let Ok((_, _, deduplicated)) = &ran {
                    traced.set("toolhost.deduplicated", *deduplicated);
                }
                ran
            }
            None => match admission.await {
                Ok(quota) => Ok((quota, run.instrument(span).await, false)),
                Err(limited) => {
                    drop(run);
                    Err(limited)
                }
            },
        };
        let (quota, result, deduplicated) = match ran {
            Ok(ran) => ran,
            Err((limited, answered_by_guard)) => {
                let kind = if limited.unavailable {
                    ErrorKind::Unavailable
                } else {
                    ErrorKind::RateLimited
                };
                let error = CallError::new(kind, limited.message);
                if answered_by_guard {
                    return CallOutcome {
                        tool: call.tool.name.clone(),
                        result: Err(error),
                        deduplicated: false,
                        duration: Duration::ZERO,
                    };
                }
                return self.refuse(session, call, error);
            }
        };
        let outcome = CallOutcome {
            tool: call.tool.name.clone(),
            result,
            deduplicated,
            duration: call.started.elapsed(),
        };
        crate::trace::sizes(&running, || {
            let arguments = serde_json::to_vec(&call.arguments).map_or(0, |bytes| bytes.len());
            let result = match &outcome.result {
                Ok(result) => result.text().len(),
                Err(error) => error.message.len(),
            };
            (arguments, result)
        });
        if let Some(quota) = quota {
            quota.end().await;
        }
        self.record(session, Some(&call.tool), Some(&call.arguments), &outcome);
        outcome
    }

    /// Records a call that its caller refused before it ran (a destructive call the user did
    /// not approve): audited like any other call, with `error` as its outcome.
    pub fn refuse(&self, session: &Session, call: PreparedCall, error: CallError) -> CallOutcome {
        let outcome = CallOutcome {
            tool: call.tool.name.clone(),
            result: Err(error),
            deduplicated: false,
            duration: Duration::ZERO,
        };
        self.record(session, Some(&call.tool), Some(&call.arguments), &outcome);
        outcome
    }
}

/// A call of `session`'s caller admitted under its quota (nothing to hold without a caller).
async fn admit(session: &Session) -> Result<Option<caller::Running>, Limited> {
    match session.caller() {
        Some(caller) => caller.admit().await,
        None => Ok(None),
    }
}

/// The enabled tool `name` of `catalog`, if the session may call it.
fn lookup<'c>(
    catalog: &'c crate::catalog::Catalog,
    session: &Session,
    name: &str,
) -> Result<&'c Arc<Tool>, CallError> {
    // A tool the caller's rules do not grant is unknown to it, not forbidden: its name is
    // not told apart from one that does not exist.
    let hidden = |tool: &Tool| session.caller().is_some_and(|c| !c.permits(tool));
    let Some(tool) = catalog.get(name).filter(|t| !hidden(t)) else {
        let names: Vec<&str> = catalog
            .tools()
            .filter(|t| session.permits(t))
            .map(|t| t.name.as_str())
            .take(50)
            .collect();
        let names = if names.is_empty() {
            vec!["none (no ensemble serves a tool)"]
        } else {
            names
        };
        return Err(CallError::new(
            ErrorKind::UnknownTool,
            match catalog.pending() {
                [] => format!(
                    "there is no tool named `{name}`; available tools: {}",
                    names.join(", ")
                ),
                pending => format!(
                    "there is no tool named `{name}` yet: {}; its tools join when that ends \
                     (`toolhost status` and /readyz say when); available now: {}",
                    loading(pending),
                    names.join(", ")
                ),
            },
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

/// What the ensembles that do not serve yet wait for, and how long they have: "hello.toml is
/// loading (compiling hello.wasm for 12 s)", at most three of them. File names only: the
/// caller is told what to wait for, not where the operator keeps things (nor an imported
/// server's command line or URL, which may carry a secret).
fn loading(pending: &[crate::catalog::Pending]) -> String {
    const SHOWN: usize = 3;
    let name = |path: &std::path::Path| {
        path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let mut parts: Vec<String> = pending
        .iter()
        .take(SHOWN)
        .map(|p| {
            let compiling = p.compiling.iter().map(|c| format!("compiling {}", name(c)));
            let starting = p
                .starting
                .iter()
                .map(|_| "starting its MCP server".to_string());
            let waits: Vec<String> = compiling.chain(starting).collect();
            format!(
                "{} is loading ({} for {} s)",
                name(&p.file),
                waits.join(", "),
                p.since.elapsed().as_secs()
            )
        })
        .collect();
    if pending.len() > SHOWN {
        parts.push(format!("{} more", pending.len() - SHOWN));
    }
    parts.join("; ")
}

/// One run of `tool` on its backend, once the invoker's gate lets it in.
async fn run_on_backend(
    tool: &Tool,
    arguments: &Value,
    session: &str,
    link: &Arc<dyn CallerLink>,
) -> Result<Arc<ToolResult>, CallError> {
    let _turn = tool.policy.gate.enter().await.map_err(|_| {
        CallError::new(
            ErrorKind::Busy,
            format!(
                "tool `{}` is busy: {} call(s) running and {} waiting, its limits; try again shortly",
                tool.name, tool.policy.gate.max_running, tool.policy.gate.max_waiting
            ),
        )
    })?;
    let call = BackendCall {
        invoker: &tool.name,
        session,
        tool: &tool.backend_tool,
        arguments,
        limits: tool.policy.limits,
        sandbox: &tool.policy.sandbox,
        link,
        stock: tool.policy.stock.as_ref(),
    };
    let result =
        tool.backend.call(call).await.map_err(|e| {
            CallError::from_backend(&tool.name, e, tool.policy.limits.max_output_bytes)
        })?;
    if let (Some(check), Some(structured)) = (&tool.accepts.output_check, &result.structured)
        && let Some(error) = check.validator().iter_errors(structured).next()
    {
        return Err(CallError::new(
            ErrorKind::ToolError,
            format!(
                "tool `{}` returned a structured result that does not match the output schema \
                 it declares: {error} (at `{}`)",
                tool.name,
                error.instance_path()
            ),
        ));
    }
    Ok(Arc::new(result))
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
    check_arguments(&tool.name, &tool.accepts.schema, arguments)
}

/// Checks `arguments` against `schema` (of the tool `name`) and lists the violations, as
/// every call does before its tool runs.
pub fn check_arguments(name: &str, schema: &Schema, arguments: &Value) -> Result<(), CallError> {
    match CallError::violations(name, schema.validator(), arguments) {
        Some(error) => Err(error),
        None => Ok(()),
    }
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
