//! Fuzz target `arguments`: see `targets.rs`.

#[path = "../../targets.rs"]
mod targets;

fn main() {
    afl::fuzz!(|data: &[u8]| targets::arguments(data));
}
