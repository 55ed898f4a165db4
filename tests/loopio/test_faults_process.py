"""Fault injection on a real agent process: the ACP test agent (tests/fakes/acp_test_agent.py)
through the real child-process transport, struck at every line it writes.

At its Nth line the agent is SIGKILLed (dies) or SIGSTOPped (hangs: only SIGKILL reaches
it now). The app opens a session,
runs a turn with a permission, asks ``info`` and closes, reacting to what it sees. Every
case must end in the documented sequence (the session error after a failed turn, exactly
one ``closed``, a reply to every command) and leave no process of the agent's group
behind. tests/drivers/test_faults_agent.py strikes every driver the same way in-process.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
from pathlib import Path
from typing import Any, Callable

import pytest

from agentproto.loopio.process_transport import group_alive
from agentproto.loopio.transport import Spawn
from agentproto.engine.session import EngineSession
from agentproto.core.errors import Kind
from agentproto.loopio.loop import Loop
from agentproto.core.wire import event_kind_name
from faults import FaultyProcess, Outcome
from scripted import Conversation

AGENT = Path(__file__).resolve().parents[1] / "fakes" / "acp_test_agent.py"
#: A short turn timeout, so that a hung agent's turn fails quickly (real time); the app
#: gives up on an open hung in its handshake by itself (its EOF), long before 30 s.
ENV = {"AGENTPROTO_ACP_HANDSHAKE_TIMEOUT": "30", "AGENTPROTO_ACP_TURN_TIMEOUT": "0.5"}
#: What only a real process does: die by SIGKILL, and hang stopped. (Garbage and floods are
#: lines, the same whatever carries them: test_faults_agent.py slips them in everywhere.)
REAL_FAULTS = ("die", "hang")


class ProcessConversation(Conversation):
    def __init__(self, fault: str | None, at: int) -> None:
        self.fault = fault
        self.at = at
        self.agents: list[FaultyProcess] = []
        self.commands = 0
        super().__init__()

    def _factory(self, loop: Loop, spawn: Spawn, record_wire: str | None) -> FaultyProcess:  # type: ignore[override]
        agent = FaultyProcess(loop, spawn, record_wire, self.fault, self.at)
        self.agents.append(agent)
        return agent

    def command(self, name: str, **args: Any) -> None:
        self.commands += 1
        super().command(name, **args)

    def has(self, what: Callable[[tuple[Any, ...]], bool]) -> bool:
        return any(what(o) for o in self.out)

    def settled_until(self, done: Callable[[], bool], timeout: float) -> bool:
        try:
            self.run_until(done, timeout)
        except AssertionError:
            return False
        return True


def closed(o: tuple[Any, ...]) -> bool:
    return o[0] == "closed"


def event_named(name: str) -> Callable[[tuple[Any, ...]], bool]:
    return lambda o: o[0] == "event" and event_kind_name(o[1]["kind"]) == name


def drive(conv: ProcessConversation, workdir: str) -> None:
    """The app: open, a turn whose permission it allows, info, close; then its EOF."""
    conv.open({"acp": {"name": "acp-test", "path": str(AGENT), "args": []}}, dir=workdir, env=ENV)
    conv.settled_until(lambda: bool(conv.replies("open")) or any(a.hung() for a in conv.agents), 30)
    if conv.session_id is not None and not conv.has(closed):
        # The test agent says its commands 50 ms after session/new: waiting for them keeps
        # the scenario one sequence of lines (they came before the close when the run was
        # slow and not at all when it was quick, so the baseline had 8 lines or 9).
        conv.settled_until(lambda: conv.has(event_named("SessionUpdated")) or conv.has(closed)
                           or any(a.hung() for a in conv.agents), 30)
        conv.command("prompt", text="tool")
        conv.settled_until(lambda: conv.has(event_named("RequestOpened")) or conv.has(event_named("TurnEnded")) or conv.has(closed), 30)
        requests = conv.events("RequestOpened")
        if requests and not conv.has(closed):
            conv.command("answer", request=requests[0]["Permission"]["id"], answer={"Permission": "AllowOnce"})
            conv.settled_until(lambda: conv.has(event_named("TurnEnded")) or conv.has(closed), 30)
        conv.command("info")
        conv.command("close")
        conv.settled_until(lambda: conv.has(closed), 30)
    conv.runtime.close_all()
    conv.settled_until(lambda: not conv.runtime.sessions and all(a.inner._reported for a in conv.agents), 30)


def baseline_lines(tmp_path: Path) -> int:
    conv = ProcessConversation(None, -1)
    try:
        drive(conv, str(tmp_path))
        assert conv.reply("close") is None
        return conv.agents[0].lines
    finally:
        conv.loop.close()


_LINES: dict[str, int] = {}


def lines_written(tmp_path: Path) -> int:
    if "n" not in _LINES:
        _LINES["n"] = baseline_lines(tmp_path)
    return _LINES["n"]


#: The agent's lines in this scenario (checked against a fault-free run by the first test).
LINES = 9


def test_the_scenario_has_the_lines_the_faults_strike(tmp_path: Path) -> None:
    assert lines_written(tmp_path) == LINES


@pytest.mark.parametrize("fault", REAL_FAULTS)
@pytest.mark.parametrize("at", range(LINES))
def test_real_agent_fault(at: int, fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A hung agent ignores the close: the kill comes after the close grace, here shortened.
    monkeypatch.setattr(EngineSession, "CLOSE_GRACE", 0.5)
    monkeypatch.setattr(EngineSession, "KILL_GRACE", 1.0)
    conv = ProcessConversation(fault, at)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            drive(conv, str(tmp_path))
        agent = conv.agents[0]
        assert agent.struck, f"the agent wrote only {agent.lines} lines"
        assert not agent.alive(), "a process of the agent's group outlived the session"
        assert not conv.runtime.sessions
        assert len(conv.replies()) == conv.commands, "a command got no reply, or two"
        assert "Traceback" not in stderr.getvalue(), stderr.getvalue()[-3000:]
        outcome = Outcome(conv.out)
        opened = conv.session_id is not None
        outcome.check(opened=opened)
        if fault == "die" and opened:
            errors = outcome.errors()
            # Killed while open: a session error (ProcessExited), after a failed turn if one ran.
            assert [e.kind for e in errors] == [Kind.PROCESS_EXITED], errors
        if fault == "die" and not opened:
            assert conv.replies("open")[0][1] is not None
    finally:
        for agent in conv.agents:
            if group_alive(agent.inner.pgid):
                os.killpg(agent.inner.pgid, signal.SIGKILL)
        conv.loop.close()
