"""The ops servers' sessions: the hub (the engine's ``EventSink`` for the sessions an ops server
opened) and each session's mailbox, which keeps its events until a request streams them.

Rules of this file:
- A session's events wait in its mailbox until a request on that session follows it, so a
  client that asks nothing loses nothing and never blocks the agent: up to
  ``OpsHub.MAILBOX_FREE`` waiting events are counted as delivered at once; past that the
  engine's flow control pauses the agent until a follower writes them.
- The first follower writes each line (and counts it delivered once written); every
  follower observes it (ops_framing.py's requests end on what they see).
- With an ``idle_timeout`` a session the hub opened is closed, as a ``close`` op would,
  once it has been idle that long (``Expiry``: no turn running or queued, no open request,
  no follower, no event stream of its ``tap``).
- A ``tap`` (the console, console_http.py) is told every line too (an event before the
  mailbox, so that a request streaming it reuses the tap's encoding): it keeps its own
  copy and never counts in flow control.
"""

from __future__ import annotations

from collections import deque

from agentproto.core.errors import AgentError, log
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.engine.runtime import Engine, Scope
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from typing import Any, Callable, Protocol

    from agentproto.engine.session import EngineSession

    class Lines(Protocol):
        def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None: ...

    class Follower(Protocol):
        """A request streaming a session's lines (ops_framing.py): ``run`` writes them."""

        @property
        def run(self) -> Lines: ...

        def observe(self, line: dict[str, Any]) -> None: ...

        def closed(self) -> None: ...

    class Tap(Protocol):
        """Told of every session line besides the mailbox (console_http.py's rings)."""

        def event(self, session: EngineSession, event: dict[str, Any]) -> None: ...

        def session_error(self, session: EngineSession, error: AgentError) -> None: ...

        def session_closed(self, session: EngineSession) -> None: ...

        def opened(self, session: EngineSession) -> None: ...

        def watched(self, session_id: str) -> bool: ...


class Mailbox:
    """One session's lines (its events, its error) until a request streams them: the
    first follower writes each line, every follower observes it."""

    def __init__(self, hub: "OpsHub", session: EngineSession) -> None:
        self.hub = hub
        self.session = session
        self.items: deque[tuple[dict[str, Any], bool]] = deque()  # (line, still owed to the engine)
        self.followers: list[Follower] = []
        self.closed = False
        self.pumping = False
        #: The session's idle clock (the hub's ``idle_timeout``), or None.
        self.expiry: Expiry | None = None

    def push(self, line: dict[str, Any], is_event: bool) -> None:
        if self.expiry is not None:
            self.expiry.last = self.hub.loop.time()
        owed = is_event
        if is_event and not self.followers and len(self.items) < self.hub.MAILBOX_FREE:
            self.session.delivered(1)
            owed = False
        self.items.append((line, owed))
        self.pump()

    def follow(self, follower: "Follower") -> None:
        self.followers.append(follower)
        if self.expiry is not None:
            self.expiry.last = self.hub.loop.time()
        self.pump()

    def unfollow(self, follower: "Follower") -> None:
        if follower in self.followers:
            self.followers.remove(follower)
            if self.expiry is not None:
                self.expiry.last = self.hub.loop.time()
        self._maybe_drop()

    def pump(self) -> None:
        if self.pumping:
            return
        self.pumping = True
        try:
            while self.items and self.followers:
                line, owed = self.items.popleft()
                self.followers[0].run.line(line, self.session if owed else None)
                for follower in list(self.followers):
                    follower.observe(line)
            if self.closed and not self.items:
                for follower in list(self.followers):
                    follower.closed()
        finally:
            self.pumping = False
        self._maybe_drop()

    def close(self) -> None:
        self.closed = True
        if self.expiry is not None:
            self.expiry.alarm.cancel()
            self.expiry = None
        self.pump()

    def _maybe_drop(self) -> None:
        if self.closed and not self.followers and not self.pumping:
            for _line, owed in self.items:
                if owed:
                    self.session.delivered(1)
            self.items.clear()
            if self.hub.boxes.get(self.session.id) is self:
                del self.hub.boxes[self.session.id]
                self.hub.errors.pop(self.session.id, None)


