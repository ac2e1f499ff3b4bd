//! Prepared instances: a call's fresh instance, made before the call arrives.
//!
//! Every call runs in an instance nobody has called before, and is dropped after it. Nothing
//! in that promise says *when* the instance is made, and for some components making it is
//! most of a call (componentize-py and componentize-js run start-up code that fills their
//! function tables: 1 to 2.5 ms, against tens of microseconds for a Rust component). A
//! [`Stock`] keeps such instances ready: instantiated under the invoker's limits and grants,
//! never called, each handed to one call and then dropped as any other. A call that finds
//! none instantiates as it always did.
//!
//! Why nothing of one call reaches another (docs/decisions.md, "Prepared instances"): a
//! prepared instance is made for nobody (no session, no caller link) and taken by exactly one
//! call, which makes the store its own before any of its code runs (`Sandboxed::begin`: new
//! log and talk budgets, a new network guard, its deadline, and output captured during
//! preparation logged and emptied). Its memory, tables and resource table were only ever
//! written by the component's own start-up code; the instance is dropped after the call, so
//! the pool resets its slot as before.
//!
//! Bounds: a stock holds at most its invoker's `prepared` instances (by default one for a
//! component whose instantiation takes [`PREPARE_ABOVE`] or more, none otherwise), all stocks
//! together at most [`PreparedLimits`], and a preparation only takes a pool slot that is free
//! while no call waits: a call that finds the pool full takes a prepared instance's slot
//! instead ([`Pool::evict_one`]). A preparation that fails is reported once and that stock
//! prepares no more; a reload makes new stocks.

mod pool;

pub(crate) use pool::Pool;
pub use pool::{PreparedLimits, PreparedUsage};

use crate::instance::{Sandboxed, within_deadline};
use crate::sandbox::SandboxSpec;
use crate::tier::Code;
use crate::{Caller, LoadedComponent, Runtime};
use pool::{Alike, Held};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use toolhost_contract::{CallLimits, CallerLink, RunError, Unlinked};
use wasmtime::component::Instance;

/// A component whose instantiation takes this long or more gets one prepared instance when
/// its invoker does not say how many (the fastest of the first [`SAMPLES`] instantiations).
/// Measured on the project's machine: a Rust component 15 to 60 µs, Python and JavaScript
/// components 0.9 to 2.5 ms (BENCHMARKS.md, "Prepared instances").
pub const PREPARE_ABOVE: Duration = Duration::from_micros(250);
/// Instantiations timed before a stock of [`Preparation::Measured`] decides.
const SAMPLES: u32 = 3;
/// An instance whose drop takes this long or more (the fastest of the first [`SAMPLES`]
/// drops) is dropped after its call has answered, in the background: a Rust component's
/// takes a few microseconds, a Python or JavaScript component's 100 to 200 µs.
pub const DROP_ABOVE: Duration = Duration::from_micros(50);
/// The most instances one invoker may keep prepared (`prepared` in `[limits]`).
pub const MAX_PREPARED_PER_INVOKER: usize = 64;

/// How many instances an invoker keeps prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preparation {
    /// One if instantiating the component takes [`PREPARE_ABOVE`] or more, else none.
    Measured,
    /// Exactly this many (`prepared = N`; 0 turns preparation off).
    Keep(usize),
}

/// One stock as it is now, for `toolhost status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StockState {
    /// The component file.
    pub component: String,
    pub ready: usize,
    /// How many it keeps (decided from `instantiate_us` when the invoker did not say).
    pub target: usize,
    /// The fastest of its first three instantiations, in microseconds.
    pub instantiate_us: Option<u64>,
    /// Instances this stock prepared, and preparations of it that failed (at most one: it
    /// prepares no more after a failure).
    pub made: u64,
    pub failures: u64,
    /// Why it stopped preparing.
    pub failed: Option<String>,
}

/// An instance made and never called, in its own store and pool slot.
pub(crate) struct Prepared {
    sandboxed: Sandboxed,
    instance: Instance,
    /// The component's code it was made from (a call on other code does not take it).
    code: Arc<Code>,
    /// The granted directories it opened, as [`crate::sandbox::granted_directories`] saw them
    /// right after (empty without grants of files).
    directories: Vec<(u64, u64)>,
    _held: Held,
}

