#!/usr/bin/env bash
# The whole test suite on a fresh machine. Set-up: the wasm32-wasip2 target, and the
# programs the tests drive but do not build (scripts/test-tools.sh: the official MCP clients,
# Debian's packages, wkg, into target/test-tools/, reused when there). tests/build.rs builds
# every example and test plugin once, inside the cargo build.
#
# The tools install while the tests build: their downloads wait on the network and the
# build on the CPU, so each fills the other's idle time (BENCHMARKS.md, "Build and test
# time"). Each phase's time is printed, so a slow run says where it went.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
phase() { echo "== test.sh: $1 done at $((SECONDS - start)) s" >&2; }

rustup target add wasm32-wasip2
mkdir -p target
./scripts/test-tools.sh > target/test-tools.log 2>&1 &
tools=$!

# Host unit tests and the one integration binary (tests/all), built while the tools install.
cargo test --workspace --no-run
phase "test build"
if ! wait "$tools"; then
    cat target/test-tools.log >&2
    echo "scripts/test-tools.sh failed (its output is above)" >&2
    exit 1
fi
phase "test tools"
export TOOLHOST_TEST_TOOLS="$PWD/target/test-tools"

cargo test --workspace
phase "tests"
# The example plugins' own unit tests (their parsers), on the host target.
cargo test --manifest-path plugins/Cargo.toml --target-dir target/plugins-native
phase "plugin tests"
