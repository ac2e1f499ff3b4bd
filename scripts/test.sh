#!/usr/bin/env bash
# The whole test suite on a fresh machine. Set-up: the wasm32-wasip2 target, and the
# programs the tests drive but do not build (scripts/test-tools.sh: the official MCP clients,
# into target/test-tools/, reused when there). tests/build.rs builds every example and test
# plugin once, inside the cargo build.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2
./scripts/test-tools.sh
export TOOLHOST_TEST_TOOLS="$PWD/target/test-tools"

# Host unit tests and the one integration binary (tests/all).
cargo test --workspace
# The example plugins' own unit tests (their parsers), on the host target.
cargo test --manifest-path plugins/Cargo.toml --target-dir target/plugins-native
