"""engine/oneshots.plan_usage_all on a real loop: one agent's answer, failure, bug or hang
never costs the others their rows; each row is answered once, in discover's order.

The drivers here are stand-ins (Codex's real read: tests/drivers/codex/test_codex_plan_usage.py):
each agent's ``plan_usage`` answers at once, later on the loop, with a typed error, by
raising, twice, or never.
"""

from __future__ import annotations

from typing import Any

from agentproto.core.errors import AgentError, Kind
from agentproto.engine import oneshots
from agentproto.loopio.loop import Loop

USAGE = {"windows": [], "fetched_at": {"secs_since_epoch": 1, "nanos_since_epoch": 0}}


def agent(agent_id: str) -> dict[str, Any]:
    return {"id": agent_id, "name": agent_id, "executable_path": f"/bin/{agent_id}", "source": "Path", "version": "1"}


def run(agents: list[dict[str, Any]], behave: dict[str, Any], args: dict[str, Any] | None = None) -> tuple[Any, Any, list[Any]]:
    """plan_usage_all over ``agents``, each agent's plan_usage doing what ``behave`` says;
    the answer, the error, and every (field, ...) asked."""
    loop = Loop()
    answers: list[tuple[Any, Any]] = []
    asked: list[dict[str, Any]] = []

    def discover(done: Any) -> None:
        loop.call_soon(lambda: done({"agents": agents, "missing": [], "diagnostics": []}, None))

    def plan_usage(fields: dict[str, Any], done: Any) -> None:
        asked.append(fields)
        ref = fields["agent"]
        what = behave[ref if isinstance(ref, str) else ref["id"]]
        if what == "now":
            done(USAGE, None)
        elif what == "soon":
            loop.call_soon(lambda: done({**USAGE, "plan": "soon"}, None))
        elif what == "twice":
            done({**USAGE, "plan": "first"}, None)
            done({**USAGE, "plan": "second"}, None)
        elif what == "refused":
            raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, "plan usage")  # as Driver.plan_usage does
        elif what == "auth":
            loop.call_soon(lambda: done(None, AgentError.detail(Kind.AUTH_REQUIRED, "log in")))
        elif what == "bug":
            raise RuntimeError("a driver's bug")
        elif what == "late":
            loop.call_later(0.5, lambda: done({**USAGE, "plan": "late"}, None))
        # "never": no answer at all

    def finished(value: Any, error: Any) -> None:
        answers.append((value, error))

    def plan_usage_caught(fields: dict[str, Any], done: Any) -> None:
        # What runtime.plan_usage does: a driver's AgentError is the answer.
        try:
            plan_usage(fields, done)
        except AgentError as error:
            done(None, error)

    try:
        oneshots.plan_usage_all(loop, discover, plan_usage_caught, args or {}, finished)
        loop.run(until=lambda: bool(answers))
        settled: list[bool] = []
        loop.call_later(0.7, lambda: settled.append(True))  # past every late answer: none may count
        loop.run(until=lambda: bool(settled))
    finally:
        loop.close()
    assert len(answers) == 1, answers  # answered exactly once
    return answers[0][0], answers[0][1], asked


def test_every_row_in_order_whatever_each_agent_does() -> None:
    names = ["mock", "now", "soon", "refused", "auth", "bug", "twice", "never", "late"]
    agents = [agent(name) for name in names]
    behave = {name: name for name in names}
    behave["mock"] = "now"
    rows, error, asked = run(agents, behave, {"agent_timeout": 0.2})
    assert error is None
    assert [row["agent"] for row in rows] == agents
    got = {row["agent"]["id"]: row.get("plan_usage") or row["error"] for row in rows}
    assert got["mock"] == USAGE and got["now"] == USAGE
    assert got["soon"]["plan"] == "soon" and got["twice"]["plan"] == "first"
    assert got["refused"]["kind"] == "UnsupportedFeature" and got["auth"]["kind"] == "AuthRequired"
    assert got["bug"]["kind"] == "Internal" and "a driver's bug" in got["bug"]["message"]
    for hung in ("never", "late"):  # bounded by agent_timeout; the late answer is dropped
        assert got[hung]["kind"] == "HandshakeTimeout" and "no plan usage within 0.2 s" in got[hung]["message"]
    # The mock by its id, every other agent at the path discover found.
    assert asked[0] == {"agent": "mock"}
    assert asked[1] == {"agent": {"id": "now", "path": "/bin/now"}}


def test_dir_goes_to_every_agent_and_a_missing_one_is_refused_once(tmp_path: Any) -> None:
    rows, error, asked = run([agent("a"), agent("b")], {"a": "now", "b": "soon"}, {"dir": str(tmp_path)})
    assert error is None and len(rows) == 2
    assert [fields["dir"] for fields in asked] == [str(tmp_path)] * 2
    rows, error, asked = run([agent("a")], {"a": "now"}, {"dir": str(tmp_path / "gone")})
    assert rows is None and error.kind == "InvalidConfiguration" and asked == []


def test_no_agents_no_rows() -> None:
    rows, error, _ = run([], {})
    assert rows == [] and error is None
