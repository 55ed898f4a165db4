#!/usr/bin/env python3
"""Benchmarks of the framings and transports, side by side in one run.

    python scripts/bench_transports.py [--events N] [--requests N]

1. Streaming: one turn of N TextDelta events (the mock, no sleeps) read to its end
   through protocol 1 on stdio (the baseline), the ops `agent` loop, JSON-RPC, HTTP
   (one POST) and MCP (a tools/call collecting the turn). Events per second, and the
   ratio to protocol 1.
2. Round trips: N sequential `capabilities` (ops) / `discover` (protocol 1) requests on a
   warm connection: stdio protocol 1, agent loop, JSON-RPC, MCP, HTTP (one connection
   per POST, and all on one kept-alive connection). Requests per second and the ratio
   to protocol 1.
3. Cold single-shot: `agentproto --single-shot` answering `capabilities`, vs
   `python3 -c pass`.

Figures only: nothing here asserts a time. Everything runs on 127.0.0.1.
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def flood_script(events: int, directory: str) -> str:
    path = os.path.join(directory, "flood.json")
    steps = [{"Repeat": {"times": events, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": "x"}}}]}}]
    steps.append({"End": {"Completed": {"source": "Protocol"}}})
    with open(path, "w") as f:
        json.dump({"turns": [steps] * 64}, f)
    return path


class Child:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
            cwd=str(ROOT),
        )
        assert self.proc.stdin and self.proc.stdout
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout

    def send(self, obj: Any) -> None:
        self.stdin.write((json.dumps(obj) + "\n").encode())
        self.stdin.flush()

    def line(self) -> Any:
        return json.loads(self.stdout.readline())

    def until(self, match: Callable[[Any], bool]) -> int:
        n = 0
        while True:
            obj = self.line()
            n += 1
            if match(obj):
                return n

    def close(self) -> None:
        self.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()
        assert self.proc.stderr
        self.proc.stderr.close()


def turn_ended(obj: Any) -> bool:
    return "TurnEnded" in json.dumps(obj.get("event", obj.get("params", {})).get("kind", "")) if isinstance(obj, dict) else False


def stream_p1(script: str) -> float:
    c = Child("serve", "--mock", script)
    c.line()
    c.send({"id": 1, "cmd": "open", "agent": "mock", "dir": "/tmp"})
    c.until(lambda o: o.get("id") == 1)
    start = time.perf_counter()
    c.send({"id": 2, "cmd": "prompt", "session": "s1", "text": "go"})
    c.until(lambda o: "event" in o and "TurnEnded" in json.dumps(o["event"]["kind"]))
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def stream_ops(script: str) -> float:
    c = Child("agent", "--mock", script)
    c.send({"op": "open", "agent": "mock", "dir": "/tmp"})
    c.until(lambda o: o["kind"] == "done")
    start = time.perf_counter()
    c.send({"op": "prompt", "text": "go"})
    c.until(lambda o: o["kind"] == "done")
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def stream_jsonrpc(script: str) -> float:
    c = Child("serve", "--transport", "jsonrpc", "--mock", script)
    c.send({"jsonrpc": "2.0", "id": 1, "method": "open", "params": {"agent": "mock", "dir": "/tmp"}})
    c.until(lambda o: o.get("id") == 1)
    start = time.perf_counter()
    c.send({"jsonrpc": "2.0", "id": 2, "method": "prompt", "params": {"text": "go"}})
    c.until(lambda o: o.get("id") == 2)
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def stream_mcp(script: str) -> float:
    c = Child("serve", "--transport", "mcp", "--mock", script)
    c.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "agentproto_open", "arguments": {"agent": "mock", "dir": "/tmp"}}})
    c.until(lambda o: o.get("id") == 1)
    start = time.perf_counter()
    c.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "agentproto_prompt", "arguments": {"text": "go"}}})
    c.until(lambda o: o.get("id") == 2)
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


class HttpChild:
    def __init__(self, *args: str) -> None:
        self.child = Child("serve", "--transport", "http", "--port", "0", *args)
        assert self.child.proc.stderr
        line = self.child.proc.stderr.readline().decode()
        match = re.search(r":(\d+)/", line)
        assert match, line
        self.port = int(match.group(1))

    def post(self, body: bytes) -> bytes:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("POST", "/v1/agent", body=body)
        data = conn.getresponse().read()
        conn.close()
        return data

    def close(self) -> None:
        self.child.proc.terminate()
        self.child.close()


def stream_http(script: str) -> float:
    h = HttpChild("--mock", script)
    h.post(b'{"op": "open", "agent": "mock", "dir": "/tmp"}')
    start = time.perf_counter()
    h.post(b'{"op": "prompt", "session": "s1", "text": "go"}')
    elapsed = time.perf_counter() - start
    h.close()
    return elapsed


def trips_p1(n: int) -> float:
    c = Child("serve", "--mock", str(ROOT / "fixtures" / "mock-scripts" / "turn.json"))
    c.line()
    start = time.perf_counter()
    for i in range(n):
        c.send({"id": i, "cmd": "discover"})
        c.line()
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def trips_ops(n: int) -> float:
    c = Child("agent")
    start = time.perf_counter()
    for _ in range(n):
        c.send({"op": "capabilities"})
        c.until(lambda o: o["kind"] == "done")
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def trips_rpc(n: int, transport: str, method: str, params: Any) -> float:
    c = Child("serve", "--transport", transport)
    start = time.perf_counter()
    for i in range(n):
        c.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        c.until(lambda o: o.get("id") == i)
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def trips_http(n: int) -> float:
    h = HttpChild()
    start = time.perf_counter()
    for _ in range(n):
        h.post(b'{"op": "capabilities"}')
    elapsed = time.perf_counter() - start
    h.close()
    return elapsed


def trips_http_kept(n: int) -> float:
    """The same POSTs on one kept-alive connection (what an HTTP client library does)."""
    h = HttpChild()
    conn = http.client.HTTPConnection("127.0.0.1", h.port, timeout=60)
    start = time.perf_counter()
    for _ in range(n):
        conn.request("POST", "/v1/agent", body=b'{"op": "capabilities"}')
        conn.getresponse().read()
    elapsed = time.perf_counter() - start
    conn.close()
    h.close()
    return elapsed


def cold(args: list[str], stdin: bytes) -> float:
    start = time.perf_counter()
    subprocess.run(args, input=stdin, capture_output=True, env=ENV, cwd=str(ROOT), check=False)
    return time.perf_counter() - start


def best(fn: Callable[[], float], runs: int = 3) -> float:
    return min(fn() for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--requests", type=int, default=500)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = flood_script(opts.events, tmp)
        print(f"1. streaming one turn of {opts.events} TextDelta events (best of 3)")
        rows = [
            ("protocol 1 (stdio)", best(lambda: stream_p1(script))),
            ("ops agent loop", best(lambda: stream_ops(script))),
            ("JSON-RPC", best(lambda: stream_jsonrpc(script))),
            ("HTTP POST /v1/agent", best(lambda: stream_http(script))),
            ("MCP tools/call", best(lambda: stream_mcp(script))),
        ]
        base = rows[0][1]
        for name, seconds in rows:
            print(f"   {name:<22} {opts.events / seconds:>10,.0f} events/s   {base / seconds:5.2f}x protocol 1")
    n = opts.requests
    print(f"2. {n} sequential requests on a warm server (best of 3)")
    rows = [
        ("protocol 1 discover", best(lambda: trips_p1(n))),
        ("ops capabilities", best(lambda: trips_ops(n))),
        ("JSON-RPC capabilities", best(lambda: trips_rpc(n, "jsonrpc", "capabilities", {}))),
        ("MCP ping", best(lambda: trips_rpc(n, "mcp", "ping", {}))),
        ("HTTP POST capabilities", best(lambda: trips_http(n))),
        ("HTTP POST, kept alive", best(lambda: trips_http_kept(n))),
    ]
    base = rows[0][1]
    for name, seconds in rows:
        print(f"   {name:<22} {n / seconds:>10,.0f} req/s      {base / seconds:5.2f}x protocol 1")
    print("3. cold start (best of 5)")
    floor = best(lambda: cold([sys.executable, "-c", "pass"], b""), 5)
    shot = best(lambda: cold([sys.executable, "-m", "agentproto", "--single-shot"], b'{"op": "capabilities"}'), 5)
    print(f"   python3 -c pass          {floor * 1000:7.1f} ms")
    print(f"   --single-shot capabilities {shot * 1000:5.1f} ms   {shot / floor:5.2f}x python3 -c pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
