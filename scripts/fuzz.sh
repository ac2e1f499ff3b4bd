#!/usr/bin/env bash
# Coverage-guided fuzzing with cargo-afl (AFL++), on the stable toolchain.
#
#   ./scripts/fuzz.sh                      # every target, 600 s each
#   FUZZ_SECONDS=60 ./scripts/fuzz.sh sse  # one target, one minute
#
# Installs cargo-afl into target/fuzz-tools (reused), builds fuzz/ into target/fuzz, runs each
# target from its corpus (fuzz/corpus/<target>/), then adds the inputs that found new paths
# to the corpus and copies any crash to fuzz/regressions/<target>/ (fix it, keep it: the test
# suite replays both folders through the targets, tests/all/fuzzing.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

tools="$PWD/target/fuzz-tools"
export XDG_DATA_HOME="$tools/xdg"
export CARGO_TARGET_DIR="$PWD/target/fuzz"
export AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
if [ ! -x "$tools/bin/cargo-afl" ]; then
    cargo install --quiet --root "$tools" cargo-afl --version 0.18.2 --locked
fi
export PATH="$tools/bin:$PATH"
[ -d "$XDG_DATA_HOME/afl.rs" ] || cargo afl config --build

targets=("${@:-descriptor arguments network_pattern sse}")
read -r -a targets <<< "${targets[*]}"
seconds="${FUZZ_SECONDS:-600}"
(cd fuzz && cargo afl build --release --quiet)
for target in "${targets[@]}"; do
    out="$CARGO_TARGET_DIR/out/$target"
    rm -rf "$out"
    echo "fuzzing $target for $seconds s"
    cargo afl fuzz -V "$seconds" -i "fuzz/corpus/$target" -o "$out" \
        "$CARGO_TARGET_DIR/release/$target" > "$CARGO_TARGET_DIR/$target.log" 2>&1 || true
    grep -E "execs_done|corpus_count|saved_crashes|saved_hangs" "$out/default/fuzzer_stats" || true
    # Keep the inputs that reached new paths (small ones), and every crash.
    find "$out/default/queue" -maxdepth 1 -type f -size -4k -name 'id:*' -newer "fuzz/corpus/$target" \
        -exec sh -c 'cp "$1" "fuzz/corpus/'"$target"'/$(basename "$1" | tr ":," "__")"' _ {} \; 2>/dev/null || true
    if ls "$out/default/crashes"/id:* > /dev/null 2>&1; then
        mkdir -p "fuzz/regressions/$target"
        for crash in "$out/default/crashes"/id:*; do
            cp "$crash" "fuzz/regressions/$target/$(basename "$crash" | tr ':,' '__')"
        done
        echo "CRASHES in $target: see fuzz/regressions/$target"
    fi
done
