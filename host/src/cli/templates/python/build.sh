#!/bin/sh
# Builds {{name}}.wasm, the component ensembles/{{name}}.toml names, with componentize-py
# (the one on PATH, else one installed into .venv).
set -eu
cd "$(dirname "$0")"
if ! command -v componentize-py >/dev/null 2>&1; then
    [ -x .venv/bin/componentize-py ] || {
        python3 -m venv .venv
        .venv/bin/pip install --quiet componentize-py==0.25.1
    }
    PATH="$PWD/.venv/bin:$PATH"
fi
componentize-py -d wit -w plugin componentize app -o {{name}}.wasm
echo "built {{name}}.wasm; try: toolhost describe {{name}}.wasm, then toolhost --ensembles ensembles call one of its tools"
