#!/usr/bin/env python3
"""What a `tools/call` costs the server over streamable HTTP, against stdio, measured from
outside the process (issue #44).

    scripts/http-load.py [--toolhost target/release/toolhost] [--seconds 10]
                         [--connections 1,16,64] [--cells stdio,sessionless,session,jwt,dedup]
                         [--echo PATH] [--perf OUT.data] [--json OUT.json]
                         [--host-line 'keep-resident-mib = 1' ...] [--repeat N]
                         [--stdio-connections 1,16] [--vs OTHER_TOOLHOST]
                         [--redis-delay-ms MS] [--otel SAMPLER[:ARG]] [--otel-only-this]

Each cell serves the `echo` test component (tests/plugins/echo, built for wasm32-wasip2 by
`cargo build --release --target wasm32-wasip2 --manifest-path tests/plugins/Cargo.toml
--target-dir target/wasm32-plugins -p echo`) from a fresh `toolhost serve --no-watch` with an
audit log, and drives it for `--seconds` after a warm-up:

- stdio: a raw JSON-RPC pipe client (this script), 2026-07-28 calls, one at a time (or
  `--stdio-connections` in flight); stdio-dedup: the same with `dedup = "exact"` and the
  same arguments every time;
- sessionless: `wrk` (Debian's), session-less 2026-07-28 `tools/call` over keep-alive, the
  `Mcp-Method`/`Mcp-Name` headers and the `_meta` fields set by scripts/http-load.lua;
- session: 2025-11-25 in one MCP session opened first (every connection uses it);
- jwt: sessionless, each request with an access token (RS256, `[access.oidc]` trusting a key
  set this script serves on loopback);
- dedup: sessionless with `dedup = "exact"`, identical arguments and one conversation named
  in `_meta`, so every call after the first is a hit;
- quota: sessionless with a named static token under a quota no call reaches (a million
  calls a minute, 10,000 at once): what counting a call costs, in this process;
- quota-redis: the same with `[fleet] redis` naming a `redis-server` this script starts on
  loopback (Debian's): what counting it in Redis, one script per call, costs (with
  `--redis-delay-ms`, through a proxy that puts Redis that many milliseconds away);
- quota-rediss: quota-redis over TLS (`rediss://`, a redis-server on a TLS port alone, its
  certificate from a CA this script makes with `openssl`, named by `redis-ca-file`): what
  TLS to Redis adds (issue #58);
- quota-cluster: quota-redis on a Redis Cluster of three primaries (`redis-cluster`, made by
  `redis-cli --cluster create`): what the cluster client costs, and that a call still takes
  one round trip (issue #58);
- dedup-redis: sessionless with `dedup = "exact"`, a conversation named in `_meta` and
  `[fleet] redis`, every call's arguments new: each call asks the fleet's dedup (a miss,
  a claim) and stores its result for the fleet (off the call's path);
- quota-dedup-redis: the same under the quota of the quota cells: the admission and the
  dedup asked together (one round trip), then the release of the call's `concurrent-calls`
  lease before its answer (a second); rate-dedup-redis: under `calls-per-minute` alone
  (one round trip in all);
- routed: sessionless on one replica with `[fleet] redis` and `advertise` (issue #43): what
  looking at each call for what another replica holds costs when nothing is;
- forwarded: the session cell's requests sent to a replica that does not hold the session,
  so that each is forwarded to the one that does (server CPU: both replicas');
- fleet-1, fleet-3: sessionless through haproxy (Debian's, round robin) in front of one
  replica and of three (server CPU: every replica's; haproxy's is not counted).

For every cell on Redis, a second table says what Redis did per call (issue #58): each
command Redis counted (`INFO commandstats`, every node's; a script's own `redis.call`s are
counted under their names, so `evalsha` is the round trips scripts took) and the CPU the
redis-server processes took per call, from which the calls/s at which one Redis core is the
limit follows (`1 / CPU per call`).

Cells other than stdio run at each of `--connections` (wrk, one thread). Reported: calls/s,
p50 and p99 (wrk's), the server's CPU per call (utime + stime from /proc over the run,
divided by the calls), the server's context switches per call (every thread's, from /proc),
and the CPU wrk itself took (it shares the 2 cores). With `--vs`, every cell runs with both
binaries in turn, which goes first swapped at each repeat (`this ÷ vs` compares their CPU
per call: the median of each repeat's ratio); with `--repeat N` the figures are medians of N
runs. `ratio` is the
server's CPU per call against stdio's (one call at a time) in the same run. With `--perf OUT`, one cell (`--perf-cell`,
`--perf-connections`; sessionless at 16 by default) is recorded with `perf record` (Debian's linux-perf; timer samples, DWARF
call graphs) for `perf report` or a flame graph.
"""

