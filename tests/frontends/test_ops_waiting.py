"""In the ops framing, a turn that waits for an answer ends its request with the
``RequestOpened`` and the ``StatusChanged "NeedsInput"`` that follows it: both belong to that
request's stream, never to the next request's (issue 21)."""

from __future__ import annotations

from typing import Any

from ops_support import Proc, result_of
from sidecar import script


def statuses(lines: list[dict[str, Any]]) -> list[Any]:
    return [line["event"]["kind"]["StatusChanged"] for line in lines
            if line["kind"] == "event" and "StatusChanged" in line["event"]["kind"]]  # fmt: skip


def events(lines: list[dict[str, Any]]) -> list[str]:
    return [next(iter(line["event"]["kind"])) for line in lines if line["kind"] == "event"]


def test_needs_input_belongs_to_the_request_whose_turn_waits() -> None:
    p = Proc(["agent", "--db", "off", "--mock", script("plan-exit")])
    try:
        p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        lines = p.request({"op": "prompt", "text": "plan it"})
        assert result_of(lines)["waiting"]["Permission"]["id"] == "exit-1"
        assert events(lines)[-2:] == ["RequestOpened", "StatusChanged"] and statuses(lines) == ["Working", "NeedsInput"]
        info = p.request({"op": "info"})
        assert events(info) == [] and result_of(info)["session"]["status"] == "NeedsInput"  # nothing stale in it
        lines = p.request({"op": "answer", "request": "exit-1", "answer": {"Permission": "AllowOnce"}})
        assert result_of(lines)["stop"] == {"Completed": {"source": "Protocol"}}
        assert statuses(lines) == ["Working", "Idle"]
        # The next turn waits too: its NeedsInput is in its prompt's stream, the next op sees none.
        lines = p.request({"op": "prompt", "text": "test it"})
        assert result_of(lines)["waiting"]["Permission"]["id"] == "r2" and statuses(lines)[-1] == "NeedsInput"
        assert events(p.request({"op": "info"})) == []
    finally:
        p.stop()
