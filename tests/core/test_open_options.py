"""Odd characters in launch options (issue 13): a NUL, a lone surrogate, an empty or `=`
environment name in any field that may reach an argv, an environment or a path is
InvalidConfiguration naming the field, for every driver, before anything starts; no value is
quoted back; and no half-built session is left registered.

Through a real ``serve`` (tests/fakes/sidecar.py). Nothing is spawned: the refusal comes first, so
the claude and codex references point at this Python (were one not refused, it would fail to
start as that CLI, a SpawnFailed, and the test would fail all the same).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from agentproto.core.commands import launch_text_problem
from sidecar import ROOT, Sidecar

AGENTS: dict[str, Any] = {
    "mock": "mock",
    "claude": {"id": "claude", "path": sys.executable},
    "codex": {"id": "codex", "path": sys.executable},
    "acp": {"acp": {"name": "acp-test", "path": str(ROOT / "tests" / "fakes" / "acp_test_agent.py"), "args": []}},
    "agy": {"id": "agy", "path": str(ROOT / "tests" / "fakes" / "fake_agy.py")},
}

SECRET = "sk-do-not-echo-0123456789"

# (options, the field the message must name, what it must say)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "args NUL": ({"args": ["ok", "a\x00b"]}, "args[1]", "NUL"),
    "args surrogate": ({"args": ["\ud800"]}, "args[0]", "surrogate"),
    "env name =": ({"env": {f"TOKEN={SECRET}": "x"}}, "env: a name", "'='"),
    "env name empty": ({"env": {"": "x"}}, "env: a name", "empty"),
    "env name NUL": ({"env": {"A\x00": "x"}}, "env: a name", "NUL"),
    "env value NUL": ({"env": {"API_KEY": SECRET + "\x00"}}, "env.API_KEY", "NUL"),
    "env value surrogate": ({"env": {"API_KEY": SECRET + "\udcff"}}, "env.API_KEY", "surrogate"),
    "dir NUL": ({"dir": "/tmp\x00"}, "dir", "NUL"),
    "dir surrogate": ({"dir": "/tmp/\ud800"}, "dir", "surrogate"),
    "record_wire NUL": ({"record_wire": "/tmp/wire\x00"}, "record_wire", "NUL"),
    "record_wire surrogate": ({"record_wire": "/tmp/\ud800.ndjson"}, "record_wire", "surrogate"),
    "config_home NUL": ({"config_home": "/tmp/home\x00"}, "config_home", "NUL"),
    "resume NUL": ({"resume": "a\x00b"}, "resume", "NUL"),
    "instructions NUL": ({"instructions": "be\x00good"}, "instructions", "NUL"),
    "mcp env name =": (
        {"mcp_servers": [{"name": "m", "connection": {"Stdio": {"command": "x", "env": {"A=B": "1"}}}}]},
        "mcp_servers[0].connection.Stdio.env: a name",
        "'='",
    ),
    "mcp header NUL": (
        {"mcp_servers": [{"name": "m", "connection": {"Http": {"url": "http://127.0.0.1:1", "headers": {"X": "\x00"}}}}]},
        "mcp_servers[0].connection.Http.headers.X",
        "NUL",
    ),
}


@pytest.fixture(scope="module")
def sidecar() -> Iterator[Sidecar]:
    with Sidecar() as sc:
        yield sc


def refused(sc: Sidecar, agent: Any, options: dict[str, Any]) -> dict[str, Any]:
    return sc.error({"cmd": "open", "agent": agent, "dir": "/tmp", **options}, timeout=30)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("driver", sorted(AGENTS))
def test_odd_characters_in_open_options(sidecar: Sidecar, driver: str, case: str, tmp_path: Path) -> None:
    options, field, what = CASES[case]
    if "record_wire" in options:
        options = {**options, "record_wire": str(tmp_path) + options["record_wire"]}
    error = refused(sidecar, AGENTS[driver], options)
    assert error["kind"] == "InvalidConfiguration", error
    assert error["detail"].startswith(field) and what in error["detail"], error
    assert SECRET not in str(error)
    assert not list(tmp_path.iterdir())  # no record_wire file was made


@pytest.mark.parametrize(
    "agent, field",
    [
        ({"id": "claude", "path": sys.executable + "\x00"}, "agent.path"),
        ({"acp": {"name": "t", "path": "/tmp/\ud800", "args": []}}, "agent.acp.path"),
        ({"acp": {"name": "t", "path": str(ROOT / "tests" / "fakes" / "acp_test_agent.py"), "args": ["\x00"]}}, "agent.acp.args[0]"),
    ],
)
def test_odd_characters_in_the_agent_reference(sidecar: Sidecar, agent: Any, field: str) -> None:
    error = refused(sidecar, agent, {})
    assert error["kind"] == "InvalidConfiguration" and error["detail"].startswith(field), error


def test_generate_probe_and_plan_usage_refuse_them_too(sidecar: Sidecar) -> None:
    for cmd in ({"cmd": "generate", "prompt": "hi"}, {"cmd": "probe"}, {"cmd": "plan_usage"}):
        error = sidecar.error({**cmd, "agent": "mock", "dir": "/tmp", "args": ["\x00"]}, timeout=30)
        assert error["kind"] == "InvalidConfiguration" and error["detail"].startswith("args[0]"), (cmd, error)


def test_no_refused_open_is_left_registered(tmp_path: Path) -> None:
    # A fresh sidecar: every refused open above would have taken an id if it had been
    # registered; the first open that succeeds is s1 and is the only live session.
    with Sidecar() as sc:
        for options, _field, _what in CASES.values():
            if "record_wire" in options:
                options = {**options, "record_wire": str(tmp_path / "w.ndjson\x00")}
            refused(sc, AGENTS["acp"], options)
        assert sc.error({"cmd": "info", "session": "s1"})["kind"] == "UnknownSession"
        assert sc.open("mock", "/tmp") == "s1"
        assert sc.ok({"cmd": "info", "session": "s1"})["status"] == "Idle"


def test_a_value_nested_as_deep_as_json_allows_is_checked_without_overflow() -> None:
    deep: Any = "\x00"
    for _ in range(5000):
        deep = [deep]
    problem = launch_text_problem({"tools": [deep]})
    assert problem is not None and problem.startswith("tools[0][0]") and problem.endswith("holds a NUL character")
    assert launch_text_problem({"agent": "mock", "dir": "/tmp", "env": {"PATH": "/bin"}, "args": ["-v"]}) is None
