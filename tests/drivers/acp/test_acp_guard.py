"""Guard rails (issue 24) on an ACP agent: the SDK's test agent (tests/fakes/acp_test_agent.py)
asks permission for an edit of ``edited.txt`` in the session's dir; a policy allowing edits
under ``*.txt`` picks its allow_once option, one denying them its reject_once option, and the
app only sees the request opened and closed. (The pinned claude-agent-acp is issue 22's.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, Sidecar, kind_name

AGENT = {"acp": {"name": "acp-test", "path": str(ROOT / "tests" / "fakes" / "acp_test_agent.py"), "args": []}}


@pytest.mark.parametrize(
    ("rule", "outcome"),
    [
        ({"action": "allow", "kind": ["Edit"], "path": ["*.txt"]}, "zz-yes-1"),
        ({"action": "deny", "path": ["edited.txt"], "reason": "not that file"}, "zz-no"),
    ],
)
def test_a_policy_answers_an_acp_agents_permission(tmp_path: Path, rule: dict[str, Any], outcome: str) -> None:
    with Sidecar() as sc:
        sid = sc.open(AGENT, dir=str(tmp_path), policy=[rule])
        sc.ok({"cmd": "prompt", "session": sid, "text": "tool"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        names = [kind_name(e["kind"]) for e in events]
        assert "RequestOpened" in names and "NeedsInput" not in str(events)
        closed = next(e for e in events if kind_name(e["kind"]) == "RequestClosed")
        assert closed["extensions"]["agentproto"]["answered_by"] == {"policy": 0, "action": rule["action"]}
        text = "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")
        assert f"outcome: {outcome}" in text, text


def test_an_acp_agents_rate_limit_is_reported_and_the_turn_sent_again(tmp_path: Path) -> None:
    # The agent names no reset: agentproto waits its default (5 s), within max_wait_s.
    with Sidecar() as sc:
        sid = sc.open(AGENT, dir=str(tmp_path), retry={"max_wait_s": 30})
        sc.ok({"cmd": "prompt", "session": sid, "text": "ratelimit"})
        events = sc.events(sid, "TurnEnded", timeout=60)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
        limits = [e["extensions"]["agentproto"]["rate_limit"] for e in events
                  if kind_name(e["kind"]) == "Diagnostic" and "rate_limit" in e["extensions"].get("agentproto", {})]  # fmt: skip
        assert len(limits) == 1 and "Rate limit exceeded" in limits[0]["message"], limits
        text = "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")
        assert text == "after the limit"
