"""Closed sessions cost nothing (issue 13): session ids are issued in order, so an issued id
that is not live is closed; nothing is kept per closed session (in the runtime, in a scope,
or in a cancelled timer of the loop), and a command on a closed session still gets
SessionClosed, on every scope kind.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

from sidecar import Sidecar

from agentproto.engine.session import EngineSession
from agentproto.core.errors import AgentError
from agentproto.loopio.loop import Loop
from agentproto.engine.runtime import Engine, Scope


class Counting:
    """A sink that keeps nothing: a test of memory must not grow by its own sink."""

    def __init__(self) -> None:
        self.events = self.closed = 0

    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        self.events += 1
        session.delivered(1)

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        pass

    def session_closed(self, session: EngineSession) -> None:
        self.closed += 1


def run(loop: Loop, runtime: Engine, scope: Scope, sink: Counting, name: str, **args: Any) -> tuple[Any, Any]:
    replies: list[tuple[Any, Any]] = []
    runtime.execute(name, args, sink, scope, lambda value, error: replies.append((value, error)))
    if not replies:
        guard = loop.call_later(10.0, loop.stop)
        loop.run(until=lambda: bool(replies))
        guard.cancel()
    assert replies, f"{name} did not answer"
    return replies[0]


def containers(*objects: object) -> dict[str, int]:
    return {
        f"{type(obj).__name__}.{name}": len(value)
        for obj in objects
        for name, value in vars(obj).items()
        if isinstance(value, (dict, set, list, frozenset))
    }


def test_ten_thousand_closed_sessions_leave_nothing_behind() -> None:
    loop = Loop()
    try:
        runtime = Engine(loop)
        own, shared = Scope(runtime), Scope(runtime, shared=True)
        sink = Counting()
        alive: list[weakref.ref[EngineSession]] = []
        for index in range(10_000):
            scope = own if index % 2 else shared
            info, error = run(loop, runtime, scope, sink, "open", agent="mock", dir="/tmp")
            assert error is None, error
            alive.append(weakref.ref(runtime.sessions[info["id"]]))
            assert run(loop, runtime, scope, sink, "close", session=info["id"]) == (None, None)
        assert info["id"] == "s10000" and sink.closed == 10_000
        assert not runtime.sessions and not own.live and not shared.live
        grown = {name: size for name, size in containers(runtime, own, shared).items() if size > 5}
        assert not grown, grown
        gc.collect()
        # Not one closed EngineSession is still reachable (a cancelled close timer held each one,
        # whole, until its grace would have run out).
        assert sum(ref() is not None for ref in alive) == 0
        for scope in (own, shared):
            for old in ("s1", "s2", "s9999", "s10000"):
                _, error = run(loop, runtime, scope, sink, "prompt", session=old, text="hi")
                assert error.kind == "SessionClosed" and error.body()["detail"] == old, error
            for never in ("s10001", "s0", "s01", "S1", "s-1", "s1.0", "s" + "9" * 5000, "s١", ""):
                _, error = run(loop, runtime, scope, sink, "info", session=never)
                assert error.kind == "UnknownSession", (never[:20], error)
    finally:
        loop.close()


def test_a_session_live_on_another_connection_stays_unknown() -> None:
    loop = Loop()
    try:
        runtime = Engine(loop)
        mine, theirs = Scope(runtime), Scope(runtime)
        sink = Counting()
        info, _ = run(loop, runtime, theirs, sink, "open", agent="mock", dir="/tmp")
        assert run(loop, runtime, mine, sink, "info", session=info["id"])[1].kind == "UnknownSession"
        run(loop, runtime, theirs, sink, "close", session=info["id"])
        assert run(loop, runtime, mine, sink, "info", session=info["id"])[1].kind == "SessionClosed"
    finally:
        loop.close()


def test_a_closed_session_is_session_closed_through_serve() -> None:
    with Sidecar() as sc:
        first = sc.open("mock", "/tmp")
        second = sc.open("mock", "/tmp")
        assert sc.ok({"cmd": "close", "session": first}) is None
        for cmd in ({"cmd": "prompt", "text": "hi"}, {"cmd": "info"}, {"cmd": "close"}):
            error = sc.error({**cmd, "session": first})
            assert error["kind"] == "SessionClosed", error
        assert sc.error({"cmd": "info", "session": "s3"})["kind"] == "UnknownSession"
        assert sc.ok({"cmd": "info", "session": second})["status"] == "Idle"


def test_an_id_that_is_not_a_string_is_unknown_in_process() -> None:
    # Frames are validated first; an in-process caller (the fault tests' harness) may still
    # hand the dispatcher None.
    loop = Loop()
    try:
        runtime = Engine(loop)
        sink = Counting()
        for scope in (Scope(runtime), Scope(runtime, shared=True)):
            assert run(loop, runtime, scope, sink, "info", session=None)[1].kind == "UnknownSession"
    finally:
        loop.close()
