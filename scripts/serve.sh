#!/usr/bin/env bash
# The main job on a fresh machine: set everything up, check the shipped ensembles, make one
# real call, then serve them over MCP (streamable HTTP) with hot reload until Ctrl-C.
#
#   TOOLHOST_HTTP=127.0.0.1:9000 ./scripts/serve.sh    # another address (default 127.0.0.1:8750)
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
toolhost=target/release/toolhost

"$toolhost" check
"$toolhost" list
"$toolhost" call calculate '{"expression": "2 * (3 + 4) ^ 2 - sqrt(16)"}'
echo
echo "MCP clients can connect to http://${TOOLHOST_HTTP:-127.0.0.1:8750}/mcp"
echo "The web chat is at http://${TOOLHOST_HTTP:-127.0.0.1:8750}/ (it talks to the model [chat] names in toolhost.toml: set OPENAI_API_KEY, or point it at a local server)"
echo "Edit ensembles/*.toml while it runs: changes are picked up at once. Ctrl-C stops it."
exec "$toolhost" serve --http "${TOOLHOST_HTTP:-127.0.0.1:8750}"
