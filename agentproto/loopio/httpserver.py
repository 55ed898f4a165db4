"""HTTP/1.1 on the one loop: connections that hand each complete request to a handler and
write its answer. Knows nothing of routes, tokens or sessions: those are the handler's.

Rules of this file:
- The parser, response heads and the checks are sans-IO in core/http1.py; this file does the
  I/O, through ``streams.Reader`` and ``streams.Output`` (so ``loop.io`` sees every byte).
- One request at a time per connection: while one is answered the connection does not
  read. Once its answer is written (drained: a client that pipelines without reading
  costs only its own buffer), the next request is read from what the client already sent,
  then from the socket; or the connection closes, when either side asked for it.
- Every error answer (a malformed request, a refusal, a timeout, a handler's bug) closes
  the connection: the body it did not read cannot be skipped safely.
- Bounded: head and body sizes (httpcore), ``max_connections``; a request must arrive
  within ``request_timeout`` once the connection (or its first byte) is there, and a
  kept-alive connection idle for ``idle_timeout`` is closed. At the bound, a new
  connection closes the oldest idle one (no request being answered, or an answer whole
  and only waiting for its client to read it) to make room, and is itself closed only
  when every connection is busy; from three quarters of it on, a connection that is new or
  kept alive gets ``CROWDED_TIMEOUT`` at most (idle clients cannot lock the others out).
- A client that does not read cannot hold a slot for ever: while a request is answered,
  its connection's deadline (the request's, or the keep-alive's) checks that some of the
  answer was written since the request was handled, then every ``idle_timeout`` (the
  crowded timeout once crowded) since the last check; an answer with bytes waiting and
  none written closes the connection. (An answer that is slow to come, a held tool call,
  a long turn, is the handler's business: only unwritten bytes count.) No timer per
  request: the deadline already armed does it.
- Per owner (optional, ``owners``: the listener's owner is a session's token): once its
  head is in, a connection counts against the request's owner until it closes (or a later
  request on it names another); until then the rules above apply. At ``per_owner`` a new
  head of that owner closes the owner's oldest idle connection, or, when every one of them
  is busy, is read whole and answered by ``owners.over`` and the connection closes: one
  owner cannot take every slot from the others.
- A web page must not drive a loopback listener: as soon as a head is in, before its body
  is read or ``100 Continue`` sent, ``httpcore.check_request`` (Host, Origin,
  Content-Type) and then the handler's own ``refuse`` (its token) are applied.
- An answer that lasts (an event stream: ``Response.watch_hangup``) reads on while it is
  written, only to see its client go (``on_gone``); what the client sends meanwhile is
  dropped, and the connection closes after that answer.
- ``close()`` closes the listener and this server's connections, and never stops the loop.
  ``drain(then)`` is the graceful end: it stops accepting, closes the connections that
  answer nothing, lets each other one finish the answer it is writing (never reading
  another request), and calls ``then()`` once none is left.
"""

from __future__ import annotations

import functools
import json
import socket
from typing import TYPE_CHECKING, Any, Protocol

from agentproto.core.errors import log
from agentproto.core.http1 import (
    LAST_CHUNK,
    MAX_BODY,
    MAX_HEAD,
    HttpError,
    Request,
    RequestParser,
    check_request,
    chunk,
    keep_alive,
    response_head,
)
from agentproto.loopio.lifetime import when_drained
from agentproto.loopio.loop import Alarm
from agentproto.loopio.sockets import Accepted, Acceptor
from agentproto.loopio.streams import Reader

if TYPE_CHECKING:
    from typing import Callable

    from agentproto.loopio.loop import Loop
    from agentproto.loopio.streams import Delivered

#: (status, JSON body, extra header fields) of a request that may not run.
Refusal = tuple[int, Any, dict[str, str]]


class Handler(Protocol):
    """What answers a server's requests."""

    def refuse(self, request: Request) -> Refusal | None:
        """Whether a request whose head is in may go on (its body is not read yet)."""

    def handle(self, request: Request, response: "Response") -> None:
        """Answer a complete request through ``response``, now or later."""

    def error_body(self, status: int, message: str) -> Any:
        """The JSON body of an error the server answers itself (400, 408, 413, ...)."""


