#!/usr/bin/env bash
# The whole test suite on a fresh machine. The wasm32-wasip2 target is the only set-up step;
# tests/build.rs builds every example and test plugin once, inside the cargo build.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2

# Host unit tests and the one integration binary (tests/all).
cargo test --workspace
# The example plugins' own unit tests (their parsers), on the host target.
cargo test --manifest-path plugins/Cargo.toml --target-dir target/plugins-native
