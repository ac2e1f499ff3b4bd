#!/usr/bin/env bash
# Builds Wassette's `eval-py` example (tests/plugins/eval-py: main.py and its WIT, copied from
# github.com/microsoft/wassette at 8940e27, MIT; one import moved for componentize-py 0.25) as
# Wassette's Justfile builds it: bindings first, then componentize-py with `--stub-wasi`
# (`-s`), every WASI import stubbed by a module of its own. Uses the componentize-py that
# scripts/test-tools.sh installs (run it first). The benchmark of tiered compiles serves it
# (scripts/first-call.py).
#
#   scripts/build-eval-py.sh [OUT.wasm]     (default target/eval-py.wasm)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tools="${TOOLHOST_TEST_TOOLS:-$repo/target/test-tools}"
out="$(realpath -m "${1:-$repo/target/eval-py.wasm}")"
componentize="$tools/venv/bin/componentize-py"
[ -x "$componentize" ] || { echo "no componentize-py at $componentize: run scripts/test-tools.sh" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$repo/tests/plugins/eval-py/." "$work/"
cd "$work"
"$componentize" -d wit -w sandbox bindings . >/dev/null
"$componentize" -d wit -w sandbox componentize -s main -o "$out" >/dev/null
echo "$out"
