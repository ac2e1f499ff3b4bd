//! Fuzz target `network_pattern`: see `targets.rs`.

#[path = "../../targets.rs"]
mod targets;

fn main() {
    afl::fuzz!(|data: &[u8]| targets::network_pattern(data));
}
