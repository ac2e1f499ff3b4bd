//! The engine settings every component runs under, and the thread that advances the epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; timeouts are checked, and long calls yield, at this pace.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(1);

/// The settings that decide the code a component compiles to: epoch interruption for
/// deadlines, no component-model concurrency. The compile worker uses exactly these, so its
/// artifacts load into the host's engine (which adds the pooling allocator, a runtime
/// setting).
pub(super) fn compile_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true).concurrency_support(false);
    config
}

/// What one instance (one call) may take of the pool: a component that declares more is
/// refused at load, naming the resource. The pool holds this much for every instance, so no
/// call can take another's share.
pub const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
pub const MEMORIES_PER_COMPONENT: u32 = 2;
pub const TABLES_PER_COMPONENT: u32 = 32;
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
    let n = max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .total_memories(n.saturating_mul(MEMORIES_PER_COMPONENT))
        .total_tables(n.saturating_mul(TABLES_PER_COMPONENT))
        .total_stacks(n)
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .max_tables_per_component(TABLES_PER_COMPONENT)
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
    let mut config = compile_config();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub(super) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(super) fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| {
                tracing::error!("could not start the epoch thread; timeouts will not fire: {e}")
            });
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
