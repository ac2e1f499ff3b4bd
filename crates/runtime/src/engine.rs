//! The engine settings every component runs under (one engine per compiler tier: Winch's
//! code does not load into Cranelift's engine), and the thread that advances the epochs of
//! them all while calls run (and sleeps without waking once none has run for a few ticks).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy};

/// How often the epoch advances; timeouts are checked, and long calls yield, at this pace.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Which compiler made a component's code: Winch, wasmtime's baseline compiler (fast to
/// compile, slower code; x86_64 only), or Cranelift, its optimizing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Winch,
    Cranelift,
}

impl Tier {
    /// Its name in logs, `status`, `/metrics` and the worker's command line.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Winch => "winch",
            Tier::Cranelift => "cranelift",
        }
    }

    /// The tier of a worker's `--tier` argument.
    pub fn from_name(name: &str) -> Option<Self> {
        [Tier::Winch, Tier::Cranelift]
            .into_iter()
            .find(|tier| tier.name() == name)
    }

    /// Whether this build of wasmtime has Winch for this machine (x86_64 only).
    pub fn winch_available() -> bool {
        cfg!(target_arch = "x86_64")
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The settings that decide the code a component compiles to: the compiler of `tier`, epoch
/// interruption for deadlines, no component-model concurrency. The compile worker uses
/// exactly these, so its artifacts load into the host's engine of that tier (which adds the
/// pooling allocator, a runtime setting).
pub(super) fn compile_config(tier: Tier) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true).concurrency_support(false);
    if tier == Tier::Winch {
        config.strategy(Strategy::Winch);
    }
    config
}

/// What one instance (one call) may take of the pool by default: a component that declares
/// more is refused at load, naming the resource and the setting that raises it. The pool
/// holds this much for every instance, so no call can take another's share.
pub const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
pub const MEMORIES_PER_COMPONENT: u32 = 2;
pub const TABLES_PER_COMPONENT: u32 = 32;

/// One call's share of the instance pool (`[host] core-instances-per-call`,
/// `memories-per-call`, `tables-per-call`; read at start): the pool reserves it for each of
/// its instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolShare {
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl Default for PoolShare {
    fn default() -> Self {
        PoolShare {
            core_instances: CORE_INSTANCES_PER_COMPONENT,
            memories: MEMORIES_PER_COMPONENT,
            tables: TABLES_PER_COMPONENT,
        }
    }
}
/// Elements of one table, at most (a table declared larger is refused at load, and none may
/// grow past it): the pool reserves this much for every table of every instance.
pub const TABLE_ELEMENTS: usize = 20_000;

/// The table bytes a slot keeps resident when memory is kept resident.
const TABLE_KEEP_RESIDENT: usize = 256 << 10;

/// The engine settings of the host: [`compile_config`] with the pooling allocator sized for
/// `max_instances` instances, each with its full share of core instances, memories and
/// tables, keeping up to `keep_resident` bytes of each linear memory resident between calls
/// (`[host] keep-resident-mib`; 0: every page is given back). Public so that the benchmarks'
/// raw-wasmtime baseline runs on exactly the same settings.
pub fn engine_config(max_instances: u32, keep_resident: usize) -> Config {
    engine_config_with(max_instances, keep_resident, PoolShare::default())
}

/// [`engine_config`] with `share` of the pool for each instance.
pub fn engine_config_with(max_instances: u32, keep_resident: usize, share: PoolShare) -> Config {
    tier_config(Tier::Cranelift, max_instances, keep_resident, share)
}

/// [`engine_config_with`] for the code of `tier`.
pub(super) fn tier_config(
    tier: Tier,
    max_instances: u32,
    keep_resident: usize,
    share: PoolShare,
) -> Config {
    let n = max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(share.core_instances))
        .total_memories(n.saturating_mul(share.memories))
        .total_tables(n.saturating_mul(share.tables))
        .total_stacks(n)
        .max_core_instances_per_component(share.core_instances)
        .max_memories_per_component(share.memories)
        .max_tables_per_component(share.tables)
        .table_elements(TABLE_ELEMENTS)
        .max_memory_size(4 << 30);
    if keep_resident > 0 {
        // A slot's dirty pages are put back from the component's image and stay resident,
        // instead of being unmapped and faulted in again by the next call (PAGEMAP_SCAN finds
        // which pages a call touched, on Linux 6.7 and later).
        pool.pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(keep_resident)
            .table_keep_resident(TABLE_KEEP_RESIDENT);
    }
    let mut config = compile_config(tier);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Advances the engines' epochs every [`EPOCH_TICK`] while at least one store is alive
/// ([`EpochTicker::running`]), and for [`LINGER`] ticks after the last one ends; then it
/// sleeps without waking until a store starts: an idle host costs no CPU for its deadlines.
/// A store's deadline is counted from the epoch when it starts, so epochs that did not pass
/// while nothing ran take nothing from anyone's time.
///
/// The linger is what keeps a steady stream of calls from waking the thread once per call:
/// one call at a time is 0 stores, then 1, then 0 again, hundreds of times a second, and
/// parking and waking the thread each time cost every call two context switches and a
/// futex (BENCHMARKS.md, "Where an HTTP call's time goes"). Starting a store is then one
/// atomic add while the thread ticks.
pub(super) struct EpochTicker {
    demand: Arc<Demand>,
}

