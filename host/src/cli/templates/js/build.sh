#!/bin/sh
# Builds {{name}}.wasm, the component ensembles/{{name}}.toml names, with componentize-js
# (the one on PATH, else one installed into node_modules; needs Node 18 or newer).
set -eu
cd "$(dirname "$0")"
if ! command -v componentize-js >/dev/null 2>&1; then
    [ -x node_modules/.bin/componentize-js ] || \
        npm install --no-fund --no-audit --loglevel=error @bytecodealliance/componentize-js@0.23.0
    PATH="$PWD/node_modules/.bin:$PATH"
fi
componentize-js app.js --wit wit -n plugin -o {{name}}.wasm
echo "built {{name}}.wasm; try: toolhost describe {{name}}.wasm, then toolhost --ensembles ensembles call one of its tools"
