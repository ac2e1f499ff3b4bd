#!/usr/bin/env python3
"""Peak resident memory of `toolhost` under the attacks of the hardening issue.

Each scenario runs the release binary (target/release/toolhost) in a temporary directory of
its own, with its own ensembles, compile cache, audit log and status file; the cache is
warmed with `toolhost list` first unless the scenario is about loading. The host's peak
resident memory is VmHWM: for `serve`, read from /proc/<pid>/status of the running process;
for one-shot commands (`check`, `call`, `chat`), the same high-water mark as wait4()'s
ru_maxrss, taken by a small launcher process (exec records the spawning image's peak in
ru_maxrss too, so the launcher reports its own VmHWM: a ru_maxrss above it is the command's
own), with /proc polled every few milliseconds while the command runs as a floor.

A scenario whose component does not load with this binary is reported as NOT RUN with the
reason (scenario 1 then runs with echo, whose results are its ~1 MB arguments).

Prints a Markdown table (attack | what the host did | host peak RSS (MiB) | wall time (s)),
then the details of each scenario.

    python3 scripts/attack-rss.py            # every scenario
    python3 scripts/attack-rss.py --only 3,8 # some of them
    python3 scripts/attack-rss.py --keep     # keep the temporary directories

Standard library only. Needs target/release/toolhost and the test components in
target/wasm32-plugins/wasm32-wasip2/release/ (echo, testbed, spinner).
"""

import argparse
import hashlib
import http.server
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "toolhost")
WASM = os.path.join(ROOT, "target", "wasm32-plugins", "wasm32-wasip2", "release")
PROTOCOL = "2025-06-18"
MIB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Memory of a process


def status_kib(pid, key):
    """A `kB` line of /proc/<pid>/status (VmHWM, VmRSS), or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return None


def mib(kib):
    return "?" if kib is None else f"{kib / 1024:.1f}"


# ---------------------------------------------------------------------------------------------
# A scenario's directory and environment


class Scene:
    """A temporary directory with ensembles/, the components it needs, a cache and logs."""

    def __init__(self, name, components=(), keep=False):
        self.dir = tempfile.mkdtemp(prefix=f"attack-rss-{name}-")
        self.keep = keep
        self.ensembles = os.path.join(self.dir, "ensembles")
        os.makedirs(self.ensembles)
        for component in components:
            shutil.copy(os.path.join(WASM, f"{component}.wasm"), self.dir)
        self.config = None

    def write(self, relative, text):
        path = os.path.join(self.ensembles, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def host_config(self, text):
        self.config = os.path.join(self.dir, "toolhost.toml")
        with open(self.config, "w") as f:
            f.write("schema-version = 1\n" + text)

    def env(self):
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TOOLHOST_")
            and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RUST_LOG")
        }
        env.update(
            TOOLHOST_ENSEMBLES=self.ensembles,
            TOOLHOST_CACHE_DIR=os.path.join(self.dir, "cache"),
            TOOLHOST_STATUS_FILE=os.path.join(self.dir, "status.json"),
            TOOLHOST_AUDIT=os.path.join(self.dir, "audit.jsonl"),
        )
        if self.config:
            env["TOOLHOST_CONFIG"] = self.config
        return env

    def warm(self):
        """`toolhost list`, so that the components are compiled into the cache."""
        run = run_measured(["list"], self, timeout=300)
        if run.code != 0:
            raise RuntimeError(f"warming the cache failed ({run.code}): {run.stderr[-2000:]}")
        return run

    def require(self, component):
        """Raises NotRun when `check` refuses something (a component that does not load)."""
        run = run_measured(["check"], self, timeout=120)
        if run.code != 0:
            raise NotRun(f"{component}.wasm does not load in this build: {first_error(run.stderr + run.stdout)}")

    def close(self):
        if self.keep:
            print(f"kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def ensemble(name, component, rest):
    """An ensemble file over `component` (a file beside ensembles/, or an absolute path)."""
    path = component if component.startswith("/") else f"../{component}.wasm"
    return f'schema-version = 1\n\n[ensemble]\nname = "{name}"\ncomponent = "{path}"\n\n{rest}\n'


# ---------------------------------------------------------------------------------------------
# One-shot commands, measured


class Run:
    pass


class NotRun(Exception):
    """A scenario that cannot run as described with this binary and these components."""


# A launcher of its own for each measured command: the kernel's ru_maxrss of a process also
# counts the memory of the process it was spawned from (exec records the old image's high-water
# mark), so the command is spawned by a small, fresh interpreter that reports its own VmHWM
# beside the child's ru_maxrss. A ru_maxrss above the launcher's is the command's own peak.
LAUNCHER = r"""
import os, sys
def hwm():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1])
report = int(sys.argv[1])
args = sys.argv[2:]
own = hwm()
pid = os.posix_spawn(args[0], args, os.environ)
os.write(report, b'pid %d\n' % pid)
_, status, usage = os.wait4(pid, 0)
os.write(report, b'done %d %d %d\n' % (os.waitstatus_to_exitcode(status), usage.ru_maxrss, max(own, hwm())))
"""


def run_measured(args, scene, timeout, cwd=None):
    """Runs `toolhost ARGS` to its end (killed at `timeout`); its exit code, output, peak RSS
    and wall time."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    read_end, write_end = os.pipe()
    start = time.monotonic()
    launcher = subprocess.Popen(
        [sys.executable, "-S", "-c", LAUNCHER, str(write_end), BIN, *args],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        env=scene.env(),
        cwd=cwd or scene.dir,
        pass_fds=(write_end,),
    )
    os.close(write_end)
    reports = queue.Queue()

    def read_reports():
        with os.fdopen(read_end, "rb") as f:
            for line in f:
                reports.put(line.split())
        reports.put(None)

    threading.Thread(target=read_reports, daemon=True).start()
    pid = None
    done = None
    polled = 0
    killed = False
    while True:
        try:
            report = reports.get(timeout=0.003)
        except queue.Empty:
            report = False
        if report is None:
            break
        if report and report[0] == b"pid":
            pid = int(report[1])
        elif report and report[0] == b"done":
            done = [int(x) for x in report[1:]]
        if pid:
            hwm = status_kib(pid, "VmHWM")
            if hwm:
                polled = max(polled, hwm)
        if time.monotonic() - start > timeout and not killed and pid:
            os.kill(pid, signal.SIGKILL)
            killed = True
    launcher.wait()
    wall = time.monotonic() - start
    run = Run()
    if done is None:
        raise RuntimeError(f"the launcher failed: {err.read()[-2000:]!r}")
    run.code, run.maxrss_kib, run.launcher_kib = done
    run.killed = killed
    run.wall = wall
    run.polled_kib = polled
    # The launcher's image may be what ru_maxrss shows; then the command's peak is at most that,
    # and at least what was polled.
    run.exact = run.maxrss_kib > run.launcher_kib
    run.peak_kib = run.maxrss_kib if run.exact else max(polled, 1)
    out.seek(0)
    err.seek(0)
    run.stdout_bytes = out.read()
    run.stdout = run.stdout_bytes[:100_000].decode("utf-8", "replace")
    run.stderr_bytes = err.read()
    run.stderr = run.stderr_bytes.decode("utf-8", "replace")
    return run


