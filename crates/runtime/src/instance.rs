//! One instance's store as the runtime runs it ([`Sandboxed`]): its captured output and its
//! slot of the pool, the clock of its deadline, and what its end means (`conclude`: a
//! timeout, a trap classified, a refusal, or what it returned, with its output logged for
//! the caller). Calls, offers, loads and prepared instances all end here.

use crate::engine::{self, EpochTicker};
use crate::outcome::classify;
use crate::sandbox::{Capture, SandboxSpec};
use crate::state::{CallState, LogBudget};
use crate::talk::TalkBudget;
use crate::{Caller, network_guard};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;
use toolhost_contract::{CallLimits, PROGRESS_PER_CALL, RunError};
use wasmtime::{Store, UpdateDeadline};

/// A call stuck in a host function (a long sleep, say) is abandoned this long after its
/// timeout; CPU-bound guests are interrupted at the deadline itself by the epoch.
const WALL_CLOCK_GRACE: Duration = Duration::from_millis(50);

/// One instance's store, the captures of its output, and its slot of the pool (freed when
/// this is dropped).
pub(crate) struct Sandboxed {
    pub(crate) store: Store<CallState>,
    pub(crate) stdout: Capture,
    pub(crate) stderr: Capture,
    pub(crate) _slot: Option<OwnedSemaphorePermit>,
    /// The epoch advances while this is held: from [`Sandboxed::begin`] until the work for
    /// which it began is concluded.
    pub(crate) ticking: Option<engine::Ticking>,
}

/// Runs `work` to its end or to the call's deadline. CPU-bound guests are interrupted at the
/// deadline by the epoch; this catches a call stuck in a host function.
pub(crate) async fn within_deadline<T>(
    limits: CallLimits,
    work: impl Future<Output = wasmtime::Result<T>>,
) -> Result<wasmtime::Result<T>, tokio::time::error::Elapsed> {
    tokio::time::timeout(limits.timeout + WALL_CLOCK_GRACE, work).await
}

impl Sandboxed {
    /// Makes the store `caller`'s from now on: the log and talk budgets and the network guard
    /// are new and theirs, and the clock starts.
    pub(crate) fn begin(
        &mut self,
        ticker: &EpochTicker,
        caller: Caller<'_>,
        limits: CallLimits,
        sandbox: &SandboxSpec,
    ) {
        let state = self.store.data_mut();
        state.log = LogBudget::new(caller, sandbox.talk.log);
        state.talk = TalkBudget::new(sandbox.talk, Arc::clone(caller.link));
        state.network = network_guard(caller, limits, sandbox);
        self.start_clock(ticker, limits);
    }

    /// The deadline is `limits.timeout` from now, the epoch advancing until the work is
    /// concluded.
    pub(crate) fn start_clock(&mut self, ticker: &EpochTicker, limits: CallLimits) {
        self.ticking = Some(ticker.running());
        let deadline = Instant::now() + limits.timeout;
        self.store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        self.store.set_epoch_deadline(1);
    }

    /// Bytes of the instance's linear memories.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.store.data().limiter.in_use()
    }

    /// What the instance's work came to, with its captured output logged for `caller`: a
    /// timeout, a trap classified (memory, fuel, a crash), or what it returned. A tool's own
    /// error (`tool_error`) or a trap after one of its network requests was refused is that
    /// refusal: it failed for want of the grant. The epoch no longer advances for this store.
    pub(crate) fn conclude<T>(
        &mut self,
        caller: Caller<'_>,
        limits: CallLimits,
        outcome: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
        tool_error: impl Fn(&T) -> bool,
    ) -> Result<T, RunError> {
        self.ticking = None;
        let (out, out_dropped) = self.stdout.take();
        let (err, err_dropped) = self.stderr.take();
        let state = self.store.data();
        report_output(
            caller,
            &out,
            out_dropped,
            &err,
            err_dropped,
            state.log.dropped,
            state.talk.progress_dropped,
        );
        let refused = state.network.refused();
        let failed = match &outcome {
            Ok(Ok(answer)) => tool_error(answer),
            Ok(Err(_)) => true,
            Err(_) => false,
        };
        if failed && !refused.is_empty() {
            return Err(RunError::CapabilityDenied {
                message: refused.join("; "),
            });
        }
        match outcome {
            Err(_elapsed) => Err(RunError::Timeout {
                limit: limits.timeout,
            }),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(classify(&error, state.limiter.memory_refused, limits, &err)),
        }
    }
}

fn report_output(
    caller: Caller<'_>,
    out: &str,
    out_dropped: u64,
    err: &str,
    err_dropped: u64,
    logs_dropped: u32,
    progress_dropped: u32,
) {
    if !out.is_empty() {
        tracing::debug!(target: "plugin", invoker = caller.invoker, session = caller.session, stream = "stdout", dropped = out_dropped, "{out}");
    }
    if !err.is_empty() {
        tracing::debug!(target: "plugin", invoker = caller.invoker, session = caller.session, stream = "stderr", dropped = err_dropped, "{err}");
    }
    if logs_dropped > 0 {
        tracing::warn!(target: "plugin", invoker = caller.invoker, session = caller.session, "dropped {logs_dropped} log messages over the per-call limit");
    }
    if progress_dropped > 0 {
        tracing::debug!(target: "plugin", invoker = caller.invoker, session = caller.session, "dropped {progress_dropped} progress reports (not granted, or over the per-call limit of {PROGRESS_PER_CALL})");
    }
}
