#!/usr/bin/env python3
"""Per-call latency of tools over one MCP stdio session of `toolhost serve`, as an MCP
client sees it (the official Python SDK). Each tool is called N times with distinct
arguments (no dedup hit); the script prints p50 and p90 per tool.

  python3 scripts/mcp-latency.py [--calls 500] [--toolhost target/release/toolhost] \\
      [--pace-ms 10] [--prepared N] NAME=COMPONENT.wasm:TOOL:ARGUMENTS_JSON ...

ARGUMENTS_JSON may contain {i}, replaced by the call's number. `--pace-ms` waits that long
between calls (an agent's pace, which leaves the host time to prepare the next instance);
`--prepared` sets every invoker's `prepared` (default: the host decides). Besides the
client's view it prints the host's own part of each call: the median `duration_ms` of its
audit records. Needs the `mcp` package (scripts/test-tools.sh installs it into
target/test-tools/venv)."""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def peak_rss(program):
    """The peak RSS of the newest process running `program` (the host of this session)."""
    best = None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read().startswith(os.fsencode(program)):
                    continue
            with open(f"/proc/{pid}/status") as f:
                hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
            if best is None or int(pid) > best[0]:
                best = (int(pid), hwm)
        except (OSError, StopIteration):
            continue
    return None if best is None else best[1] // 1024


def host_part(audit, tool, first):
    """The median and the 90th percentile of the host's own time of the calls of `tool` from
    the `first`-th on, in ms, from its audit records."""
    times = []
    with open(audit) as f:
        for line in f:
            record = json.loads(line)
            if record.get("tool") == tool and "duration_ms" in record:
                times.append(float(record["duration_ms"]))
    times = sorted(times[first:])
    if not times:
        return None
    return statistics.median(times), times[int(len(times) * 0.9)]


async def measure(toolhost, ensembles, cache, targets, calls, pace, audit):
    params = StdioServerParameters(
        command=toolhost,
        args=["--ensembles", ensembles, "--cache-dir", cache, "--audit", audit, "serve", "--no-watch"],
        env=dict(os.environ),
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = {t.name for t in (await session.list_tools()).tools}
            for name, tool, arguments in targets:
                assert tool in listed, f"{tool} is not served (have {sorted(listed)})"
                # Warm up: the first calls fault in the instance's memory image.
                for i in range(20):
                    await session.call_tool(tool, json.loads(arguments.replace("{i}", str(1_000_000 + i))))
                times = []
                for i in range(calls):
                    if pace:
                        await asyncio.sleep(pace / 1000)
                    args = json.loads(arguments.replace("{i}", str(i)))
                    start = time.perf_counter()
                    result = await session.call_tool(tool, args)
                    times.append((time.perf_counter() - start) * 1000)
                    assert not result.is_error, result
                times.sort()
                p50 = statistics.median(times)
                p90 = times[int(len(times) * 0.9)]
                own = host_part(audit, tool, 20)
                own = "" if own is None else f"   in the host p50 {own[0]:6.3f} ms   p90 {own[1]:6.3f} ms"
                print(f"{name:24} {tool:14} p50 {p50:6.3f} ms   p90 {p90:6.3f} ms{own}   ({calls} calls)")
            print("host peak RSS:", peak_rss(toolhost), "MiB")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--toolhost", default="target/release/toolhost")
    parser.add_argument("--pace-ms", type=float, default=0)
    parser.add_argument("--prepared", type=int, default=None)
    parser.add_argument("targets", nargs="+")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        ensembles = os.path.join(temp, "ensembles")
        os.mkdir(ensembles)
        targets = []
        for spec in options.targets:
            name, rest = spec.split("=", 1)
            component, tool, arguments = rest.split(":", 2)
            with open(os.path.join(ensembles, f"{name}.toml"), "w") as f:
                f.write(f'schema-version = 1\n\n[ensemble]\nname = "{name}"\nprefix = "{name.replace("-", "_")}"\n'
                        f'component = "{os.path.abspath(component)}"\n\n[defaults]\ntimeout-ms = 20000\n'
                        f'memory-mib = 256\ndedup = "off"\n')
                if options.prepared is not None:
                    f.write(f"prepared = {options.prepared}\n")
            targets.append((name, f'{name.replace("-", "_")}_{tool}', arguments))
        cache = os.environ.get("TOOLHOST_CACHE_DIR", os.path.join(temp, "cache"))
        # `check` compiles every component into the cache; the session then starts warm.
        subprocess.run([options.toolhost, "--ensembles", ensembles, "--cache-dir", cache, "check"],
                       check=True, stdout=subprocess.DEVNULL)
        audit = os.path.join(temp, "audit.jsonl")
        asyncio.run(measure(os.path.abspath(options.toolhost), ensembles, cache, targets, options.calls,
                            options.pace_ms, audit))


if __name__ == "__main__":
    main()