class Owners(Protocol):
    """Whom a connection counts against once its head is in, and how many each may hold."""

    #: The connections one owner may hold (busy or kept alive) at once.
    per_owner: int

    def owner(self, request: Request) -> object | None:
        """The owner of a request whose head passed the checks (None: it counts against nobody)."""

    def over(self, request: Request, response: "Response") -> None:
        """Answer a request whose owner holds ``per_owner`` busy connections already (the
        connection closes after it)."""


class Response:
    """The answer to one request: a JSON body, or a stream of chunks (``stream``, ``write``
    as many times as needed, ``end``)."""

    def __init__(self, conn: "HttpConnection", request: Request) -> None:
        self.conn = conn
        self.version = request.version
        self.keep_alive = keep_alive(request.version, request.headers)
        self.started = False
        self.chunked = False
        self.finished = False
        #: Called once if the connection closes (a long-lived stream forgets its reader).
        self.on_gone: Callable[[], None] | None = None

    @property
    def gone(self) -> bool:
        """The client went away: what is written now is dropped (and counted as delivered)."""
        return self.conn.closed

    def _head(self, status: int, content_type: str, headers: dict[str, str] | None, length: int | None) -> None:
        assert not self.started, "one head per response"
        self.started = True
        fields = [("Content-Type", content_type)] if content_type else []
        if length is None:
            self.chunked = True
            fields.append(("Transfer-Encoding", "chunked"))
        else:
            fields.append(("Content-Length", str(length)))
        if not self.keep_alive or self.conn.server.closing:
            self.keep_alive = False
            fields.append(("Connection", "close"))
        elif self.version == "HTTP/1.0":
            fields.append(("Connection", "keep-alive"))
        fields.append(("Cache-Control", "no-store"))
        fields.extend((headers or {}).items())
        self.conn.output.send(response_head(status, fields))

    def json(self, status: int, body: Any, headers: dict[str, str] | None = None, close: bool = False) -> None:
        """The whole answer: ``body`` as one JSON document."""
        data = json.dumps(body, separators=(",", ":")).encode() + b"\n"
        if close:
            self.keep_alive = False
        self._head(status, "application/json", headers, len(data))
        self.conn.output.send(data)
        self._end()

    def body(self, status: int, content_type: str, data: bytes, headers: dict[str, str] | None = None) -> None:
        """The whole answer: ``data`` as it is."""
        self._head(status, content_type, headers, len(data))
        self.conn.output.send(data)
        self._end()

    def empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        """The whole answer, without a body (a 202 Accepted, for one)."""
        self._head(status, "", headers, 0)
        self._end()

    def stream(
        self, status: int, content_type: str, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        """Start a chunked answer (``close``: the connection closes after it)."""
        if close:
            self.keep_alive = False
        self._head(status, content_type, headers, None)

    def watch_hangup(self) -> None:
        """For an answer that lasts (an event stream): read on while it is written, only to
        see the client go; it then calls ``on_gone``. Before the head (it closes after it)."""
        self.keep_alive = False
        self.conn.hangup_only = True
        self.conn.reader.start()

    def write(self, data: bytes, delivered: "Delivered | None" = None) -> None:
        """One chunk; ``delivered(1)`` once it is written or dropped (flow control)."""
        if data:
            self.conn.output.send(chunk(data), delivered)
        elif delivered is not None:
            delivered(1)

    def end(self) -> None:
        if self.chunked:
            self.conn.output.send(LAST_CHUNK)
        self._end()

    def _end(self) -> None:
        if not self.finished:
            self.finished = True
            self.conn.answered(self)


class HttpConnection(Accepted):
    def __init__(self, server: "HttpServer", sock: socket.socket) -> None:
        super().__init__(server.loop, sock)
        self.server = server
        self.parser = server.new_parser()
        self.reader = Reader(self.loop, self.fd, self._feed, self.close, 64 * 1024)
        self.checked = False  # the current request's head passed the checks
        self.idle = False  # waiting for a kept-alive connection's next request
        #: Whom it counts against (``Owners``), once a head is in; over: its owner was full.
        self.owner: object | None = None
        self.over = False
        #: Its answer lasts (``Response.watch_hangup``): what it reads is dropped.
        self.hangup_only = False
        self.response: Response | None = None
        #: ``output.sent`` when the write watch was set (``_watch_writes``).
        self.mark = 0
        #: The deadline of the request being read, or of a kept-alive connection's idling;
        #: while a request is answered, when to check that its client reads.
        self.deadline = Alarm(self.loop, self._timeout)
        server.idle[self] = None
        self.deadline.set(server.timeout(server.request_timeout))
        self.reader.start()

    # -- reading ------------------------------------------------------------------------
    def _timeout(self) -> None:
        if self.closed:
            return
        if self.response is not None:
            output = self.output
            if output.queue and output.sent == self.mark:
                self.close()  # nothing of its answer could be written for that long: it does not read
            else:
                self._watch_writes()
            return
        if self.idle:
            self.close()  # nothing was asked: nothing to answer
        else:
            self._fail(408, "request not received in time")

    def _feed(self, data: bytes) -> None:
        if self.hangup_only:
            return  # read only to see the client go
        if self.idle:
            self.idle = False
            self.deadline.set(self.server.request_timeout)
        try:
            request = self.parser.feed(data)
        except HttpError as error:
            self._fail(error.status, error.message)
            return
        if not self.checked and self.parser.request is not None:
            # The head is in: refuse now, before the body is read or 100 Continue is sent.
            self.checked = True
            refusal = self.server.refusal(self.parser.request)
            if refusal is not None:
                self._refuse(*refusal)
                return
            if self.server.owners is not None:
                self.over = not self.server.claim(self, self.parser.request)
            if request is None and self.parser.request.headers.get("expect", "").lower() == "100-continue":
                self.output.send(response_head(100, []))
        if request is not None:
            self._handle(request)

    def _watch_writes(self) -> None:
        """While a request is answered: check, ``idle_timeout`` from now, that its client reads."""
        self.mark = self.output.sent
        self.deadline.set(self.server.timeout(self.server.idle_timeout))

    def _handle(self, request: Request) -> None:
        self.reader.pause()
        self.server.idle.pop(self, None)
        # The deadline stays as it is (no timer per request): when it comes, ``_timeout``
        # checks that the answer's client read something since, and watches on.
        self.mark = self.output.sent
        response = self.response = Response(self, request)
        try:
            if self.over and self.server.owners is not None:
                response.keep_alive = False
                self.server.owners.over(request, response)
            else:
                self.server.handler.handle(request, response)
        except Exception:  # a bug costs this request, never the server
            import traceback

            # Never the path: the listener's paths hold a session's token.
            log(f"internal error answering a {request.method} request:\n{traceback.format_exc().rstrip()}")
            if not response.started:
                response.json(500, self.server.handler.error_body(500, "internal error"), close=True)
            else:
                self.close()

    def _refuse(self, status: int, body: Any, headers: dict[str, str]) -> None:
        self.reader.pause()
        self.server.idle.pop(self, None)
        response = self.response = Response(self, self.parser.request or Request("GET", "/", "HTTP/1.1", {}))
        response.json(status, body, headers, close=True)

    def _fail(self, status: int, message: str) -> None:
        self._refuse(status, self.server.handler.error_body(status, message), {})

    # -- after an answer ----------------------------------------------------------------
    def answered(self, response: Response) -> None:
        """The whole answer is queued: once written, read the next request or close."""
        if self.closed or response is not self.response:
            return
        if self.output.queue:
            # Nothing left to do but wait for the client to read: at the bound, this one may go.
            self.server.idle[self] = None
        when_drained(self.output, self._next if response.keep_alive and not self.server.closing else self.close)

    def _next(self) -> None:
        if self.closed:
            return
        if self.server.closing:
            self.close()  # draining: no next request
            return
        self.output.on_drained = None
        leftover = self.parser.leftover()
        self.parser = self.server.new_parser()
        self.checked = False
        self.over = False
        self.response = None
        self.idle = True
        self.server.idle.pop(self, None)
        self.server.idle[self] = None  # the newest idle: evicted last
        self.deadline.set(self.server.timeout(self.server.idle_timeout))
        self.reader.start()
        if leftover:
            # Not from inside the engine's bookkeeping (an answer often ends there).
            self.loop.call_soon(lambda: None if self.closed or self.response is not None else self._feed(leftover))

    # -- the end ------------------------------------------------------------------------
    def forget(self) -> None:
        self.deadline.cancel()
        if self.response is not None and self.response.on_gone is not None:
            gone, self.response.on_gone = self.response.on_gone, None
            gone()
        self.server.connections.discard(self)
        self.server.idle.pop(self, None)
        self.server.release(self)
        if self.server.acceptor is not None:
            self.server.acceptor.freed()
        self.server.check_drained()


class HttpServer:
    """Accepts connections on a listening socket and runs each request through ``handler``."""

    #: The longest a new or kept-alive connection may stay silent once the server is crowded.
    CROWDED_TIMEOUT = 2.0

    def __init__(
        self,
        loop: "Loop",
        handler: Handler,
        *,
        max_connections: int = 1024,
        request_timeout: float = 30.0,
        idle_timeout: float = 60.0,
        max_head: int = MAX_HEAD,
        max_body: int = MAX_BODY,
        owners: Owners | None = None,
    ) -> None:
        self.loop = loop
        self.handler = handler
        self.owners = owners
        #: Each owner's connections (``Owners``), the longest held first.
        self.owned: dict[object, dict[HttpConnection, None]] = {}
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        #: A request parser bounded as this server's requests are.
        self.new_parser = functools.partial(RequestParser, max_head, max_body)
        self.bound: tuple[str, int] = ("", 0)
        self.connections: set[HttpConnection] = set()
        #: The connections with no request being answered, the longest idle first.
        self.idle: dict[HttpConnection, None] = {}
        self.acceptor: Acceptor | None = None
        self.closing = False
        #: ``drain``'s ``then``, until the last connection is gone.
        self.drained: Callable[[], None] | None = None

    def listen(self, sock: socket.socket) -> tuple[str, int]:
        """Serve on a bound, listening, non-blocking socket (the server's from then on);
        returns its address."""
        name = sock.getsockname()
        self.bound = (name[0], name[1])
        self.acceptor = Acceptor(self.loop, sock, self._serve)
        self.acceptor.start()
        return self.bound

    def timeout(self, seconds: float) -> float:
        """``seconds``, or less once the server is crowded."""
        if len(self.connections) * 4 >= self.max_connections * 3:
            return min(seconds, self.CROWDED_TIMEOUT)
        return seconds

    def _serve(self, sock: socket.socket) -> None:
        if self.closing:
            sock.close()
            return
        if len(self.connections) >= self.max_connections:
            oldest = next(iter(self.idle), None)
            if oldest is None:  # every connection is being answered: the new one waits its turn elsewhere
                sock.close()
                return
            oldest.close()
        self.connections.add(HttpConnection(self, sock))

    def claim(self, conn: HttpConnection, request: Request) -> bool:
        """Count ``conn`` against its request's owner; False when the owner is full and
        every connection it holds is busy (one of its idle ones is closed to make room)."""
        assert self.owners is not None
        owner = self.owners.owner(request)
        if owner is conn.owner:
            return True
        self.release(conn)
        if owner is None:
            return True
        held = self.owned.setdefault(owner, {})
        if len(held) >= self.owners.per_owner:
            oldest = next((other for other in held if other in self.idle), None)
            if oldest is None:
                return False
            oldest.close()  # its forget releases it
            held = self.owned.setdefault(owner, {})
        held[conn] = None
        conn.owner = owner
        return True

    def release(self, conn: HttpConnection) -> None:
        owner, conn.owner = conn.owner, None
        if owner is not None:
            held = self.owned.get(owner)
            if held is not None:
                held.pop(conn, None)
                if not held:
                    del self.owned[owner]

    def refusal(self, request: Request) -> Refusal | None:
        problem = check_request(request.method, request.version, request.headers, self.bound)
        if problem is not None:
            return problem[0], self.handler.error_body(*problem), {}
        return self.handler.refuse(request)

    def close(self) -> None:
        """Stop accepting and close every connection (answers in progress are cut off)."""
        self.closing = True
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None
        for conn in list(self.connections):
            conn.close()

    def drain(self, then: Callable[[], None]) -> None:
        """Stop accepting and close every connection that answers nothing now; each other
        one closes once its answer is written (or its client is gone); ``then()`` when none
        is left."""
        self.closing = True
        self.drained = then
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None
        for conn in list(self.connections):
            if conn.response is None:
                conn.close()
        self.check_drained()

    def check_drained(self) -> None:
        if self.drained is not None and not self.connections:
            then, self.drained = self.drained, None
            then()
