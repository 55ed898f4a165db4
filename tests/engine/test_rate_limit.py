"""Rate limits (issue 24) on the mock: a ``RateLimit`` step (an API's 429 with its reset)
becomes one Diagnostic carrying ``retry_at``; with ``retry`` the turn is sent again once the
limit resets and its events go on in order, the status Working throughout; without it, or
past ``max_wait_s``, or after a tool call, the turn fails with the diagnostic."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sidecar import Sidecar, kind_name

END = {"End": {"Completed": {"source": "Protocol"}}}
LIMITED = [{"Emit": {"TextDelta": {"message_id": "m1", "text": "thinking"}}}, {"RateLimit": {"retry_after_ms": 300}}]
ANSWER = [{"Emit": {"TextDelta": {"message_id": "m2", "text": "the answer"}}}, END]
TOOL = {"Emit": {"ToolUpdated": {"id": "t1", "kind": "Read", "title": "read", "status": "Completed", "input": "None",
                                 "output": "x", "diffs": [], "locations": []}}}  # fmt: skip


def mock(tmp_path: Path, *turns: list[Any]) -> str:
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"turns": list(turns)}))
    return str(path)


def turn(sc: Sidecar, sid: str) -> list[dict[str, Any]]:
    sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    return sc.events(sid, "TurnEnded", timeout=30)


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e for e in events if kind_name(e["kind"]) == name]


def test_with_retry_a_rate_limited_turn_is_sent_again_once_it_resets(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path, LIMITED, ANSWER)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 5})
        before = time.time()
        events = turn(sc, sid)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        assert len(of(events, "TurnStarted")) == 1  # one turn, its events in order
        limit, resent = of(events, "Diagnostic")
        retry_at = limit["extensions"]["agentproto"]["rate_limit"]["retry_at"]
        assert before < retry_at < before + 5, (before, retry_at)
        assert resent["extensions"]["agentproto"]["retry"]["attempt"] == 1
        texts = [e["kind"]["TextDelta"]["text"] for e in of(events, "TextDelta")]
        assert texts == ["thinking", "the answer"]
        statuses = [e["kind"]["StatusChanged"] for e in of(events, "StatusChanged")]
        assert statuses == ["Working"], statuses  # Working while it waited


def test_without_retry_the_turn_fails_with_the_diagnostic(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path, LIMITED, ANSWER)]) as sc:
        sid = sc.open(dir=str(tmp_path))
        events = turn(sc, sid)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Failed": {"message": "rate limited: 429 Too Many Requests"}}
        (limit,) = of(events, "Diagnostic")
        assert limit["extensions"]["agentproto"]["rate_limit"]["message"] == "429 Too Many Requests"


def test_a_reset_past_max_wait_or_a_turn_that_used_a_tool_is_not_sent_again(tmp_path: Path) -> None:
    late = [{"RateLimit": {"retry_after_ms": 60000}}]
    with Sidecar(["--mock", mock(tmp_path, late, [TOOL, *LIMITED], ANSWER)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 5})
        assert "Failed" in turn(sc, sid)[-1]["kind"]["TurnEnded"]["stop"]  # resets in 60 s > 5
        events = turn(sc, sid)
        assert "Failed" in events[-1]["kind"]["TurnEnded"]["stop"]  # a tool ran: never repeated
        assert len(of(events, "Diagnostic")) == 1


def test_a_turn_waiting_out_a_rate_limit_cancels_at_once(tmp_path: Path) -> None:
    slow = [{"RateLimit": {"retry_after_ms": 20000}}]
    with Sidecar(["--mock", mock(tmp_path, slow, ANSWER)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 60})
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        sc.events(sid, "Diagnostic", timeout=10)
        sc.events(sid, "Diagnostic", timeout=10)  # the retry's: waiting now
        sc.ok({"cmd": "cancel", "session": sid})
        events = sc.events(sid, "TurnEnded", timeout=5)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == "Cancelled"
