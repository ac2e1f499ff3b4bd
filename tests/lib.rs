//! Paths of the example and test plugins, built once by `build.rs` for wasm32-wasip2.
//! The integration tests (`tests/all`) and the benchmarks use these constants.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