impl Prepared {
    /// The store and the instance in it, no longer counted as prepared.
    pub(crate) fn into_parts(self) -> (Sandboxed, Instance) {
        (self.sandboxed, self.instance)
    }
}

/// The prepared instances of the invokers that run one component with the same limits,
/// grants and `prepared` (they would make identical instances). Cloned handles share it;
/// dropping the last one (a reload that replaced the component) drops its instances.
#[derive(Clone)]
pub struct Stock(Arc<Shelf>);

impl std::fmt::Debug for Stock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stock")
            .field("component", &self.0.component.path)
            .field("want", &self.0.want)
            .finish_non_exhaustive()
    }
}

struct Shelf {
    runtime: Arc<Runtime>,
    component: Arc<LoadedComponent>,
    limits: CallLimits,
    sandbox: SandboxSpec,
    want: Preparation,
    ready: Mutex<Vec<Prepared>>,
    /// Instances to keep ready; for [`Preparation::Measured`], one until it has decided.
    target: AtomicUsize,
    timing: Mutex<Timing>,
    /// A task is preparing for this stock (one at a time).
    preparing: AtomicBool,
    /// Why the last preparation failed: the stock prepares no more.
    failed: Mutex<Option<String>>,
    made: AtomicU64,
    failures: AtomicU64,
    /// Bytes of linear memory of its last instance.
    bytes: AtomicUsize,
    /// Listed in the pool's stocks to fill again after a call.
    short: AtomicBool,
    /// Told when a preparation task ends (the tests and benchmarks wait for a full stock).
    idle: tokio::sync::Notify,
}

#[derive(Default)]
struct Timing {
    samples: u32,
    fastest: Option<Duration>,
    /// Drops timed, and the fastest of them.
    drops: u32,
    fastest_drop: Option<Duration>,
}

/// Why a preparation task stopped.
enum Stop {
    /// The stock has what it wants.
    Enough,
    /// Calls need the slots (one waits, or the pool is full): it fills again once a call
    /// has ended ([`Pool::after_call`]).
    Calls,
    /// `max-prepared` or `max-prepared-mib` is reached: it fills again after its own next
    /// call, not after everyone's (which would cost every call a look at every stock).
    Bounds,
    /// The preparation failed: it prepares no more.
    Failed,
}

impl Runtime {
    /// The stock of `component` for invokers with these `limits`, `sandbox` and `want`. It
    /// prepares nothing until [`Stock::fill`].
    pub fn stock(
        self: &Arc<Self>,
        component: &Arc<LoadedComponent>,
        limits: CallLimits,
        sandbox: &SandboxSpec,
        want: Preparation,
    ) -> Stock {
        let alike: Alike = (component.hash, limits, sandbox.clone(), want);
        let mut stocks = (self.prepared.stocks.lock()).unwrap_or_else(PoisonError::into_inner);
        if let Some(shelf) = stocks.get(&alike).and_then(Weak::upgrade) {
            return Stock(shelf);
        }
        let target = match want {
            Preparation::Measured => 1,
            Preparation::Keep(n) => n.min(MAX_PREPARED_PER_INVOKER),
        };
        let shelf = Arc::new(Shelf {
            runtime: Arc::clone(self),
            component: Arc::clone(component),
            limits,
            sandbox: sandbox.clone(),
            want,
            ready: Mutex::default(),
            target: AtomicUsize::new(target),
            timing: Mutex::default(),
            preparing: AtomicBool::new(false),
            failed: Mutex::default(),
            made: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            bytes: AtomicUsize::new(0),
            short: AtomicBool::new(false),
            idle: tokio::sync::Notify::new(),
        });
        // Stocks no catalog holds are forgotten when the map has doubled: a constant share per
        // insert, however many come and go.
        let len = stocks.len();
        stocks.insert(alike, Arc::downgrade(&shelf));
        if len >= 8 && (len + 1).is_power_of_two() {
            stocks.retain(|_, stock| stock.strong_count() > 0);
        }
        Stock(shelf)
    }

