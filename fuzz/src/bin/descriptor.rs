//! Fuzz target `descriptor`: see `targets.rs`.

#[path = "../../targets.rs"]
mod targets;

fn main() {
    afl::fuzz!(|data: &[u8]| targets::descriptor(data));
}
