//! Paths of the example and test plugins, built once by `build.rs` for wasm32-wasip2, and the
//! Python and JavaScript test components, built with the toolchains `scripts/test-tools.sh`
//! installs; and a real OCI registry to push to and pull from. The integration tests
//! (`tests/all`) and the benchmarks use these.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));

pub mod languages;
pub mod registry;
