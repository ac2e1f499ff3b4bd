#!/usr/bin/env bash
# Coverage-guided fuzzing with cargo-afl (AFL++), on the stable toolchain.
#
#   ./scripts/fuzz.sh                      # every target, 600 s each
#   FUZZ_SECONDS=60 ./scripts/fuzz.sh sse  # one target, one minute
#
# Installs cargo-afl into target/fuzz-tools (reused), builds fuzz/ into target/fuzz, runs each
# target from its corpus (fuzz/corpus/<target>/), then minimizes the old and new inputs into
# the corpus (afl-cmin) and copies any crash to fuzz/regressions/<target>/ (fix it, keep it: the test
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
afl_bin="$(dirname "$(find "$XDG_DATA_HOME/afl.rs" -path '*/bin/afl-cmin.awk' | head -n 1)")"
for target in "${targets[@]}"; do
    out="$CARGO_TARGET_DIR/out/$target"
    rm -rf "$out"
    mkdir -p "$(dirname "$out")"
    echo "fuzzing $target for $seconds s"
    cargo afl fuzz -V "$seconds" -i "fuzz/corpus/$target" -o "$out" \
        "$CARGO_TARGET_DIR/release/$target" > "$CARGO_TARGET_DIR/$target.log" 2>&1 || true
    grep -E "execs_done|corpus_count|saved_crashes|saved_hangs" "$out/default/fuzzer_stats" || true
    # The corpus becomes the smallest set of inputs (old and new) that covers every path seen,
    # each file named by its hash. (The awk afl-cmin: the Python one that `cargo afl cmin`
    # runs finds no paths in afl.rs binaries.)
    if PATH="$afl_bin:$PATH" AFL_PATH="$afl_bin" "$afl_bin/afl-cmin.awk" -i "$out/default/queue" \
        -o "$out/min" -- "$CARGO_TARGET_DIR/release/$target" > "$CARGO_TARGET_DIR/$target.cmin.log" 2>&1 \
        && ls "$out/min"/* > /dev/null 2>&1; then
        rm -f "fuzz/corpus/$target"/*
        for input in "$out/min"/*; do
            cp "$input" "fuzz/corpus/$target/$(sha256sum "$input" | cut -c1-16)"
        done
        echo "corpus of $target: $(ls "fuzz/corpus/$target" | wc -l) inputs"
    fi
    # Crashes and hangs (inputs past AFL's time limit) become regressions, named by kind and
    # hash: fix each, keep it.
    found=0
    for kind in crash hang; do
        for input in "$out/default/${kind/%crash/crashe}s"/id:*; do
            [ -e "$input" ] || continue
            mkdir -p "fuzz/regressions/$target"
            cp "$input" "fuzz/regressions/$target/${kind}_$(sha256sum "$input" | cut -c1-16)"
            found=$((found + 1))
        done
    done
    if [ "$found" -gt 0 ]; then
        echo "$found crash(es) or hang(s) in $target: see fuzz/regressions/$target"
    fi
done
