"""The engine: sessions, turns, queues, requests, ordering and flow control.

Rules of this file:
- The engine owns the bookkeeping kinds: TurnStarted, TurnEnded, RequestClosed,
  SessionUpdated and StatusChanged. Drivers report facts; the engine decides order, so
  every turn opens with TurnStarted and ends with TurnEnded followed by the status
  change (or the next queued turn), whatever order an agent reports things in.
- Per session, events are numbered from 1 and handed to the session's sink in order.
  The ``ok`` reply to ``open`` is handed over before the session's first event.
- A session error is terminal: the running turn ends Failed first, then the error, then
  exactly one ``closed``.
- Flow control (flow.py): a session whose sink holds ``HIGH_WATER`` unwritten events stops
  reading its agent (``driver.pause_output``) and resumes below ``LOW_WATER``; only a
  session none of whose events could be written for ``stall_timeout`` seconds is closed.
- Nothing here blocks. Commands finish through callbacks, so one slow command never
  stalls another.
- The app's own tools and hooks (apptools.py) open ToolCall and Hook requests here, in the
  running turn (closed with it) or, outside any turn, at the session's level (turn_info
  null; closed by their answer, their timeout or the session's close).
- A turn's start and end, and the commands, are session_turns.py's (the base of EngineSession);
  the open requests are session_requests.py's, which reaches the session only through its
  documented members (``send``, ``refresh_status``).
- The EngineSession builds its driver, last in its constructor, reporting to a Host of its own
  (restart.py's ``DriverHost``: the session's methods, retired with the driver when a new
  agent process takes over a rate-limited turn): what its constructor raises refuses the open.
"""

from __future__ import annotations

import json
from collections import deque
from time import time_ns

from agentproto.core import session_info
from agentproto.core.errors import AgentError, Kind, log
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.core.wire import event_kind_name
from agentproto.drivers.base import Driver, Launch
from agentproto.engine.flow import HIGH_WATER, Flow
from agentproto.engine.guard import Guard
from agentproto.engine.restart import DriverHost, Restart, begin
from agentproto.engine.session_requests import Requests
from agentproto.engine.session_turns import SessionTurns
from agentproto.engine.turns import CONTENT, MESSAGE_KINDS, Prompt, Turn
from agentproto.loopio.loop import Loop, Timer

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import AgentDetails, SessionInfo, StopReason, TurnUsage
    from agentproto.drivers.base import Host
    from agentproto.engine.observations import Observer
    from agentproto.engine.turns import Done as Done
    from agentproto.loopio.transport import LineTransport, Spawn, TransportFactory
    from agentproto.tools.apptools import Listen

ENGINE_OWNED = frozenset({"TurnStarted", "TurnEnded", "RequestClosed", "SessionUpdated", "StatusChanged"})
_NOW = object()  # send's default turn: the one running as it is sent (held events keep theirs)

#: The session lifecycle, as a table (h11's shape): each state, the states it may become.
#: ``EngineSession._move`` is the one writer of ``state``; any other move is a bug and raises.
LIFECYCLE: dict[str, frozenset[str]] = {
    "opening": frozenset({"open", "closed"}),  # the agent is ready; or the open failed / was abandoned
    "open": frozenset({"closing"}),  # close, or a session error
    "closing": frozenset({"closed"}),  # the agent is gone, or its kill grace ran out
    "closed": frozenset(),
}


class EventSink(Protocol):
    """Where a session's output goes: a frontend connection, or an internal collector."""

    def event(self, session: "EngineSession", event: dict[str, Any]) -> None: ...

    def session_error(self, session: "EngineSession", error: AgentError) -> None: ...

    def session_closed(self, session: "EngineSession") -> None: ...


class Holder(Protocol):
    """Something that holds a session until it closes (a frontend's scope)."""

    def discard(self, session: "EngineSession") -> None: ...


