//! Fuzz target `sse`: see `targets.rs`.

#[path = "../../targets.rs"]
mod targets;

fn main() {
    afl::fuzz!(|data: &[u8]| targets::sse(data));
}
