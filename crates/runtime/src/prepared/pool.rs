//! The pool-wide side of prepared instances: the bounds of all stocks together
//! ([`PreparedLimits`]), what they hold ([`PreparedUsage`]), every stock by what makes its
//! instances alike, the stocks to fill again after a call, and giving a prepared instance's
//! slot to a call that needs one.

use super::{Preparation, Shelf, Stock};
use crate::sandbox::SandboxSpec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use toolhost_contract::{CallLimits, SourceHash};

/// The bounds of all prepared instances together (`[host] max-prepared`,
/// `max-prepared-mib`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreparedLimits {
    /// Instances held prepared at once; never more than half the pool.
    pub max_instances: usize,
    /// Bytes of linear memory they hold at once.
    pub max_bytes: usize,
}

impl Default for PreparedLimits {
    fn default() -> Self {
        PreparedLimits {
            max_instances: 32,
            max_bytes: 512 << 20,
        }
    }
}

/// Prepared instances as they are now, and what became of those made so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedUsage {
    pub instances: usize,
    /// Bytes of linear memory they hold (an upper bound of what is resident).
    pub bytes: usize,
    pub max_instances: usize,
    pub max_bytes: usize,
    /// Instances prepared, taken by a call, given up for a call that needed the slot, and
    /// preparations that failed, since the start.
    pub made: u64,
    pub used: u64,
    pub evicted: u64,
    pub failed: u64,
}

/// The runtime's prepared instances: every stock (to take a slot back for a call, and for
/// status) and the counts bounded by [`PreparedLimits`].
pub(crate) struct Pool {
    /// Stocks by what makes their instances alike, so that invokers (and reloads) that
    /// would make identical instances share one.
    pub(super) stocks: Mutex<HashMap<Alike, Weak<Shelf>>>,
    pub(super) counts: Arc<Counts>,
    pub(super) limits: PreparedLimits,
    /// Stocks that lost an instance to a call, or stopped short because calls needed the
    /// slots: the next call to end has them fill again ([`Pool::after_call`]). Each is
    /// listed once (its own `short` flag), so the list is at most the number of stocks.
    short: Mutex<Vec<Weak<Shelf>>>,
    /// Whether the list has anything: the one atomic load an ending call pays otherwise.
    any_short: AtomicBool,
}

/// What a prepared instance is made from and with: instances alike in all four are
/// interchangeable.
pub(super) type Alike = (SourceHash, CallLimits, SandboxSpec, Preparation);

#[derive(Default)]
pub(super) struct Counts {
    instances: AtomicUsize,
    pub(super) bytes: AtomicUsize,
    pub(super) made: AtomicU64,
    pub(super) used: AtomicU64,
    pub(super) evicted: AtomicU64,
    pub(super) failed: AtomicU64,
}

impl Pool {
    /// The pool of a runtime whose instance pool has `capacity` slots: at most half of them
    /// may be held prepared.
    pub(crate) fn new(limits: PreparedLimits, capacity: usize) -> Self {
        Pool {
            stocks: Mutex::default(),
            counts: Arc::default(),
            short: Mutex::default(),
            any_short: AtomicBool::new(false),
            limits: PreparedLimits {
                max_instances: limits.max_instances.min(capacity / 2),
                max_bytes: limits.max_bytes,
            },
        }
    }

    pub(super) fn stocks(&self) -> Vec<Arc<Shelf>> {
        let stocks = self.stocks.lock().unwrap_or_else(PoisonError::into_inner);
        stocks.values().filter_map(Weak::upgrade).collect()
    }

    /// Drops one prepared instance, freeing its slot for a call that needs one. False when
    /// there is none.
    pub(crate) fn evict_one(&self) -> bool {
        if self.counts.instances.load(Ordering::Acquire) == 0 {
            return false;
        }
        let evicted = self.stocks().into_iter().find_map(|stock| {
            let prepared = stock.pop()?;
            self.mark_short(&stock);
            Some(prepared)
        });
        let found = evicted.is_some();
        if found {
            self.counts.evicted.fetch_add(1, Ordering::Relaxed);
        }
        drop(evicted);
        found
    }

    /// Lists `stock` to fill again once a call has ended.
    pub(super) fn mark_short(&self, stock: &Arc<Shelf>) {
        if !stock.short.swap(true, Ordering::AcqRel) {
            (self.short.lock().unwrap_or_else(PoisonError::into_inner)).push(Arc::downgrade(stock));
            self.any_short.store(true, Ordering::Release);
        }
    }

    /// After a call ended (its slot is free again): the stocks left short by the pressure of
    /// calls fill again. One atomic load when none is.
    pub(crate) fn after_call(&self) {
        if !self.any_short.load(Ordering::Acquire) || !self.any_short.swap(false, Ordering::AcqRel)
        {
            return;
        }
        let short = std::mem::take(&mut *self.short.lock().unwrap_or_else(PoisonError::into_inner));
        for stock in short.iter().filter_map(Weak::upgrade) {
            stock.short.store(false, Ordering::Release);
            Stock(stock).fill();
        }
    }

    /// Prepared instances held now (each holds a slot of the instance pool).
    pub(crate) fn held(&self) -> usize {
        self.counts.instances.load(Ordering::Acquire)
    }

    /// Room for one more prepared instance, counted until the [`Held`] is dropped.
    pub(super) fn hold(&self) -> Option<Held> {
        let counts = &self.counts;
        if counts.instances.fetch_add(1, Ordering::AcqRel) >= self.limits.max_instances {
            counts.instances.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Held {
            counts: Arc::clone(counts),
            bytes: 0,
        })
    }

    pub(super) fn usage(&self) -> PreparedUsage {
        let counts = &self.counts;
        PreparedUsage {
            instances: counts.instances.load(Ordering::Relaxed),
            bytes: counts.bytes.load(Ordering::Relaxed),
            max_instances: self.limits.max_instances,
            max_bytes: self.limits.max_bytes,
            made: counts.made.load(Ordering::Relaxed),
            used: counts.used.load(Ordering::Relaxed),
            evicted: counts.evicted.load(Ordering::Relaxed),
            failed: counts.failed.load(Ordering::Relaxed),
        }
    }
}

/// One prepared instance's share of the bounds, given back when it is dropped.
pub(super) struct Held {
    counts: Arc<Counts>,
    bytes: usize,
}

impl Held {
    /// Counts `bytes` more against `max_bytes`; false (and nothing counted) when over.
    pub(super) fn add_bytes(&mut self, bytes: usize, max_bytes: usize) -> bool {
        let before = self.counts.bytes.fetch_add(bytes, Ordering::AcqRel);
        if before.saturating_add(bytes) > max_bytes {
            self.counts.bytes.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        self.bytes += bytes;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.counts.instances.fetch_sub(1, Ordering::AcqRel);
        self.counts.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}
