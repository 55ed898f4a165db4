"""A rate-limited turn outlives its agent process: the session starts a new process, resumed
by its resume token, and sends the turn again there (issue 24), with the same session id,
turn and event order.

Rules of this file:
- Every driver reports to a ``DriverHost`` of its own, never to the session itself. While the
  driver is the session's, its host's members are the session's bound methods (no call is
  added to the relay's path). Once its process ended and a new one takes over, the old
  host is retired: what the old driver still reports (the rest of its exit, a timer's
  event, a late line) is dropped, its diagnostics are shown as the ended process's, and
  its ``closed`` (every process of it is gone) starts the new process. Nothing the old
  driver says reaches the new one's session state.
- A restart is tried only when the session asked ``retry``, a turn runs that waits out a
  rate limit (or whose agent ended right after a rate-limit report, before any tool call,
  and the guard would send it again: each restart is one of the turn's retries, so at
  most guard.MAX_RETRIES, also while its wait runs), the turn was not cancelled (by the app
  or a budget), the agent offers ``Resume`` and gave a resume token, and no restart is
  under way. Otherwise the session fails with ProcessExited, as without this
  file. The requests the ended process had open in the turn are closed.
- The new driver gets the session's launch resumed by the token (no fork), with the
  options in force. It opens as any driver does, unseen by the app; then one Diagnostic
  (``extensions.agentproto.restart``) says the process ended and a new one was started
  resumed, and the turn goes to it once the limit's wait is over (guard.py holds the
  re-send until then). Meanwhile no turn goes to a driver (engine/session_turns.py): a
  prompt is queued, and the queue's head starts once the new driver opened. A new driver
  that does not open fails the session with the ended process's ProcessExited, after a
  Warning saying why the resume failed.
- The new process starts only once the old driver said ``closed`` (every process of it is
  gone), so a recording holds one process's lines, then the other's. The old process's
  group is killed if it still runs (a driver that reported the exit before its transport
  did), and again after ``KILL_GRACE`` without ``closed``; after another ``KILL_GRACE``
  the session fails with the exit instead. A session closing meanwhile gets no error from
  a restart: close's own timers end it.
- The agent wire (record.py) gets a ``restart`` record before the new process's spawn:
  replay checks that the live run restarts at the same point and plays the later lines to
  the new process's transport.
"""

from __future__ import annotations

from agentproto.core import session_info
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.drivers.base import Host
from agentproto.engine.guard import MAX_RETRIES

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import AgentDetails, SessionInfo
    from agentproto.drivers.base import Driver, Launch
    from agentproto.engine.flow import Flow
    from agentproto.engine.guard import Guard
    from agentproto.engine.session_requests import Requests
    from agentproto.engine.turns import Turn
    from agentproto.loopio.loop import Timer
    from agentproto.loopio.transport import LineTransport, Spawn


class Restartable(Host, Protocol):
    """What of its EngineSession (engine/session.py) a restart uses: the Host it is, and these."""

    KILL_GRACE: float
    state: str
    mute: bool
    failed: AgentError | None
    driver_gone: bool
    launch: Launch
    info: SessionInfo
    turn: Turn | None
    driver: Driver
    guard: Guard
    requests: Requests
    flow: Flow
    transport: LineTransport | None
    restart: Restart | None

    def send(self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None) -> None:
        """Number one event and hand it to the session's sink."""

    def refresh_status(self) -> None: ...

    def start_queued(self) -> None: ...

_DROPPED = ("opened", "open_failed", "turn_acknowledged", "emit", "end_turn", "update", "spent",
            "request_withdrawn", "fail")  # fmt: skip


def _drop(*_args: Any, **_kwargs: Any) -> None:
    return None


