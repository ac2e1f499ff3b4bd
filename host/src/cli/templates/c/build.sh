#!/bin/sh
# Builds {{name}}.wasm, the component ensembles/{{name}}.toml names: wit-bindgen writes the C
# bindings of wit/ into bindings/, Debian's clang and wasi-libc compile, and wasm-component-ld
# links a component. Each tool is looked for first; a missing one stops the build with the
# command that installs it.
set -eu
cd "$(dirname "$0")"
missing=0
need() {
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "build.sh: $1 is missing; install it with: $2" >&2
        missing=1
    fi
}
need clang "apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32"
need wit-bindgen "cargo install wit-bindgen-cli   (built from source: minutes)"
need wasm-component-ld "cargo install wasm-component-ld   (or put rustup's on PATH: \$(rustc --print sysroot)/lib/rustlib/*/bin)"
if [ ! -d /usr/include/wasm32-wasi ] && [ ! -d /usr/share/wasi-sysroot ]; then
    echo "build.sh: wasi-libc is missing; install it with: apt-get install wasi-libc libclang-rt-14-dev-wasm32" >&2
    missing=1
fi
[ "$missing" = 0 ] || exit 1
wit-bindgen c wit --world plugin --out-dir bindings >/dev/null
# Compiled optimised, linked without -O: at -O, clang would run a binaryen wasm-opt found on
# PATH over the linked component, which it cannot read.
clang --target=wasm32-wasi -O2 -Ibindings -c tool.c -o bindings/tool.o
clang --target=wasm32-wasi -O2 -Ibindings -c bindings/plugin.c -o bindings/plugin.o
clang --target=wasm32-wasi -mexec-model=reactor -fuse-ld="$(command -v wasm-component-ld)" \
    -o {{name}}.wasm bindings/tool.o bindings/plugin.o bindings/plugin_component_type.o
# A component's header is \0asm then 0d 00 01 00; a core module's, 01 00 00 00.
if [ "$(od -An -tx1 -j4 -N4 {{name}}.wasm | tr -d ' \n')" != "0d000100" ]; then
    rm -f {{name}}.wasm
    echo "build.sh: the linker wrote a core module, not a component: link with wasm-component-ld (-fuse-ld)" >&2
    exit 1
fi
echo "built {{name}}.wasm; try: toolhost describe {{name}}.wasm, then toolhost --ensembles ensembles call one of its tools"
