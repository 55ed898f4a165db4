"""The engine and the runtime in-process, on a real Loop and the real mock driver.

These tests reach what a subprocess sidecar cannot show: the loop's clock (a Loop whose
``time()`` runs ahead stands in for minutes passing), and the seams between the runtime,
the EngineSession and its driver.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from sidecar import ROOT, kind_name

from agentproto.engine.session import EngineSession
from agentproto.core.errors import AgentError
from agentproto.loopio.loop import Loop
from agentproto.engine.runtime import Engine, Scope


class SkewedLoop(Loop):
    """A real loop whose clock can be moved ahead (timers and the engine both read it)."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead = 0.0

    def time(self) -> float:  # type: ignore[override]
        return time.monotonic() + self.ahead


class Recorder:
    """A sink that keeps everything and, unless told to, writes nothing (``delivered``)."""

    def __init__(self, writes: bool = False) -> None:
        self.writes = writes
        self.events: list[dict[str, Any]] = []
        self.errors: list[AgentError] = []
        self.closed: list[str] = []

    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        self.events.append(event)
        if self.writes:
            session.delivered(1)

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        self.errors.append(error)

    def session_closed(self, session: EngineSession) -> None:
        self.closed.append(session.id)


def run_until(loop: Loop, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Run the loop until ``done()``; a ticking timer keeps it waking up to check."""
    deadline = time.monotonic() + timeout

    def tick() -> None:
        if not done():
            loop.call_later(0.02, tick)

    loop.call_soon(tick)
    loop.run(until=lambda: done() or time.monotonic() > deadline)
    assert done(), "timed out"


def execute(runtime: Engine, scope: Scope, sink: Recorder, name: str, **args: Any) -> list[tuple[Any, Any]]:
    replies: list[tuple[Any, Any]] = []
    runtime.execute(name, args, sink, scope, lambda value, error: replies.append((value, error)))
    return replies


def test_the_stall_timeout_is_counted_on_the_loops_clock() -> None:
    """Nothing of this session is written; once the loop's clock is past the stall timeout
    (no real minute passes) the session fails ConsumerLagged and closes."""
    loop = SkewedLoop()
    try:
        runtime = Engine(loop, stall_timeout=60.0)
        scope = Scope(runtime)
        stalled = Recorder()
        [(info, error)] = execute(runtime, scope, stalled, "open", agent="mock", dir=str(ROOT))
        assert error is None
        execute(runtime, scope, stalled, "prompt", session=info["id"], text="one two three")
        run_until(loop, lambda: any(kind_name(e["kind"]) == "TurnEnded" for e in stalled.events))
        assert not stalled.errors, "60 s have not passed on any clock yet"
        loop.ahead = 61.0
        run_until(loop, lambda: bool(stalled.closed))
        [lagged] = stalled.errors
        assert lagged.kind == "ConsumerLagged" and lagged.fault == "app"
        assert stalled.closed == [info["id"]] and info["id"] not in runtime.sessions
    finally:
        loop.close()


def test_the_lifecycle_table_leads_every_state_to_closed() -> None:
    from agentproto.engine.session import LIFECYCLE

    assert set(LIFECYCLE) == {"opening", "open", "closing", "closed"} and LIFECYCLE["closed"] == frozenset()
    for state in LIFECYCLE:
        seen, todo = {state}, [state]
        while todo:
            for nxt in LIFECYCLE[todo.pop()]:
                assert nxt in LIFECYCLE, nxt
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert "closed" in seen, f"{state} can never close"


def test_a_session_walks_the_lifecycle_and_a_closed_one_ignores_its_driver() -> None:
    loop = Loop()
    try:
        runtime = Engine(loop)
        scope = Scope(runtime)
        sink = Recorder(writes=True)
        [(info, _)] = execute(runtime, scope, sink, "open", agent="mock", dir=str(ROOT))
        session = runtime.sessions[info["id"]]
        assert session.state == "open"
        closed: list[Any] = []
        session.close(lambda value, error: closed.append((value, error)))
        assert session.state == "closing"
        run_until(loop, lambda: bool(closed))
        assert closed == [(None, None)] and session.state == "closed" and sink.closed == [session.id]
        count = len(sink.events)
        # A driver reporting after the close changes nothing, and moves no state.
        session.opened({"config_options": []})
        session.emit({"TextDelta": {"message_id": "m", "text": "late"}})
        session.fail(AgentError.process_exited("1", ""))
        assert session.state == "closed" and len(sink.events) == count and not sink.errors
        again: list[Any] = []
        session.close(lambda value, error: again.append(error))
        assert again[0].kind == "SessionClosed"
    finally:
        loop.close()
