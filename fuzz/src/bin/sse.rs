//! Fuzz target `sse`: see `targets.rs`.

// Each binary uses one target of the shared file.
#[allow(dead_code)]
#[path = "../../targets.rs"]
mod targets;

fn main() {
    afl::fuzz!(|data: &[u8]| targets::sse(data));
}
