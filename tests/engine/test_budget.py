"""Budgets (issue 24) on the mock, through ``serve``: a runaway turn (a Repeat of usage
reports) is stopped within one report of its bound and ends Failed, a Diagnostic names the
bound, the amount and the overshoot (BudgetExceeded), later prompts are refused until
``configure budget`` raises the bound, ``info`` shows spent and left, 80 % warns once, and a
bad budget is InvalidConfiguration naming the bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sidecar import Sidecar, kind_name

#: A runaway turn: 10,000 reports of 100 output tokens (1,000,000 in all), 1 ms apart.
RUNAWAY = [{"Repeat": {"times": 10000, "steps": [{"UsageReport": {"input_tokens": 10, "output_tokens": 100}}, {"Sleep": 1}]}},
           {"End": {"Completed": {"source": "Protocol"}}}]  # fmt: skip
SHORT = [{"UsageReport": {"input_tokens": 10, "output_tokens": 100}}, {"End": {"Completed": {"source": "Protocol"}}}]


def mock(tmp_path: Path, *turns: list[Any]) -> str:
    path = tmp_path / "budget.json"
    path.write_text(json.dumps({"turns": list(turns)}))
    return str(path)


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e for e in events if kind_name(e["kind"]) == name]


def test_a_runaway_turn_stops_within_one_report_of_its_bound(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path, RUNAWAY, SHORT)]) as sc:
        sid = sc.open(dir=str(tmp_path), budget={"output_tokens": 5000})
        sc.ok({"cmd": "prompt", "session": sid, "text": "run away"})
        events = sc.events(sid, "TurnEnded", timeout=60)
        stop = events[-1]["kind"]["TurnEnded"]["stop"]
        assert stop == {"Failed": {"message": "budget exceeded: output_tokens 5,100 of 5,000 (over by 100)"}}, stop
        warned, error = of(events, "Diagnostic")
        assert warned["kind"]["Diagnostic"]["level"] == "Warning" and "80%" in warned["kind"]["Diagnostic"]["message"]
        assert error["extensions"]["agentproto"]["error"]["kind"] == "BudgetExceeded"
        assert error["extensions"]["agentproto"]["budget"] == {"bound": "output_tokens", "limit": 5000, "spent": 5100, "over": 100}
        info = sc.ok({"cmd": "info", "session": sid})
        assert info["budget"]["spent"]["output_tokens"] == 5100 and info["budget"]["left"]["output_tokens"] == 0
        assert info["status"] == "Idle"
        refused = sc.error({"cmd": "prompt", "session": sid, "text": "more"})
        assert refused["kind"] == "BudgetExceeded" and "output_tokens 5,100 of 5,000" in refused["message"], refused
        raised = json.dumps({"output_tokens": 6000})
        assert sc.ok({"cmd": "configure", "session": sid, "option": "budget", "value": raised}) is None
        sc.ok({"cmd": "prompt", "session": sid, "text": "a short one"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        assert sc.ok({"cmd": "info", "session": sid})["budget"]["spent"]["output_tokens"] == 5200


def test_usd_is_counted_from_tokens_at_the_price_table(tmp_path: Path) -> None:
    # The mock's price: $1/M input, $2/M output: each report costs $0.00021.
    with Sidecar(["--mock", mock(tmp_path, RUNAWAY)]) as sc:
        sid = sc.open(dir=str(tmp_path), budget={"usd": 0.01})
        sc.ok({"cmd": "prompt", "session": sid, "text": "run away"})
        events = sc.events(sid, "TurnEnded", timeout=60)
        error = of(events, "Diagnostic")[-1]["extensions"]["agentproto"]["budget"]
        assert error["bound"] == "usd" and 0 < error["over"] <= 0.00021 + 1e-9, error
        info = sc.ok({"cmd": "info", "session": sid})["budget"]
        assert info["prices"]["model"] == "mock" and info["prices"]["version"]


def test_the_turns_bound_refuses_the_next_prompt(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path, SHORT, SHORT)]) as sc:
        sid = sc.open(dir=str(tmp_path), budget={"turns": 1})
        sc.ok({"cmd": "prompt", "session": sid, "text": "one"})
        sc.events(sid, "TurnEnded", timeout=30)
        refused = sc.error({"cmd": "prompt", "session": sid, "text": "two"})
        assert refused["kind"] == "BudgetExceeded" and "turns 1 of 1" in refused["message"], refused


def test_the_wall_bound_stops_a_turn_that_reports_nothing(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path, [{"Sleep": 60000}, {"End": {"Completed": {"source": "Protocol"}}}])]) as sc:
        sid = sc.open(dir=str(tmp_path), budget={"wall_s": 0.5})
        sc.ok({"cmd": "prompt", "session": sid, "text": "wait"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        stop = events[-1]["kind"]["TurnEnded"]["stop"]
        assert "Failed" in stop and "budget exceeded: wall_s" in stop["Failed"]["message"], stop


@pytest.mark.parametrize(
    ("budget", "named"),
    [({"dollars": 1}, "budget.dollars"), ({"usd": -1}, "budget.usd"), ({"turns": 1.5}, "budget.turns"), ({"usd": True}, "budget.usd")],
)
def test_a_bad_budget_is_refused_naming_the_bound(tmp_path: Path, budget: dict[str, Any], named: str) -> None:
    with Sidecar() as sc:
        error = sc.error({"cmd": "open", "agent": "mock", "dir": str(tmp_path), "budget": budget})
        assert error["kind"] == "InvalidConfiguration" and named in error["message"], error