class DriverHost:
    """The ``Host`` of one driver: the session's, until the driver is retired."""

    __slots__ = ("session", "loop", "session_id", *_DROPPED, "diagnostic", "closed", "hook", "is_app_tool",
                 "hook_url", "spawn")  # fmt: skip

    def __init__(self, session: Restartable) -> None:
        self.session = session
        self.loop = session.loop
        self.session_id = session.session_id
        self.opened: Callable[..., None] = session.opened
        self.open_failed: Callable[[AgentError], None] = session.open_failed
        self.turn_acknowledged: Callable[[], None] = session.turn_acknowledged
        self.emit: Callable[..., None] = session.emit
        self.end_turn: Callable[..., None] = session.end_turn
        self.update: Callable[..., None] = session.update
        self.diagnostic: Callable[[str, str], None] = session.diagnostic
        self.spent: Callable[..., None] = session.spent
        self.request_withdrawn: Callable[[str], None] = session.request_withdrawn
        self.fail: Callable[[AgentError], None] = session.fail
        self.closed: Callable[[], None] = session.closed
        self.hook: Callable[[str, Any, Callable[[dict[str, Any]], None]], None] = session.hook
        self.is_app_tool: Callable[[str, str], bool] = session.is_app_tool
        self.hook_url: Callable[[str], str | None] = session.hook_url
        self.spawn: Callable[[Spawn], LineTransport] = session.spawn

    @property
    def tools_url(self) -> str | None:
        return self.session.tools_url

    def retire(self, closed: Callable[[], None]) -> None:
        """The driver is no longer the session's: drop what it reports, show its diagnostics
        as the ended process's, and hand its ``closed`` to ``closed``."""
        for name in _DROPPED:
            setattr(self, name, _drop)
        session = self.session
        self.diagnostic = lambda level, message: session.diagnostic(level, f"(the ended agent process) {message}")
        self.hook = lambda _event, _input, reply: reply({})
        self.spawn = _refuse_spawn
        self.closed = closed


def _refuse_spawn(spawn: Spawn) -> LineTransport:
    raise OSError("a retired driver starts no process")


def host_of(driver: Driver) -> DriverHost | None:
    host: Any = driver.host
    return host if isinstance(host, DriverHost) else None


class Restart:
    """One session's restarts: how many were made, and the one under way."""

    __slots__ = ("session", "count", "active", "cause", "resend", "old", "old_gone", "timer")

    def __init__(self, session: Restartable) -> None:
        self.session = session
        self.count = 0
        #: A restart is under way: the old driver's ``closed`` or the new one's ``opened``
        #: is awaited (the cause: the ended process's ProcessExited).
        self.active = False
        self.cause: AgentError | None = None
        #: The turn's re-send, when its wait ended before the new driver opened.
        self.resend: Callable[[], None] | None = None
        #: The old driver's host, until it said ``closed`` (or was given up on).
        self.old: DriverHost | None = None
        self.old_gone = False
        self.timer: Timer | None = None


def begin(session: Restartable, error: AgentError) -> bool:
    """The agent process ended (``error``: ProcessExited): start a new one resumed (True),
    when the module's rules allow it; False: the session fails as before."""
    turn, info = session.turn, session.info
    if session.state != "open" or turn is None or session.launch.retry is None:
        return False
    restart = session.restart
    if restart is not None and restart.active:
        return False
    token = info.get("resume_token")
    if not isinstance(token, str) or not token or "Resume" not in session_info.features(info):
        return False
    old = host_of(session.driver)
    if old is None:
        return False
    if turn.cancel_timer is not None or turn.failure is not None:
        return False  # the app (or a budget) cancelled the turn: it is not sent again
    if turn.retry_timer is not None:  # its wait runs (its 429 was one retry): this is one more
        if turn.retries >= MAX_RETRIES:
            return False
        turn.retries += 1
    elif not session.guard.retrying(turn, {"Failed": {"message": "agent exited"}}):
        return False
    if restart is None:
        restart = session.restart = Restart(session)
    restart.count += 1
    restart.active, restart.cause, restart.resend, restart.old_gone = True, error, None, False
    restart.old = old
    old.retire(lambda: _old_closed(restart))
    # What the ended process asked can no longer be answered to it.
    session.requests.close_turn(turn, "the agent process ended")
    session.refresh_status()
    if session.driver_gone:  # it said closed without a fail first: gone already
        session.loop.call_soon(lambda: _old_closed(restart))
        return True
    transport = session.transport
    if transport is not None and transport.running:
        session.driver.kill()  # it reported its exit before its process was gone
    restart.timer = session.loop.call_later(session.KILL_GRACE, lambda: _overdue(restart))
    return True


def _overdue(restart: Restart) -> None:
    """The old driver did not say it is gone: kill it, and give it KILL_GRACE more."""
    if restart.old_gone:
        return
    session = restart.session
    session.driver.kill()
    restart.timer = session.loop.call_later(session.KILL_GRACE, lambda: _gave_up(restart))


