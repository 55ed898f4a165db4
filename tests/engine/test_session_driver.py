"""A session builds its driver itself (it is the driver's Host): what the driver's constructor
raises refuses that open, before there is a session to forget, and costs nothing else.

Before, the runtime made an EngineSession without a driver and set ``session.driver`` from outside
(a ``# type: ignore`` hid the gap); now the driver class is the EngineSession's to call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentproto.core.errors import AgentError, InternalError, Kind
from agentproto.drivers.mock import MockDriver
from agentproto.engine.runtime import Engine, Scope
from agentproto.loopio.loop import Loop


class Sink:
    def event(self, session: Any, event: Any) -> None: ...

    def session_error(self, session: Any, error: Any) -> None: ...

    def session_closed(self, session: Any) -> None: ...


def _open_twice(tmp_path: Path) -> tuple[list[Any], Engine, Scope]:
    loop = Loop()
    runtime = Engine(loop)
    scope = Scope(runtime, shared=True)
    answers: list[Any] = []
    for _ in range(2):
        runtime.execute("open", {"agent": "mock", "dir": str(tmp_path)}, Sink(), scope, lambda v, e: answers.append((v, e)))
    return answers, runtime, scope


@pytest.mark.parametrize(
    "raised, kind",
    [
        (AgentError.detail(Kind.INVALID_CONFIGURATION, "this launch cannot run"), "InvalidConfiguration"),
        (OSError(13, "no access"), "SpawnFailed"),
        (RuntimeError("injected bug"), "Internal"),
    ],
)
def test_a_driver_that_cannot_be_built_refuses_the_open_and_the_next_one_opens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, raised: Exception, kind: str
) -> None:
    built: list[Any] = []
    real_init = MockDriver.__init__

    def init(self: MockDriver, host: Any, launch: Any) -> None:
        if not built:
            built.append(host)
            raise raised
        real_init(self, host, launch)

    monkeypatch.setattr(MockDriver, "__init__", init)
    answers, runtime, scope = _open_twice(tmp_path)
    try:
        [(value, error), (second, second_error)] = answers
        assert value is None and error.kind == kind, error
        # The driver was handed its session's Host while the session was being built.
        assert built[0].session.id == "s1" and built[0].session.launch.agent_id == "mock"
        assert second_error is None and second["id"] == "s2", "the id is spent; the next open runs"
        assert list(runtime.sessions) == ["s2"] and [s.id for s in scope.sessions()] == ["s2"]
        with pytest.raises(AgentError) as closed:
            scope.lookup("s1")
        assert closed.value.kind == "SessionClosed"
        if kind == "Internal":
            assert isinstance(error, InternalError) and "injected bug" in error.message
            assert "RuntimeError: injected bug" in capsys.readouterr().err
        runtime.close_all()
        runtime.loop.run(until=lambda: not runtime.sessions)
    finally:
        runtime.loop.close()
