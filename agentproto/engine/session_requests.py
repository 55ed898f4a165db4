"""A session's open requests: the agent's permissions and questions, and the app's own
tool calls and hooks (apptools.py). The engine's bookkeeping of them, one per EngineSession.

Rules of this file:
- A request the app must answer sits in its turn's ``requests`` while it is open (the
  session is NeedsInput meanwhile). A tool call or a hook that arrives outside any turn
  belongs to the session (``turn_info`` null): a turn's end does not close it; its answer,
  its timeout or the session's close do.
- Every request the app was shown closes with exactly one ``RequestClosed``: on its
  answer, its withdrawal, its turn's end or cancel, the session's close, and for the app's
  own, their timeout. The app's own always give the agent an answer as they close.
- The policy (guard.py), then the permission mode (``auto_answer``) answer permissions,
  never a ToolCall: calling one of the app's tools is the app's decision.
"""

from __future__ import annotations

from agentproto.core.answers import auto_answer, check_answer, request_id_of
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.tools.apptools import AppTools, Pending

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import AgentRequest
    from agentproto.drivers.base import Driver, Launch
    from agentproto.engine.guard import Guard
    from agentproto.engine.turns import Done, Turn
    from agentproto.loopio.loop import Loop


class Owner(Protocol):
    """What of its EngineSession (engine/session.py) the bookkeeping uses."""

    loop: "Loop"
    turn: "Turn | None"
    driver: "Driver"
    driver_gone: bool
    launch: "Launch"
    guard: "Guard"
    watcher: Callable[[str, Any], None] | None

    def send(self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None) -> None:
        """Number one event and hand it to the session's sink."""

    def refresh_status(self) -> None:
        """Send StatusChanged if the session's status changed."""


class Requests:
    __slots__ = ("session", "app")

    def __init__(self, session: Owner) -> None:
        self.session = session
        #: The app's own tools and hooks: none until the session serves them.
        self.app = AppTools(session.loop, self._app_opened, self._app_closed)

    # -- the agent's requests (a driver reports them) -------------------------------------
    def agent_opened(self, turn: "Turn", request: AgentRequest) -> bool:
        """Track a request; True when the permission mode answered it (the app never sees it)."""
        session = self.session
        verdict = session.guard.verdict(request)  # the policy first (guard.py)
        if verdict == "answered":
            return True
        answer = None if verdict == "ask" else auto_answer(request, session.launch.permission_mode)
        if answer is not None:
            # After the driver's current step: an agent cannot take an answer to a
            # request it is still in the middle of reporting.
            def approve() -> None:
                if not session.driver_gone:
                    session.driver.answer(request, answer)

            session.loop.call_soon(approve)
            return True
        if "Permission" in request or "Question" in request:
            turn.requests[request_id_of(request)] = request
        return False

    def withdrawn(self, turn: "Turn | None", request_id: str) -> None:
        if turn is None or turn.requests.pop(request_id, None) is None:
            return  # answered already, or never shown to the app
        self.session.send({"RequestClosed": {"request_id": request_id}})
        self.session.refresh_status()

    # -- the app's answers ----------------------------------------------------------------
    def answer(self, request_id: str, answer: Any, done: "Done") -> None:
        session = self.session
        if request_id in self.app.pending:
            problem = self.app.answer(request_id, answer)
            done(None, None if problem is None else AgentError.detail(Kind.INVALID_REQUEST, f"{request_id}: {problem}"))
            return
        turn = session.turn
        request = turn.requests.get(request_id) if turn is not None else None
        if request is None:
            done(None, AgentError.detail(Kind.INVALID_REQUEST, f"no open request {request_id}"))
            return
        assert "Permission" in request or "Question" in request  # the app's own are in app.pending
        problem = check_answer(request, answer)
        if problem is not None:
            done(None, AgentError.detail(Kind.INVALID_REQUEST, f"{request_id}: {problem}"))
            return
        assert turn is not None
        del turn.requests[request_id]
        session.driver.answer(request, answer)
        session.send({"RequestClosed": {"request_id": request_id}})
        session.refresh_status()
        done(None, None)

    def close_turn(self, turn: "Turn", why: str) -> None:
        """The turn ends or is cancelled: close what it left open (the agent is told ``why``)."""
        for request_id in turn.take_requests():
            if not self.app.end(request_id, why):  # the app's own close themselves
                self.session.send({"RequestClosed": {"request_id": request_id}})

    # -- the app's own tool calls and hooks (apptools.AppTools reports them) ---------------
    def _app_opened(self, pending: Pending) -> None:
        session = self.session
        turn = pending.turn = session.turn
        if turn is not None:
            turn.requests[pending.id] = pending.request
        if session.watcher is not None:
            session.watcher("RequestOpened", pending.request)
        session.send({"RequestOpened": pending.request})
        session.refresh_status()

    def _app_closed(self, pending: Pending) -> None:
        # When the engine closes a turn's requests itself, they are out of the turn already.
        session = self.session
        tracked = pending.turn is not None and pending.turn.requests.pop(pending.id, None) is not None
        session.send({"RequestClosed": {"request_id": pending.id}})
        if tracked:
            session.refresh_status()
        if "Hook" in pending.request and pending.outcome is not None and not session.driver_gone:
            # A hook the listener took never passed through the driver: tell it what its
            # agent was answered (agy's injected messages reach the stream without text).
            session.driver.hook_answered(pending.request["Hook"]["event"], pending.outcome)
