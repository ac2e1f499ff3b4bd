//! watch: how one shared engine is doing, kept by the engine as it is used. A request that
//! fails marks it down and counts; one that succeeds marks it up. A change (up, down, another
//! reason) is logged, at most one line per [`LOG_EVERY`] per engine: a Redis gone away would
//! otherwise log at every call, and one that flaps at every change; the next line says how
//! many changes went unlogged. What is kept never holds a password: the engines make their
//! messages from the URL as shown.
//!
//! An engine's fault never makes the host unready (every replica shares the engine: a fault
//! of it would take them all out of the balancer at once); `/readyz`'s body, `/metrics` and
//! `status` say it, with what it stops ([`EngineHealth::stops`]).

use crate::EngineHealth;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The most often one engine's changes are logged.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The health of one engine.
pub(crate) struct Watch {
    engine: &'static str,
    /// The engine's URL as shown (no password), for the log line when it comes up.
    shown: String,
    /// What fails while it is down.
    stops: &'static str,
    up: AtomicBool,
    failures: AtomicU64,
    state: Mutex<State>,
}

struct State {
    last_error: Option<String>,
    /// When a change was last logged.
    logged: Option<Instant>,
    /// Changes since then that were not.
    unlogged: u64,
}

impl Watch {
    pub(crate) fn new(engine: &'static str, shown: String, stops: &'static str) -> Self {
        Watch {
            engine,
            shown,
            stops,
            up: AtomicBool::new(false),
            failures: AtomicU64::new(0),
            state: Mutex::new(State {
                last_error: Some("not reached yet".into()),
                logged: None,
                unlogged: 0,
            }),
        }
    }

    /// A request answered.
    pub(crate) fn answered(&self) {
        if !self.up.swap(true, Ordering::SeqCst) {
            let mut state = self.state();
            state.last_error = None;
            if let Some(unlogged) = state.may_log() {
                tracing::info!(
                    engine = self.engine,
                    at = %self.shown,
                    "{} answers{}",
                    self.engine,
                    unlogged
                );
            }
        }
    }

    /// A request failed, for `why` (no password in it): counted, and logged when the engine
    /// goes down or the reason changes (within [`LOG_EVERY`]). Returns `why`.
    pub(crate) fn failed(&self, why: String) -> String {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        let went_down = self.up.swap(false, Ordering::SeqCst);
        if went_down || state.last_error.as_deref() != Some(why.as_str()) {
            if let Some(unlogged) = state.may_log() {
                tracing::warn!(engine = self.engine, "{why}; {}{unlogged}", self.stops);
            }
            state.last_error = Some(why.clone());
        }
        why
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn health(&self) -> EngineHealth {
        let up = self.up.load(Ordering::SeqCst);
        EngineHealth {
            engine: self.engine,
            up,
            error: if up {
                None
            } else {
                self.state().last_error.clone()
            },
            failures: self.failures.load(Ordering::Relaxed),
            stops: self.stops,
        }
    }
}

impl State {
    /// Whether a change may be logged now: `Some` with what to add about the changes not
    /// logged before it, or `None` (it is counted instead).
    fn may_log(&mut self) -> Option<String> {
        if self.logged.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            self.unlogged += 1;
            return None;
        }
        self.logged = Some(Instant::now());
        Some(match std::mem::take(&mut self.unlogged) {
            0 => String::new(),
            n => format!(
                " ({n} changes in the {} s before were not logged)",
                LOG_EVERY.as_secs()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flapping_engine_logs_one_change_per_period_and_counts_the_rest() {
        let watch = Watch::new("redis", "redis://r/0".into(), "quotas");
        watch.answered();
        for n in 0..100 {
            watch.failed(format!("down {n}"));
            watch.answered();
        }
        let state = watch.state();
        assert_eq!(state.unlogged, 200, "every change after the first counted");
        drop(state);
        let health = watch.health();
        assert!(health.up && health.error.is_none());
        assert_eq!(health.failures, 100);
        watch.state().logged = Some(Instant::now() - LOG_EVERY);
        let said = watch.state().may_log().expect("a period passed");
        assert!(said.contains("200 changes"), "{said}");
    }
}