class Context:
    """What every session of one runtime shares, handed to each: the engine never imports the
    runtime. (Not a dataclass: defining one costs more start-up time than this module's rest.)"""

    __slots__ = ("loop", "stall_timeout", "forget", "transport_factory", "listen", "observer", "replaying")

    def __init__(
        self,
        loop: Loop,
        stall_timeout: float,
        forget: Callable[[EngineSession], None],
        transport_factory: TransportFactory,
        listen: Listen | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.loop = loop
        #: Seconds a session may have events waiting unwritten before it fails ConsumerLagged.
        self.stall_timeout = stall_timeout
        #: The session has closed (or failed to open): its owner drops it.
        self.forget = forget
        #: How sessions start their agents (loopio/transport.py; replay and fault injection
        #: put their own in).
        self.transport_factory = transport_factory
        #: Serves a session's tools and hooks on the loopback listener (opened on first use).
        self.listen = listen
        #: Told of every ended turn and ContextUsage report (observations.py: inspect's figures).
        self.observer = observer
        #: A replay's: waits for a rate limit's reset are not waited out (guard.py).
        self.replaying = False


class EngineSession(SessionTurns):
    """One agent session. Also the ``Host`` its driver reports to."""

    CLOSE_GRACE = 5.0
    KILL_GRACE = 3.0
    CANCEL_GRACE = 15.0
    QUIET_PROMPTED = 120.0
    QUIET_AGENT = 20.0

    def __init__(
        self,
        context: Context,
        session_id: str,
        launch: Launch,
        sink: EventSink,
        driver_class: Callable[[Host, Launch], Driver],
    ) -> None:
        self.context: Context = context
        self.loop: Loop = context.loop
        self.id = self.session_id = session_id
        self.launch = launch
        self.sink = sink
        self.state = "opening"  # see LIFECYCLE
        self.mute = False  # closed, or its session error is out: nothing more but ``closed``
        self.info = session_info.new_info(session_id, launch.installation)
        self.sequence = 0
        self.turn: Turn | None = None
        self.turn_counter = self.prompt_counter = 0
        self.queue: deque[Prompt] = deque()
        self.pending_steer: Prompt | None = None
        self.late_end_warned = False
        self.flow = Flow(self.loop, context.stall_timeout, self._pause, self._resume, self._stalled)
        # Bound once: it runs for every write, and a method that only forwards costs a call.
        #: The sink wrote ``count`` of this session's events (what flow control counts).
        self.delivered: Callable[[int], None] = self.flow.delivered
        self.close_waiters: list[Done] = []
        self.finalizing = False
        self.close_timers: list[Timer] = []
        self.failed: AgentError | None = None
        self.driver_gone = False
        self.open_done: Done | None = None
        self.held: list[tuple[Any, Any, Any, Any]] | None = []  # events before the open reply
        #: generate: called with each content kind, may veto tool use.
        self.watcher: Callable[[str, Any], None] | None = None
        self.scopes: list[Holder] = []
        #: Its open requests (session_requests.py), and the app's own tools and hooks.
        self.requests = Requests(self)
        self.app = self.requests.app
        self.guard = Guard(self)  # its policy and budget (guard.py)
        self.created = self.loop.time()
        self.transport: LineTransport | None = None  # the agent's, once spawned (inspect shows its pid)
        self.restart: Restart | None = None  # a new agent process after a rate limit (restart.py)
        #: Built last, reporting to its own Host (restart.py): what it raises refuses the open.
        self.driver: Driver = driver_class(DriverHost(self), launch)

    # -- helpers ----------------------------------------------------------------------

    def _move(self, state: str) -> None:
        if state not in LIFECYCLE[self.state]:
            raise RuntimeError(f"session {self.id}: a {self.state} session cannot become {state}")
        self.state = state
        self.mute = self.mute or state == "closed"

    def send(
        self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None, turn: Any = _NOW
    ) -> None:
        """Number one event of this session and hand it to the sink (held until the open's
        reply is out; nothing once the session is mute). The engine's own bookkeeping sends
        through here (session_requests.py too); a driver's events come through ``emit``."""
        if self.mute:
            return
        if turn is _NOW:
            turn = self.turn
        if self.held is not None:
            self.held.append((kind, extensions, parent_tool_id, turn))
            return
        self.sequence += 1
        ns = time_ns()
        event = {
            "sequence": self.sequence,
            # wire.system_time, inline: this runs for every event
            "occurred_at": {"secs_since_epoch": ns // 1_000_000_000, "nanos_since_epoch": ns % 1_000_000_000},
            "session_id": self.id,
            "turn_info": None if turn is None else {"id": turn.id, "parent_tool_id": parent_tool_id},
            "kind": kind,
            "extensions": extensions or {},
        }
        # Flow control's count, inline (a relay's hottest path); its two edges go to flow.py.
        # ``==``: the count grows by one, so it passes HIGH_WATER exactly once on the way up
        # (past it, with the agent paused, the rest of its last read would call for nothing).
        flow = self.flow
        flow.unwritten += 1
        if flow.unwritten == 1 or flow.unwritten == HIGH_WATER:
            flow.grew()
        self.sink.event(self, event)

    def _pause(self) -> None:
        self.driver.pause_output()

    def _resume(self) -> None:
        if not self.driver_gone:
            self.driver.resume_output()

    def _stalled(self, error: AgentError) -> None:
        if self.state != "closed":
            self.fail(error)

    def refresh_status(self) -> None:
        """Send StatusChanged if the session's status (NeedsInput, Working, Idle) is no longer
        what its info says: after anything that opens or closes a turn, a request or a queued
        prompt."""
        turn = self.turn
        if turn is not None and turn.requests:
            status = "NeedsInput"
        elif turn is not None or self.queue:
            status = "Working"
        else:
            status = "Idle"
        if status != self.info["status"]:
            self.info["status"] = status
            self.send({"StatusChanged": status})

    def _session_updated(self) -> None:
        if self.state in ("open", "closing"):
            self.send({"SessionUpdated": self.snapshot()})

    def snapshot(self) -> SessionInfo:
        """A deep copy of the info (a JSON round trip: it holds only JSON values)."""
        copy: SessionInfo = json.loads(json.dumps(self.info))
        return copy

    # -- Host: what the driver reports ------------------------------------------------

    def spawn(self, spawn: "Spawn") -> "LineTransport":
        """Start this session's agent through the runtime's transport factory."""
        self.transport = self.context.transport_factory(self.loop, spawn, self.launch.wire)
        return self.transport

    def opened(self, details: AgentDetails, **info: Any) -> None:
        if self.state != "opening":
            return
        session_info.merge(self.info, info)
        problem = session_info.adopt_details(self.info, details, self.launch.configure, self.driver.validate_config)
        if problem is not None:
            self._abort_open(AgentError.detail(Kind.INVALID_CONFIGURATION, problem))
            return
        session_info.add_features(self.info, self.app.features)
        refusal = self.guard.open_problem()
        if refusal is not None:
            self._abort_open(refusal)
            return
        self._move("open")
        done, self.open_done = self.open_done, None
        if done is not None:
            done(self.snapshot(), None)
        held, self.held = self.held, None
        for item in held or ():
            self.send(*item)

    def open_failed(self, error: AgentError) -> None:
        if self.state == "opening":
            self._abort_open(error)

    def _abort_open(self, error: AgentError) -> None:
        self._move("closed")
        self.app.shutdown("the session did not open")
        self.context.forget(self)
        done, self.open_done = self.open_done, None
        self.held = None
        if not self.driver_gone:
            self.driver.kill()
        if done is not None:
            done(None, error)
        self._leave_scopes()

    def _leave_scopes(self) -> None:
        scopes, self.scopes = self.scopes, []
        for scope in scopes:
            scope.discard(self)

    def turn_acknowledged(self) -> None:
        if self.turn is not None:
            self.turn.acked = True

    def emit(self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None) -> None:
        if self.mute:
            return
        # wire.event_kind_name, with a dict's name first: this runs for every event.
        name = next(iter(kind)) if type(kind) is dict and len(kind) == 1 else event_kind_name(kind)
        if name in ENGINE_OWNED:
            self.diagnostic("Warning", f"dropped an engine-owned {name} from the driver")
            return
        turn = self.turn
        if name in CONTENT:
            body = kind[name]
            if turn is not None and not turn.acked:
                return  # stale: from before the agent acknowledged this turn
            if self.watcher is not None:
                self.watcher(name, body)
                if self.state == "closed":
                    return
            if turn is None and Turn.starts_one(name, body):
                turn = self._start_turn("Agent", acked=True)
            if turn is not None:
                if name in MESSAGE_KINDS:
                    turn.messages[body["message_id"]] = None  # inline: a relay's hottest line
                elif name == "ToolUpdated":
                    turn.tool_updated(body)
                elif self.requests.agent_opened(turn, body):
                    return
        elif name == "MessageEnded" and turn is not None:
            turn.messages.pop(kind[name]["message_id"], None)
        elif name == "ContextUsage" and self.context.observer is not None:
            self.context.observer.context_usage(self, kind[name])
        elif name == "Diagnostic" and extensions and turn is not None:
            turn.rate_limit = extensions.get("agentproto", {}).get("rate_limit", turn.rate_limit)
        self.send(kind, extensions, parent_tool_id)
        if name == "RequestOpened":
            self.refresh_status()
        if turn is not None and turn.quiet is not None:
            turn.quiet.restart()

    def end_turn(self, stop: StopReason, usage: TurnUsage | None = None) -> None:
        if self.mute:
            return
        turn = self.turn
        if turn is None:
            if not self.late_end_warned:
                self.late_end_warned = True
                self.diagnostic("Warning", "late turn end with no turn running; ignored")
            return
        if not turn.acked:
            return  # a stale end of the previous turn
        self.late_end_warned = False
        if self.guard.retrying(turn, stop):
            return  # a rate limit: the turn goes on once it resets (guard.py)
        self._finish_turn(stop, usage)

    def update(self, **info: Any) -> None:
        if session_info.merge(self.info, info):
            session_info.add_features(self.info, self.app.features)
            self._session_updated()

    def spent(self, usage: TurnUsage, cost_usd: float | None = None) -> None:
        if self.turn is not None and not self.mute:
            self.guard.spent_so_far(usage, cost_usd)  # budgets (guard.py)

    def diagnostic(self, level: str, message: str) -> None:
        if not self.mute:
            self.send({"Diagnostic": {"level": level, "message": message}})

    def request_withdrawn(self, request_id: str) -> None:
        if not self.mute:
            self.requests.withdrawn(self.turn, request_id)

    def fail(self, error: AgentError) -> None:
        if self.state == "opening":
            self._abort_open(error)
            return
        if self.state == "closed" or self.failed is not None:
            return
        if error.kind == Kind.PROCESS_EXITED and begin(self, error):
            return  # a rate-limited turn: a new process, resumed, takes it (restart.py)
        self.failed = error
        self.app.shutdown("the session failed")
        if self.turn is not None:
            message = "agent exited during the turn" if error.kind == Kind.PROCESS_EXITED else error.message
            self._finish_turn({"Failed": {"message": message}}, None, start_next=False)
        self._drop_queue()
        self.refresh_status()
        self.sink.session_error(self, error)
        self.mute = True  # terminal: what the driver still reports (a late turn end) stays here
        if self.state == "open":
            self._move("closing")
            self._shutdown_driver()
        elif self.driver_gone:
            self._finalize()

    def closed(self) -> None:
        self.driver_gone = True
        if self.state == "opening":
            self._abort_open(AgentError.detail(Kind.SPAWN_FAILED, "the agent exited during start-up"))
            return
        if self.state == "open":
            # Gone without saying why: that is a process exit all the same.
            self.fail(AgentError.process_exited(None, ""))
            return
        if self.state == "closing" and (self.failed is not None or self.close_waiters):
            self._finalize()

    # -- Host: the app's tools and hooks (apptools.py) ---------------------------------

    def serve_app(self) -> None:
        """Before the driver opens: serve the app's tools and hooks (AgentError when the
        driver cannot take them, OSError when the listener cannot open)."""
        self.app.serve(self.launch, self.driver, self.context.listen)
        self.info["tools_url"] = self.app.tools_url
        urls = {event: self.app.hook_url(event) for event in self.launch.hooks}
        if urls:  # hooks with or without tools: the app's own agents post to these
            self.info["hook_urls"] = {event: url for event, url in urls.items() if url is not None}

    @property
    def tools_url(self) -> str | None:
        return self.app.tools_url

    def hook_url(self, event: str) -> str | None:
        return self.app.hook_url(event)

    def hook(self, event: str, input: Any, reply: Callable[[dict[str, Any]], None]) -> None:
        self.app.hook(event, input, reply)

    def is_app_tool(self, server: str, tool: str) -> bool:
        return self.app.owns_tool(server, tool)

    def close(self, done: Done) -> None:
        if self.state == "closed":
            done(None, AgentError.session_closed(self.id))
            return
        self.close_waiters.append(done)
        if self.state == "closing":
            if self.failed is None and self.driver_gone:
                self._finalize()
            return
        self._move("closing")
        self.app.shutdown("the session closed")
        self._drop_queue()
        if self.driver_gone:
            self._finalize()
        else:
            self._shutdown_driver()

    def _shutdown_driver(self) -> None:
        if self.driver_gone:
            self._finalize()
            return
        self.driver.close()
        self.close_timers.append(self.loop.call_later(self.CLOSE_GRACE, self._close_expired))

    def _close_expired(self) -> None:
        if self.driver_gone or self.state == "closed":
            return
        log(f"{self.id}: the agent did not close within {self.CLOSE_GRACE:g} s; killing it")
        self.driver.kill()
        self.close_timers.append(self.loop.call_later(self.KILL_GRACE, self._finalize))

    def _finalize(self) -> None:
        # Re-entry guard: a sink may call close() from inside the events emitted here.
        if self.state == "closed" or self.finalizing:
            return
        self.finalizing = True
        for timer in self.close_timers:
            timer.cancel()
        self.app.shutdown("the session closed")
        if self.turn is not None:
            self._finish_turn("Cancelled", None, start_next=False)
        self.queue.clear()
        self.refresh_status()
        self.flow.stop()
        self._move("closed")
        self.context.forget(self)
        self.sink.session_closed(self)
        waiters, self.close_waiters = self.close_waiters, []
        for done in waiters:
            done(None, None)
        self._leave_scopes()

    def abandon(self) -> None:
        """EOF of the owning frontend: close now, whatever state the session is in."""
        if self.state == "opening":
            scopes, self.scopes = self.scopes, []
            error = AgentError.detail(
                Kind.SESSION_CLOSED, self.id, "the app's input ended while the session was opening"
            )
            self._abort_open(error)
            if not self.launch.throwaway:
                self.sink.session_closed(self)
            self.scopes = scopes
            self._leave_scopes()
            return
        if self.state == "open":
            self.close(lambda _ok, _err: None)

