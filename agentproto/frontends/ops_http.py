"""The ops framing over HTTP (``serve --transport http``): one handler of httpserver.py.

    POST /v1/agent           one ops request -> application/x-ndjson lines ending with done
    POST /v1/agent/batch     NDJSON requests, run in order with one default session
    GET  /v1/agent/version   {"agentproto", "protocol", "contract"}
    GET  /, /v1/sessions...  the console: its page and event streams (console_http.py)

Rules of this file:
- The connections, keep-alive, limits, timeouts and the checks against web pages (Host,
  Origin, Content-Type) are the HTTP server's; this handler adds its routes and its bearer
  token (checked once the head is in, before the body is read or any op runs).
- The response body is chunked, so the stream starts before the request's ``done``. A
  slow client only fills its own connection's bounded ``Output`` and, through the
  engine's flow control, pauses only the session it streams; a batch runs its next request
  only once its connection's output is back under ``BATCH_HIGH_WATER``.
- Sessions belong to the server, not to a connection: any POST may name any session; a
  POST's default session starts empty. A client that crashed cannot leak them: a session
  idle for ``idle_timeout`` (``--session-idle-timeout``, default ``IDLE_TIMEOUT``; 0:
  never) is closed as a ``close`` op would (frontends/ops_framing.py says what idle is).
- Without a token, only a loopback address may be listened on: anyone who can reach the
  port could run any program as this user.
- The console (console_http.py) is served beside the ops: its page and its secret exchange
  need no token, its streams do. ``agentproto console`` is ``run_http`` with a minted token
  (unless one is given) and a printed URL whose fragment holds a one-time secret.
- A signal or EOF drains (``HttpServer.drain``): a turn a client is streaming ends as a
  ``close`` ends it, its result and ``done`` written, before the process exits.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

from agentproto import CONTRACT, PROTOCOL, __version__
from agentproto.core.errors import log
from agentproto.core.http1 import Request, authorized, is_loopback
from agentproto.core.wire import encode
from agentproto.engine.runtime import Engine
from agentproto.engine.session import EngineSession
from agentproto.frontends.ops_framing import EXIT_FAILED, EXIT_OK, OpsContext, OpsHub, protocol_error
from agentproto.loopio.httpserver import HttpServer, Refusal, Response
from agentproto.loopio.lifetime import capture, watch_lifetime, when_drained
from agentproto.loopio.record import RecordSink
from agentproto.loopio.sockets import bind_tcp, tcp_address

if TYPE_CHECKING:
    from agentproto.frontends.console_http import Console

REQUEST_TIMEOUT = 30.0
#: Seconds a session opened over HTTP may stay idle before it is closed (--session-idle-timeout).
IDLE_TIMEOUT = 1800.0
EXIT_USAGE = 2
#: A batch runs its next request only while its connection's output holds at most this many
#: chunks (past it, once the output has drained): a client that does not read costs that
#: much, never its whole batch's answers.
BATCH_HIGH_WATER = 256

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


class _PostOut:
    """The ops ``Out`` of one request of a POST: NDJSON chunks, captured under --record."""

    def __init__(
        self, response: Response, then: Callable[[bytes, int, int], None], recording: bool, console: Console
    ) -> None:
        self.response = response
        self.then = then
        self.captured = capture(recording)
        self.console = console

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None:
        data = self.console.event_line(obj) or encode(obj)
        self.captured.add(data)
        self.response.write(data, None if session is None else session.delivered)

    def done(self, exit_code: int) -> None:
        self.line({"kind": "done", "exit_code": exit_code})
        self.then(self.captured.value(), self.captured.dropped, exit_code)


class OpsHttp:
    """The ops frontend as one handler of the HTTP server: its routes, its token, its
    sessions (the server's, not a connection's)."""

    def __init__(
        self,
        runtime: Engine,
        auth_token: str | None,
        recorder: RecordSink | None,
        idle_timeout: float = 0.0,
        ring_events: int | None = None,
    ) -> None:
        self.loop = runtime.loop
        self.auth_token = auth_token
        self.recorder = recorder
        self.hub = OpsHub(runtime, shared=True, idle_timeout=idle_timeout)
        from agentproto.frontends.console_http import RING_EVENTS
        from agentproto.frontends.console_http import Console as ConsoleState

        self.console: Console = ConsoleState(runtime, auth_token, ring_events or RING_EVENTS)
        self.console.on_unwatched = self.hub.unwatched
        self.hub.tap = self.console

    def error_body(self, status: int, message: str) -> Any:
        return {"kind": "error", "message": message}

    def refuse(self, request: Request) -> Refusal | None:
        if self.console.public(request):
            return None
        if self.auth_token is not None and not authorized(request.headers.get("authorization"), self.auth_token):
            return 401, self.error_body(401, "unauthorized"), {"WWW-Authenticate": "Bearer"}
        return None

    def handle(self, request: Request, response: Response) -> None:
        route = (request.method, request.path.rstrip("/") or "/")
        if self.recorder is not None and route[0] == "POST" and route[1].startswith("/v1/agent"):
            # Replay runs the pairs that follow with one default session per POST, as here.
            self.recorder.note("post", path=route[1])
        if route == ("GET", "/v1/agent/version"):
            response.json(200, {"agentproto": __version__, "protocol": PROTOCOL, "contract": CONTRACT})
        elif route == ("POST", "/v1/agent"):
            self._single(response, request.body)
        elif route == ("POST", "/v1/agent/batch"):
            self._batch(response, request.body)
        elif not self.console.handle(request, response):
            response.json(404, self.error_body(404, f"not found: {request.method} {request.path}"))

    def _single(self, response: Response, body: bytes) -> None:
        response.stream(200, "application/x-ndjson")
        ctx = OpsContext(self.hub)

        def then(answer: bytes, dropped: int, _code: int) -> None:
            if self.recorder is not None:
                self.recorder.pair(body, answer, dropped)
            response.end()

        out = _PostOut(response, then, self.recorder is not None, self.console)
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

    def _batch(self, response: Response, body: bytes) -> None:
        response.stream(200, "application/x-ndjson")
        ctx = OpsContext(self.hub)
        output = response.conn.output
        # The body is walked line by line as the batch goes: a list of its lines would cost
        # an object per request (12 MB for a 4 MiB batch of small requests) up front.
        position = 0

        def next_line() -> bytes | None:
            nonlocal position
            while position < len(body):
                end = body.find(b"\n", position)
                end = len(body) if end < 0 else end
                raw, position = body[position:end], end + 1
                if raw.strip():
                    return raw
            return None

        def step() -> None:
            if ctx.halted or response.gone:
                response.end()
                return
            if len(output) > BATCH_HIGH_WATER:
                # Flow control: the answers are produced as fast as the client reads them. The
                # kernel's socket buffer still holds what was written: the client never waits.
                when_drained(output, lambda: self.loop.call_soon(step))
                return
            raw = next_line()
            if raw is None:
                response.end()
                return

            def then(answer: bytes, dropped: int, _code: int) -> None:
                if self.recorder is not None:
                    self.recorder.pair(raw, answer, dropped)
                # Never inside the engine's bookkeeping: the next request starts next tick.
                self.loop.call_soon(step)

            ctx.run_raw(raw, _PostOut(response, then, self.recorder is not None, self.console))

        step()


def listen_guarded(server: HttpServer, address: tuple[str, int], auth_token: str | None) -> tuple[str, int] | int:
    """``server`` listening on ``address`` (its bound address), or the exit code said why: 2 for
    a non-loopback address without a token (anyone who can reach the port could run any
    program as this user), 1 when it cannot listen (in use: not a usage error)."""
    host, port = address
    try:
        family, kind, proto, addr = tcp_address(host, port)
        if auth_token is None and not is_loopback(str(addr[0])):
            raise BindRefused(
                f"refusing to listen on {host}:{port} without --auth-token (or AGENTPROTO_AUTH_TOKEN):"
                " only a loopback address may go without a token"
            )
        return server.listen(bind_tcp(family, kind, proto, addr))
    except BindRefused as exc:
        log(str(exc))
        return EXIT_USAGE
    except OSError as exc:
        log(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
        return EXIT_FAILED


def run_http(
    runtime: Engine,
    address: tuple[str, int],
    auth_token: str | None,
    recorder: RecordSink | None,
    idle_timeout: float = IDLE_TIMEOUT,
    console: bool = False,
    ring_events: int | None = None,
) -> int:
    """``serve --transport http``: the ops handler on an HTTP server until a signal or EOF
    (``console``: print the page's URL, with a one-time secret, on stdout)."""
    loop = runtime.loop
    handler = OpsHttp(runtime, auth_token, recorder, idle_timeout, ring_events)
    server = HttpServer(loop, handler, request_timeout=REQUEST_TIMEOUT)
    stopping = [False]

    def shutdown() -> None:
        # Drain: no new connection or request; the sessions close as a close op would, so a
        # streamed turn ends with its TurnEnded, result and done; the loop stops once every
        # session is closed and every answer written (the lifetime bounds the wait).
        if not stopping[0]:
            stopping[0] = True
            left = [2]

            def one_done() -> None:
                left[0] -= 1
                if left[0] == 0:
                    loop.stop()

            handler.console.end_streams()
            server.drain(one_done)
            handler.hub.close_all(one_done)

    watch_lifetime(loop, shutdown, runtime.kill_all)  # before the banner: a client may act on it
    bound = listen_guarded(server, address, auth_token)
    if isinstance(bound, int):
        return bound
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    log(f"listening on http://{shown}:{bound[1]}/")
    if console:
        import sys

        # stdout, not the log: the secret is good once, for 60 s, and only for this URL.
        fragment = "" if auth_token is None else f"#secret={handler.console.mint_secret()}"
        sys.stdout.write(f"agentproto console: open http://{shown}:{bound[1]}/{fragment}\n")
        sys.stdout.flush()
    loop.run()
    return EXIT_OK