    /// The prepared instances now, and what became of those made so far.
    pub fn prepared(&self) -> PreparedUsage {
        self.prepared.usage()
    }

    /// Every stock that prepares or holds instances, for status.
    pub fn stocks(&self) -> Vec<StockState> {
        let mut stocks: Vec<StockState> = (self.prepared.stocks().iter())
            .map(|shelf| shelf.state())
            .filter(|state| state.target > 0 || state.ready > 0 || state.failed.is_some())
            .collect();
        stocks.sort_by(|a, b| a.component.cmp(&b.component));
        stocks
    }

    /// Instantiates `component` in a new store in `slot`, for nobody: no session, no caller
    /// link. Whatever its start-up code writes to stdout or stderr is logged under
    /// `component` and gone before a call takes the instance.
    async fn prepare(
        &self,
        shelf: &Shelf,
        code: &Code,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(Sandboxed, Instance), RunError> {
        let label = shelf.component.path.display().to_string();
        let nobody: Arc<dyn CallerLink> = Arc::new(Unlinked);
        let caller = Caller {
            invoker: &label,
            session: "",
            link: &nobody,
        };
        let mut sandboxed = self.sandboxed_in(
            &code.engine,
            Some(slot),
            caller,
            shelf.limits,
            &shelf.sandbox,
        )?;
        let made =
            within_deadline(shelf.limits, code.world.instantiate(&mut sandboxed.store)).await;
        let instance = sandboxed.conclude(caller, shelf.limits, made, |_| false)?;
        Ok((sandboxed, instance))
    }
}

impl Stock {
    /// A prepared instance for a call on `code`, if one is ready.
    /// One whose granted directories are no longer the ones it opened (one was moved, or a
    /// link has appeared in its path) is dropped instead: its call instantiates now, with
    /// what the grants name now. So is one made from the component's earlier code (Winch's,
    /// before Cranelift's replaced it): new calls run the new code.
    pub(crate) fn take(&self, code: &Arc<Code>) -> Option<Prepared> {
        let prepared = self.0.pop()?;
        if !Arc::ptr_eq(&prepared.code, code) {
            (self.0.runtime.prepared.counts.evicted).fetch_add(1, Ordering::Relaxed);
            // The rest of the stock was made from the same earlier code: made again.
            drop(std::mem::take(
                &mut *self.0.ready.lock().unwrap_or_else(PoisonError::into_inner),
            ));
            self.fill();
            return None;
        }
        if !prepared.directories.is_empty()
            && crate::sandbox::granted_directories(&self.0.sandbox).as_ref()
                != Some(&prepared.directories)
        {
            tracing::debug!(
                "a prepared instance of {} is not used: a granted directory changed since it was \
                 made",
                self.0.component.path.display()
            );
            (self.0.runtime.prepared.counts.evicted).fetch_add(1, Ordering::Relaxed);
            return None;
        }
        (self.0.runtime.prepared.counts.used).fetch_add(1, Ordering::Relaxed);
        Some(prepared)
    }

    /// Done with a call's instance: dropped, and the stock filled again, after the call has
    /// its answer. Dropping an instance resets every page its call touched, which for a
    /// large component (Python, JavaScript) takes a tenth of a millisecond or more: once its
    /// first drops were timed at [`DROP_ABOVE`] or more, a stock's instances are dropped in
    /// the background, off the call's way back; the others here and now (a task would cost
    /// more than the drop).
    pub(crate) fn retire(&self, instance: Sandboxed) {
        let shelf = &self.0;
        match tokio::runtime::Handle::try_current() {
            Ok(tokio) if shelf.slow_drops() => {
                let stock = self.clone();
                tokio.spawn(async move {
                    drop(instance);
                    stock.0.runtime.prepared.after_call();
                    stock.fill();
                });
            }
            _ => {
                let started = Instant::now();
                drop(instance);
                shelf.dropped(started.elapsed());
                shelf.runtime.prepared.after_call();
                self.fill();
            }
        }
    }