# ---------------------------------------------------------------------------------------------
# `serve --http`, and an MCP client over streamable HTTP (raw sockets, one connection a request)


class Serve:
    def __init__(self, scene, extra=()):
        self.scene = scene
        self.start = time.monotonic()
        self.child = subprocess.Popen(
            [BIN, "serve", "--http", "127.0.0.1:0", *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=scene.env(),
            cwd=scene.dir,
        )
        self.tail = []
        self.stderr_bytes = 0
        found = queue.Queue()

        def drain():
            for raw in self.child.stderr:
                self.stderr_bytes += len(raw)
                line = raw.decode("utf-8", "replace").rstrip("\n")
                prefix = "toolhost: serving MCP on "
                if line.startswith(prefix):
                    found.put(line[len(prefix):])
                self.tail = (self.tail + [line[:500]])[-20:]
            found.put(None)

        threading.Thread(target=drain, daemon=True).start()
        try:
            url = found.get(timeout=120)
        except queue.Empty:
            url = None
        if not url:
            self.stop()
            raise RuntimeError("serve did not print its address: " + "\n".join(self.tail))
        hostport = url[len("http://"):].split("/")[0]
        host, port = hostport.rsplit(":", 1)
        self.addr = (host, int(port))
        self.path = "/" + url[len("http://"):].split("/", 1)[1]

    def hwm_kib(self):
        return status_kib(self.child.pid, "VmHWM")

    def rss_kib(self):
        return status_kib(self.child.pid, "VmRSS")

    def stop(self):
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()


class HttpError(Exception):
    pass


def http_post(addr, path, body, headers, timeout=120, until=None):
    """POSTs `body`; returns (status, headers, messages) where messages are the JSON-RPC
    messages of the answer (one JSON body, or every `data:` event of an SSE stream). With
    `until(message)`, stops reading (and closes) at the first message it accepts."""
    sock = socket.create_connection(addr, timeout=timeout)
    try:
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {addr[0]}:{addr[1]}",
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        reader = sock.makefile("rb")
        status_line = reader.readline()
        if not status_line:
            raise HttpError("the connection was closed without an answer")
        status = int(status_line.split()[1])
        response_headers = {}
        while True:
            line = reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            response_headers[key.strip().lower()] = value.strip()
        messages = []
        kind = response_headers.get("content-type", "")
        chunks = body_chunks(reader, response_headers)
        if "text/event-stream" in kind:
            for message in sse_messages(chunks):
                messages.append(message)
                if until and until(message):
                    break
        else:
            data = b"".join(chunks)
            if data.strip():
                try:
                    messages.append(json.loads(data))
                except ValueError:
                    messages.append({"raw": data[:500].decode("utf-8", "replace")})
        return status, response_headers, messages
    finally:
        sock.close()


def body_chunks(reader, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                reader.readline()
                return
            data = reader.read(size)
            reader.readline()
            yield data
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            data = reader.read(min(left, 1 << 20))
            if not data:
                return
            left -= len(data)
            yield data
    else:
        while True:
            data = reader.read1(1 << 20)
            if not data:
                return
            yield data


def sse_messages(chunks):
    """The JSON `data:` of each server-sent event, in linear time however lines are cut."""
    pending = bytearray()
    scanned = 0
    data = []
    for chunk in chunks:
        pending += chunk
        start = 0
        while True:
            end = pending.find(b"\n", scanned)
            if end < 0:
                scanned = len(pending)
                break
            line = bytes(pending[start:end]).rstrip(b"\r")
            start = scanned = end + 1
            if not line:
                if data:
                    text = b"\n".join(data)
                    data = []
                    try:
                        yield json.loads(text)
                    except ValueError:
                        pass
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:])
        del pending[:start]
        scanned -= start