import argparse
import asyncio
import base64
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "scripts" / "http-load.lua"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid, user_only=False):
    """utime + stime of process `pid` (utime alone with `user_only`: the host's own code,
    without the kernel's share, which over loopback TCP includes delivering each answer to
    the client), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + (0 if user_only else int(fields[12]))) / TICKS


def switches(pid):
    """Context switches of every thread of process `pid` so far (each one a wake-up or a
    preemption: what a call costs beyond its work)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Provider:
    """An OpenID provider of one RSA key on loopback: its metadata and key set, served by a
    thread of this script; tokens signed here (PyJWT from the tests' virtualenv, or openssl)."""

    def __init__(self, work):
        self.key = work / "key.pem"
        subprocess.run(["openssl", "genrsa", "-out", str(self.key), "2048"], check=True,
                       capture_output=True)
        modulus = subprocess.run(["openssl", "rsa", "-in", str(self.key), "-noout", "-modulus"],
                                 check=True, capture_output=True, text=True).stdout
        n = bytes.fromhex(modulus.strip().split("=", 1)[1])
        port = free_port()
        self.issuer = f"http://127.0.0.1:{port}"
        documents = {
            "/.well-known/openid-configuration": {"issuer": self.issuer,
                                                  "jwks_uri": f"{self.issuer}/jwks"},
            "/jwks": {"keys": [{"kty": "RSA", "kid": "load", "alg": "RS256", "use": "sig",
                                "n": b64url(n), "e": "AQAB"}]},
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps(documents.get(self.path)).encode()
                self.send_response(200 if self.path in documents else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def token(self, resource):
        header = {"alg": "RS256", "typ": "at+jwt", "kid": "load"}
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": "load", "aud": resource, "iat": now,
                  "exp": now + 3600, "scope": "tools:all", "client_id": "load"}
        signing = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing.encode(), check=True,
                                   capture_output=True).stdout
        return f"{signing}.{b64url(signature)}"


class Server:
    """`toolhost serve` over the echo ensemble in `work`, over HTTP at `port` or over stdio."""

    def __init__(self, args, work, http_port=None, dedup="off", oidc=None, record=None,
                 extra="", env=None):
        ensembles = work / "ensembles"
        shutil.rmtree(ensembles, ignore_errors=True)
        ensembles.mkdir(parents=True)
        (ensembles / "echo.toml").write_text(
            f'schema-version = 1\n\n[ensemble]\nname = "echo"\ncomponent = "{args.echo}"\n\n'
            f'[defaults]\ndedup = "{dedup}"\n\n[[invokers]]\ninvoker = {{ name = "echo" }}\n')
        host = (f'schema-version = 1\n\n[host]\nensembles = "ensembles"\ncache-dir = "cache"\n'
                f'audit = "audit.jsonl"\nstatus-file = "status.json"\n')
        for line in args.host_line:
            host += line + "\n"
        if oidc:
            host += (f'\n[access.oidc]\nissuer = "{oidc.issuer}"\n'
                     f'resource = "http://127.0.0.1:{http_port}/mcp"\nalgorithms = ["RS256"]\n')
        (work / "toolhost.toml").write_text(host + extra)
        command = [str(args.toolhost), "--config", str(work / "toolhost.toml"), "serve",
                   "--no-watch"]
        if http_port:
            command += ["--http", f"127.0.0.1:{http_port}"]
        if record:
            # No hardware counters on many VMs: the timer's samples; call graphs from DWARF
            # (release builds keep no frame pointers).
            command = ["perf", "record", "-e", "cpu-clock", "-F", "2000", "--call-graph",
                       "dwarf,32768", "-o", record, "--"] + command
        self.stderr = open(work / "stderr", "w")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, cwd=work,
                                        env={**os.environ, **(OTEL_ENV if OTEL_ACTIVE[0] else {}),
                                             **(env or {})})
        self.pid = self.process.pid
        if record:
            # perf's child is the server.
            deadline = time.time() + 10
            while time.time() < deadline:
                children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
                if children:
                    self.pid = int(children[0])
                    break
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{http_port}/mcp" if http_port else None

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(2 if self.pid == self.process.pid else 15)
            if self.pid != self.process.pid:
                os.kill(self.pid, 15)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.stderr.close()


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "http-load", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def post(url, body, headers):
    """One request with curl: (status, headers text, body text)."""
    command = ["curl", "-s", "-D", "-", "-o", "-", "-X", "POST", url,
               "-H", "content-type: application/json",
               "-H", "accept: application/json, text/event-stream", "--data", json.dumps(body)]
    for key, value in headers.items():
        command += ["-H", f"{key}: {value}"]
    out = subprocess.run(command, capture_output=True).stdout.decode()
    head, _, rest = out.partition("\r\n\r\n")
    return head, rest


