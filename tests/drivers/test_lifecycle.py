"""Each driver's lifecycle table (drivers/base.py's ``Lifecycle``): every (state, event)
of every table either moves to the table's next state or raises the one uniform error,
``ProtocolFailed`` for an event the agent causes and ``Internal`` for one the engine
causes; the drivers' own members hit those errors where a table has no entry; and a
``ProtocolFailed`` raised while a line is handled fails the session instead of being
skipped as a bad line.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest

from agentproto.core.errors import AgentError, AgentFault, InternalError, Kind
from agentproto.drivers import mock
from agentproto.drivers.acp import driver as acp
from agentproto.drivers.agy import driver as agy
from agentproto.drivers.base import Launch, Lifecycle, LineDriver
from agentproto.drivers.claude import driver as claude
from agentproto.drivers.codex import driver as codex
from agentproto.loopio.loop import Loop

#: Each driver's module (its LIFECYCLE and AGENT_EVENTS) and the state it starts in.
TABLES: dict[str, tuple[ModuleType, str]] = {
    "acp": (acp, "new"),
    "claude": (claude, "new"),
    "agy": (agy, "new"),
    "codex": (codex, "new"),
    "mock": (mock, "new"),
}


class Host:
    """The least a driver needs of its host: a loop, and every call it makes, recorded."""

    tools_url = None

    def __init__(self) -> None:
        self.loop = Loop()
        self.session_id = "s-1"
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def hook_url(self, event: str) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((name, args))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]


def launch(agent_id: str) -> Launch:
    return Launch(agent_id=agent_id, installation={}, executable=sys.executable, dir=".")


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_entry_moves_and_every_missing_one_raises_by_who_caused_it(name: str) -> None:
    module, start = TABLES[name]
    table: dict[str, dict[str, str]] = module.LIFECYCLE
    agent_events: frozenset[str] = module.AGENT_EVENTS
    states = set(table) | {after for moves in table.values() for after in moves.values()} | {start}
    assert states == set(table), f"{name}: every state has its row (an empty one if it ends there)"
    events = {event for moves in table.values() for event in moves}
    assert agent_events <= events and events - agent_events, "a table has events of both sides"
    reachable, todo = {start}, [start]
    while todo:
        for after in table[todo.pop()].values():
            if after not in reachable:
                reachable.add(after)
                todo.append(after)
    assert reachable == states, f"{name}: states no event reaches: {states - reachable}"
    missing = {"agent": 0, "engine": 0}
    for state in sorted(states):
        for event in sorted(events):
            life = Lifecycle(name, table, agent_events, state)
            if event in table[state]:
                assert life.move(event) == state and life.state == table[state][event]
                continue
            with pytest.raises(AgentError) as raised:
                life.move(event, b'{"line": 1}')
            assert life.state == state, "a refused event moves nothing"
            assert f"{name}: {event} is not expected while {state}" in raised.value.message
            if event in agent_events:
                missing["agent"] += 1
                assert isinstance(raised.value, AgentFault) and raised.value.kind == Kind.PROTOCOL_FAILED
                assert raised.value.fields["line"] == '{"line": 1}'
            else:
                missing["engine"] += 1
                assert isinstance(raised.value, InternalError) and raised.value.kind == Kind.INTERNAL
    assert missing["agent"] and missing["engine"], f"{name}: each side has an event some state refuses"


def test_acp_an_open_twice_is_the_engines_bug_and_an_exit_after_closed_the_agents() -> None:
    host = Host()
    driver = acp.AcpDriver(host, launch("acp-test"))  # type: ignore[arg-type]
    driver.open()  # the host gives no transport: the handshake goes nowhere
    assert driver.life.state == "opening"
    with pytest.raises(InternalError, match="acp: open is not expected while opening"):
        driver.open()
    closing = acp.AcpDriver(host, launch("acp-test"))  # type: ignore[arg-type]
    closing.close()
    assert closing.life.state == "closed" and host.named("closed")
    with pytest.raises(AgentFault, match="acp: exited is not expected while closed"):
        closing.on_exit("0", "")


@pytest.mark.parametrize("module, cls", [(claude, "ClaudeDriver"), (agy, "AgyDriver")])
def test_an_exit_after_the_exit_is_the_agents_protocol_failure(module: ModuleType, cls: str) -> None:
    host = Host()
    driver = getattr(module, cls)(host, launch(cls))
    with pytest.raises(AgentFault, match="exited is not expected while new"):
        driver.on_exit("1", "")  # no process was ever started
    driver.life.move("open")  # as open() does first (agy's then makes its session folder)
    with pytest.raises(InternalError, match="open is not expected while opening"):
        driver.open()
    driver.on_exit("1", "")
    assert driver.life.state == "gone" and host.named("open_failed") and host.named("closed")
    with pytest.raises(AgentFault, match="exited is not expected while gone"):
        driver.on_exit("1", "")


def test_codex_refuses_a_ready_it_did_not_wait_for() -> None:
    host = Host()
    driver = codex.CodexDriver(host, launch("codex"))  # type: ignore[arg-type]
    driver.open()  # the host gives no transport: the handshake goes nowhere
    with pytest.raises(InternalError, match="codex: open is not expected while opening"):
        driver.open()
    driver.close()  # no transport: closed at once
    assert driver.life.state == "closing" and host.named("closed")
    with pytest.raises(AgentFault, match="codex: ready is not expected while closing"):
        driver.life.move("ready")


def test_the_mock_opened_twice_is_the_engines_bug() -> None:
    host = Host()
    driver = mock.MockDriver(host, launch("mock"))  # type: ignore[arg-type]
    driver.open()
    assert driver.life.state == "open" and host.named("opened")
    with pytest.raises(InternalError, match="mock: open is not expected while open"):
        driver.open()
    driver.kill()
    driver.close()
    assert driver.gone


class _Refusing(LineDriver):
    """A driver whose agent line causes a transition its table does not have."""

    def __init__(self, host: Any, launch: Launch) -> None:
        super().__init__(host, launch)
        self.life = Lifecycle("test", {"opening": {"ready": "open"}, "open": {}}, frozenset({"ready"}), "open")

    def on_line(self, line: bytes) -> None:
        if line == b"ready":
            self.life.move("ready", line)
        else:
            raise ValueError("a bad line")


def test_a_protocol_failure_raised_by_a_line_fails_the_session_another_exception_skips_the_line() -> None:
    host = Host()
    driver = _Refusing(host, launch("test"))  # type: ignore[arg-type]
    driver._guarded_line(b"other")
    assert not host.named("fail") and "skipped a line it could not handle (ValueError" in host.named("diagnostic")[0][1]
    driver._guarded_line(b"ready")
    (error,), = host.named("fail")
    assert error.kind == Kind.PROTOCOL_FAILED and error.fields["line"] == "ready"
    assert "test: ready is not expected while open" in error.message
    assert len(host.named("diagnostic")) == 1
