#!/usr/bin/env bash
# Sets up a fresh machine: the wasm32-wasip2 target, the example plugins (into plugins/dist/)
# and the toolhost binary. Safe to run again; cargo only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2

# The same target directory as the test suite's build.rs, so the plugins build once.
cargo build --release --target wasm32-wasip2 \
    --manifest-path plugins/Cargo.toml --target-dir target/wasm32-plugins
mkdir -p plugins/dist
# Every member of the plugins' workspace (the same build, and target folder, as the tests').
for plugin in $(sed -n 's/^members = \[\(.*\)\]$/\1/p' plugins/Cargo.toml | tr -d '"' | tr ',' ' '); do
    cp "target/wasm32-plugins/wasm32-wasip2/release/$plugin.wasm" "plugins/dist/$plugin.wasm"
done

cargo build --release -p toolhost
