"""Test helpers for the loopback listener: raw HTTP, a blocking MCP client (http.client, not
agentproto's own), and a thread that runs a call while the test plays the app."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from typing import Any, Callable
from urllib.parse import urlsplit

from sidecar import Sidecar, kind_name

LOOKUP = {
    "name": "lookup",
    "description": "Look a word up",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
}
#: A tool whose schema mirrors two arguments into headers (MCP 2026-07-28's x-mcp-header).
ROUTED = {
    "name": "routed",
    "description": "A query routed by region",
    "input_schema": {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "shard": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "Shard"}}},
            "query": {"type": "string"},
        },
        "required": ["region", "query"],
    },
}
AREA = {
    "name": "area",
    "description": "The area of a rectangle",
    "input_schema": {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}}},
    "output_schema": {"type": "object", "properties": {"area": {"type": "number"}}, "required": ["area"]},
}


def text_result(text: str, is_error: bool = False) -> dict[str, Any]:
    return {"ToolResult": {"content": [{"type": "text", "text": text}], "is_error": is_error}}


def split(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.port is not None, "the listener is bound to 127.0.0.1 only"
    return parts.hostname, parts.port, parts.path


class Raw:
    """One HTTP response read off a raw socket."""

    def __init__(self, data: bytes) -> None:
        head, _, self.body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1]) if lines[0].startswith("HTTP/1.1 ") else 0
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}

    def json(self) -> Any:
        return json.loads(self.body)


def raw_request(port: int, data: bytes, timeout: float = 15.0) -> Raw:
    """Send ``data`` as it is and read the response until the server closes (or its length is in)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        got = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
            response = Raw(got)
            length = response.headers.get("content-length")
            if length is not None and len(response.body) >= int(length):
                break
        return Raw(got)


def post(url: str, body: Any, headers: dict[str, str] | None = None, method: str = "POST") -> Raw:
    host, port, path = split(url)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    fields = {"Host": f"{host}:{port}", "Content-Type": "application/json", "Connection": "close"}
    fields.update(headers or {})
    fields["Content-Length"] = str(len(data))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return raw_request(port, head.encode("latin-1") + data)


class BlockingMcp:
    """An MCP client of one Streamable HTTP endpoint on http.client (keep-alive)."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        host, port, self.path = split(url)
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.session_id: str | None = None
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = "2025-06-18"
        self.conn.request("POST", self.path, json.dumps(message), headers)
        response = self.conn.getresponse()
        body = response.read()
        got = {k.lower(): v for k, v in response.getheaders()}
        return response.status, got, json.loads(body) if body else None

    def rpc(self, method: str, params: Any = None) -> Any:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        status, headers, body = self.send(message)
        assert status == 200, (status, body)
        assert headers["content-type"].startswith("application/json")
        return body

    def initialize(self) -> "BlockingMcp":
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
        self.next_id += 1
        status, headers, body = self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "initialize", "params": params})
        assert status == 200 and body["result"]["protocolVersion"] == "2025-06-18", body
        self.session_id = headers["mcp-session-id"]
        status, _, body = self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202 and body is None
        return self

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = self.rpc("tools/call", {"name": name, "arguments": arguments})
        assert "result" in body, body
        result: dict[str, Any] = body["result"]
        return result

    def close(self) -> None:
        self.conn.close()


class InThread:
    """Run ``fn`` in a thread (the agent's side) while the test plays the app."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def result(self, timeout: float = 30.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the call did not return"
        if self.error is not None:
            raise self.error
        return self.value


def opened_request(car: Sidecar, session: str, tag: str = "ToolCall", timeout: float = 20.0) -> dict[str, Any]:
    """The next RequestOpened of ``tag`` in this session's stream (the whole event)."""

    def match(line: Any) -> bool:
        if "event" not in line or line["event"]["session_id"] != session:
            return False
        kind = line["event"]["kind"]
        return kind_name(kind) == "RequestOpened" and tag in kind["RequestOpened"]

    event: dict[str, Any] = car.wait_for(match, timeout)["event"]
    return event


def closed_requests(lines: list[Any], request_id: str) -> int:
    """How many RequestClosed of ``request_id`` were written."""
    return sum(
        1
        for line in lines
        if "event" in line
        and kind_name(line["event"]["kind"]) == "RequestClosed"
        and line["event"]["kind"]["RequestClosed"]["request_id"] == request_id
    )