class Expiry:
    """The idle clock of one session of a hub: closes it once it has been idle for the
    hub's ``idle_timeout``. ``last`` is the time of its latest activity (its mailbox sets it);
    the alarm checks then, and sets itself again for what is left."""

    __slots__ = ("hub", "box", "last", "alarm")

    def __init__(self, hub: "OpsHub", box: Mailbox) -> None:
        self.hub = hub
        self.box = box
        self.last = hub.loop.time()
        self.alarm = Alarm(hub.loop, self._check)
        self.alarm.set(hub.idle_timeout)

    def busy(self) -> bool:
        session = self.box.session
        return bool(
            session.turn is not None
            or session.queue
            or session.pending_steer is not None
            or session.app.pending
            or self.box.followers
            or (self.hub.tap is not None and self.hub.tap.watched(session.id))
        )

    def _check(self) -> None:
        session, hub = self.box.session, self.hub
        if session.state != "open" or self.box.expiry is not self:
            return  # closing already: its close goes on
        timeout, now = hub.idle_timeout, hub.loop.time()
        if self.busy():
            # Its end is an event or a request leaving, which restarts the clock then.
            self.last = now
            self.alarm.set(timeout)
            return
        left = self.last + timeout - now
        if left > 0:
            self.alarm.set(left)
            return
        self.box.expiry = None
        log(f"{session.id}: idle for {timeout:g} s (--session-idle-timeout): closing it")
        hub.runtime.execute("close", {"session": session.id}, hub, hub.scope, lambda _value, _error: None)


class OpsHub:
    """The sessions of one ops server (a loop, a connection, or HTTP's shared state): the
    engine's ``EventSink`` for them, and their mailboxes."""

    MAILBOX_FREE = 4096

    def __init__(self, runtime: Engine, shared: bool = False, idle_timeout: float = 0.0) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        #: Seconds a session it opened may stay idle before it is closed (0: for ever).
        self.idle_timeout = idle_timeout
        self.scope = Scope(runtime, shared)
        self.boxes: dict[str, Mailbox] = {}
        self.errors: dict[str, AgentError] = {}
        self._idle_waiters: list[Callable[[], None]] = []
        self.scope.on_empty = self._empty
        #: Told of every line too (the console's rings), or None.
        self.tap: Tap | None = None

    def box(self, session: EngineSession) -> Mailbox:
        box = self.boxes.get(session.id)
        if box is None:
            box = self.boxes[session.id] = Mailbox(self, session)
        return box

    # EventSink
    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        if self.tap is not None:
            self.tap.event(session, event)  # first: a POST streaming it reuses its encoding
        self.box(session).push({"kind": "event", "event": event}, True)

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        self.errors[session.id] = error
        text = f"session {session.id} failed: {error.kind}: {error.message}"
        self.box(session).push({"kind": "log", "stream": "stderr", "text": text}, False)
        if self.tap is not None:
            self.tap.session_error(session, error)

    def session_closed(self, session: EngineSession) -> None:
        self.box(session).close()  # the engine then takes it out of the scope
        if self.tap is not None:
            self.tap.session_closed(session)

    def opened(self, session_id: str) -> None:
        """A session this hub opened is open: its idle clock starts (with an ``idle_timeout``)."""
        # Not the scope: an open answered at once is answered before the scope holds it.
        session = self.runtime.sessions.get(session_id)
        if self.tap is not None and session is not None:
            self.tap.opened(session)
        if self.idle_timeout > 0 and session is not None and session.sink is self and session.state == "open":
            box = self.box(session)
            if box.expiry is None and not box.closed:
                box.expiry = Expiry(self, box)

    def unwatched(self, session_id: str) -> None:
        """The tap's last stream of a session ended: its idle clock restarts."""
        box = self.boxes.get(session_id)
        if box is not None and box.expiry is not None:
            box.expiry.last = self.loop.time()

    def _empty(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for then in waiters:
            then()

    def close_all(self, then: Callable[[], None]) -> None:
        """Close every session this hub opened (throwaway ones too); ``then()`` once all are."""
        sessions = self.scope.sessions()
        if not sessions:
            then()
            return
        self._idle_waiters.append(then)
        self.runtime.close_all(sessions)
