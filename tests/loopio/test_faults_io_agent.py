"""Fault injection at ``loop.io`` on an agent's own pipes: every write to a real agent's
stdin and every read of its stdout, in turn, refused (EAGAIN), cut short, or failed
(EPIPE, ENOSPC; EIO for a read), through the real child-process transport.

The agent is the ACP test agent (tests/fakes/acp_test_agent.py); the app opens a session, runs
a turn with a permission it allows, asks ``info`` and closes. A refused or short write and
a refused read change nothing the app sees. A failed write (the agent can no longer be
told anything) or a failed read (it can no longer tell us anything) ends the session in
the documented sequence, a failed turn first, soon, rather than hanging it. Either way the
agent's whole process group is gone at the end.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agentproto.loopio.process_transport import ProcessTransport, group_alive, process_transport
from agentproto.loopio.transport import LineTransport, Spawn
from agentproto.engine.session import EngineSession
from agentproto.core.errors import Kind
from agentproto.loopio.loop import Loop
from agentproto.core.wire import event_kind_name
from faults import READ_FAULTS, WRITE_FAULTS, FaultyIO, Outcome
from scripted import Conversation
from tests.loopio.test_faults_process import AGENT

ENV = {"AGENTPROTO_ACP_HANDSHAKE_TIMEOUT": "30", "AGENTPROTO_ACP_TURN_TIMEOUT": "5"}

#: The scenario's writes to the agent, and the lines it writes (checked by the first test;
#: a read fault strikes the first read after each line).
WRITES, LINES = 4, 9


class PipeConversation(Conversation):
    def __init__(self, plan: dict[str, dict[int, str]]) -> None:
        self.io = FaultyIO()
        self.io.write_plan = plan.get("write", {})
        self.io.read_after_lines = plan.get("read", {})
        self.agents: list[ProcessTransport] = []
        self.commands = 0
        self.close_sent = False
        #: Whether the app had closed the session when the fault struck.
        self.closing_at_fault: bool | None = None
        self.io.on_inject = lambda fault, at: setattr(self, "closing_at_fault", self.close_sent)
        super().__init__(loop=Loop(self.io))

    def _factory(self, loop: Loop, spawn: Spawn, record_wire: str | None) -> LineTransport:  # type: ignore[override]
        transport = process_transport(loop, spawn, record_wire)
        assert isinstance(transport, ProcessTransport)
        assert transport.proc.stdin is not None and transport.proc.stdout is not None
        self.io.write_fds.add(transport.proc.stdin.fileno())
        self.io.read_fds.add(transport.proc.stdout.fileno())
        self.agents.append(transport)
        return transport  # type: ignore[return-value]

    def command(self, name: str, **args: Any) -> None:
        self.commands += 1
        self.close_sent = self.close_sent or name == "close"
        super().command(name, **args)

    def closed(self) -> bool:
        return any(o[0] == "closed" for o in self.out)

    def until(self, done: Any, timeout: float = 30) -> None:
        with contextlib.suppress(AssertionError):
            self.run_until(done, timeout)


def drive(conv: PipeConversation, workdir: str) -> None:
    def seen(name: str) -> bool:
        return any(o[0] == "event" and event_kind_name(o[1]["kind"]) == name for o in conv.out)

    conv.open({"acp": {"name": "acp-test", "path": str(AGENT), "args": []}}, dir=workdir, env=ENV)
    conv.until(lambda: bool(conv.replies("open")))
    if conv.session_id is not None:
        # The test agent says its commands 50 ms after session/new. Waiting for them keeps the
        # scenario one sequence: otherwise they land after the turn when the run is slow (a
        # fault's retry, a loaded machine) and after the close when it is quick, and the two
        # runs compared differ by that SessionUpdated alone.
        conv.until(lambda: seen("SessionUpdated") or conv.closed())
        conv.command("prompt", text="tool")
        conv.until(lambda: seen("RequestOpened") or seen("TurnEnded") or conv.closed())
        requests = conv.events("RequestOpened")
        if requests and not conv.closed():
            conv.command("answer", request=requests[0]["Permission"]["id"], answer={"Permission": "AllowOnce"})
            conv.until(lambda: seen("TurnEnded") or conv.closed())
        conv.command("info")
        conv.command("close")
        conv.until(conv.closed)
    conv.runtime.close_all()
    conv.until(lambda: not conv.runtime.sessions and all(not a.running for a in conv.agents))
    conv.until(lambda: all(not group_alive(a.pgid) for a in conv.agents), 10)


def kinds(conv: PipeConversation) -> list[str]:
    return [event_kind_name(o[1]["kind"]) for o in conv.out if o[0] == "event"]


def run(plan: dict[str, dict[int, str]], workdir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PipeConversation, str]:
    monkeypatch.setattr(EngineSession, "CLOSE_GRACE", 0.5)
    monkeypatch.setattr(ProcessTransport, "GONE_GRACE", 0.3, raising=False)
    conv = PipeConversation(plan)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            drive(conv, str(workdir))
    finally:
        for agent in conv.agents:
            if group_alive(agent.pgid):
                os.killpg(agent.pgid, signal.SIGKILL)
        conv.loop.close()
    return conv, stderr.getvalue()


_BASELINE: dict[str, Any] = {}


def baseline(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> PipeConversation:
    if "run" not in _BASELINE:
        conv, stderr = run({}, workdir, monkeypatch)
        assert "Traceback" not in stderr, stderr
        _BASELINE["run"] = conv
    conv = _BASELINE["run"]
    assert isinstance(conv, PipeConversation)
    return conv


def test_the_fault_free_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conv = baseline(tmp_path, monkeypatch)
    assert conv.reply("close") is None
    assert Outcome(conv.out).failed_turns() == [{"Completed": {"source": "Protocol"}}]
    assert (conv.io.writes, conv.io.lines_read) == (WRITES, LINES)


def check_ended_well(conv: PipeConversation, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not conv.runtime.sessions
    assert len(conv.replies()) == conv.commands, "a command got no reply, or two"
    for agent in conv.agents:
        assert not group_alive(agent.pgid), "a process of the agent's group outlived the session"
    Outcome(conv.out).check(opened=conv.session_id is not None)


@pytest.mark.parametrize("fault", WRITE_FAULTS)
@pytest.mark.parametrize("at", range(WRITES))
def test_a_fault_at_every_write_to_the_agent(at: int, fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = baseline(tmp_path, monkeypatch)
    conv, stderr = run({"write": {at: fault}}, tmp_path, monkeypatch)
    check_ended_well(conv, stderr)
    assert conv.io.injected == [(fault, at)]
    if fault in ("eagain", "short"):
        assert kinds(conv) == kinds(clean)
        return
    # The agent never got that line, and can get none: the session ends, it never hangs.
    check_lost_agent(conv)


@pytest.mark.parametrize("fault", READ_FAULTS)
@pytest.mark.parametrize("at", range(LINES))
def test_a_fault_at_every_read_of_the_agent(at: int, fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = baseline(tmp_path, monkeypatch)
    conv, stderr = run({"read": {at: fault}}, tmp_path, monkeypatch)
    check_ended_well(conv, stderr)
    assert conv.io.injected == [(fault, at)]
    if fault == "eagain":
        assert kinds(conv) == kinds(clean)
        return
    check_lost_agent(conv)


def check_lost_agent(conv: PipeConversation) -> None:
    """The agent can no longer hear or tell: an open fails; an open session fails with
    ProcessExited, its turn (if one ran) Failed, instead of hanging (or, when the agent itself ends the
    turn Failed first, the app's close comes before its exit); a closing one closes."""
    outcome = Outcome(conv.out)
    if conv.session_id is None:
        assert conv.replies("open")[0][1] is not None
    elif not conv.closing_at_fault:
        errors = [e.kind for e in outcome.errors()]
        stops = outcome.failed_turns()
        assert errors == [Kind.PROCESS_EXITED] or (not errors and stops and "Failed" in stops[-1]), conv.out
        if stops:  # a fault before the prompt fails the session before any turn
            assert "Completed" not in stops[-1], stops


# -- the transport's own promise, with the smallest agents that show it ------------------------


def lone_agent(code: str, loop: Loop) -> tuple[ProcessTransport, list[Any]]:
    exits: list[Any] = []
    transport = ProcessTransport(
        loop,
        Spawn(
            argv=[sys.executable, "-c", code],
            cwd=None,
            env=dict(os.environ),
            on_line=lambda line: None,
            on_exit=lambda status, stderr: exits.append(status),
        ),
    )
    return transport, exits


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("import os, time; os.close(1); time.sleep(600)", id="closes-its-output"),
        pytest.param("import os, time; os.close(0); time.sleep(600)", id="closes-its-input"),
    ],
)
def test_an_agent_that_can_no_longer_talk_is_shut_down(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that closed its output (it can never report a turn's end) or its input (the
    line just sent is lost, and every later one) used to live on, and its session hung
    until the app closed it; such an agent is shut down (SIGTERM after a grace)."""
    monkeypatch.setattr(ProcessTransport, "GONE_GRACE", 0.2, raising=False)
    loop = Loop()
    transport, exits = lone_agent(code, loop)
    try:
        loop.call_later(0.5, lambda: transport.write(b'{"hello": 1}\n'))  # once it has closed it
        deadline = loop.time() + 20
        tick = loop.call_later(20, lambda: None)
        loop.run(until=lambda: bool(exits) or loop.time() > deadline)
        tick.cancel()
        assert exits == ["SIGTERM"], "the agent was left running"
        assert not group_alive(transport.pgid)
    finally:
        if group_alive(transport.pgid):
            os.killpg(transport.pgid, signal.SIGKILL)
        loop.close()
