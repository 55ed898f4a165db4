"""The console: the HTTP transport's page and its event streams (Server-Sent Events).

    GET  /                           the page (index.html, console.js, console.css: package data)
    POST /v1/console/exchange        {"secret": S} -> {"token": T}: the printed URL's one-time secret
    GET  /v1/sessions                SSE: the session list (a ``sessions`` snapshot, then ``update``s)
    GET  /v1/sessions/{id}/events    SSE: one session's protocol 1 lines, each ``id`` its sequence

Rules of this file:
- Every session of the HTTP server has a ring (``Ring``): its lines (each event, its session
  error, its ``closed``), as SSE messages, at most ``RING_EVENTS`` of them (``--ring-events``)
  and ``RING_BYTES`` in all, the oldest dropped first. An event's SSE ``id`` is its ``sequence``; the error and
  ``closed`` lines, which nothing follows, take the next numbers. The ring is fed beside the
  mailbox (ops_hub.py): it never delays, pauses or holds an event back, and it never
  counts in the engine's flow control.
- A stream (``EventStream``) starts after its ``Last-Event-ID``, else at the oldest line
  the ring holds. When the lines it needs next have left the ring (it asked for an id
  older than the ring's oldest, or newer than its latest, or it read too slowly), it gets
  one ``resync`` message (the session's info, the ring's oldest id) and goes on from the
  ring's oldest line: a client starts over from there, never misses a line silently.
- A slow reader costs only itself: a stream writes while its connection holds at most
  ``STREAM_HIGH_WATER`` chunks and, past it, writes nothing until that output has drained,
  then catches up from the ring (or resyncs). The session never waits for it.
- A stream reads on only to see its client go (``Response.watch_hangup``): a page that
  reloads or closes frees its stream at once, even on a session with nothing to say.
- A stream ends after its session's ``closed`` line. The rings of the latest
  ``CLOSED_KEPT`` closed sessions stay, so a page that reloads still reads how they ended.
- The session list's stream sends a whole ``sessions`` snapshot first (and again after a
  reader fell behind), then ``update`` messages with the changed rows and the gone ids,
  at most one every ``LIST_EVERY`` seconds: no timer per event, one per change burst.
- Public without the token (nothing in them is secret): the page's three files and the
  secret exchange. Everything else is the HTTP transport's (Host, Origin, Content-Type,
  the bearer token). A secret is good once, for ``SECRET_TTL`` seconds, compared in
  constant time; it is never logged.
- An event is encoded once: its protocol 1 line goes into the ring, and the ops line of the
  POST that streams it at once is made from it (``event_line``), byte for byte
  ``encode`` 's.
- Every answer of the console carries ``PAGE_HEADERS`` (a CSP without inline script,
  ``X-Frame-Options: DENY``, ``nosniff``, ``no-referrer``); ``Cache-Control: no-store``
  comes with every answer of the server.
"""

from __future__ import annotations

import bisect
import hmac
import json
import secrets
from collections import deque
from typing import TYPE_CHECKING, Any

from agentproto.core.wire import encode, encode_event
from agentproto.loopio.lifetime import when_drained
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from agentproto.core.errors import AgentError
    from agentproto.core.http1 import Request
    from agentproto.engine.runtime import Engine
    from agentproto.engine.session import EngineSession
    from agentproto.loopio.httpserver import Response

RING_EVENTS = 2000
RING_BYTES = 4 * 1024 * 1024
CLOSED_KEPT = 32
STREAM_HIGH_WATER = 64
#: How many ring lines a stream writes in one go before it lets the loop run.
STREAM_BATCH = 256
LIST_EVERY = 0.2
SECRET_TTL = 60.0

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
SSE_HEADERS = {**PAGE_HEADERS, "X-Accel-Buffering": "no"}
#: The page's files: path -> (package file, content type).
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
EXCHANGE = "/v1/console/exchange"
SESSIONS = "/v1/sessions"
_cache: dict[str, bytes] = {}


def page_file(name: str) -> bytes:
    """One of the page's files, read from the package (a zipapp or a vendored copy too)."""
    data = _cache.get(name)
    if data is None:
        from importlib import resources

        data = _cache[name] = resources.files("agentproto.frontends").joinpath("console").joinpath(name).read_bytes()
    return data


