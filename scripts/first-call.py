#!/usr/bin/env python3
"""How long a new Python or JavaScript tool takes to answer, with compiles in tiers and
without (issue #59), measured from outside the process.

    scripts/first-call.py [--toolhost target/release/toolhost] [--repeat 3] [--calls 200]
                          [--only python,javascript,eval-py] [--json OUT.json]

For each component and each repeat, a fresh `toolhost serve` (stdio, an empty cache of its
own) is started twice, once with `[host] tiered-compile = true` and once with `false` (in
alternating order), and this script times:

- first call: from starting the process to the first `tools/call` answered without error
  (calls are sent one after another from the start; until the component is loaded each is
  answered "no tool named ... yet");
- the CPU the compile workers took (the children's utime + stime, from /proc): Winch's once
  the first call has answered (tiers on), Cranelift's once its code has replaced Winch's;
- the server's CPU per call (utime + stime of the `toolhost` process over `--calls` calls, one
  at a time): right after the first call (on Winch's code, with tiers on, while Cranelift's
  compile runs beside it) and again after the swap (on Cranelift's code; the status file
  says when);
- the server's CPU per call on Winch's code alone, with no compile beside it: a third host,
  tiers on and `compile-cpu-seconds = 3`, which Winch's compile stays within and Cranelift's
  does not, so that the component stays on Winch's code (its state says so).

The components: the Python test component (`tests/plugins/python`, componentize-py) and the
JavaScript one (`tests/plugins/js`, componentize-js), as the test suite builds them (under
target/tmp/language-builds: run `cargo test --test all -- languages` once), and Wassette's
`eval-py` built with `--stub-wasi` by scripts/build-eval-py.sh (target/eval-py.wasm; it
needs 38 core instances, so every host here runs with `core-instances-per-call = 40`).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")


def newest(pattern):
    found = sorted(glob.glob(os.path.join(REPO, pattern)), key=os.path.getmtime)
    return found[-1] if found else None


COMPONENTS = {
    "python": (
        lambda: newest("target/tmp/language-builds/python-plugin-*.wasm"),
        "shout",
        {"text": "hi"},
    ),
    "javascript": (
        lambda: newest("target/tmp/language-builds/js-plugin-*.wasm"),
        "shout",
        {"text": "hi"},
    ),
    "eval-py": (
        lambda: os.path.join(REPO, "target/eval-py.wasm"),
        "eval",
        {"expression": "2 + 2"},
    ),
}


def cpu(pid):
    """(the process's own CPU seconds, its reaped children's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICKS, (cutime + cstime) / TICKS


class Serve:
    """A `toolhost serve` over stdio, spoken to one request at a time."""

    def __init__(self, toolhost, root):
        self.process = subprocess.Popen(
            [toolhost, "--config", os.path.join(root, "toolhost.toml"), "serve", "--no-watch"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(os.path.join(root, "stderr.log"), "w"),
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith(("TOOLHOST_", "OTEL_"))},
        )
        self.next = 1
        self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "first-call", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method, params):
        id = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("serve ended")
            message = json.loads(line)
            if message.get("id") == id:
                return message

    def call(self, tool, arguments):
        """True when the call answered without error."""
        answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        result = answer.get("result")
        return result is not None and not result.get("isError")

    def stop(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def component_state(root):
    """The component's state in the status file, if it says."""
    try:
        with open(os.path.join(root, "status.json")) as f:
            components = json.load(f).get("components", [])
    except (OSError, ValueError):
        return {}
    return components[0] if components else {}


def settled(root, mode):
    """Whether the component runs the code it will stay on: Cranelift's, or (mode `winch`)
    Winch's once Cranelift's compile was cut at its bound."""
    state = component_state(root)
    if mode == "winch":
        return "Cranelift could not compile" in (state.get("note") or "")
    return state.get("tier") == "cranelift"


def per_call(serve, tool, arguments, calls):
    before = cpu(serve.process.pid)[0]
    for _ in range(calls):
        assert serve.call(tool, arguments), "a call failed"
    return (cpu(serve.process.pid)[0] - before) / calls


def run(toolhost, wasm, tool, arguments, mode, calls):
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "ensembles"))
        with open(os.path.join(root, "ensembles", "c.toml"), "w") as f:
            f.write(f'schema-version = 1\n\n[ensemble]\nname = "c"\ncomponent = "{wasm}"\n\n'
                    '[defaults]\ntimeout-ms = 30000\ndedup = "off"\n')
        with open(os.path.join(root, "toolhost.toml"), "w") as f:
            f.write('schema-version = 1\n\n[host]\nensembles = "ensembles"\ncache-dir = "cache"\n'
                    'status-file = "status.json"\ncore-instances-per-call = 40\n'
                    f'tiered-compile = {"false" if mode == "off" else "true"}\n')
            if mode == "winch":
                f.write("compile-cpu-seconds = 3\n")
        started = time.monotonic()
        serve = Serve(toolhost, root)
        while not serve.call(tool, arguments):
            time.sleep(0.005)
        first = time.monotonic() - started
        pid = serve.process.pid
        first_workers = cpu(pid)[1]
        early = per_call(serve, tool, arguments, calls)
        deadline = time.monotonic() + 600
        while not settled(root, mode):
            assert time.monotonic() < deadline, "the component never settled"
            time.sleep(0.05)
        workers = cpu(pid)[1]
        late = per_call(serve, tool, arguments, calls)
        serve.stop()
        return {
            "first_call_s": first,
            "first_tier_cpu_s": first_workers,
            "second_tier_cpu_s": workers - first_workers,
            "cpu_per_call_us_first": early * 1e6,
            "cpu_per_call_us_after": late * 1e6,
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--toolhost", default=os.path.join(REPO, "target/release/toolhost"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--only", default=",".join(COMPONENTS))
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {}
    for name in args.only.split(","):
        find, tool, arguments = COMPONENTS[name]
        wasm = find()
        if not wasm or not os.path.isfile(wasm):
            sys.exit(f"no {name} component: see this script's doc for how to build it")
        runs = {"on": [], "off": [], "winch": []}
        for n in range(args.repeat):
            order = ["on", "off", "winch"] if n % 2 == 0 else ["off", "on", "winch"]
            for mode in order:
                runs[mode].append(run(args.toolhost, wasm, tool, arguments, mode, args.calls))
        median = lambda mode, key: statistics.median(r[key] for r in runs[mode])
        results[name] = {"size_mib": os.path.getsize(wasm) / (1 << 20)}
        for mode in runs:
            results[name][mode] = {k: median(mode, k) for k in runs[mode][0]}
    print(f"medians of {args.repeat}; CPU per call over {args.calls} calls, one at a time\n")
    print("| component | size | first call, tiers on | tiers off | ratio | Winch's compile CPU "
          "| Cranelift's compile CPU (tier two) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        on, off = r["on"], r["off"]
        print(f"| {name} | {r['size_mib']:.1f} MiB | {on['first_call_s']:.2f} s "
              f"| {off['first_call_s']:.2f} s | {on['first_call_s'] / off['first_call_s']:.2f}x "
              f"| {on['first_tier_cpu_s']:.2f} s | {on['second_tier_cpu_s']:.2f} s |")
    print("\nserver CPU per call:\n")
    print("| component | on Winch's code, Cranelift compiling beside | on Winch's code alone "
          "| on Cranelift's, after the swap | tiers off | after the swap / off |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        on, off, winch = r["on"], r["off"], r["winch"]
        after, alone = on["cpu_per_call_us_after"], off["cpu_per_call_us_after"]
        print(f"| {name} | {on['cpu_per_call_us_first']:.0f} µs "
              f"| {winch['cpu_per_call_us_after']:.0f} µs | {after:.0f} µs | {alone:.0f} µs "
              f"| {after / alone:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