def wait_ready(url, headers, deadline=120, server=None):
    """Until echo answers a call; returns the answer's text. A server that exits first (a
    build that does not know a setting of the cell) ends the run with its stderr."""
    started = time.time()
    head, rest = "", ""
    body = {"jsonrpc": "2.0", "id": 0, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "ready"}, "_meta": META}}
    hdrs = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}
    hdrs.update(headers)
    while time.time() - started < deadline:
        try:
            head, rest = post(url, body, hdrs)
            if '"isError":false' in rest:
                return head, rest
        except OSError:
            pass
        if server and server.process.poll() is not None:
            server.stderr.flush()
            said = (Path(server.stderr.name).read_text())[-2000:]
            sys.exit(f"the server exited before it answered a call:\n{said}")
        time.sleep(0.2)
    sys.exit(f"the server never answered a call: {head} {rest}")


def open_session(url, headers):
    """A 2025-11-25 session: its id."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "http-load", "version": "1"}}}
    head, _ = post(url, body, headers)
    session = re.search(r"(?im)^mcp-session-id:\s*(\S+)", head).group(1)
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"},
         dict(headers, **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}))
    return session


def run_wrk(args, url, connections, env):
    """wrk for --seconds: (requests, seconds, p50 ms, p99 ms, non-2xx, wrk CPU seconds)."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{args.seconds}s", "--latency",
               "-s", str(LUA), url]
    started = os.times()
    result = subprocess.run(command, capture_output=True, text=True,
                            env=dict(os.environ, MCP_RUN=os.urandom(6).hex(), **env))
    ended = os.times()
    out = result.stdout
    requests = int(re.search(r"(\d+) requests in ([\d.]+)(\w+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

    def percentile(p):
        value, unit = re.search(rf"\s{p}%\s+([\d.]+)(\w+)", out).groups()
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    wrk_cpu = (ended.children_user - started.children_user
               + ended.children_system - started.children_system)
    return requests, percentile(50), percentile(99), int(non2xx.group(1)) if non2xx else 0, \
        wrk_cpu, out


def stdio_cell(args, work, inflight=1, cell="stdio", record=None):
    """Calls over stdio from a raw JSON-RPC pipe client, `inflight` at a time (pipelined: a
    new request for each answer); with cell `stdio-dedup`, `dedup = "exact"` and the same
    arguments every time (the connection is the dedup scope)."""
    dedup = cell == "stdio-dedup"
    server = Server(args, work, dedup="exact" if dedup else "off", record=record)
    out, stdin = server.process.stdout, server.process.stdin
    sent_at = {}

    def send(n):
        text = "same" if dedup else str(n)
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text}, "_meta": META}}
        sent_at[n] = time.perf_counter()
        stdin.write((json.dumps(body) + "\n").encode())

    def receive():
        message = json.loads(out.readline())
        return message, time.perf_counter() - sent_at.pop(message["id"])

    n = 0
    started = time.time()
    while True:  # until echo is loaded (its compile, the first time)
        n += 1
        send(n)
        stdin.flush()
        answer, _ = receive()
        if not answer.get("result", {}).get("isError", True):
            break
        if time.time() - started > 120:
            sys.exit(f"stdio: echo never answered: {answer}")
        time.sleep(0.2)

    def run(seconds, latencies):
        nonlocal n
        for _ in range(inflight):
            n += 1
            send(n)
        stdin.flush()
        calls, begin = 0, time.time()
        while time.time() - begin < seconds:
            _, took = receive()
            calls += 1
            if latencies is not None:
                latencies.append(took * 1000)
            n += 1
            send(n)
            stdin.flush()
        for _ in range(inflight):
            receive()
        return calls, time.time() - begin

    run(2, None)
    before, switched = cpu_seconds(server.pid), switches(server.pid)
    user_before = cpu_seconds(server.pid, user_only=True)
    latencies = []
    calls, elapsed = run(args.seconds, latencies)
    cpu = cpu_seconds(server.pid) - before
    user = cpu_seconds(server.pid, user_only=True) - user_before
    switched = switches(server.pid) - switched
    server.stop()
    latencies.sort()
    return {"cell": cell, "connections": inflight, "calls": calls,
            "calls_per_s": calls / elapsed, "p50_ms": latencies[len(latencies) // 2],
            "p99_ms": latencies[int(len(latencies) * 0.99)],
            "server_us_per_call": cpu / calls * 1e6, "user_us_per_call": user / calls * 1e6,
            "switches_per_call": switched / calls, "client_cpu_share": None, "errors": 0}


class Redis:
    """Debian's redis-server on a free loopback port, nothing saved; stopped by `stop`. With
    `delay_ms`, the servers reach it through a proxy that holds each message `delay_ms / 2`
    each way (a Redis that far away; messages in flight are not held up by one another), so
    that a call's round trips to Redis show in its latency one by one."""

    def __init__(self, work, delay_ms=0.0, tls=False):
        self.port = free_port()
        self.ca = None
        ports = ["--port", str(self.port)]
        if tls:
            self.ca, cert, key = test_certificates(work / "tls")
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(cert),
                     "--tls-key-file", str(key), "--tls-ca-cert-file", str(self.ca),
                     "--tls-auth-clients", "no"]
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", *ports, "--save", "",
             "--appendonly", "no", "--dir", str(work)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.05)
        else:
            sys.exit("redis-server did not start")
        if delay_ms:
            self.direct = self.port
            self.port = delaying_proxy(self.port, delay_ms / 2000)

        self.nodes = [(self.process.pid, self.server_port(), tls)]

    def server_port(self):
        return self.port if not hasattr(self, "direct") else self.direct

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