/// Ticks the thread goes on for once no store is alive, before it parks: calls a few
/// milliseconds apart or closer never wake it, and a host whose last call ended parks within
/// [`LINGER`] ms.
const LINGER: u64 = 4;

/// How many stores are alive, whether the thread is parked and whether it should end; the
/// ticks so far, and the tick at which the last store ended.
#[derive(Default)]
struct Demand {
    running: AtomicUsize,
    parked: AtomicBool,
    stop: AtomicBool,
    lock: Mutex<()>,
    changed: Condvar,
    ticks: AtomicU64,
    idle_since: AtomicU64,
}

/// One store's claim on the ticker: ticking goes on until every claim is dropped.
pub(super) struct Ticking {
    demand: Arc<Demand>,
}

impl EpochTicker {
    /// Starts the thread that advances the epoch of each of `engines` (one per tier).
    pub(super) fn start(engines: Vec<Engine>) -> Self {
        let demand = Arc::new(Demand::default());
        let ticking = demand.clone();
        std::thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || ticking.run(&engines))
            .map(|_| ())
            .unwrap_or_else(|e| {
                tracing::error!("could not start the epoch thread; timeouts will not fire: {e}")
            });
        EpochTicker { demand }
    }

    /// Keeps the epoch advancing until the claim is dropped (a store's lifetime).
    pub(super) fn running(&self) -> Ticking {
        let demand = &self.demand;
        // SeqCst with the thread's `parked` then `running` (Dekker): either it sees this
        // store and does not park, or this sees it parked and wakes it.
        if demand.running.fetch_add(1, Ordering::SeqCst) == 0
            && demand.parked.load(Ordering::SeqCst)
        {
            let _held = demand.lock.lock().unwrap_or_else(PoisonError::into_inner);
            demand.changed.notify_one();
        }
        Ticking {
            demand: Arc::clone(demand),
        }
    }

    /// The ticks so far, and whether the thread is parked (for tests).
    #[cfg(test)]
    fn ticks(&self) -> (u64, bool) {
        let demand = &self.demand;
        (
            demand.ticks.load(Ordering::SeqCst),
            demand.parked.load(Ordering::SeqCst),
        )
    }
}

impl Demand {
    /// The thread's loop: tick while stores are alive and [`LINGER`] ticks after, then park.
    fn run(&self, engines: &[Engine]) {
        loop {
            let idle = self.running.load(Ordering::SeqCst) == 0;
            let ticks = self.ticks.load(Ordering::SeqCst);
            if idle && ticks >= self.idle_since.load(Ordering::SeqCst) + LINGER {
                let mut held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                self.parked.store(true, Ordering::SeqCst);
                while self.running.load(Ordering::SeqCst) == 0 && !self.stop.load(Ordering::SeqCst)
                {
                    held = (self.changed.wait(held)).unwrap_or_else(PoisonError::into_inner);
                }
                self.parked.store(false, Ordering::SeqCst);
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(EPOCH_TICK);
            for engine in engines {
                engine.increment_epoch();
            }
            self.ticks.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let demand = &self.demand;
        if demand.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            let now = demand.ticks.load(Ordering::SeqCst);
            demand.idle_since.store(now, Ordering::SeqCst);
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        let demand = &self.demand;
        demand.stop.store(true, Ordering::SeqCst);
        let _held = demand.lock.lock().unwrap_or_else(PoisonError::into_inner);
        demand.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Waits (up to a minute) until `ready` holds of the ticker's state.
    fn until(ticker: &EpochTicker, ready: impl Fn((u64, bool)) -> bool) -> (u64, bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = ticker.ticks();
            if ready(now) {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "the ticker never got there: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_epoch_advances_while_a_store_runs_and_stands_still_when_none_does() {
        let engine = Engine::new(&compile_config(Tier::Cranelift)).expect("engine");
        let ticker = EpochTicker::start(vec![engine]);
        // Idle from the start: it parks within its linger.
        let (ticks, _) = until(&ticker, |(_, parked)| parked);
        assert!(ticks <= LINGER, "{ticks} ticks before parking");
        // Two stores: it ticks until both are gone.
        let (first, second) = (ticker.running(), ticker.running());
        let (ticked, _) = until(&ticker, |(ticks, _)| ticks > 10);
        drop(first);
        until(&ticker, |(ticks, _)| ticks > ticked + 10);
        drop(second);
        // Idle again: parked, and no tick however long it waits.
        let (parked, _) = until(&ticker, |(_, parked)| parked);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(ticker.ticks(), (parked, true));
        // A store again wakes it.
        let third = ticker.running();
        until(&ticker, |(ticks, _)| ticks > parked);
        drop(third);
    }
}