def _gave_up(restart: Restart) -> None:
    """Still not gone: no new process beside it; the session fails with the exit (unless
    it is closing: then close's own timers end it, and the old driver's late ``closed``)."""
    if restart.old_gone:
        return
    if restart.session.state != "open":
        restart.active = False
        return
    restart.old_gone = True
    session = restart.session
    if restart.old is not None:
        restart.old.closed = session.closed  # its late ``closed`` ends the session's close
    session.diagnostic("Warning", "the ended agent process did not go away: it is not resumed")
    session.fail(restart.cause or AgentError.process_exited(None, ""))
    restart.active = False


def _old_closed(restart: Restart) -> None:
    """Every process of the old driver is gone: start the new one (never beside the old,
    so a recording's lines are one process's, then the other's)."""
    if restart.old_gone:
        return
    restart.old_gone = True
    if restart.timer is not None:
        restart.timer.cancel()
        restart.timer = None
    session = restart.session
    if session.state != "open" or session.failed is not None:
        # Closed (or failed) meanwhile: the session's own end goes on.
        restart.active = False
        session.closed()
        return
    session.driver_gone = False  # the new driver's, from here
    launch = _resumed(session)
    if launch.wire is not None:
        launch.wire.restarted(restart.count + 1)
    host = DriverHost(session)
    host.opened = lambda details, **fields: _opened(restart, host, details, fields)
    host.open_failed = lambda error: _not_resumed(restart, host, error)
    driver_class: Callable[[Host, Launch], Driver] = type(session.driver)
    try:
        driver = driver_class(host, launch)
    except Exception as exc:
        session.driver_gone = True
        _not_resumed(restart, host, _as_error(exc))
        return
    session.driver = driver
    session.transport = None
    if session.flow.paused:
        driver.pause_output()
    try:
        driver.open()
    except Exception as exc:
        if isinstance(exc, (AgentError, OSError)):
            session.driver_gone = True  # nothing started
        _not_resumed(restart, host, _as_error(exc))


def _as_error(exc: Exception) -> AgentError:
    if isinstance(exc, AgentError):
        return exc
    if isinstance(exc, OSError):
        return AgentError.detail(Kind.SPAWN_FAILED, str(exc.strerror or exc))
    return AgentError.detail(Kind.INTERNAL, f"{type(exc).__name__}: {exc}")


def _resumed(session: Restartable) -> Launch:
    """The session's launch, resumed by its token, with the options in force."""
    import copy  # only a restart needs it

    launch = copy.copy(session.launch)
    options = session.info["configuration"]["options"]
    launch.configure = {key: options.get(key, value) for key, value in launch.configure.items()}
    launch.resume, launch.fork, launch.fork_at = session.info["resume_token"], None, None
    return launch


def _opened(restart: Restart, host: DriverHost, details: AgentDetails, fields: dict[str, Any]) -> None:
    """The new driver resumed the session: say so, then the turn goes to it."""
    session = restart.session
    host.opened, host.open_failed = session.opened, session.open_failed
    restart.active = False
    if session.state != "open" or session.mute:
        return
    session.update(**{key: value for key, value in fields.items() if key == "resume_token" and value})
    cause = restart.cause
    status = None if cause is None else cause.fields.get("status")
    message = (f"the agent process ended (status {status or 'unknown'}); a new one was started, "
               "resumed by the session's resume token")  # fmt: skip
    body = {"status": status, "process": restart.count + 1, "resume_token": session.info["resume_token"]}
    session.send({"Diagnostic": {"level": "Warning", "message": message}}, {"agentproto": {"restart": body}})
    resend, restart.resend = restart.resend, None
    if resend is not None:
        resend()
    session.start_queued()  # the turn was cancelled meanwhile: what was prompted since goes on


def _not_resumed(restart: Restart, host: DriverHost, error: AgentError) -> None:
    """The new driver did not open: the session fails with the ended process's exit."""
    session = restart.session
    host.opened, host.open_failed = session.opened, session.open_failed
    if session.state != "open":  # closing meanwhile: close's own end goes on, no error
        restart.active = False
        return
    session.diagnostic("Warning", f"the agent process ended and could not be resumed: {error.message}")
    cause = restart.cause or AgentError.process_exited(None, "")
    session.fail(cause)  # ``active`` still: no restart of the restart
    restart.active = False