    /// Prepares instances in the background until the stock holds what it wants, unless a
    /// task does already or there is no room. Needs a tokio runtime (does nothing without).
    pub fn fill(&self) {
        let shelf = &self.0;
        if !shelf.wants_more() || shelf.preparing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            shelf.preparing.store(false, Ordering::Release);
            return;
        };
        tokio.spawn(Shelf::prepare_while_wanted(Arc::downgrade(shelf)));
    }

    /// Waits until no preparation runs for this stock (it is full, or has stopped for want
    /// of room), at most `limit`. For tests and benchmarks.
    pub async fn settled(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.0.preparing.load(Ordering::Acquire) {
            let idle = self.0.idle.notified();
            if !self.0.preparing.load(Ordering::Acquire) {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, idle).await.is_err() {
                return false;
            }
        }
        true
    }

    /// The stock as it is now.
    pub fn state(&self) -> StockState {
        self.0.state()
    }

    /// Counts one instantiation's time (a call's, made inline) towards the decision of a
    /// [`Preparation::Measured`] stock.
    pub(crate) fn measured(&self, took: Duration) {
        self.0.measured(took);
    }
}

impl Shelf {
    fn pop(&self) -> Option<Prepared> {
        (self.ready.lock().unwrap_or_else(PoisonError::into_inner)).pop()
    }

    fn ready(&self) -> usize {
        (self.ready.lock().unwrap_or_else(PoisonError::into_inner)).len()
    }

    fn failed(&self) -> Option<String> {
        (self.failed.lock().unwrap_or_else(PoisonError::into_inner)).clone()
    }

    fn wants_more(&self) -> bool {
        self.failed().is_none() && self.ready() < self.target.load(Ordering::Acquire)
    }

    fn decided(&self) -> bool {
        self.want != Preparation::Measured
            || (self.timing.lock().unwrap_or_else(PoisonError::into_inner)).samples >= SAMPLES
    }

    /// Counts one instantiation's time, the first [`SAMPLES`] of them (shown in status);
    /// a [`Preparation::Measured`] stock decides on them.
    fn measured(&self, took: Duration) {
        let mut timing = self.timing.lock().unwrap_or_else(PoisonError::into_inner);
        if timing.samples >= SAMPLES {
            return;
        }
        timing.samples += 1;
        let fastest = timing.fastest.map_or(took, |f| f.min(took));
        timing.fastest = Some(fastest);
        if timing.samples == SAMPLES && self.want == Preparation::Measured {
            let keep = usize::from(fastest >= PREPARE_ABOVE);
            self.target.store(keep, Ordering::Release);
            drop(timing);
            if keep == 0 {
                drop(std::mem::take(
                    &mut *self.ready.lock().unwrap_or_else(PoisonError::into_inner),
                ));
            }
        }
    }

    /// Whether this stock's instances are slow to drop (decided on its first drops).
    fn slow_drops(&self) -> bool {
        let timing = self.timing.lock().unwrap_or_else(PoisonError::into_inner);
        timing.drops >= SAMPLES && timing.fastest_drop.is_some_and(|d| d >= DROP_ABOVE)
    }

    fn dropped(&self, took: Duration) {
        let mut timing = self.timing.lock().unwrap_or_else(PoisonError::into_inner);
        if timing.drops < SAMPLES {
            timing.drops += 1;
            timing.fastest_drop = Some(timing.fastest_drop.map_or(took, |f| f.min(took)));
        }
    }

    fn state(&self) -> StockState {
        let timing = self.timing.lock().unwrap_or_else(PoisonError::into_inner);
        StockState {
            component: self.component.path.display().to_string(),
            ready: self.ready(),
            target: self.target.load(Ordering::Acquire),
            instantiate_us: timing.fastest.map(|f| f.as_micros() as u64),
            made: self.made.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            failed: self.failed(),
        }
    }