class McpHttp:
    """One MCP session over streamable HTTP."""

    def __init__(self, serve):
        self.addr = serve.addr
        self.path = serve.path
        self.session = None
        self.next_id = 1

    def post(self, message, until=None, timeout=120):
        headers = {}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = PROTOCOL
        return http_post(
            self.addr, self.path, json.dumps(message).encode(), headers, timeout, until
        )

    def initialize(self):
        """Opens the session; returns the HTTP status (200, or 503 past the cap)."""
        message = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "attack-rss", "version": "1"},
            },
        }
        status, headers, _ = self.post(message, until=lambda m: m.get("id") == 0)
        if status == 200:
            self.session = headers.get("mcp-session-id")
        return status

    def initialized(self):
        status, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return status

    def request(self, method, params, timeout=120):
        """A request's result (or error) and the other messages that came before it."""
        self.next_id += 1
        id_ = self.next_id
        message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
        status, _, messages = self.post(
            message, until=lambda m: m.get("id") == id_, timeout=timeout
        )
        answer = next((m for m in messages if m.get("id") == id_), None)
        if answer is None:
            raise HttpError(f"{method}: HTTP {status}, no answer: {str(messages)[:300]}")
        others = [m for m in messages if m.get("id") != id_]
        return answer, others

    def call(self, tool, arguments, timeout=120):
        """(is_error, text, other messages) of a tools/call."""
        answer, others = self.request(
            "tools/call", {"name": tool, "arguments": arguments}, timeout
        )
        if "error" in answer:
            return True, "jsonrpc error: " + json.dumps(answer["error"])[:500], others
        result = answer["result"]
        text = "".join(c.get("text", "") for c in result.get("content", []))
        return bool(result.get("isError")), text, others


def open_session(serve):
    client = McpHttp(serve)
    status = client.initialize()
    if status != 200:
        raise HttpError(f"initialize: HTTP {status}")
    client.initialized()
    return client


# ---------------------------------------------------------------------------------------------
# A fake OpenAI-compatible model server


