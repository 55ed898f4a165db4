"""generate's ``output_retries`` (issue 24) on the mock: an answer that fails output_schema is
sent back in the same session, and the corrected one is the answer; with too few retries
the last failure is ProtocolFailed naming its errors, as without retries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar import Sidecar

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def answer(text: str) -> list[Any]:
    return [{"Emit": {"TextDelta": {"message_id": "m", "text": text}}}, {"End": {"Completed": {"source": "Protocol"}}}]


def mock(tmp_path: Path) -> str:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps({"turns": [answer("not json"), answer('{"name": 7}'), answer('{"name": "Ada"}')]}))
    return str(path)


def generate(sc: Sidecar, tmp_path: Path, **options: Any) -> dict[str, Any]:
    frame = {"cmd": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "name?", "output_schema": SCHEMA}
    return dict(sc.reply(sc.send({**frame, **options}), timeout=30))


def test_an_answer_that_fails_the_schema_is_repaired_in_the_same_session(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path)]) as sc:
        assert generate(sc, tmp_path, output_retries=2)["ok"] == '{"name": "Ada"}'


def test_too_few_retries_fail_with_the_last_errors(tmp_path: Path) -> None:
    with Sidecar(["--mock", mock(tmp_path)]) as sc:
        error = generate(sc, tmp_path, output_retries=1)["error"]
        assert error["kind"] == "ProtocolFailed" and "$.name: expected string, got number" in error["message"], error
    with Sidecar(["--mock", mock(tmp_path)]) as sc:
        error = generate(sc, tmp_path)["error"]  # no retries: as before
        assert error["kind"] == "ProtocolFailed" and "not JSON" in error["message"], error


def test_generate_takes_a_budget_and_a_policy(tmp_path: Path) -> None:
    runaway = [{"Repeat": {"times": 10000, "steps": [{"UsageReport": {"output_tokens": 100}}, {"Sleep": 1}]}}]
    path = tmp_path / "runaway.json"
    path.write_text(json.dumps({"turns": [runaway]}))
    with Sidecar(["--mock", str(path)]) as sc:
        frame = {"cmd": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "go", "budget": {"output_tokens": 500}}
        error = sc.reply(sc.send(frame), timeout=30)["error"]
        assert error["kind"] == "BudgetExceeded" and "output_tokens 600 of 500" in error["message"], error
        bad = {**frame, "budget": None, "policy": [{"action": "sometimes"}]}
        error = sc.reply(sc.send(bad), timeout=30)["error"]
        assert error["kind"] == "InvalidConfiguration" and "policy[0].action" in error["message"], error
