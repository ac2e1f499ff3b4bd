//! watch: how one shared engine is doing, kept by the engine as it is used. A request that
//! fails marks it down, counts, and is logged when it goes down or its reason changes (not at
//! every failure: a Redis gone away would log at every call); one that succeeds marks it up,
//! logged once. What is kept never holds a password: the engines make their messages from
//! the URL as shown.

use crate::EngineHealth;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The health of one engine.
pub(crate) struct Watch {
    engine: &'static str,
    /// The engine's URL as shown (no password), for the log line when it comes up.
    shown: String,
    needed_for_calls: bool,
    up: AtomicBool,
    failures: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Watch {
    pub(crate) fn new(engine: &'static str, shown: String, needed_for_calls: bool) -> Self {
        Watch {
            engine,
            shown,
            needed_for_calls,
            up: AtomicBool::new(false),
            failures: AtomicU64::new(0),
            last_error: Mutex::new(Some("not reached yet".into())),
        }
    }

    /// A request answered.
    pub(crate) fn answered(&self) {
        if !self.up.swap(true, Ordering::SeqCst) {
            tracing::info!(engine = self.engine, at = %self.shown, "{} answers", self.engine);
            *self.error() = None;
        }
    }

    /// A request failed, for `why` (no password in it): counted, and logged when the engine
    /// goes down or the reason changes. Returns `why`.
    pub(crate) fn failed(&self, why: String) -> String {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut error = self.error();
        if self.up.swap(false, Ordering::SeqCst) || error.as_deref() != Some(why.as_str()) {
            tracing::warn!("{why}");
        }
        *error = Some(why.clone());
        why
    }

    fn error(&self) -> MutexGuard<'_, Option<String>> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn health(&self) -> EngineHealth {
        EngineHealth {
            engine: self.engine,
            up: self.up.load(Ordering::SeqCst),
            error: self.error().clone(),
            failures: self.failures.load(Ordering::Relaxed),
            needed_for_calls: self.needed_for_calls,
        }
    }
}