class FakeModel:
    """`POST /v1/chat/completions` answered by `mode`: 'forever' (an SSE stream without end),
    'whole' (Content-Length 500,000,000, a JSON start and then spaces), 'longline' (one SSE
    line of 40 MB). Each answer stops when the client goes away, or at a safety cap."""

    SAFETY_BYTES = 2 << 30
    SAFETY_SECONDS = 180

    def __init__(self, mode):
        self.mode = mode
        self.requests = []  # (bytes sent, how it ended)
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                self.rfile.read(length)
                sent = [0]
                try:
                    ending = model.answer(self, sent)
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    ending = "client closed the connection"
                except OSError as e:
                    ending = f"client went away ({e})"
                model.requests.append((sent[0], ending))
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, handler, sent):
        start = time.monotonic()

        def chunk(data):  # one HTTP/1.1 chunk
            handler.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
            sent[0] += len(data)

        def safe():
            return sent[0] < self.SAFETY_BYTES and time.monotonic() - start < self.SAFETY_SECONDS

        if self.mode == "forever":
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            event = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 1000 + b'"}}]}\n\n'
            block = event * 64
            while safe():
                chunk(block)
            return f"stopped at the script's safety cap after {sent[0]} bytes"
        if self.mode == "whole":
            total = 500_000_000
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(total))
            handler.end_headers()
            start_json = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
            handler.wfile.write(start_json)
            sent[0] += len(start_json)
            block = b" " * MIB
            while sent[0] < total and safe():
                n = min(len(block), total - sent[0])
                handler.wfile.write(block[:n])
                sent[0] += n
            return "sent all 500,000,000 bytes" if sent[0] >= total else "safety cap"
        if self.mode == "longline":
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            chunk(b'data: {"choices":[{"index":0,"delta":{"content":"')
            left = 40_000_000
            block = b"x" * MIB
            while left > 0:
                n = min(left, len(block))
                chunk(block[:n])
                left -= n
            chunk(b'"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
            handler.wfile.write(b"0\r\n\r\n")
            return "sent the whole 40 MB line"
        raise ValueError(self.mode)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------------------------
# The scenarios. Each returns (what the host did, peak KiB, wall seconds, details).


def s1_dedup(keep):
    try:
        return dedup_attack(keep, "testbed")
    except NotRun as e:
        # echo returns its arguments: ~1 MB of distinct arguments make ~1 MB distinct results,
        # remembered the same way (dedup keys are hashes, so the arguments are not kept).
        did, peak, wall, details = dedup_attack(keep, "echo")
        details["why echo"] = str(e)
        return f"NOT RUN with testbed ({e}); RAN WITH echo (1 MB `text` in, the same out): " + did, peak, wall, details


def dedup_attack(keep, component):
    sessions, calls, size = 20, 150, 1_000_000
    scene = Scene("dedup", [component], keep)
    if component == "testbed":
        tool = "big_output"
        arguments = lambda n, c: {"bytes": size, "nonce": f"s{n}-c{c}"}  # noqa: E731
        expected = lambda args: size  # noqa: E731
    else:
        tool = "echo"
        arguments = lambda n, c: {"nonce": f"s{n}-c{c}", "text": "x" * size}  # noqa: E731
        expected = lambda args: len(json.dumps(args, separators=(",", ":")))  # noqa: E731
    try:
        scene.host_config("[host]\ndedup-session-mib = 64\ndedup-total-mib = 256\n")
        scene.write(
            f"{component}.toml",
            ensemble(component, component, f'[[invokers]]\ninvoker = {{ name = "{tool}" }}\n'),
        )
        scene.warm()
        scene.require(component)
        serve = Serve(scene)
        try:
            baseline = serve.hwm_kib()
            counts = {"ok": 0, "error": 0, "wrong size": 0}
            errors = []
            lock = threading.Lock()
            samples = []

            def client(n):
                try:
                    mcp = open_session(serve)
                    for c in range(calls):
                        args = arguments(n, c)
                        is_error, text, _ = mcp.call(tool, args)
                        with lock:
                            if is_error:
                                counts["error"] += 1
                                errors.append(text[:200])
                            elif abs(len(text) - expected(args)) > 2:
                                counts["wrong size"] += 1
                            else:
                                counts["ok"] += 1
                except Exception as e:  # noqa: BLE001 - reported
                    with lock:
                        errors.append(f"session {n}: {e!r}")

            done = threading.Event()

            def sampler():
                while not done.wait(0.5):
                    rss = serve.rss_kib()
                    if rss:
                        samples.append(rss)

            threading.Thread(target=sampler, daemon=True).start()
            start = time.monotonic()
            threads = [threading.Thread(target=client, args=(n,)) for n in range(sessions)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - start
            done.set()
            peak = serve.hwm_kib()
            final = serve.rss_kib()
            alive = serve.child.poll() is None
        finally:
            serve.stop()
        total = sessions * calls
        did = (
            f"{counts['ok']}/{total} `{tool}` calls of ~{size:,} B answered"
            + (f", {counts['error']} errors" if counts["error"] else "")
            + (f", {counts['wrong size']} of the wrong size" if counts["wrong size"] else "")
            + f"; {total * size / MIB:,.0f} MiB of distinct results, remembered up to the 256 MiB"
            f" total bound: peak {mib(peak)} MiB over an idle {mib(baseline)} MiB, RSS at the end"
            f" {mib(final)} MiB" + ("" if alive else "; THE HOST DIED")
        )
        details = {
            "counts": counts,
            "errors (first 5)": errors[:5],
            "baseline VmHWM MiB": mib(baseline),
            "max sampled VmRSS MiB": mib(max(samples) if samples else None),
            "final VmRSS MiB": mib(final),
        }
        return did, peak, wall, details
    finally:
        scene.close()


def s2_sessions(keep):
    attempts = 5000
    scene = Scene("sessions", ["echo"], keep)
    try:
        scene.host_config("[host]\nmax-mcp-sessions = 1000\n")
        scene.write("echo.toml", ensemble("echo", "echo", '[[invokers]]\ninvoker = { name = "echo" }\n'))
        scene.warm()
        serve = Serve(scene)
        try:
            baseline = serve.hwm_kib()
            statuses = {}
            first = None
            start = time.monotonic()
            for _ in range(attempts):
                client = McpHttp(serve)
                try:
                    status = client.initialize()
                except (OSError, HttpError) as e:
                    status = f"failed: {type(e).__name__}"
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200 and first is None:
                    first = client
            wall = time.monotonic() - start
            peak_after_flood = serve.hwm_kib()
            # An open session is still served, and a new one is still refused.
            check = "no session opened"
            if first is not None:
                first.initialized()
                is_error, text, _ = first.call("echo", {"still": "served"})
                check = f"first session's echo call: {'error ' if is_error else ''}{text[:80]}"
            try:
                again = McpHttp(serve).initialize()
            except (OSError, HttpError) as e:
                again = repr(e)
            peak = serve.hwm_kib()
            alive = serve.child.poll() is None
        finally:
            serve.stop()
        got = ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items(), key=str))
        did = (
            f"{attempts} initialize POSTs: {got} (HTTP status); {check}; another new one: {again}"
            + ("" if alive else "; THE HOST DIED")
        )
        details = {
            "baseline VmHWM MiB": mib(baseline),
            "VmHWM right after the flood MiB": mib(peak_after_flood),
            "statuses": statuses,
        }
        return did, peak, wall, details
    finally:
        scene.close()