    /// Prepares until the stock is full or there is no room; one task per stock. Holds the
    /// stock only while it prepares, so a stock a reload dropped ends it.
    async fn prepare_while_wanted(shelf: Weak<Shelf>) {
        loop {
            let Some(stock) = shelf.upgrade() else { return };
            let stop = loop {
                if !stock.wants_more() && stock.decided() {
                    break Stop::Enough;
                }
                if let Err(stop) = stock.prepare_one().await {
                    break stop;
                }
            };
            stock.preparing.store(false, Ordering::Release);
            if matches!(stop, Stop::Calls) {
                stock.runtime.prepared.mark_short(&stock);
            }
            // A call that took an instance while this task was ending saw it still running
            // and left the refill to it: look once more.
            let again = matches!(stop, Stop::Enough)
                && stock.wants_more()
                && !stock.preparing.swap(true, Ordering::AcqRel);
            if !again {
                stock.idle.notify_waiters();
                return;
            }
        }
    }

    /// Prepares one instance and keeps it if the stock still wants it (an undecided
    /// [`Preparation::Measured`] stock prepares to time, and keeps at most one). Why not,
    /// when there was no room or the preparation failed.
    async fn prepare_one(&self) -> Result<(), Stop> {
        let runtime = &self.runtime;
        // A call waiting for a slot comes first; so does any call while the pool is full.
        if runtime.counters.waiting.load(Ordering::SeqCst) > 0 {
            return Err(Stop::Calls);
        }
        let Ok(slot) = Arc::clone(&runtime.slots).try_acquire_owned() else {
            return Err(Stop::Calls);
        };
        let Some(mut held) = runtime.prepared.hold() else {
            return Err(Stop::Bounds);
        };
        // An instance of this stock known to be over the bytes left is not made to find out.
        let known = self.bytes.load(Ordering::Relaxed);
        let taken = runtime.prepared.counts.bytes.load(Ordering::Relaxed);
        if taken.saturating_add(known) > runtime.prepared.limits.max_bytes {
            return Err(Stop::Bounds);
        }
        let started = Instant::now();
        // The granted directories before and after the instance opened its own: the same
        // both times, or the instance may hold one that was swapped meanwhile.
        let before = crate::sandbox::granted_directories(&self.sandbox);
        let code = self.component.code.load_full();
        let (sandboxed, instance) = match runtime.prepare(self, &code, slot).await {
            Ok(made) => made,
            Err(error) => {
                let component = self.component.path.display();
                tracing::warn!(
                    component = %component,
                    "could not prepare an instance of {component} ahead of its calls: {error}; \
                     its calls instantiate when they arrive, and it is not prepared again \
                     until the component or its invoker changes"
                );
                *self.failed.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(error.to_string());
                (runtime.prepared.counts.failed).fetch_add(1, Ordering::Relaxed);
                self.failures.fetch_add(1, Ordering::Relaxed);
                return Err(Stop::Failed);
            }
        };
        self.measured(started.elapsed());
        // A directory that changed while the instance was made (moved, or a link in its
        // path): the instance is not kept.
        let after = crate::sandbox::granted_directories(&self.sandbox);
        let directories = match (before, after) {
            (Some(before), Some(after)) if before == after => after,
            _ => return Err(Stop::Calls),
        };
        (runtime.prepared.counts.made).fetch_add(1, Ordering::Relaxed);
        self.made.fetch_add(1, Ordering::Relaxed);
        let bytes = sandboxed.memory_bytes();
        self.bytes.store(bytes, Ordering::Relaxed);
        if !held.add_bytes(bytes, runtime.prepared.limits.max_bytes) {
            return Err(Stop::Bounds);
        }
        // Under the lock a call's eviction takes: a call that began to wait for a slot before
        // this look gets it now; one that begins after finds this instance to evict.
        let mut ready = self.ready.lock().unwrap_or_else(PoisonError::into_inner);
        if runtime.counters.waiting.load(Ordering::SeqCst) > 0 {
            return Err(Stop::Calls);
        }
        if ready.len() < self.target.load(Ordering::Acquire) {
            ready.push(Prepared {
                sandboxed,
                instance,
                code,
                directories,
                _held: held,
            });
        }
        Ok(())
    }
}
