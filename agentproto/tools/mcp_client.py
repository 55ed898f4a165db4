"""An MCP client over Streamable HTTP (JSON responses), on the one loop: how the mock calls
the app's tools as a real agent would, and how ``mcp-bridge`` relays stdio to the listener.

Rules of this file:
- Nothing blocks: each POST is its own non-blocking connection (``Connection: close``, a
  ``listen.Exchange``),
  connected through the loop and read and written through ``streams.Reader`` and
  ``streams.Output`` (so ``loop.io`` sees every byte). No thread, no blocking socket call.
- ``ResponseParser`` is sans-IO: bytes in, one response out, bounded (head and body), and
  the same result however the bytes were split.
- The client keeps what the server gave it: the ``Mcp-Session-Id`` of ``initialize``'s
  response, sent on every later request, and the negotiated protocol version, sent as
  ``MCP-Protocol-Version``.
- The URL holds a secret (the session's token): no message here ever shows it.
"""

from __future__ import annotations

import json
import re
import socket
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from agentproto import __version__
from agentproto.core import jsonrpc
from agentproto.core.http1 import (  # its strict grammar
    CHUNK_SIZE_LINE,
    CONTENT_LENGTH,
    MAX_CHUNK_LINE,
    MAX_HEAD,
    MessageParser,
)
from agentproto.loopio.sockets import Exchange

if TYPE_CHECKING:
    from agentproto.loopio.loop import Loop

MAX_BODY = 64 * 1024 * 1024
#: The protocol version the client asks for (the server may answer an older one).
PROTOCOL_VERSION = "2025-06-18"

_STATUS_LINE = re.compile(r"HTTP/1\.[01] ([0-9]{3})(?: (.*))?")


class HttpResponse:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers  # lower-case names; repeated fields joined with ", "
        self.body = body


class ResponseParser(MessageParser):
    """Sans-IO HTTP/1.1 response reader: ``feed`` returns the response once complete (None
    while more is needed) or raises ValueError; ``eof`` ends a body that runs to the close."""

    def __init__(self, max_head: int = MAX_HEAD, max_body: int = MAX_BODY) -> None:
        super().__init__(max_head, max_body)  # ``length`` None: chunked, or until the close
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False

    def feed(self, data: bytes) -> HttpResponse | None:
        if self.done:
            return None
        self.buf += data
        while not self.head_done:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > self.max_head:
                    raise ValueError("response head too large")
                return None
            head = bytes(self.buf[:end]).decode("latin-1")
            del self.buf[: end + 4]
            self._head(head)
        return self._body()

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        match = _STATUS_LINE.fullmatch(lines[0])
        if match is None:
            raise ValueError("bad status line")
        status = int(match.group(1))
        if 100 <= status < 200:
            return  # 100 Continue and the like: the real response follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ValueError("bad header line")
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        self.status, self.headers, self.head_done = status, headers, True
        if status in (204, 304):
            self.length = 0
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            self.chunked = True
        elif "content-length" in headers:
            value = headers["content-length"]
            if not CONTENT_LENGTH.fullmatch(value):
                raise ValueError("bad content-length")
            self.length = int(value)
            if self.length > self.max_body:
                raise ValueError(f"response body over {self.max_body} bytes")

    def _grow(self, data: bytes | bytearray) -> None:
        if len(self.body) + len(data) > self.max_body:
            raise ValueError(f"response body over {self.max_body} bytes")
        self.body += data

    def _body(self) -> HttpResponse | None:
        if self.chunked:
            return self._chunks()
        if self.length is None:
            self._grow(self.buf)
            self.buf.clear()
            return None
        if len(self.buf) < self.length:
            return None
        self.body = self.buf[: self.length]
        return self._finish()

    def _chunks(self) -> HttpResponse | None:
        while True:
            end = self.buf.find(b"\r\n")
            if end < 0:
                if len(self.buf) > MAX_CHUNK_LINE:
                    raise ValueError("bad chunk size line")
                return None
            match = CHUNK_SIZE_LINE.fullmatch(bytes(self.buf[:end]).decode("latin-1"))
            if match is None:
                raise ValueError("bad chunk size")
            size = int(match.group(1), 16)
            if size == 0:
                # The last chunk; trailer fields (if any) end with an empty line.
                close = self.buf.find(b"\r\n\r\n", end)
                if close < 0:
                    return None
                return self._finish()
            if len(self.buf) < end + 2 + size + 2:
                return None
            self._grow(self.buf[end + 2 : end + 2 + size])
            del self.buf[: end + 2 + size + 2]

    def _finish(self) -> HttpResponse:
        self.done = True
        return HttpResponse(self.status, self.headers, bytes(self.body))

    def eof(self) -> HttpResponse | None:
        """The connection closed: the response, if its body ran to the close."""
        if self.done or not self.head_done or self.chunked or self.length is not None:
            return None
        return self._finish()


Done = Callable[["HttpResponse | None", "str | None"], None]