def testbed_scene(name, invoker, limits, keep):
    """A scene with one testbed invoker (`invoker` is its inline table's insides), its cache
    warm; raises when testbed does not load with this binary."""
    scene = Scene(name, ["testbed"], keep)
    try:
        scene.write(
            "testbed.toml",
            ensemble(
                "testbed",
                "testbed",
                f"[[invokers]]\ninvoker = {{ {invoker} }}\nlimits = {{ {limits} }}\n",
            ),
        )
        scene.warm()
        scene.require("testbed")
    except BaseException:
        scene.close()
        raise
    return scene


def s3_header_flood(keep):
    scene = testbed_scene(
        "headers", 'name = "header_flood", dedup = "off"', "memory-mib = 16, timeout-ms = 10000", keep
    )
    try:
        serve = Serve(scene)
        try:
            mcp = open_session(serve)
            baseline = serve.hwm_kib()
            texts = []
            start = time.monotonic()
            for _ in range(4):
                is_error, text, _ = mcp.call("header_flood", {"bytes": 8000})
                texts.append(("error: " if is_error else "ok: ") + text[:160])
            wall = time.monotonic() - start
            peak = serve.hwm_kib()
            alive = serve.child.poll() is None
        finally:
            serve.stop()
        distinct = sorted(set(texts))
        did = (
            f"4 calls: {' | '.join(distinct)}; host grew {(peak - baseline) / 1024:.1f} MiB"
            f" over {mib(baseline)} MiB" + ("" if alive else "; THE HOST DIED")
        )
        return did, peak, wall, {"results": texts, "baseline VmHWM MiB": mib(baseline)}
    finally:
        scene.close()


def s4_dev_zero(keep):
    scene = Scene("devzero", [], keep)
    try:
        scene.write(
            "zero.toml",
            'schema-version = 1\n[ensemble]\nname = "zero"\ncomponent = "/dev/zero"\n'
            '[[invokers]]\ninvoker = { name = "y" }\n',
        )
        run = run_measured(["check"], scene, timeout=120)
        message = first_error(run.stderr + run.stdout)
        did = f"`check` exit {run.code}{' (KILLED at the script timeout)' if run.killed else ''}: {message}"
        return did, run.peak_kib, run.wall, run_details(run)
    finally:
        scene.close()


def chat_scenario(name, mode, extra, keep):
    scene = Scene(name, ["echo"], keep)
    model = FakeModel(mode)
    try:
        scene.write("echo.toml", ensemble("echo", "echo", '[[invokers]]\ninvoker = { name = "echo" }\n'))
        scene.warm()
        args = [
            "chat",
            "--provider", "openai",
            "--model", "attack",
            "--base-url", model.base_url,
            "--max-iterations", "1",
            *extra,
            "Say something.",
        ]
        run = run_measured(args, scene, timeout=240)
        time.sleep(0.2)  # let the server's handler record how its answer ended
        requests = list(model.requests)
        message = first_error(run.stderr) or run.stderr.strip()[-300:]
        served = "; ".join(f"{sent / MIB:,.1f} MiB sent, {ending}" for sent, ending in requests)
        did = (
            f"`chat` exit {run.code}{' (KILLED at the script timeout)' if run.killed else ''}:"
            f" {message}; {len(run.stdout_bytes) / MIB:.1f} MiB of text on stdout;"
            f" the server: {served or 'no request'}"
        )
        details = run_details(run)
        details["requests"] = requests
        return did, run.peak_kib, run.wall, details
    finally:
        model.close()
        scene.close()


