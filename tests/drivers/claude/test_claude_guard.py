"""Guard rails (issue 24) on the real, pinned ``claude`` CLI against the fake Anthropic API:
a policy allowing ``git status`` and denying ``rm`` answers Claude's permission requests
without the app (the app still sees them opened and closed), and the denial's reason
reaches the model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fake_anthropic import FakeAnthropic, claude_bin, error, processes_with_env, text, tool_use
from sidecar import Sidecar, kill_each, kind_name

POLICY = [
    {"action": "allow", "command": ["git status **", "touch **"]},
    {"action": "deny", "command": ["rm **"], "reason": "rm is not allowed in this repository"},
]


@pytest.fixture
def world(tmp_path: Path) -> Any:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True, env={**os.environ, "HOME": str(tmp_path)})
    config = tmp_path / "config"
    config.mkdir()
    with FakeAnthropic() as api, Sidecar(env={"AGENTPROTO_CLAUDE_BIN": claude_bin()}) as sc:
        try:
            yield api, sc, work, config
        finally:
            sc.close()
            deadline = time.monotonic() + 5
            while processes_with_env(str(config)) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in processes_with_env(str(config)):
                os.kill(pid, signal.SIGKILL)


def open_claude(api: FakeAnthropic, sc: Sidecar, work: Path, config: Path, **options: Any) -> str:
    env = api.cli_env(str(config))
    del env["CLAUDE_CONFIG_DIR"]
    frame = {"cmd": "open", "agent": "claude", "dir": str(work), "env": env, "config_home": str(config), **options}
    return str(sc.ok(frame, timeout=60)["id"])


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e for e in events if kind_name(e["kind"]) == name]


def test_a_policy_allows_git_status_and_touch_and_denies_rm_with_its_reason(world: Any) -> None:
    api, sc, work, config = world
    (work / "victim.txt").write_text("keep me")
    api.push(
        tool_use("Bash", {"command": "git status", "description": "status"}),
        tool_use("Bash", {"command": "touch made.txt", "description": "make"}),
        tool_use("Bash", {"command": "rm victim.txt", "description": "remove"}),
        text("Done."),
    )
    sid = open_claude(api, sc, work, config, policy=POLICY)
    sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    events = sc.events(sid, "TurnEnded", 90)
    closed = {e["kind"]["RequestClosed"]["request_id"]: e["extensions"]["agentproto"]["answered_by"]
              for e in of(events, "RequestClosed")}  # fmt: skip
    asked = [e["kind"]["RequestOpened"]["Permission"] for e in of(events, "RequestOpened")]
    opened = {p["tool"]["input"]["Command"]["command"]: p["id"] for p in asked}
    # Claude runs some read-only commands (git status) without asking: a policy sees only what it asks.
    if "git status" in opened:
        assert closed[opened["git status"]] == {"policy": 0, "action": "allow"}
    assert closed[opened["touch made.txt"]] == {"policy": 0, "action": "allow"}
    assert closed[opened["rm victim.txt"]] == {"policy": 1, "action": "deny"}
    assert (work / "made.txt").exists()
    assert (work / "victim.txt").read_text() == "keep me"
    assert "rm is not allowed in this repository" in api.main_requests()[-1].last_user_text()  # the model was told
    statuses = [e["kind"]["StatusChanged"] for e in of(events, "StatusChanged")]
    assert "NeedsInput" not in statuses  # the app was never asked
    sc.ok({"cmd": "close", "session": sid}, timeout=30)


def test_a_budget_stops_a_runaway_claude_turn_within_one_usage_report(world: Any) -> None:
    api, sc, work, config = world
    steps = [tool_use("Bash", {"command": f"echo {i}", "description": "echo"}, usage={"input_tokens": 50, "output_tokens": 500})
             for i in range(8)]  # fmt: skip
    api.push(*steps, text("never reached"))
    sid = open_claude(api, sc, work, config, permission_mode="AutoApprove", budget={"output_tokens": 1200})
    sc.ok({"cmd": "prompt", "session": sid, "text": "loop"})
    events = sc.events(sid, "TurnEnded", 90)
    stop = events[-1]["kind"]["TurnEnded"]["stop"]
    assert "Failed" in stop and stop["Failed"]["message"].startswith("budget exceeded: output_tokens"), stop
    error = of(events, "Diagnostic")[-1]["extensions"]["agentproto"]
    assert error["error"]["kind"] == "BudgetExceeded"
    assert 0 < error["budget"]["over"] <= 500, error  # within one API message's report
    assert len(api.main_requests()) < 8  # stopped: the model was not asked again and again
    refused = sc.error({"cmd": "prompt", "session": sid, "text": "more"})
    assert refused["kind"] == "BudgetExceeded"
    sc.ok({"cmd": "close", "session": sid}, timeout=30)


def test_generate_repairs_an_answer_that_fails_its_schema_on_claude(world: Any) -> None:
    api, sc, work, config = world
    api.push(text('{"name": 7}'), text('{"name": "Ada"}'))
    env = api.cli_env(str(config))
    del env["CLAUDE_CONFIG_DIR"]
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    frame = {"cmd": "generate", "agent": "claude", "dir": str(work), "env": env, "config_home": str(config),
             "prompt": "a name as JSON", "output_schema": schema, "output_retries": 1}  # fmt: skip
    assert sc.ok(frame, timeout=90) == '{"name": "Ada"}'
    repair = api.main_requests()[-1].last_user_text()
    assert "$.name: expected string, got number" in repair, repair  # the model was told what to fix


def test_a_rate_limited_claude_turn_is_sent_again_once_the_limit_resets(world: Any) -> None:
    api, sc, work, config = world
    limited = error(429, "rate_limit_error", "Rate limited", headers={"retry-after": "1"})
    api.push(limited, limited, text("after the limit"))
    env = api.cli_env(str(config))
    del env["CLAUDE_CONFIG_DIR"]
    env["CLAUDE_CODE_MAX_RETRIES"] = "1"  # the CLI waits once, then gives up on the second 429
    frame = {"cmd": "open", "agent": "claude", "dir": str(work), "env": env, "config_home": str(config),
             "retry": {"max_wait_s": 30}}  # fmt: skip
    sid = sc.ok(frame, timeout=60)["id"]
    sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    events = sc.events(sid, "TurnEnded", 90)
    assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
    limits = [e["extensions"]["agentproto"]["rate_limit"] for e in of(events, "Diagnostic")
              if "rate_limit" in e["extensions"].get("agentproto", {})]  # fmt: skip
    assert len(limits) == 2 and all(isinstance(limit["retry_at"], float) for limit in limits), limits
    assert "429" in limits[-1]["message"]
    text_out = "".join(e["kind"]["TextDelta"]["text"] for e in of(events, "TextDelta"))
    assert text_out == "after the limit"
    assert len(of(events, "TurnStarted")) == 1
    sc.ok({"cmd": "close", "session": sid}, timeout=30)


def test_a_claude_process_that_ends_while_its_turn_waits_out_a_rate_limit_is_resumed_and_the_turn_sent_again(
    world: Any, tmp_path: Path
) -> None:
    # The CLI gives up on the first 429 (resetting in 10 s: room for the kill to land inside the
    # wait under load) and is killed while agentproto waits: a new claude, started with
    # --resume, takes the same turn once the limit resets.
    api, sc, work, config = world
    sc.close()
    record = tmp_path / "restart.ndjson"
    sc = Sidecar(["--record", str(record)], env={"AGENTPROTO_CLAUDE_BIN": claude_bin()})
    api.push(error(429, "rate_limit_error", "Rate limited", headers={"retry-after": "10"}), text("after the restart"))
    env = api.cli_env(str(config))
    del env["CLAUDE_CONFIG_DIR"]
    env["CLAUDE_CODE_MAX_RETRIES"] = "0"  # the CLI gives up on the first 429: agentproto waits it out
    frame = {"cmd": "open", "agent": "claude", "dir": str(work), "env": env, "config_home": str(config),
             "retry": {"max_wait_s": 60}}  # fmt: skip
    try:
        sid = sc.ok(frame, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        sc.wait_for(lambda line: "event" in line and "retry" in line["event"]["extensions"].get("agentproto", {}), 60)
        first = processes_with_env(str(config))
        assert kill_each(first), first  # the agent ends while agentproto waits
        events = sc.events(sid, "TurnEnded", 90)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
        (restart,) = [e for e in of(events, "Diagnostic") if "restart" in e["extensions"].get("agentproto", {})]
        body = restart["extensions"]["agentproto"]["restart"]
        assert body["process"] == 2 and body["status"] == "SIGKILL", body
        assert "".join(e["kind"]["TextDelta"]["text"] for e in of(events, "TextDelta")) == "after the restart"
        assert len(of(events, "TurnStarted")) == 1  # the same turn, its events in order
        assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
        assert len(api.main_requests()) == 2  # the re-sent turn reached the API
        assert not set(first) & set(processes_with_env(str(config)))  # the ended process is gone
        sc.ok({"cmd": "close", "session": sid}, timeout=30)
    finally:
        sc.close()
    records = [json.loads(line) for line in record.read_text().splitlines()]
    spawns = [r for r in records if r.get("dir") == "spawn"]
    assert len(spawns) == 2 and any(arg.startswith("--resume=") for arg in spawns[1]["argv"]), spawns
    assert [r["process"] for r in records if r.get("dir") == "restart"] == [2]
    # The recording replays offline, the second process's lines played to the second fake.
    env = {**os.environ, "AGENTPROTO_CLAUDE_BIN": "/nonexistent", "AGENTPROTO_DB": "off"}
    done = subprocess.run([sys.executable, "-m", "agentproto", "replay", str(record)], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0 and "every response matched" in done.stderr, done.stderr


def test_a_claude_process_that_ends_while_its_turn_waits_out_a_rate_limit_without_retry_fails_at_once(
    world: Any,
) -> None:
    # Without retry nothing is re-sent nor resumed: the session fails with ProcessExited.
    api, sc, work, config = world
    api.push(error(429, "rate_limit_error", "Rate limited", headers={"retry-after": "25"}), text("never"))
    env = api.cli_env(str(config))
    del env["CLAUDE_CONFIG_DIR"]
    env["CLAUDE_CODE_MAX_RETRIES"] = "0"
    frame = {"cmd": "open", "agent": "claude", "dir": str(work), "env": env, "config_home": str(config)}
    sid = sc.ok(frame, timeout=60)["id"]
    sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    sc.events(sid, "TurnEnded", 60)  # failed on the 429
    for pid in processes_with_env(str(config)):
        os.kill(pid, signal.SIGKILL)
    line = sc.wait_for(lambda line: line.get("session") == sid and "error" in line, 20)
    assert line["error"]["kind"] == "ProcessExited", line
    sc.wait_for(lambda line: line.get("closed") == sid, 20)
    assert len(api.main_requests()) == 1  # never re-sent