def sse(data: bytes, ident: int | None = None, event: str | None = None) -> bytes:
    """One SSE message: ``data`` is one line of JSON (its newline, if any, is the field's end)."""
    head = b"" if ident is None else b"id: %d\n" % ident
    if event is not None:
        head += b"event: " + event.encode() + b"\n"
    return head + b"data: " + data.rstrip(b"\n") + b"\n\n"


def last_event_id(request: "Request") -> int | None:
    value = request.headers.get("last-event-id", "").strip()
    return int(value) if value.isdigit() and len(value) < 19 else None


class Ring:
    """One session's latest lines as SSE messages, and the streams reading them."""

    __slots__ = ("session_id", "bound", "ids", "items", "size", "last", "closed", "streams")

    def __init__(self, session_id: str, bound: int = RING_EVENTS) -> None:
        self.session_id = session_id
        self.bound = bound
        self.ids: deque[int] = deque()
        self.items: deque[bytes] = deque()
        self.size = 0
        self.last = 0  # the latest id added
        self.closed = False
        self.streams: list[EventStream] = []

    def add(self, ident: int, message: bytes) -> None:
        self.ids.append(ident)
        self.items.append(message)
        self.size += len(message)
        self.last = ident
        while len(self.items) > 1 and (len(self.items) > self.bound or self.size > RING_BYTES):
            self.ids.popleft()
            self.size -= len(self.items.popleft())
        for stream in list(self.streams):
            if not stream.waiting:
                stream.pump()

    def oldest(self) -> int:
        return self.ids[0] if self.ids else self.last + 1

    def after(self, ident: int) -> int:
        """The index of the first line after ``ident``."""
        ids = self.ids
        if ids and ids[-1] - ids[0] == len(ids) - 1:  # consecutive, as the engine numbers them
            return max(0, min(len(ids), ident - ids[0] + 1))
        return bisect.bisect_right(list(ids), ident)


class EventStream:
    """One client reading one session's ring (``GET /v1/sessions/{id}/events``)."""

    def __init__(self, console: "Console", ring: Ring, response: "Response", after: int | None) -> None:
        self.console = console
        self.ring = ring
        self.response = response
        self.waiting = False
        self.done = False
        oldest = ring.oldest()
        if after is None:
            self.position = oldest - 1
        elif after < oldest - 1 or after > ring.last:
            self.position = -1  # the lines after it are gone (or were never this ring's): resync
        else:
            self.position = after

    def pump(self) -> None:
        if self.done:
            return
        response, ring = self.response, self.ring
        if response.gone:
            self.stop()
            return
        output = response.conn.output
        if len(output) > STREAM_HIGH_WATER:
            self._wait()
            return
        if self.position < ring.oldest() - 1:
            self.position = ring.oldest() - 1
            response.write(sse(self.console.resync(ring), event="resync"))
        start = ring.after(self.position)
        items, ids = ring.items, ring.ids
        end = min(len(items), start + STREAM_BATCH)
        for index in range(start, end):
            response.write(items[index])
        if end > start:
            self.position = ids[end - 1]
        if end < len(items):
            self._wait()  # the rest once this much is written: the loop runs meanwhile
        elif ring.closed and self.position >= ring.last:
            self.stop()
            response.end()

    def _wait(self) -> None:
        if not self.waiting:
            self.waiting = True
            when_drained(self.response.conn.output, self._drained)

    def _drained(self) -> None:
        self.waiting = False
        self.response.conn.output.on_drained = None
        self.console.loop.call_soon(self.pump)

    def stop(self) -> None:
        if not self.done:
            self.done = True
            if self in self.ring.streams:
                self.ring.streams.remove(self)
            self.console.unwatched(self.ring.session_id)


class ListStream:
    """One client reading the session list (``GET /v1/sessions``)."""

    def __init__(self, console: "Console", response: "Response") -> None:
        self.console = console
        self.response = response
        self.stale = False  # it fell behind: a whole snapshot once it has drained
        self.waiting = False

    def send(self, message: bytes) -> None:
        output = self.response.conn.output
        if len(output) > STREAM_HIGH_WATER:
            self.stale = True
            if not self.waiting:
                self.waiting = True
                when_drained(output, self._drained)
            return
        self.response.write(message)

    def _drained(self) -> None:
        self.waiting = False
        self.response.conn.output.on_drained = None
        if self.stale and not self.response.gone:
            self.stale = False
            self.send(self.console.snapshot_message())


