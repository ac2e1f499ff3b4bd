#!/bin/sh
# Builds {{name}}.wasm, the component ensembles/{{name}}.toml names.
set -eu
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm; try: toolhost describe {{name}}.wasm, then toolhost --ensembles ensembles call one of its tools"
