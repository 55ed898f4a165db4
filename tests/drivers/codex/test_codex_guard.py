"""Guard rails (issue 24) on the real, pinned ``codex app-server`` against the fake OpenAI
API: a policy allowing ``git status`` and denying ``rm`` answers Codex's approval requests
(which wrap each command in a shell: ``/bin/bash -lc '...'``, matched on the inner line)
without the app, which still sees them opened and closed; a rate-limited turn is sent again,
on the same process or, when the process ended during the wait, on a new one resumed by the
thread id (thread/resume)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fake_openai as fo
import pytest
from sidecar import Sidecar, kill_each, kind_name

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


def test_a_codex_process_that_ends_while_its_turn_waits_out_a_rate_limit_is_resumed_by_its_thread(
    world: Any, tmp_path: Path
) -> None:
    # Codex gives up on the 429 (no reset named: agentproto waits 5 s) and is killed while
    # agentproto waits: a new codex app-server resumes the thread (thread/resume) and takes
    # the same turn once the wait is over.
    world.api.script(fo.text("before"), fo.Error(429, "Rate limit reached. Please try again in 1s."),
                     fo.text("after the restart"))  # fmt: skip
    record = tmp_path / "restart.ndjson"
    with Sidecar(["--record", str(record)], env=world.env) as sc:
        info = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, "retry": {"max_wait_s": 60}}, timeout=60)
        sid, thread = info["id"], info["resume_token"]
        sc.ok({"cmd": "prompt", "session": sid, "text": "remember kumquat"})
        first_turn = sc.events(sid, "TurnEnded", 90)
        assert "before" in "".join(e["kind"]["TextDelta"]["text"] for e in of(first_turn, "TextDelta"))
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        sc.wait_for(lambda line: "event" in line and "retry" in line["event"]["extensions"].get("agentproto", {}), 60)
        first = [pid for pid in world.codex_processes() if pid != sc.proc.pid]  # its --record path says codex
        assert kill_each(first), first  # the agent ends while agentproto waits
        events = sc.events(sid, "TurnEnded", 90)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
        (restart,) = [e for e in of(events, "Diagnostic") if "restart" in e["extensions"].get("agentproto", {})]
        body = restart["extensions"]["agentproto"]["restart"]
        assert body == {"status": "SIGKILL", "process": 2, "resume_token": thread}, body
        assert "after the restart" in "".join(e["kind"]["TextDelta"]["text"] for e in of(events, "TextDelta"))
        assert len(of(events, "TurnStarted")) == 1  # the same turn, its events in order
        assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
        requests = world.api.response_requests()
        assert len(requests) == 3  # the re-sent turn reached the API
        # The resumed thread's history, read back from the first process's rollout, then the
        # re-sent prompt. The turn that met the 429 kept its prompt there too (as Codex keeps
        # it on one process), when the killed process had written it (it had, in every run).
        sent = requests[-1].user_texts()[1:]
        assert sent[0] == "remember kumquat" and sent[-1] == "go" and sent.count("go") in (1, 2), sent
        assert "before" in requests[-1].input_texts()
        assert not set(first) & set(world.codex_processes())  # the ended process is gone
        assert sc.ok({"cmd": "info", "session": sid})["resume_token"] == thread
        sc.ok({"cmd": "close", "session": sid}, timeout=30)
    records = [json.loads(line) for line in record.read_text().splitlines()]
    assert len([r for r in records if r.get("dir") == "spawn"]) == 2
    assert [r["process"] for r in records if r.get("dir") == "restart"] == [2]
    resumed = [r for r in records if r.get("dir") == "to_agent" and "thread/resume" in r["line"]]
    assert len(resumed) == 1 and thread in resumed[0]["line"], resumed
    # The recording replays offline, the second process's lines played to the second fake.
    env = {**os.environ, "AGENTPROTO_CODEX_BIN": "/nonexistent", "AGENTPROTO_DB": "off"}
    done = subprocess.run([sys.executable, "-m", "agentproto", "replay", str(record)], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0 and "every response matched" in done.stderr, done.stderr