def s5_endless_stream(keep):
    return chat_scenario("stream", "forever", [], keep)


def s6_whole_500mb(keep):
    return chat_scenario("whole", "whole", ["--no-stream"], keep)


def s7_long_sse_line(keep):
    return chat_scenario("longline", "longline", [], keep)


def s8_fail_big(keep):
    scene = testbed_scene("failbig", 'name = "fail_big"', "memory-mib = 256", keep)
    try:
        run = run_measured(["call", "fail_big", '{"bytes": 50000000}'], scene, timeout=120)
        lines = run.stderr_bytes.split(b"\n")
        error = next((l for l in lines if l.startswith(b"error:")), b"")
        line = error.decode("utf-8", "replace")
        did = (
            f"`call` exit {run.code}: printed a {len(error):,}-byte error line"
            f" (`{line[:40]}...{line[-60:]}`) in {len(run.stderr_bytes):,} B of stderr"
        )
        return did, run.peak_kib, run.wall, run_details(run)
    finally:
        scene.close()


def schema_check(name, arguments_toml, keep):
    scene = Scene(name, ["echo"], keep)
    try:
        scene.write(
            "web.toml",
            ensemble("web", "echo", '[[invokers]]\ninvoker = { name = "echo" }\n\n' + arguments_toml),
        )
        # Warm the cache with echo alone (another ensembles directory, the same cache), so
        # that `check` below measures the schema, not a compile.
        saved = scene.ensembles
        scene.ensembles = os.path.join(scene.dir, "warm")
        scene.write("echo.toml", ensemble("echo", "echo", '[[invokers]]\ninvoker = { name = "echo" }\n'))
        scene.warm()
        scene.ensembles = saved
        size = os.path.getsize(os.path.join(saved, "web.toml"))
        run = run_measured(["check"], scene, timeout=240)
        message = first_error(run.stderr + run.stdout)
        did = (
            f"`check` of a {size / 1024:,.0f} KiB ensemble file: exit {run.code}"
            f"{' (KILLED at the script timeout)' if run.killed else ''}: {message}"
        )
        return did, run.peak_kib, run.wall, run_details(run)
    finally:
        scene.close()


def s9_allof_doubling(keep):
    levels = 24
    lines = [
        "[invokers.arguments]",
        'type = "object"',
        f'properties = {{ x = {{ "$ref" = "#/$defs/l{levels}" }} }}',
        "",
        '[invokers.arguments."$defs"]',
        'l0 = { type = "string" }',
    ]
    for n in range(1, levels + 1):
        lines.append(
            f'l{n} = {{ allOf = [{{ "$ref" = "#/$defs/l{n - 1}" }}, {{ "$ref" = "#/$defs/l{n - 1}" }}] }}'
        )
    return schema_check("allof", "\n".join(lines) + "\n", keep)


def properties_with_patterns(count):
    lines = ["[invokers.arguments]", 'type = "object"', "", "[invokers.arguments.properties]"]
    for n in range(count):
        lines.append(f'p{n} = {{ type = "string", pattern = "^a{n % 97}b+$" }}')
    return "\n".join(lines) + "\n"


def s10_many_patterns(keep):
    return schema_check("patterns", properties_with_patterns(200_000), keep)


def s10b_patterns_within_size(keep):
    return schema_check("patterns-small", properties_with_patterns(5_000), keep)


def s10c_largest_descriptor(keep):
    """The most the 16 MiB descriptor-file bound lets through: ~1.4 million empty tables."""
    lines = ["[invokers.arguments]", 'type = "object"', "", "[invokers.arguments.properties]"]
    lines += [f"p{n}={{}}" for n in range(1_400_000)]
    return schema_check("tables", "\n".join(lines) + "\n", keep)


