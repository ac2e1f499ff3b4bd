#!/usr/bin/env bash
# The main job on a fresh machine: set everything up, check the shipped ensembles, and run a
# few real calls of the shipped tools through the whole pipeline.
#
# `toolhost serve` (MCP) is not built yet; when it lands, this script ends by serving instead.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
toolhost=target/release/toolhost

"$toolhost" check
"$toolhost" list
echo
"$toolhost" call calculate '{"expression": "2 * (3 + 4) ^ 2 - sqrt(16)"}'
"$toolhost" call text_stats '{"text": "The quick brown fox jumps over the lazy dog."}'
"$toolhost" call slugify '{"text": "Hot reload, without the downtime!"}'
"$toolhost" call json_query '{"document": "{\"tools\": [{\"name\": \"calculate\"}]}", "pointer": "/tools/0/name"}'
"$toolhost" call search_files '{"path": "/data", "pattern": "eggs"}'
# A typed error, shown on purpose: the tool's sandbox has no /etc.
"$toolhost" call read_file '{"path": "/etc/passwd"}' || echo "(refused, as it should be)"
echo
echo "Every call above is recorded in .toolhost/audit.jsonl"