class RedisCluster:
    """Three redis-server primaries on loopback made a cluster by `redis-cli --cluster
    create` (no replicas), nothing saved; stopped by `stop`."""

    def __init__(self, work, primaries=3):
        folder = work / "cluster"
        folder.mkdir(exist_ok=True)
        self.processes, ports = [], []
        for _ in range(primaries):
            port, bus = free_port(), free_port()
            self.processes.append(subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--cluster-enabled",
                 "yes", "--cluster-port", str(bus), "--cluster-config-file",
                 str(folder / f"nodes-{port}.conf"), "--save", "", "--appendonly", "no",
                 "--dir", str(folder)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port)
        for port in ports:
            deadline = time.time() + 10
            while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                if time.time() > deadline:
                    sys.exit("redis-server did not start")
                time.sleep(0.05)
        subprocess.run(["redis-cli", "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in ports], "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not all(b"cluster_state:ok" in subprocess.run(
                ["redis-cli", "-p", str(p), "cluster", "info"], capture_output=True).stdout
                for p in ports):
            if time.time() > deadline:
                sys.exit("the cluster never said ok")
            time.sleep(0.1)
        self.seeds = ",".join(f"redis://127.0.0.1:{p}" for p in ports)
        self.nodes = [(process.pid, port, False)
                      for process, port in zip(self.processes, ports)]

    def stop(self):
        for process in self.processes:
            process.terminate()
            process.wait(timeout=10)


def commandstats(engine):
    """Every command each node of `engine` counted so far: {name: calls}."""
    counted = {}
    for _, port, tls in engine.nodes:
        command = ["redis-cli", "-p", str(port)]
        if tls:
            command += ["--tls", "--cacert", str(engine.ca)]
        out = subprocess.run(command + ["info", "commandstats"], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            if line.startswith("cmdstat_"):
                name, fields = line[len("cmdstat_"):].split(":", 1)
                calls = int(fields.split(",")[0].split("=")[1])
                counted[name] = counted.get(name, 0) + calls
    return counted


def test_certificates(folder):
    """A CA and a certificate it signed for 127.0.0.1, made with `openssl` in `folder`: the
    CA's, the certificate's and its key's paths."""
    folder.mkdir(parents=True, exist_ok=True)
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=load test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    return folder / "ca.crt", folder / "server.crt", folder / "server.key"


def delaying_proxy(target, delay_s):
    """A loopback TCP proxy to `target` holding each chunk `delay_s` in each direction, in a
    thread of its own; returns its port."""
    ready = threading.Event()
    port = []

    async def pipe(reader, writer):
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()

        async def deliver():
            while (item := await queue.get()) is not None:
                due, data = item
                await asyncio.sleep(max(0.0, due - loop.time()))
                writer.write(data)
                await writer.drain()
            writer.close()

        delivering = asyncio.create_task(deliver())
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + delay_s, data))
        queue.put_nowait(None)
        await delivering

    async def serve():
        async def connected(client_reader, client_writer):
            redis_reader, redis_writer = await asyncio.open_connection("127.0.0.1", target)
            await asyncio.gather(pipe(client_reader, redis_writer),
                                 pipe(redis_reader, client_writer), return_exceptions=True)

        server = await asyncio.start_server(connected, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    ready.wait(10)
    return port[0]


# With --otel: every server exports its spans to a sink of this script's (issue #57).
OTEL_ENV = {}
# Whether the server started now exports (all but `vs` with --otel-only-this).
OTEL_ACTIVE = [True]


def otlp_sink():
    """An OTLP/HTTP endpoint on loopback that takes every export and answers 200 with an
    empty message, in a thread of its own; returns its URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        # Keep-alive, as a collector does: the exporter sends its batches on one connection.
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


QUOTA_TOKEN = "load-test-token"
QUOTA = ('\n[[access.tokens]]\nname = "load"\nenv = "LOAD_TOKEN"\n\n'
         '[[access.quotas]]\ncalls-per-minute = 1000000\nconcurrent-calls = 10000\n')


def http_cell(args, work, cell, connections, provider, record=None, redis=None):
    port = free_port()
    dedup = "exact" if "dedup" in cell else "off"
    extra = QUOTA if cell.startswith("quota") else ""
    if cell.startswith("rate"):
        extra = QUOTA.replace("concurrent-calls = 10000\n", "")
    if cell.endswith("redis"):
        extra += f'\n[fleet]\nredis = "redis://127.0.0.1:{redis.port}/0"\n'
    if cell.endswith("cluster"):
        extra += f'\n[fleet]\nredis-cluster = "{redis.seeds}"\n'
    if cell.endswith("rediss"):
        extra += (f'\n[fleet]\nredis = "rediss://127.0.0.1:{redis.port}/0"\n'
                  f'redis-ca-file = "{redis.ca}"\n')
    server = Server(args, work, http_port=port, dedup=dedup,
                    oidc=provider if cell == "jwt" else None, record=record, extra=extra,
                    env={"LOAD_TOKEN": QUOTA_TOKEN})
    env, headers = {}, {}
    try:
        if cell == "jwt":
            token = provider.token(server.url)
            env["MCP_TOKEN"], headers["authorization"] = token, f"Bearer {token}"
        if cell.startswith(("quota", "rate")):
            env["MCP_TOKEN"], headers["authorization"] = QUOTA_TOKEN, f"Bearer {QUOTA_TOKEN}"
        wait_ready(server.url, headers, server=server)
        if cell == "session":
            env["MCP_SESSION"] = open_session(server.url, headers)
        if "dedup" in cell:
            env["MCP_CONVERSATION"] = hashlib.sha256(os.urandom(16)).hexdigest()[:32]
        if cell == "dedup":
            env["MCP_SAME_ARGUMENTS"] = "1"
        return wrk_cell(args, cell, server.url, connections, env, [server.pid], redis)
    finally:
        server.stop()


def wrk_cell(args, cell, url, connections, env, pids, engine=None):
    """wrk against `url` after a warm-up, the servers `pids` (and the Redis `engine` the cell
    is on, if any) measured over the run."""
    # Warm-up: the connections open, the caches fill.
    run_wrk(argparse.Namespace(seconds=2), url, connections, env)
    on_redis = engine is not None and ("redis" in cell or "cluster" in cell
                                       or cell in FLEET_CELLS)
    if on_redis:
        commands_before = commandstats(engine)
        redis_before = sum(cpu_seconds(pid) for pid, _, _ in engine.nodes)
    before = sum(cpu_seconds(pid) for pid in pids)
    user_before = sum(cpu_seconds(pid, user_only=True) for pid in pids)
    switched = sum(switches(pid) for pid in pids)
    requests, p50, p99, errors, wrk_cpu, out = run_wrk(args, url, connections, env)
    cpu = sum(cpu_seconds(pid) for pid in pids) - before
    user = sum(cpu_seconds(pid, user_only=True) for pid in pids) - user_before
    switched = sum(switches(pid) for pid in pids) - switched
    redis = {}
    if on_redis:
        redis_cpu = sum(cpu_seconds(pid) for pid, _, _ in engine.nodes) - redis_before
        counted = commandstats(engine)
        redis["redis_us_per_call"] = redis_cpu / max(requests, 1) * 1e6
        redis["redis_commands_per_call"] = {
            name: (calls - commands_before.get(name, 0)) / max(requests, 1)
            for name, calls in sorted(counted.items())
            if calls - commands_before.get(name, 0) > 0}
    if errors:
        print(f"{cell} at {connections}: {errors} answers were not 2xx\n{out}", file=sys.stderr)
    return {**redis, "cell": cell, "connections": connections, "calls": requests,
            "calls_per_s": requests / args.seconds, "p50_ms": p50, "p99_ms": p99,
            "server_us_per_call": cpu / max(requests, 1) * 1e6,
            "user_us_per_call": user / max(requests, 1) * 1e6,
            "switches_per_call": switched / max(requests, 1),
            "client_cpu_share": wrk_cpu / args.seconds, "errors": errors}


FLEET_CELLS = {"routed": 1, "forwarded": 2, "fleet-1": 1, "fleet-3": 3}


class Haproxy:
    """Debian's haproxy, round robin over `urls`, on a free loopback port."""

    def __init__(self, work, urls):
        port = free_port()
        servers = "".join(
            f"    server r{n} {url.removeprefix('http://').removesuffix('/mcp')}\n"
            for n, url in enumerate(urls))
        config = work / "haproxy.cfg"
        config.write_text(
            "global\n    maxconn 4096\n\ndefaults\n    mode http\n    timeout connect 2s\n"
            "    timeout client 30s\n    timeout server 30s\n\n"
            f"frontend mcp\n    bind 127.0.0.1:{port}\n    default_backend replicas\n\n"
            f"backend replicas\n    balance roundrobin\n{servers}")
        self.process = subprocess.Popen(["haproxy", "-db", "-f", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self):
        self.process.kill()
        self.process.wait()


def fleet_cell(args, work, cell, connections, redis):
    """A cell of replicas on one Redis, each advertising its address (see the doc)."""
    servers, balancer = [], None
    try:
        for n in range(FLEET_CELLS[cell]):
            port = free_port()
            replica = work / f"replica{n}"
            replica.mkdir(exist_ok=True)
            extra = (f'\n[fleet]\nredis = "redis://127.0.0.1:{redis.port}/0"\n'
                     f'advertise = "http://127.0.0.1:{port}"\n')
            servers.append(Server(args, replica, http_port=port, extra=extra))
        for server in servers:
            wait_ready(server.url, {}, server=server)
        url, env = servers[0].url, {}
        if cell == "forwarded":
            # Held by the second replica, asked of the first.
            env["MCP_SESSION"] = open_session(servers[1].url, {})
        if cell.startswith("fleet"):
            balancer = Haproxy(work, [server.url for server in servers])
            url = balancer.url
            wait_ready(url, {})
        return wrk_cell(args, cell, url, connections, env, [server.pid for server in servers],
                        redis)
    finally:
        for server in servers:
            server.stop()
        if balancer:
            balancer.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--toolhost", type=Path, default=ROOT / "target/release/toolhost")
    parser.add_argument("--echo", type=Path,
                        default=ROOT / "target/wasm32-plugins/wasm32-wasip2/release/echo.wasm")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--cells", default="stdio,sessionless,session,jwt,dedup")
    parser.add_argument("--stdio-connections", default="1",
                        help="calls in flight over stdio, e.g. 1,16")
    parser.add_argument("--perf", help="perf record one HTTP cell into this file")
    parser.add_argument("--perf-cell", default="sessionless")
    parser.add_argument("--perf-connections", type=int, default=16)
    parser.add_argument("--vs", type=Path,
                        help="another toolhost binary (a baseline build, scripts/baseline.sh): "
                             "every cell runs with both, in turn")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every cell this many times, the cells in turn; medians")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--redis-delay-ms", type=float, default=0.0,
                        help="reach Redis through a proxy adding this round-trip time")
    parser.add_argument("--otel-only-this", action="store_true",
                        help="--otel for this build only: `--vs` the same binary measures "
                             "what exporting costs in one run")
    parser.add_argument("--otel", default=None, metavar="SAMPLER",
                        help="export every server's spans to a sink (issue #57) with this "
                             "OTEL_TRACES_SAMPLER (always_on, or parentbased_traceidratio:0.01)")
    parser.add_argument("--host-line", action="append", default=[],
                        help="a line added to [host] of the served toolhost.toml")
    args = parser.parse_args()
    # The servers run in a temporary directory: every path absolute.
    args.toolhost, args.echo = args.toolhost.resolve(), args.echo.resolve()
    args.vs = args.vs.resolve() if args.vs else None
    for needed, hint in [(args.toolhost, "cargo build --release -p toolhost"),
                         (args.echo, "the cargo command in this script's doc")]:
        if not needed.exists():
            sys.exit(f"{needed} is missing: {hint}")
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    if args.otel:
        sampler, _, ratio = args.otel.partition(":")
        OTEL_ENV.update({"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink(),
                         "OTEL_TRACES_SAMPLER": sampler})
        if ratio:
            OTEL_ENV["OTEL_TRACES_SAMPLER_ARG"] = ratio
    cells = args.cells.split(",")
    args.stdio_connections = [int(c) for c in args.stdio_connections.split(",")]
    connections = [int(c) for c in args.connections.split(",")]
    builds = [("this", args.toolhost)] + ([("vs", args.vs)] if args.vs else [])
    runs = []

    def measured(build, run):
        run["build"] = build
        run["repeat"] = len([r for r in runs if r["build"] == build])
        runs.append(run)
        print(json.dumps(run), file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        provider = Provider(work) if "jwt" in cells else None
        wants_redis = any(c.endswith("redis") or c in FLEET_CELLS for c in cells)
        if wants_redis and not shutil.which("redis-server"):
            sys.exit("redis-server is missing: apt-get install redis-server")
        if any(c.startswith("fleet") for c in cells) and not shutil.which("haproxy"):
            sys.exit("haproxy is missing: apt-get install haproxy")
        redis = Redis(work, args.redis_delay_ms) if wants_redis else None
        tls_redis = (Redis(work, tls=True) if any(c.endswith("rediss") for c in cells)
                     else None)
        cluster = (RedisCluster(work) if any(c.endswith("cluster") for c in cells)
                   else None)
        for repeat in range(args.repeat):
            for cell in cells:
                stdio = cell in ("stdio", "stdio-dedup")
                for c in (args.stdio_connections if stdio else connections):
                    record = args.perf if (args.perf and cell == args.perf_cell
                                           and c == args.perf_connections) else None
                    # Each build in turn, cell by cell: a slower minute weighs on both; the
                    # order swapped at each repeat, so that going first or second (a warmer
                    # cache, a busier minute) weighs on neither.
                    order = builds if repeat % 2 == 0 else builds[::-1]
                    for build, binary in order:
                        args.toolhost = binary
                        OTEL_ACTIVE[0] = not (args.otel_only_this and build == "vs")
                        if stdio:
                            measured(build, stdio_cell(args, work, c, cell, record))
                        elif cell in FLEET_CELLS:
                            measured(build, fleet_cell(args, work, cell, c, redis))
                        else:
                            engine = (tls_redis if cell.endswith("rediss")
                                      else cluster if cell.endswith("cluster") else redis)
                            measured(build, http_cell(args, work, cell, c, provider, record,
                                                      engine))
        for engine in (redis, tls_redis, cluster):
            if engine:
                engine.stop()
    # With --repeat, each figure is the median of its runs.
    rows = []
    for run in runs:
        key = (run["build"], run["cell"], run["connections"])
        if any((r["build"], r["cell"], r["connections"]) == key for r in rows):
            continue
        same = [r for r in runs if (r["build"], r["cell"], r["connections"]) == key]
        row = dict(run)
        for field in ("calls_per_s", "p50_ms", "p99_ms", "server_us_per_call",
                      "user_us_per_call", "switches_per_call", "client_cpu_share"):
            values = sorted(r.get(field) for r in same if r.get(field) is not None)
            row[field] = values[len(values) // 2] if values else None
        rows.append(row)
    stdio = {build: next((r["server_us_per_call"] for r in rows if r["build"] == build
                          and r["cell"] == "stdio" and r["connections"] == 1), None)
             for build, _ in builds}
    if args.vs:
        print(f"this: {builds[0][1]}, vs: {builds[1][1]}; medians of {args.repeat} run(s)\n")
    stdio_user = {build: next((r["user_us_per_call"] for r in rows if r["build"] == build
                               and r["cell"] == "stdio" and r["connections"] == 1), None)
                  for build, _ in builds}
    print("| build | cell | connections | calls/s | p50 | p99 | server CPU per call "
          "| ratio to stdio | this ÷ vs | of it in user space (ratio) | switches per call "
          "| wrk's CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = stdio[r["build"]]
        ratio = f"{r['server_us_per_call'] / base:.2f}x" if base else "-"
        other = next((o for o in rows if o["build"] == "vs" and o["cell"] == r["cell"]
                      and o["connections"] == r["connections"]), None)
        # The median of the runs' ratios, each run against the other build's run next to it
        # (of the same repeat): steadier than a ratio of medians when the machine drifts.
        pairs = [(a["server_us_per_call"], b["server_us_per_call"]) for a in runs
                 for b in runs if (a["build"], b["build"]) == ("this", "vs")
                 and (a["cell"], a["connections"], a["repeat"])
                 == (b["cell"], b["connections"], b["repeat"])]
        ratios = sorted(a / b for a, b in pairs)
        versus = (f"{ratios[len(ratios) // 2]:.2f}x"
                  if other and ratios and r["build"] == "this" else "-")
        share = f"{r['client_cpu_share']:.2f} cores" if r["client_cpu_share"] is not None else "-"
        user, user_base = r.get("user_us_per_call"), stdio_user[r["build"]]
        in_user = (f"{user:.0f} µs ({user / user_base:.2f}x)" if user is not None and user_base
                   else f"{user:.0f} µs" if user is not None else "-")
        print(f"| {r['build']} | {r['cell']} | {r['connections']} | {r['calls_per_s']:,.0f} | "
              f"{r['p50_ms'] * 1000:.0f} µs | {r['p99_ms'] * 1000:.0f} µs | "
              f"{r['server_us_per_call']:.0f} µs | {ratio} | {versus} | {in_user} | "
              f"{r['switches_per_call']:.1f} | {share} |")
    on_redis = [r for r in rows if "redis_us_per_call" in r]
    if on_redis:
        print("\n| build | cell | connections | Redis CPU per call | calls/s one Redis core "
              "answers | commands per call (INFO commandstats) |")
        print("|---|---|---|---|---|---|")
        for r in on_redis:
            same = [o for o in runs if (o["build"], o["cell"], o["connections"])
                    == (r["build"], r["cell"], r["connections"])]
            us = sorted(o["redis_us_per_call"] for o in same)[len(same) // 2]
            commands = ", ".join(f"{name} {n:.2f}"
                                 for name, n in r["redis_commands_per_call"].items()
                                 if n >= 0.01)
            answers = f"{1e6 / us:,.0f}" if us >= 0.5 else "- (nothing per call)"
            print(f"| {r['build']} | {r['cell']} | {r['connections']} | {us:.1f} µs | "
                  f"{answers} | {commands or '-'} |")
    if args.json:
        args.json.write_text(json.dumps({"medians": rows, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
