#!/usr/bin/env bash
# What an idle `toolhost serve --http` costs: CPU seconds and wake-ups (voluntary context
# switches) of each of its threads over a quiet period, after it is ready and has settled.
#
#   scripts/idle-cost.sh [TOOLHOST] [SECONDS]     (defaults: target/release/toolhost, 20)
#
# Serves the shipped ensembles (ensembles/, or the directory in $ENSEMBLES) on a free
# loopback port with a fresh state directory; prints one line per thread that woke, then the
# totals. Linux only (/proc).
set -euo pipefail
cd "$(dirname "$0")/.."
toolhost=${1:-target/release/toolhost}
seconds=${2:-20}
state=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$state"' EXIT

TOOLHOST_ENSEMBLES=${ENSEMBLES:-ensembles} XDG_STATE_HOME="$state" "$toolhost" serve --http 127.0.0.1:0 \
    2> "$state/stderr" &
pid=$!
until grep -q "serving MCP on" "$state/stderr" 2>/dev/null; do sleep 0.1; done
url=$(sed -n 's/.*serving MCP on \(http[^ ]*\)\/mcp.*/\1/p' "$state/stderr" | head -1)
until curl -sf "$url/readyz" > /dev/null; do sleep 0.2; done
sleep 5   # compiles and stocks settle

snapshot() {
    for task in /proc/"$pid"/task/*; do
        printf '%s %s %s %s\n' "$(basename "$task")" "$(tr ' ' '_' < "$task/comm")" \
            "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$task/status")" \
            "$(awk '{print $14 + $15}' "$task/stat")"
    done | sort
}
ticks=$(getconf CLK_TCK)
before=$(snapshot)
sleep "$seconds"
after=$(snapshot)
join <(echo "$before") <(echo "$after") | awk -v s="$seconds" -v hz="$ticks" '
    { wakes = $6 - $3; cpu = ($7 - $4) / hz; total_w += wakes; total_c += cpu
      if (wakes > 0 || cpu > 0) printf "%-24s %8d wake-ups (%.1f/s) %6.2f s CPU\n", $2, wakes, wakes / s, cpu }
    END { printf "total over %d s: %d wake-ups (%.1f/s), %.2f s CPU (%.2f%% of a core)\n",
          s, total_w, total_w / s, total_c, 100 * total_c / s }'
