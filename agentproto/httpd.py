"""The ops framing over HTTP/1.1, on the one selectors loop.

    POST /v1/agent           one ops request -> application/x-ndjson lines ending with done
    POST /v1/agent/batch     NDJSON requests, run in order with one default session
    GET  /v1/agent/version   {"agentproto", "protocol", "contract"}

Rules of this file:
- The request parser and the checks are sans-IO, in ``httpcore.py``; this file does the I/O.
- One connection, one request, one response (``Connection: close``); the response body
  is chunked so the stream can start before the request's ``done``.
- No thread per connection: a slow client only fills its own bounded ``Output`` and,
  through the engine's flow control, pauses only the session it streams. Requests are
  bounded (head 64 KiB, body 16 MiB: ``httpcore``) and a connection that does not finish
  sending its request within ``REQUEST_TIMEOUT`` is dropped.
- Sessions belong to the server, not to a connection: any POST may name any session; a
  POST's default session starts empty.
- A web page must not be able to drive the server (cross-site requests, DNS rebinding):
  as soon as a request's head is in, before its body is read, before ``100 Continue`` and
  before any op runs, ``check_request`` (Host on a loopback bind, Origin, the browser
  "simple" content types) and then the token are checked. The checks are pure functions
  of the head so that any other listener can apply the same rules.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Callable

from agentproto import CONTRACT, PROTOCOL, __version__
from agentproto.engine import Session, log
from agentproto.httpcore import HttpError, Request, RequestParser, authorized, check_request, is_loopback
from agentproto.runtime import Runtime
from agentproto.loop import Loop, Timer
from agentproto.ops import EXIT_OK, EXIT_PROTOCOL, OpsContext, OpsHub, protocol_error
from agentproto.streams import Output
from agentproto.transports import Recorder, accept_ready, watch_lifetime
from agentproto.wire import encode

REQUEST_TIMEOUT = 30.0
MAX_CONNECTIONS = 1024
EXIT_USAGE = 2

REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--listen {value!r}: expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    number = int(port)
    if number > 65535:
        raise ValueError(f"--listen {value!r}: port out of range")
    return host, number


class BindRefused(Exception):
    """A listen address that may not be used as asked (a usage error: exit 2)."""


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class HttpConnection:
    READ_SIZE = 64 * 1024

    def __init__(self, server: "HttpServer", sock: socket.socket) -> None:
        self.server = server
        self.loop: Loop = server.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.parser = RequestParser()
        self.output = Output(self.loop, self.fd, self._write_failed)
        self.closed = False
        self.reading = True
        self.checked = False
        self.timer: Timer | None = self.loop.call_later(REQUEST_TIMEOUT, self._timeout)
        self.loop.add_reader(self.fd, self._readable)

    # -- reading ------------------------------------------------------------------------
    def _readable(self) -> None:
        try:
            data = self.sock.recv(self.READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        try:
            request = self.parser.feed(data)
        except HttpError as error:
            self._stop_reading()
            self.simple(error.status, {"kind": "error", "message": error.message})
            return
        if not self.checked and self.parser.request is not None:
            # The head is in: refuse now, before the body is read or 100 Continue is sent.
            self.checked = True
            refusal = self.server.refusal(self.parser.request)
            if refusal is not None:
                self._stop_reading()
                self.simple(*refusal)
                return
            if request is None and self.parser.request.headers.get("expect", "").lower() == "100-continue":
                self.output.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        if request is None:
            return
        self._stop_reading()
        self.server.dispatch(self, request)

    def _stop_reading(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.fd)

    def _timeout(self) -> None:
        self.timer = None
        if self.reading and not self.closed:
            self._stop_reading()
            self.simple(408, {"kind": "error", "message": "request not received in time"})

    # -- writing ------------------------------------------------------------------------
    def head(self, status: int, content_type: str, extra: dict[str, str] | None = None, length: int | None = None) -> None:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}", f"Content-Type: {content_type}"]
        if length is None:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append(f"Content-Length: {length}")
        lines += ["Connection: close", "Cache-Control: no-store"]
        for key, value in (extra or {}).items():
            lines.append(f"{key}: {value}")
        self.output.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def simple(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode() + b"\n"
        self.head(status, "application/json", extra, len(data))
        self.output.send(data)
        self.finish()

    def stream_line(self, data: bytes, session: Session | None = None) -> None:
        self.output.send(chunk(data), session)

    def finish(self, chunked: bool = False) -> None:
        if chunked:
            self.output.send(b"0\r\n\r\n")
        if not self.output.queue or self.output.failed:
            self.close()
        else:
            self.output.on_drained = self.close

    def _write_failed(self, _exc: OSError) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop_reading()
        self.output.on_drained = None
        self.loop.forget(self.fd)
        self.output.close()
        self.output.failed = True  # later lines of a running request are dropped (and counted)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.server.connections.discard(self)


class _PostOut:
    """The ops ``Out`` of one request of a POST: chunked NDJSON, captured for --record."""

    def __init__(self, conn: HttpConnection, then: Callable[[bytes, int], None]) -> None:
        self.conn = conn
        self.then = then
        self.captured: list[bytes] = []

    def line(self, obj: dict[str, Any], session: Session | None = None) -> None:
        data = encode(obj)
        self.captured.append(data)
        self.conn.stream_line(data, session)

    def done(self, exit_code: int) -> None:
        self.line({"kind": "done", "exit_code": exit_code})
        self.then(b"".join(self.captured), exit_code)


class HttpServer:
    def __init__(self, runtime: Runtime, address: tuple[str, int], auth_token: str | None, recorder: Recorder | None) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.address = address
        self.auth_token = auth_token
        self.recorder = recorder
        self.hub = OpsHub(runtime, shared=True)
        self.listener: socket.socket | None = None
        self.bound: tuple[str, int] = address
        self.connections: set[HttpConnection] = set()
        self.stopping = False

    def start(self) -> tuple[str, int]:
        host, port = self.address
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, addr = infos[0]
        if self.auth_token is None and not is_loopback(str(addr[0])):
            # Anyone who can reach the port could run any program as this user.
            raise BindRefused(
                f"refusing to listen on {host}:{port} without --auth-token (or AGENTPROTO_AUTH_TOKEN):"
                " only a loopback address may go without a token"
            )
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.listener = sock
        self.loop.add_reader(sock, self._accept)
        bound = sock.getsockname()
        self.bound = (bound[0], bound[1])
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        log(f"listening on http://{shown}:{bound[1]}/")
        return self.bound

    def _accept(self) -> None:
        assert self.listener is not None
        accept_ready(self.listener, self._serve)

    def _serve(self, sock: socket.socket) -> None:
        if len(self.connections) >= MAX_CONNECTIONS:
            sock.close()
            return
        self.connections.add(HttpConnection(self, sock))

    # -- routing ------------------------------------------------------------------------
    def refusal(self, request: Request) -> tuple[int, Any, dict[str, str]] | None:
        """The answer to a request that may not run (a web page's, or without the token)."""
        problem = check_request(request.method, request.version, request.headers, self.bound)
        if problem is not None:
            return problem[0], {"kind": "error", "message": problem[1]}, {}
        if self.auth_token is not None and not authorized(request.headers.get("authorization"), self.auth_token):
            return 401, {"kind": "error", "message": "unauthorized"}, {"WWW-Authenticate": "Bearer"}
        return None

    def dispatch(self, conn: HttpConnection, request: Request) -> None:
        route = (request.method, request.path.rstrip("/") or "/")
        if route == ("GET", "/v1/agent/version"):
            conn.simple(200, {"agentproto": __version__, "protocol": PROTOCOL, "contract": CONTRACT})
        elif route == ("POST", "/v1/agent"):
            self._single(conn, request.body)
        elif route == ("POST", "/v1/agent/batch"):
            self._batch(conn, request.body)
        else:
            conn.simple(404, {"kind": "error", "message": f"not found: {request.method} {request.path}"})

    def _single(self, conn: HttpConnection, body: bytes) -> None:
        conn.head(200, "application/x-ndjson")
        ctx = OpsContext(self.hub)

        def then(response: bytes, _code: int) -> None:
            if self.recorder is not None:
                self.recorder.record(body, response)
            conn.finish(chunked=True)

        out = _PostOut(conn, then)
        if not body.strip():
            protocol_error(out, "malformed JSON: the request body is empty")
            return
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            protocol_error(out, f"malformed JSON: {message}")
            return
        ctx.run(obj, out)

    def _batch(self, conn: HttpConnection, body: bytes) -> None:
        conn.head(200, "application/x-ndjson")
        ctx = OpsContext(self.hub)
        lines = [line for line in body.split(b"\n") if line.strip()]

        def step(index: int) -> None:
            if index >= len(lines) or ctx.halted:
                conn.finish(chunked=True)
                return
            raw = lines[index]

            def then(response: bytes, _code: int) -> None:
                if self.recorder is not None:
                    self.recorder.record(raw, response)
                # Never inside the engine's bookkeeping: the next request starts next tick.
                self.loop.call_soon(lambda: step(index + 1))

            ctx.run_raw(raw, _PostOut(conn, then))

        step(0)

    # -- lifetime -----------------------------------------------------------------------
    def shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.listener is not None:
            self.loop.forget(self.listener)
            self.listener.close()
            self.listener = None
        for conn in list(self.connections):
            conn.close()
        self.hub.close_all(self.loop.stop)


def run_http(runtime: Runtime, address: tuple[str, int], auth_token: str | None, recorder: Recorder | None) -> int:
    server = HttpServer(runtime, address, auth_token, recorder)
    watch_lifetime(runtime.loop, server.shutdown)  # before the banner: a client may act on it
    try:
        server.start()
    except BindRefused as exc:
        log(str(exc))
        return EXIT_USAGE
    except OSError as exc:
        log(f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}")
        return EXIT_PROTOCOL
    runtime.loop.run()
    return EXIT_OK