def s11_spinners(keep):
    scene = Scene("spinners", ["echo"], keep)
    try:
        with open(os.path.join(WASM, "spinner.wasm"), "rb") as f:
            spinner = f.read()
        for n in range(6):
            name, payload = b"toolhost-test", f"s{n}".encode()
            size = 1 + len(name) + len(payload)
            with open(os.path.join(scene.dir, f"spinner{n}.wasm"), "wb") as f:
                f.write(spinner + bytes([0, size, len(name)]) + name + payload)
            scene.write(
                f"spin{n}.toml",
                ensemble(f"spin{n}", f"spinner{n}", f'[[invokers]]\ninvoker = {{ name = "spin{n}", tool = "spin" }}\n'),
            )
        scene.write("echo.toml", ensemble("echo", "echo", '[[invokers]]\ninvoker = { name = "echo" }\n'))
        warm = run_measured(["list"], scene, timeout=300)
        start = time.monotonic()
        child = subprocess.Popen(
            [BIN, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=scene.env(),
            cwd=scene.dir,
        )
        lines = queue.Queue()
        err_tail = []

        def read_out():
            for raw in child.stdout:
                try:
                    lines.put(json.loads(raw))
                except ValueError:
                    pass
            lines.put(None)

        def read_err():
            for raw in child.stderr:
                err_tail.append(raw.decode("utf-8", "replace").rstrip()[:300])
                del err_tail[:-20]

        threading.Thread(target=read_out, daemon=True).start()
        threading.Thread(target=read_err, daemon=True).start()

        def send(message):
            child.stdin.write((json.dumps(message) + "\n").encode())
            child.stdin.flush()

        def answer(id_, deadline):
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                try:
                    message = lines.get(timeout=left)
                except queue.Empty:
                    return None
                if message is None:
                    return None
                if message.get("id") == id_:
                    return message

        deadline = start + 120
        listed = None
        tools = []
        try:
            send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "attack-rss", "version": "1"}}})
            initialized = answer(1, deadline)
            initialized_at = time.monotonic() - start
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            id_ = 1
            while initialized and time.monotonic() < deadline:
                id_ += 1
                send({"jsonrpc": "2.0", "id": id_, "method": "tools/list", "params": {}})
                reply = answer(id_, deadline)
                if reply is None:
                    break
                tools = [t["name"] for t in reply.get("result", {}).get("tools", [])]
                if "echo" in tools:
                    listed = time.monotonic() - start
                    break
                time.sleep(0.05)
            peak_at_list = status_kib(child.pid, "VmHWM")
            # The spinners' describe() may still be running: give them their deadline and more.
            time.sleep(5)
            peak = status_kib(child.pid, "VmHWM")
        finally:
            try:
                child.stdin.close()
            except OSError:
                pass
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        if listed is None:
            did = (
                f"serve (stdio) never listed echo within 120 s (initialize answered: "
                f"{bool(initialized)}); tools seen: {tools}"
            )
            wall = time.monotonic() - start
        else:
            did = (
                f"serve (stdio) answered initialize at {initialized_at:.2f} s and listed echo at"
                f" {listed:.2f} s (tools: {', '.join(tools)}); the warm-up `list` over the same"
                f" seven components took {warm.wall:.1f} s (exit {warm.code})"
            )
            wall = listed
        details = {
            "VmHWM when echo was listed MiB": mib(peak_at_list),
            "VmHWM 5 s later MiB": mib(peak),
            "warm-up list peak MiB": mib(warm.peak_kib),
            "warm-up list stderr (end)": warm.stderr[-1500:],
            "serve stderr (end)": err_tail[-10:],
        }
        return did, peak or peak_at_list, wall, details
    finally:
        scene.close()


def s12_log_flood(keep):
    scene = testbed_scene("logflood", 'name = "log_flood", dedup = "off"', "timeout-ms = 60000", keep)
    try:
        serve = Serve(scene)
        try:
            mcp = open_session(serve)
            baseline = serve.hwm_kib()
            stderr_before = serve.stderr_bytes
            results, notes = [], 0
            start = time.monotonic()
            for _ in range(4):
                is_error, text, others = mcp.call("log_flood", {"count": 100_000}, timeout=120)
                results.append(("error: " if is_error else "") + text[:120])
                notes += sum(1 for m in others if m.get("method") == "notifications/message")
            wall = time.monotonic() - start
            time.sleep(0.3)
            peak = serve.hwm_kib()
            alive = serve.child.poll() is None
            stderr_grew = serve.stderr_bytes - stderr_before
        finally:
            serve.stop()
        did = (
            f"4 x 100,000 host.log calls: results {sorted(set(results))}; {notes} log"
            f" notifications reached the session; the host's stderr grew {stderr_grew:,} B;"
            f" host grew {(peak - baseline) / 1024:.1f} MiB over {mib(baseline)} MiB"
            + ("" if alive else "; THE HOST DIED")
        )
        return did, peak, wall, {"baseline VmHWM MiB": mib(baseline), "stderr tail": serve.tail[-3:]}
    finally:
        scene.close()


# ---------------------------------------------------------------------------------------------


