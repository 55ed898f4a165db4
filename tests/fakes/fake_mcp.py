"""Tiny MCP servers for the tests: what an agent's MCP client sent them, recorded.

``HttpMcp`` is a Streamable HTTP server (JSON responses only, 405 on GET, as the spec
allows) on 127.0.0.1 that keeps every request's headers. ``ENV_STDIO_MCP`` is a stdio
server that first writes its whole environment as JSON to the file named by its first
argument. Both offer one tool, ``shout``.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from typing import Any

TOOLS = [
    {
        "name": "shout",
        "description": "Upper-cases text",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }
]


def answer(msg: dict[str, Any]) -> dict[str, Any]:
    method = msg.get("method")
    if method == "initialize":
        version = (msg.get("params") or {}).get("protocolVersion", "2025-06-18")
        result: Any = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": str(msg["params"]["arguments"]["text"]).upper()}]}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": msg["id"], "result": result}


class HttpMcp:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []  # (method, headers, body)
        self._lock = threading.Condition()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _record(self, body: Any) -> None:
                with owner._lock:
                    owner.requests.append((self.command, {k.lower(): v for k, v in self.headers.items()}, body))
                    owner._lock.notify_all()

            def _reply(self, status: int, body: Any = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Mcp-Session-Id", "fake-session")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    msg = json.loads(raw)
                except ValueError:
                    msg = None
                self._record(msg)
                if isinstance(msg, dict) and "id" in msg and "method" in msg:
                    self._reply(200, answer(msg))
                else:
                    self._reply(202)

            def do_GET(self) -> None:
                self._record(None)
                self._reply(405)

            def do_DELETE(self) -> None:
                self._record(None)
                self._reply(405)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"

    def wait_for(self, method: str, timeout: float = 30.0) -> tuple[str, dict[str, str], Any]:
        """The first POST whose JSON-RPC method is ``method``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for request in self.requests:
                    if request[0] == "POST" and isinstance(request[2], dict) and request[2].get("method") == method:
                        return request
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {method} reached the MCP server; got {[r[:1] for r in self.requests]}")
                self._lock.wait(left)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for_file(path: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if text.endswith("\n"):
                return text
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} was never written")
        time.sleep(0.05)


def cmdlines(pids: list[int]) -> dict[int, bytes]:
    """``/proc/PID/cmdline`` of each live pid (what every local user can read)."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = f.read()
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process under it (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


#: A stdio MCP server (newline-delimited JSON-RPC) that first dumps its environment.
ENV_STDIO_MCP = r"""
import json, os, sys
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(json.dumps(dict(os.environ)) + "\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
sys.path.insert(0, sys.argv[2])
from fake_mcp import answer
for line in sys.stdin:
    msg = json.loads(line)
    if "id" in msg and "method" in msg:
        print(json.dumps(answer(msg)), flush=True)
"""