class Console:
    """The console's state in one HTTP server: the rings, the streams, the secrets."""

    def __init__(self, runtime: "Engine", token: str | None, ring_events: int = RING_EVENTS) -> None:
        self.runtime = runtime
        self.ring_events = ring_events
        self.loop = runtime.loop
        self.token = token
        self.rings: dict[str, Ring] = {}
        self.closed_rings: deque[str] = deque()
        self.lists: list[ListStream] = []
        self.dirty: set[str] = set()
        self.gone: set[str] = set()
        self.list_alarm = Alarm(self.loop, self._flush_list)
        self.list_id = 0
        self.secrets: dict[str, float] = {}
        #: Streams per session (a watched session is not idle: ops_hub's Expiry asks).
        self.watchers: dict[str, int] = {}
        #: Told when a session stops being watched (ops_hub restarts its idle clock).
        self.on_unwatched: Any = None
        #: The latest event and its protocol 1 line (``event_line``).
        self.last_event: object = None
        self.last_line = b""

    # -- the hub's tap (ops_hub.py) -------------------------------------------------------
    def _ring(self, session_id: str) -> Ring:
        ring = self.rings.get(session_id)
        if ring is None:
            ring = self.rings[session_id] = Ring(session_id, self.ring_events)
        return ring

    def event(self, session: "EngineSession", event: dict[str, Any]) -> None:
        line = encode_event(event)
        # The POST streaming this event reuses the line (``event_line``): one encoding for both.
        self.last_event, self.last_line = event, line
        self._ring(session.id).add(event["sequence"], sse(line, event["sequence"]))
        if self.lists:
            self._changed(session.id)

    def event_line(self, obj: dict[str, Any]) -> bytes | None:
        """The ops line ``{"kind": "event", "event": E}`` for the event just added, else None."""
        if obj.get("event") is self.last_event and obj.get("kind") == "event" and len(obj) == 2:
            return b'{"kind":"event",' + self.last_line[1:]
        return None

    def session_error(self, session: "EngineSession", error: "AgentError") -> None:
        ring = self._ring(session.id)
        ring.add(ring.last + 1, sse(encode({"session": session.id, "error": error.body()}), ring.last + 1))

    def session_closed(self, session: "EngineSession") -> None:
        ring = self._ring(session.id)
        ring.closed = True
        ring.add(ring.last + 1, sse(encode({"closed": session.id}), ring.last + 1))
        self.closed_rings.append(session.id)
        while len(self.closed_rings) > CLOSED_KEPT:
            old = self.closed_rings.popleft()
            dropped = self.rings.get(old)
            if dropped is not None and dropped.closed:
                del self.rings[old]  # a stream still writing it holds it until it is done
        self.dirty.discard(session.id)
        self.gone.add(session.id)
        self._arm_list()

    def opened(self, session: "EngineSession") -> None:
        self._changed(session.id)

    def watched(self, session_id: str) -> bool:
        return self.watchers.get(session_id, 0) > 0

    def unwatched(self, session_id: str) -> None:
        left = self.watchers.get(session_id, 0) - 1
        if left > 0:
            self.watchers[session_id] = left
        else:
            self.watchers.pop(session_id, None)
            if self.on_unwatched is not None:
                self.on_unwatched(session_id)

    # -- the session list -----------------------------------------------------------------
    def _changed(self, session_id: str) -> None:
        if self.lists:
            self.dirty.add(session_id)
            self._arm_list()

    def _arm_list(self) -> None:
        if self.lists and not self.list_alarm.armed:
            self.list_alarm.set(LIST_EVERY)

    def _rows(self, ids: Any = None) -> list[Any]:
        from agentproto.frontends.inspect_op import session_row

        sessions = self.runtime.sessions
        chosen = sessions.values() if ids is None else (sessions[i] for i in ids if i in sessions)
        return [session_row(self.runtime, s) for s in chosen if not s.launch.throwaway]

    def snapshot_message(self) -> bytes:
        self.list_id += 1
        return sse(json.dumps({"sessions": self._rows()}).encode(), self.list_id, "sessions")

    def _flush_list(self) -> None:
        self.lists = [one for one in self.lists if not one.response.gone]
        dirty, gone = self.dirty, self.gone
        self.dirty, self.gone = set(), set()
        if not self.lists or not (dirty or gone):
            return
        self.list_id += 1
        body = {"sessions": self._rows(sorted(dirty - gone)), "gone": sorted(gone)}
        message = sse(json.dumps(body).encode(), self.list_id, "update")
        for one in self.lists:
            one.send(message)

    def end_streams(self) -> None:
        """At shutdown: end the list streams (each session's ends after its ``closed``)."""
        for one in self.lists:
            if not one.response.gone:
                one.response.end()
        self.lists = []
        for ring in self.rings.values():
            if ring.closed:
                for stream in list(ring.streams):
                    stream.pump()

    # -- the routes -------------------------------------------------------------------------
    def public(self, request: "Request") -> bool:
        """A request that needs no token: the page's files and the secret exchange."""
        path = request.path.split("?", 1)[0]
        return (request.method == "GET" and path in FILES) or (request.method == "POST" and path == EXCHANGE)

    def handle(self, request: "Request", response: "Response") -> bool:
        """Answer a console route (False: not one)."""
        path = request.path.split("?", 1)[0]
        if request.method == "GET" and path in FILES:
            name, content_type = FILES[path]
            response.body(200, content_type, page_file(name), PAGE_HEADERS)
        elif request.method == "POST" and path == EXCHANGE:
            self._exchange(request, response)
        elif request.method == "GET" and path.rstrip("/") == SESSIONS:
            response.watch_hangup()
            response.stream(200, "text/event-stream", SSE_HEADERS)
            stream = ListStream(self, response)
            self.lists.append(stream)
            response.on_gone = lambda: self.lists.remove(stream) if stream in self.lists else None
            stream.send(self.snapshot_message())
        elif request.method == "GET" and path.startswith(SESSIONS + "/") and path.endswith("/events"):
            self._events(path[len(SESSIONS) + 1 : -len("/events")], request, response)
        else:
            return False
        return True

    def _events(self, session_id: str, request: "Request", response: "Response") -> None:
        from urllib.parse import unquote

        session_id = unquote(session_id)
        ring = self.rings.get(session_id)
        if ring is None:
            if session_id not in self.runtime.sessions:
                message = f"unknown session: {session_id}"
                response.json(404, {"kind": "error", "message": message}, PAGE_HEADERS)
                return
            ring = self._ring(session_id)
        response.watch_hangup()
        response.stream(200, "text/event-stream", SSE_HEADERS)
        stream = EventStream(self, ring, response, last_event_id(request))
        ring.streams.append(stream)
        self.watchers[session_id] = self.watchers.get(session_id, 0) + 1
        response.on_gone = stream.stop
        stream.pump()

    def resync(self, ring: Ring) -> bytes:
        session = self.runtime.sessions.get(ring.session_id)
        info = None if session is None else session.snapshot()
        body = {"resync": ring.session_id, "oldest": ring.oldest(), "info": info}
        return json.dumps(body).encode()

    # -- the one-time secret ------------------------------------------------------------------
    def mint_secret(self) -> str:
        """A secret for the printed URL's fragment: good once, for ``SECRET_TTL`` seconds."""
        secret = secrets.token_urlsafe(24)
        now = self.loop.time()
        self.secrets = {s: t for s, t in self.secrets.items() if t > now}
        self.secrets[secret] = now + SECRET_TTL
        return secret

    def _exchange(self, request: "Request", response: "Response") -> None:
        try:
            body = json.loads(request.body or b"null")
        except (ValueError, RecursionError):
            body = None
        given = body.get("secret") if isinstance(body, dict) else None
        now = self.loop.time()
        found = None
        if isinstance(given, str):
            for secret, expires in list(self.secrets.items()):
                if hmac.compare_digest(secret.encode(), given.encode("utf-8", "replace")) and expires > now:
                    found = secret
        if found is None:
            why = "this link's secret was used already or has expired (60 s): enter the token instead"
            response.json(403, {"kind": "error", "message": why}, PAGE_HEADERS)
            return
        del self.secrets[found]
        response.json(200, {"token": self.token}, PAGE_HEADERS)
