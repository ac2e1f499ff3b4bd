#!/bin/sh
# Builds {{name}}.wasm, the component ensembles/{{name}}.toml names: wit-bindgen writes the C
# bindings of wit/ into bindings/, Debian's clang and wasi-libc compile, and wasm-component-ld
# links a component. Needs: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32;
# cargo install wit-bindgen-cli wasm-component-ld.
set -eu
cd "$(dirname "$0")"
wit-bindgen c wit --world plugin --out-dir bindings >/dev/null
# Compiled optimised, linked without -O: at -O, clang would run a binaryen wasm-opt found on
# PATH over the linked component, which it cannot read.
clang --target=wasm32-wasi -O2 -Ibindings -c tool.c -o bindings/tool.o
clang --target=wasm32-wasi -O2 -Ibindings -c bindings/plugin.c -o bindings/plugin.o
clang --target=wasm32-wasi -mexec-model=reactor -fuse-ld="$(command -v wasm-component-ld)" \
    -o {{name}}.wasm bindings/tool.o bindings/plugin.o bindings/plugin_component_type.o
echo "built {{name}}.wasm; try: toolhost --ensembles ensembles call {{tool}} '{\"name\": \"Ada\"}'"