class HttpExchange(Exchange):
    """One request on its own connection; ``done(response, None)`` or ``done(None, why)``, once."""

    def __init__(
        self, loop: "Loop", address: tuple[str, int], request: bytes, done: Done, timeout: float = 0.0
    ) -> None:
        super().__init__(loop, socket.AF_INET6 if ":" in address[0] else socket.AF_INET, request, done, timeout)
        self.parser = ResponseParser()
        self.connect(address)

    def received(self, data: bytes) -> None:
        try:
            response = self.parser.feed(data)
        except ValueError as exc:
            self.fail(f"bad response: {exc}")
            return
        if response is not None:
            self.end(response, None)

    def closed(self) -> None:
        response = self.parser.eof()
        self.end(response, None if response is not None else "the connection closed before the response ended")


def split_url(url: str) -> tuple[tuple[str, int], str, str]:
    """``http://HOST:PORT/PATH`` -> ((host, port), the Host header, the path). ValueError
    names what is wrong, never the URL (it holds a token)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("expected an http://HOST:PORT/PATH URL")
    port = parts.port or 80
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return (host, port), f"{shown}:{port}", parts.path or "/"


class McpHttpClient:
    """An MCP client session with one Streamable HTTP endpoint."""

    def __init__(self, loop: "Loop", url: str, timeout: float = 0.0) -> None:
        self.loop = loop
        self.address, self.host, self.path = split_url(url)
        self.timeout = timeout
        self.peer = jsonrpc.Peer()
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.ready = False
        self._waiting: list[Callable[[str | None], None]] = []  # callers of connect() meanwhile

    def post(self, body: bytes, done: Done, headers: dict[str, str] | None = None) -> None:
        """POST one message (or batch) as it is; the session's headers go with it, or
        ``headers`` instead (a 2026-07-28 request's own: no session there)."""
        fields = [
            f"POST {self.path} HTTP/1.1",
            f"Host: {self.host}",
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
            f"Content-Length: {len(body)}",
            "Connection: close",
            f"User-Agent: agentproto/{__version__}",
        ]
        if headers is not None:
            fields.extend(f"{name}: {value}" for name, value in headers.items())
        else:
            if self.session_id is not None:
                fields.append(f"Mcp-Session-Id: {self.session_id}")
            if self.protocol_version is not None:
                fields.append(f"MCP-Protocol-Version: {self.protocol_version}")
        head = ("\r\n".join(fields) + "\r\n\r\n").encode("latin-1")
        HttpExchange(self.loop, self.address, head + body, done, self.timeout)

    def request(self, method: str, params: Any, done: Callable[[Any, str | None], None]) -> None:
        """A call; ``done(result, None)``, or ``done(None, why)`` (an error, HTTP or JSON-RPC)."""
        def on_response(result: Any, error: jsonrpc.RpcError | None) -> None:
            done(result, None if error is None else error.message)

        message = self.peer.request(method, params, on_response)
        rpc_id = message["id"]

        def answered(response: HttpResponse | None, why: str | None) -> None:
            problem = why if response is None else self._take(response)
            # Still pending: the response did not answer the call (the peer ran done if it did).
            if self.peer.forget(rpc_id):
                done(None, problem or "no response to the call")

        self.post(json.dumps(message).encode(), answered)

    def _take(self, response: HttpResponse) -> str | None:
        """Hand a JSON response to the peer (which runs its call's callback); else why not."""
        session_id = response.headers.get("mcp-session-id")
        if session_id:
            self.session_id = session_id
        if response.status != 200:
            return f"HTTP {response.status}"
        try:
            message = json.loads(response.body)
        except ValueError:
            return "the response is not JSON"
        self.peer.receive(message)
        return None

    def connect(self, done: Callable[[str | None], None]) -> None:
        """``initialize`` then ``notifications/initialized``, once; ``done(None)`` when ready."""
        if self.ready:
            done(None)
            return
        self._waiting.append(done)
        if len(self._waiting) > 1:
            return
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "agentproto", "version": __version__},
        }
        self.request("initialize", params, self._initialized)

    def _initialized(self, result: Any, why: str | None) -> None:
        if why is None:
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            self.protocol_version = version if isinstance(version, str) else PROTOCOL_VERSION
            body = json.dumps(self.peer.notification("notifications/initialized")).encode()
            self.post(body, lambda response, problem: self._ready(problem or _not_accepted(response)))
        else:
            self._ready(why)

    def _ready(self, why: str | None) -> None:
        self.ready = why is None
        waiting, self._waiting = self._waiting, []
        for done in waiting:
            done(why)

    def call_tool(self, name: str, arguments: dict[str, Any], done: Callable[[Any, str | None], None]) -> None:
        """``tools/call`` (connecting first); ``done(CallToolResult, None)`` or ``done(None, why)``."""

        def connected(why: str | None) -> None:
            if why is not None:
                done(None, why)
            else:
                self.request("tools/call", {"name": name, "arguments": arguments}, done)

        self.connect(connected)


def _not_accepted(response: HttpResponse | None) -> str | None:
    if response is None or response.status in (200, 202):
        return None
    return f"HTTP {response.status}"


def result_text(result: Any) -> str:
    """A CallToolResult's content as text (images named), for a ToolUpdated's output."""
    parts = []
    for item in result.get("content", []) if isinstance(result, dict) else []:
        if isinstance(item, dict) and item.get("type") == "text":
            parts.append(str(item.get("text", "")))
        elif isinstance(item, dict):
            parts.append(f"[{item.get('type')} {item.get('mimeType', '')}]".replace(" ]", "]"))
    return "\n".join(parts)
