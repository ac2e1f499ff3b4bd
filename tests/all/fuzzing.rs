//! Every input the fuzzers saved, replayed through the fuzz targets' bodies: the corpora in
//! `fuzz/corpus/<target>/` and the crashes found, kept in `fuzz/regressions/<target>/` once
//! fixed. `scripts/fuzz.sh` runs the fuzzers themselves (cargo-afl).

#[path = "../../fuzz/targets.rs"]
mod targets;

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs = 0;
    for folder in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("an input").path();
            let data = std::fs::read(&path).expect("read an input");
            let outcome = std::panic::catch_unwind(|| body(&data));
            assert!(outcome.is_ok(), "{} fails", path.display());
            inputs += 1;
        }
    }
    assert!(inputs > 0, "no saved input for {target}");
}

#[test]
fn saved_descriptor_inputs_still_pass() {
    replay("descriptor", targets::descriptor);
}

#[test]
fn saved_argument_inputs_still_pass() {
    replay("arguments", targets::arguments);
}

#[test]
fn saved_network_pattern_inputs_still_pass() {
    replay("network_pattern", targets::network_pattern);
}

#[test]
fn saved_sse_inputs_still_pass() {
    replay("sse", targets::sse);
}
