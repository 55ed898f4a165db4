"""Every file of the captured-wire corpus (fixtures/wire/<agent>/<case>.jsonl) replayed
through its real driver: the driver must write what it wrote when the lines were captured,
and the app must see what it saw then. Add a file, gain a test (tests/fakes/wire_corpus.py says
the format and how to capture or hand-make one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sidecar import check_line
from wire_corpus import CORPUS, ROOT, cases, load, replay

EPOCH = {"secs_since_epoch": 0, "nanos_since_epoch": 0}


def covers(want: object, got: object) -> bool:
    """``got`` has everything ``want`` has: equal values, and every member of an expected
    object (more members are fine: protocol 1 grows by additive optional fields, which
    the engine adds without a driver changing; a new event or a changed value is not)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and covers(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(covers, want, got))
    return type(want) is type(got) and want == got


def as_line(seen: dict) -> dict:
    """An expectation as the protocol 1 line the app would read."""
    if "event" in seen:
        return {"event": {**seen["event"], "occurred_at": EPOCH}}
    if "reply" in seen:
        return {"id": 1, **{k: v for k, v in seen.items() if k != "reply"}}
    if "session_error" in seen:
        return {"session": "s1", "error": seen["session_error"]}
    return {"closed": "s1"}


def test_the_corpus_covers_every_driver_and_its_hard_cases():
    names = {str(path.relative_to(CORPUS).with_suffix("")) for path in cases()}
    for agent in ("claude", "codex", "acp", "agy"):
        assert any(n.startswith(agent + "/") for n in names), agent
        for case in ("malformed-then-good", "unknown-types"):
            assert f"{agent}/{case}" in names


_JSON_ERROR = re.compile(r"(is not JSON: )[^:\[\"]*(: \[)")


@pytest.mark.parametrize("path", cases(), ids=lambda p: str(p.relative_to(CORPUS).with_suffix("")))
def test_replay(path: Path, tmp_path: Path) -> None:
    case = load(path)
    _, seen = replay(case, str(tmp_path))
    for index, (got, want) in enumerate(zip(seen, case.expects)):
        # The json module's own words for a line it refuses differ by Python version (3.13:
        # "Expecting value (at column N)" where 3.11 says "nested too deeply"): not the driver's.
        got, want = (json.loads(_JSON_ERROR.sub(r"\1…\2", json.dumps(line))) for line in (got, want))
        assert covers(want, got), (
            f"{path.relative_to(ROOT)}: output {index} differs\n  driver:  {json.dumps(got)}\n  capture: {json.dumps(want)}"
        )
    # The app's tools and hooks are agentproto's additions to anyagent's schema.
    opened = next((e["app"] for e in case.conversation if e.get("app", {}).get("cmd") == "open"), {})
    reference = not (opened.get("tools") or opened.get("hooks"))
    for got in seen:
        check_line(as_line(got), reference)  # what the driver produced is valid protocol 1
    assert len(seen) == len(case.expects), (
        f"{path.relative_to(ROOT)}: the app saw {len(seen)} lines, the capture {len(case.expects)}: "
        f"{json.dumps(seen[len(case.expects):] or case.expects[len(seen):])}"
    )
