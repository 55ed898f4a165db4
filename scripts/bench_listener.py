#!/usr/bin/env python3
"""The loopback listener's cost: a tool call's round trip through agentproto against the same
call to a minimal stdlib ``http.server`` MCP stub that answers it directly, in one run; then
1,000 sequential calls from each of 4 concurrent clients, checked for loss.

Through agentproto a call goes MCP client -> listener -> the session's stream (stdout) ->
the app, which answers on stdin -> listener -> MCP client. The stub answers in its own
handler. Both are separate processes from the client, which is the same keep-alive
http.client code for both.

    python scripts/bench_listener.py [--calls N]
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import http.client
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOL = {"name": "echo", "description": "Echo n", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}


# -- the baseline: a minimal MCP server on http.server, answering every call itself ----------
class _Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Its head and body are two writes: without this, Nagle and delayed ACKs add 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in message:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if message["method"] == "initialize":
            result: Any = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "stub", "version": "1"}}
        elif message["method"] == "tools/call":
            n = message["params"]["arguments"]["n"]
            result = {"content": [{"type": "text", "text": str(n)}], "isError": False}
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Mcp-Session-Id", "stub")
        self.end_headers()
        self.wfile.write(body)


def run_stub() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Stub)
    print(server.server_address[1], flush=True)
    server.serve_forever()


# -- the client: the same for both -----------------------------------------------------------
class McpClient:
    def __init__(self, url: str) -> None:
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.rpartition(":")
        self.path = "/" + path
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.session: str | None = None
        self.ids = 0

    def post(self, message: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = "2025-06-18"
        self.conn.request("POST", self.path, json.dumps(message), headers)
        response = self.conn.getresponse()
        body = response.read()
        self.session = response.getheader("Mcp-Session-Id") or self.session
        return json.loads(body) if body else None

    def initialize(self) -> "McpClient":
        self.ids += 1
        self.post({"jsonrpc": "2.0", "id": self.ids, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    def call(self, n: int) -> str:
        self.ids += 1
        answer = self.post({"jsonrpc": "2.0", "id": self.ids, "method": "tools/call", "params": {"name": "echo", "arguments": {"n": n}}})
        text: str = answer["result"]["content"][0]["text"]
        return text


def time_calls(client: McpClient, count: int) -> list[float]:
    timings = []
    for n in range(count):
        started = time.perf_counter()
        assert client.call(n) == str(n)
        timings.append(time.perf_counter() - started)
    return timings


# -- agentproto, with an app that answers every ToolCall at once ------------------------------
class App:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPROTO_")}
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(ROOT),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.lock = threading.Lock()
        self.opened = threading.Event()
        self.info: dict[str, Any] = {}
        self.answered = 0
        self.closed: set[str] = set()
        self.proc.stdout.readline()  # hello
        threading.Thread(target=self._read, daemon=True).start()
        self.send({"id": 1, "cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [TOOL]})
        assert self.opened.wait(30)

    def send(self, frame: dict[str, Any]) -> None:
        with self.lock:
            self.stdin.write((json.dumps(frame) + "\n").encode())
            self.stdin.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        frame_id = 100
        for raw in self.proc.stdout:
            line = json.loads(raw)
            if line.get("id") == 1 and "ok" in line:
                self.info = line["ok"]
                self.opened.set()
            event = line.get("event")
            if not event:
                continue
            kind = event["kind"]
            if isinstance(kind, dict) and "RequestOpened" in kind:
                call = kind["RequestOpened"]["ToolCall"]
                frame_id += 1
                answer = {"ToolResult": {"content": [{"type": "text", "text": str(call["arguments"]["n"])}], "is_error": False}}
                self.send({"id": frame_id, "cmd": "answer", "session": event["session_id"], "request": call["id"], "answer": answer})
                self.answered += 1
            elif isinstance(kind, dict) and "RequestClosed" in kind:
                self.closed.add(kind["RequestClosed"]["request_id"])

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000, help="round trips timed on each side")
    parser.add_argument("--stub", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stub:
        run_stub()
        return 0
    stub = subprocess.Popen([sys.executable, __file__, "--stub"], stdout=subprocess.PIPE, text=True)
    assert stub.stdout is not None
    stub_url = f"http://127.0.0.1:{stub.stdout.readline().strip()}/mcp"
    app = App()
    try:
        url = app.info["tools_url"]
        ours, theirs = McpClient(url).initialize(), McpClient(stub_url).initialize()
        time_calls(ours, 50), time_calls(theirs, 50)  # warm up
        # Interleaved rounds, so that a busy moment of the machine costs both sides alike.
        through: list[float] = []
        direct: list[float] = []
        for _ in range(10):
            through += time_calls(ours, args.calls // 10)
            direct += time_calls(theirs, args.calls // 10)
        median_through, median_direct = statistics.median(through), statistics.median(direct)
        print(f"tool call round trip, median of {len(through)}:")
        print(f"  through agentproto (MCP client -> listener -> app -> MCP client): {median_through * 1e6:8.0f} us")
        print(f"  http.server MCP stub answering directly:                          {median_direct * 1e6:8.0f} us")
        print(f"  ratio: {median_through / median_direct:.2f}x  (+{(median_through - median_direct) * 1e6:.0f} us per call)")

        # 4 concurrent clients, 1,000 sequential calls each, nothing lost.
        before = app.answered
        per_client, results = 1000, [0, 0, 0, 0]

        def client(index: int) -> None:
            mcp = McpClient(url).initialize()
            for n in range(per_client):
                if mcp.call(index * per_client + n) == str(index * per_client + n):
                    results[index] += 1

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        total = sum(results)
        deadline = time.monotonic() + 10
        while len(app.closed) < app.answered and time.monotonic() < deadline:
            time.sleep(0.01)
        print(f"4 concurrent clients x {per_client} sequential calls: {total}/{4 * per_client} answered right, "
              f"{app.answered - before} asked of the app, {len(app.closed)} RequestClosed for {app.answered} calls, "
              f"{total / elapsed:.0f} calls/s")
        lost = total != 4 * per_client or len(app.closed) != app.answered
        print("nothing lost" if not lost else "LOST CALLS")
        return 1 if lost else 0
    finally:
        app.close()
        stub.terminate()
        stub.wait(10)


if __name__ == "__main__":
    sys.exit(main())