def first_error(text):
    """The first `error`-ish line of a command's output, shortened."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.lower().startswith(("error", "warning")) or "error:" in stripped.lower():
            return stripped[:400]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:400] if lines else "(no output)"


def run_details(run):
    return {
        "exit": run.code,
        "polled VmHWM MiB": mib(run.polled_kib),
        "wait4 ru_maxrss MiB": mib(run.maxrss_kib),
        "launcher VmHWM MiB": mib(run.launcher_kib),
        "ru_maxrss is the command's own": run.exact,
        "stdout bytes": len(run.stdout_bytes),
        "stderr bytes": len(run.stderr_bytes),
        "stderr (start)": run.stderr[:1500],
    }


SCENARIOS = [
    ("1", "dedup memory: 20 MCP HTTP sessions x 150 distinct `big_output` calls of ~1 MiB", s1_dedup),
    ("2", "5,000 MCP HTTP sessions opened and left idle (max-mcp-sessions 1000)", s2_sessions),
    ("3", "`header_flood` {bytes: 8000}, memory-mib 16, 4 calls (serve --http)", s3_header_flood),
    ("4", "component = \"/dev/zero\" (`toolhost check`)", s4_dev_zero),
    ("5", "a model that streams forever (`chat`, OpenAI SSE)", s5_endless_stream),
    ("6", "a 500 MB whole answer, Content-Length 500000000 (`chat --no-stream`)", s6_whole_500mb),
    ("7", "one 40 MB SSE line (`chat`)", s7_long_sse_line),
    ("8", "a 50 MB tool error: `fail_big` {bytes: 50000000}, memory-mib 256 (`toolhost call`)", s8_fail_big),
    ("9", "[arguments] whose allOf doubles per level, 24 levels via $ref (`check`)", s9_allof_doubling),
    ("10", "[arguments] with 200,000 properties with patterns (`check`)", s10_many_patterns),
    ("10b", "[arguments] with 5,000 properties with patterns, under the 256 KiB bound (`check`)", s10b_patterns_within_size),
    ("10c", "[arguments] with 1.4 million empty property tables: a 15 MB file, under the 16 MiB descriptor bound (`check`)", s10c_largest_descriptor),
    ("11", "six components whose describe() never returns, plus echo (`serve`, stdio)", s11_spinners),
    ("12", "`log_flood` {count: 100000}, 4 calls (serve --http)", s12_log_flood),
]


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def main():
    global BIN
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated scenario numbers (e.g. 1,4,10b)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--bin", default=BIN, help=f"the toolhost binary (default {BIN})")
    args = parser.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin} is missing: cargo build --release -p toolhost --bin toolhost")
    # A copy, so that a build finishing while the scenarios run cannot change the binary.
    snapshot = tempfile.mkdtemp(prefix="attack-rss-bin-")
    BIN = os.path.join(snapshot, "toolhost")
    shutil.copy2(args.bin, BIN)
    with open(BIN, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(args.bin)))
    for component in ("echo", "testbed", "spinner"):
        if not os.path.exists(os.path.join(WASM, f"{component}.wasm")):
            sys.exit(f"{WASM}/{component}.wasm is missing (the test suite's build script makes it)")
    chosen = set(args.only.split(",")) if args.only else None
    rows, details = [], []
    started = time.monotonic()
    for number, attack, scenario in SCENARIOS:
        if chosen and number not in chosen:
            continue
        print(f"[{time.monotonic() - started:6.1f} s] scenario {number}: {attack}", file=sys.stderr)
        try:
            did, peak, wall, detail = scenario(args.keep)
        except NotRun as e:
            did, peak, wall = f"NOT RUN: {e}", None, None
            detail = {"not run": str(e)}
        except Exception as e:  # noqa: BLE001 - a failed scenario is a row, not the end
            did, peak, wall = f"SCRIPT ERROR: {e!r}", None, None
            detail = {"traceback": traceback.format_exc()}
        rows.append((number, attack, did, mib(peak), "?" if wall is None else f"{wall:.2f}"))
        details.append((number, detail))
        print(f"    -> {mib(peak)} MiB, {wall if wall is None else round(wall, 2)} s: {did}", file=sys.stderr)
    print("| # | attack | what the host did | host peak RSS (MiB) | wall time (s) |")
    print("|---|---|---|---:|---:|")
    for number, attack, did, peak, wall in rows:
        print(f"| {number} | {cell(attack)} | {cell(did)} | {peak} | {wall} |")
    print()
    print(
        "Peak RSS is VmHWM of the toolhost process (serve: read from /proc while it runs;"
        " check/call/chat: wait4's ru_maxrss through a small launcher, see the details). Wall"
        " time: serve scenarios time the attack itself; check/call/chat time the whole command;"
        " scenario 11 times from starting serve to the tools/list answer that lists echo."
    )
    print()
    print("## Details")
    for number, detail in details:
        print(f"\n### {number}\n")
        print("```")
        for key, value in detail.items():
            print(f"{key}: {value if isinstance(value, str) else json.dumps(value, default=str)}")
        print("```")
    print(f"\n(total {time.monotonic() - started:.0f} s; binary {args.bin}, built {built} UTC, sha256 {digest}...)")
    shutil.rmtree(snapshot, ignore_errors=True)


if __name__ == "__main__":
    main()
