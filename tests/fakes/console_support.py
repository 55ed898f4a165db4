"""Test helpers for the console (frontends/console_http.py): a live sidecar over HTTP, its
ops, and a Server-Sent Events reader over a real socket. 127.0.0.1 only."""

from __future__ import annotations

import http.client
import json
import re
import socket
from typing import Any, Iterator

from ops_support import Proc

TOKEN = "console-token-0123456789"


class Sidecar:
    """``agentproto console ARGS`` (or ``serve --transport http`` with ``serve=True``)."""

    def __init__(self, *args: str, serve: bool = False, env: dict[str, str] | None = None) -> None:
        command = ["serve", "--transport", "http", "--port", "0"] if serve else ["console"]
        self.proc = Proc([*command, *args], env=env)
        match = self.proc.banner(r"listening on http://([\d.]+):(\d+)/")
        self.host, self.port = match.group(1), int(match.group(2))
        self.url_line = "" if serve else self.proc.raw_line().decode()
        self.token: str | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def secret(self) -> str:
        found = re.search(r"#secret=([A-Za-z0-9_-]+)", self.url_line)
        assert found, self.url_line
        return found.group(1)

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = dict(extra or {})
        if self.token is not None:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
                ) -> tuple[int, Any, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
            extra = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=self.headers({**extra, **(headers or {})}))
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def exchange(self, secret: str) -> tuple[int, Any]:
        status, _head, body = self.request("POST", "/v1/console/exchange", {"secret": secret})
        return status, json.loads(body)

    def op(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        status, _head, body = self.request("POST", "/v1/agent", request)
        assert status == 200, (status, body)
        return [json.loads(line) for line in body.splitlines()]

    def result(self, request: dict[str, Any]) -> dict[str, Any]:
        return next(line for line in self.op(request) if line["kind"] == "result")

    def open(self, **fields: Any) -> str:
        result = self.result({"op": "open", "agent": "mock", "dir": ".", **fields})
        assert result["ok"], result
        return str(result["session"]["id"])

    def stream(self, path: str, last_id: int | None = None, rcvbuf: int | None = None,
               headers: dict[str, str] | None = None) -> "SseReader":
        return SseReader(self, path, last_id, rcvbuf, headers)

    def stop(self) -> None:
        self.proc.stop()


class SseReader:
    """One SSE response read from a raw socket (``rcvbuf``: a small receive buffer, to be a
    slow reader)."""

    def __init__(self, sidecar: Sidecar, path: str, last_id: int | None, rcvbuf: int | None,
                 headers: dict[str, str] | None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(30)
        self.sock.connect((sidecar.host, sidecar.port))
        fields = {"Host": f"{sidecar.host}:{sidecar.port}", **sidecar.headers(headers)}
        if last_id is not None:
            fields["Last-Event-ID"] = str(last_id)
        head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        self.sock.sendall(head.encode())
        self.file = self.sock.makefile("rb")
        status_line = self.file.readline().decode()
        self.status = int(status_line.split()[1])
        self.headers: dict[str, str] = {}
        while True:
            line = self.file.readline().decode().rstrip("\r\n")
            if not line:
                break
            name, _, value = line.partition(":")
            self.headers[name.lower()] = value.strip()
        self.buffer = b""
        self.ended = False

    def _chunk(self) -> bytes:
        size_line = self.file.readline()
        if not size_line:
            self.ended = True
            return b""
        size = int(size_line.split(b";")[0], 16)
        data = self.file.read(size)
        self.file.readline()
        if size == 0:
            self.ended = True
        return data

    def messages(self) -> Iterator[dict[str, Any]]:
        """Each message: {"id", "event", "data" (parsed JSON)}, until the stream ends."""
        while True:
            while b"\n\n" not in self.buffer:
                if self.ended:
                    return
                self.buffer += self._chunk()
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            message: dict[str, Any] = {"id": None, "event": "message", "data": ""}
            for line in block.decode().split("\n"):
                field, _, value = line.partition(": ")
                if field == "id":
                    message["id"] = int(value)
                elif field == "event":
                    message["event"] = value
                elif field == "data":
                    message["data"] += value
            message["data"] = json.loads(message["data"])
            yield message

    def take(self, count: int) -> list[dict[str, Any]]:
        out = []
        for message in self.messages():
            out.append(message)
            if len(out) == count:
                break
        return out

    def close(self) -> None:
        self.file.close()
        self.sock.close()
