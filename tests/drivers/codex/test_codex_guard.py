"""Guard rails (issue 24) on the real, pinned ``codex app-server`` against the fake OpenAI
API: a policy allowing ``git status`` and denying ``rm`` answers Codex's approval requests
(which wrap each command in a shell: ``/bin/bash -lc '...'``, matched on the inner line)
without the app, which still sees them opened and closed."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import fake_openai as fo
import pytest
from sidecar import Sidecar, kind_name

POLICY = [
    {"action": "allow", "command": ["git status **"]},
    {"action": "deny", "command": ["rm **"], "reason": "rm is not allowed here"},
]


@pytest.fixture
def world(tmp_path: Any) -> Any:
    w = fo.CodexWorld(str(tmp_path))
    yield w
    w.close()


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e for e in events if kind_name(e["kind"]) == name]


def test_a_policy_allows_git_status_and_denies_rm_on_codex(world: Any) -> None:
    subprocess.run(["git", "init", "-q", world.work], check=True, env={**os.environ, "HOME": world.work})
    victim = os.path.join(world.outside, "victim.txt")
    with open(victim, "w") as f:
        f.write("keep me")
    world.api.script(
        fo.exec_command("git status", escalated=True),
        fo.exec_command(f"rm {victim}", escalated=True),
        fo.text("done"),
    )
    with Sidecar(env=world.env) as sc:
        sid = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, "policy": POLICY}, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        events = sc.events(sid, "TurnEnded", timeout=90)
        asked = [e["kind"]["RequestOpened"]["Permission"] for e in of(events, "RequestOpened")]
        by = {e["kind"]["RequestClosed"]["request_id"]: e["extensions"]["agentproto"]["answered_by"]
              for e in of(events, "RequestClosed")}  # fmt: skip
        commands = {p["tool"]["input"]["Command"]["command"]: p["id"] for p in asked}
        assert len(commands) == 2, commands
        status = next(rid for command, rid in commands.items() if "git status" in command)
        remove = next(rid for command, rid in commands.items() if "rm " in command)
        assert by == {status: {"policy": 0, "action": "allow"}, remove: {"policy": 1, "action": "deny"}}
        assert "NeedsInput" not in [e["kind"]["StatusChanged"] for e in of(events, "StatusChanged")]
        assert os.path.exists(victim)
        assert "rejected by user" in "\n".join(world.api.response_requests()[-1].input_texts())
        sc.ok({"cmd": "close", "session": sid}, timeout=30)


def test_a_budget_stops_a_runaway_codex_turn_within_one_usage_report(world: Any) -> None:
    # Each response reports 100 input and 10 output tokens (Codex's thread/tokenUsage/updated).
    world.api.script(*[fo.exec_command(f"echo {i}") for i in range(10)], fo.text("never reached"))
    with Sidecar(env=world.env) as sc:
        sid = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, "budget": {"output_tokens": 35}}, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": sid, "text": "loop"})
        events = sc.events(sid, "TurnEnded", timeout=90)
        stop = events[-1]["kind"]["TurnEnded"]["stop"]
        assert stop == {"Failed": {"message": "budget exceeded: output_tokens 40 of 35 (over by 5)"}}, stop
        assert len(world.api.response_requests()) < 10
        info = sc.ok({"cmd": "info", "session": sid})
        assert info["budget"]["prices"]["model"] == "gpt-5-codex" and info["budget"]["spent"]["usd"] > 0
        sc.ok({"cmd": "close", "session": sid}, timeout=30)


def test_a_rate_limited_codex_turn_is_sent_again(world: Any) -> None:
    # Codex gives up on the 429 without naming a reset: agentproto waits its default (5 s).
    world.api.script(fo.Error(429, "Rate limit reached. Please try again in 1s."), fo.text("after the limit"))
    with Sidecar(env=world.env) as sc:
        sid = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, "retry": {"max_wait_s": 30}}, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        events = sc.events(sid, "TurnEnded", timeout=90)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
        limits = [e["extensions"]["agentproto"]["rate_limit"] for e in of(events, "Diagnostic")
                  if "rate_limit" in e["extensions"].get("agentproto", {})]  # fmt: skip
        assert len(limits) == 1 and "429" in limits[0]["message"] and limits[0]["retry_at"] is None, limits
        assert "after the limit" in "".join(e["kind"]["TextDelta"]["text"] for e in of(events, "TextDelta"))
        sc.ok({"cmd": "close", "session": sid}, timeout=30)
