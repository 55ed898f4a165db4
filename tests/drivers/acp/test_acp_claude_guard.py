"""Guard rails (issue 24) on the real pinned Claude Code ACP adapter (``claude-agent-acp``
0.23.1) through ``serve``, against the fake Messages API (tests/fakes/fake_anthropic.py):
a policy allowing one command and denying ``rm`` answers the adapter's Bash permission
requests without the app (the app sees each opened and closed, ``answered_by`` naming the
rule), and a ``usd`` budget counts the adapter's own ``usage_update`` cost (the session's
so far, as the spec says: each turn counts its own part) and stops the turn that crosses it;
an adapter killed while its turn waits out the API's 429 is started again, resumed by the
ACP session id, and the same turn goes to it.

The adapter reports usage once per turn, at its end (Claude Code's result), just before the
prompt's answer: that report is the one a turn is stopped on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from acp_real_support import ClaudeAcpWorld, running, stop_of, texts
from fake_anthropic import error, text, tool_use
from sidecar import ROOT, Sidecar, base_env, kill_each, kind_name

POLICY = [
    {"action": "allow", "command": ["touch **"]},
    {"action": "deny", "command": ["rm **"], "reason": "rm is not allowed in this repository"},
]
#: Claude Code prices the fake's default model as Sonnet: $3 in, $15 out per million tokens,
#: so this usage costs $0.0105 a turn (the adapter's cost, not agentproto's table).
USAGE = {"input_tokens": 1000, "output_tokens": 500, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


@pytest.fixture
def world(tmp_path):
    with running(ClaudeAcpWorld, tmp_path) as w:
        yield w


@pytest.fixture
def api(world):
    return world.api


def of(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if kind_name(e["kind"]) == name]


def test_a_policy_allows_touch_and_denies_rm_without_the_app(world, api, tmp_path):
    record = tmp_path / "policy.ndjson"
    world.sc.close()
    world.sc = Sidecar(["--record", str(record)], env=world.env, reference=False)
    (world.work / "victim.txt").write_text("keep me")
    api.push(
        tool_use("Bash", {"command": "touch made.txt", "description": "make"}),
        tool_use("Bash", {"command": "rm victim.txt", "description": "remove"}),
        text("Done."),
    )
    session = world.open(policy=POLICY)["id"]
    world.prompt(session, "go")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "Done."
    opened = {e["kind"]["RequestOpened"]["Permission"]["tool"]["title"]: e for e in of(events, "RequestOpened")}
    closed = {e["kind"]["RequestClosed"]["request_id"]: e for e in of(events, "RequestClosed")}
    assert set(opened) == {"touch made.txt", "rm victim.txt"}
    rules = {"touch made.txt": {"policy": 0, "action": "allow"}, "rm victim.txt": {"policy": 1, "action": "deny"}}
    for command, rule in rules.items():
        request = opened[command]
        request_id = request["kind"]["RequestOpened"]["Permission"]["id"]
        assert request["extensions"]["agentproto"]["answered_by"] == rule
        assert closed[request_id]["extensions"]["agentproto"]["answered_by"] == rule
        assert closed[request_id]["sequence"] == request["sequence"] + 1  # back to back
    assert (world.work / "made.txt").exists()
    assert (world.work / "victim.txt").read_text() == "keep me"
    statuses = [e["kind"]["StatusChanged"] for e in of(events, "StatusChanged")]
    assert "NeedsInput" not in statuses  # the app was never asked
    assert world.sc.ok({"cmd": "info", "session": session})["policy"] == POLICY
    # ACP answers a permission with one of the agent's options: a deny's reason has no field to
    # travel in, so the model hears the adapter's own refusal (docs/guard-rails.md says so).
    result = api.main_requests()[-1].body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] and "refused" in result["content"], result
    world.close_session(session)
    # The recording replays offline: the policy decides again, the same requests closed by the same rules.
    assert "answered_by" in record.read_text()
    env = {**base_env(), "AGENTPROTO_DB": "off"}
    cmd = [sys.executable, "-m", "agentproto", "replay", str(record)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    assert done.returncode == 0 and "every response matched" in done.stderr, done.stderr


def test_a_usd_budget_counts_the_adapters_cost_and_stops_the_turn_that_crosses_it(world, api):
    api.push(text("first", usage=USAGE), text("second", usage=USAGE), text("never"))
    session = world.open(budget={"usd": 0.015})["id"]
    world.prompt(session, "one")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "first"
    budget = world.sc.ok({"cmd": "info", "session": session})["budget"]
    assert budget["spent"]["usd"] == pytest.approx(0.0105), budget  # the adapter's cost, counted once
    assert budget["spent"]["input_tokens"] == 1000 and budget["spent"]["output_tokens"] == 500
    world.prompt(session, "two")  # the adapter's second report is $0.021 (the session's): this turn's part is $0.0105
    events = world.turn(session)
    stop = events[-1]["kind"]["TurnEnded"]["stop"]
    assert stop == {"Failed": {"message": "budget exceeded: usd $0.0210 of $0.0150 (over by $0.0060)"}}, stop
    error = of(events, "Diagnostic")[-1]["extensions"]["agentproto"]
    assert error["error"]["kind"] == "BudgetExceeded"
    assert error["budget"]["spent"] == pytest.approx(0.021) and error["budget"]["over"] == pytest.approx(0.006)
    refused = world.sc.error({"cmd": "prompt", "session": session, "text": "three"})
    assert refused["kind"] == "BudgetExceeded"
    assert len(api.main_requests()) == 2


def test_an_adapter_that_ends_while_its_turn_waits_out_a_rate_limit_is_resumed_and_the_turn_sent_again(
    world: Any, api: Any, tmp_path: Path
) -> None:
    # Claude Code (no retries of its own here) gives up on the API's 429, resetting in 10 s (room
    # for the transcript wait below and the kill to land inside the wait under load); the
    # adapter fails the prompt with it, and is killed (with its Claude Code) while agentproto
    # waits: a new adapter resumes the ACP session by its id and takes the same turn.
    record = tmp_path / "restart.ndjson"
    world.sc.close()
    world.sc = Sidecar(["--record", str(record)], env=world.env, reference=False)
    api.push(text("noted"), error(429, "rate_limit_error", "Rate limited", headers={"retry-after": "10"}),
             text("after the restart"))  # fmt: skip
    info = world.open(retry={"max_wait_s": 60})
    session, token = info["id"], info["resume_token"]
    world.prompt(session, "remember the word kumquat")
    assert texts(world.turn(session)) == "noted"
    world.prompt(session, "which word?")
    world.sc.wait_for(lambda line: "event" in line and "retry" in line["event"]["extensions"].get("agentproto", {}), 60)
    # Claude Code writes its transcript behind the turn: killed before it has, the session has
    # nothing to resume from (the adapter answers "Resource not found", agentproto then fails
    # the turn, as it must). The scenario is a process that ends after its transcript is saved.
    deadline = time.monotonic() + 30
    while not any("kumquat" in path.read_text(errors="replace")
                  for path in (world.home / ".claude").rglob(f"{token}.jsonl")):  # fmt: skip
        assert time.monotonic() < deadline, "Claude Code never saved the session's transcript"
        time.sleep(0.1)
    first = world.processes()
    assert kill_each(first), first  # the agent ends while agentproto waits
    events = world.turn(session)
    diagnostics = [(e["kind"]["Diagnostic"]["message"], e["extensions"]) for e in of(events, "Diagnostic")]
    assert stop_of(events) == "Completed" and texts(events) == "after the restart", (events[-1], diagnostics)
    (restart,) = [e for e in of(events, "Diagnostic") if "restart" in e["extensions"].get("agentproto", {})]
    body = restart["extensions"]["agentproto"]["restart"]
    assert body == {"status": "SIGKILL", "process": 2, "resume_token": token}, body
    limits = [e["extensions"]["agentproto"]["rate_limit"] for e in of(events, "Diagnostic")
              if "rate_limit" in e["extensions"].get("agentproto", {})]  # fmt: skip
    assert len(limits) == 1 and "429" in limits[0]["message"], limits  # the adapter's ACP error
    assert len(of(events, "TurnStarted")) == 1  # the same turn, its events in order
    assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
    requests = api.main_requests()
    assert len(requests) == 3, [r.body.get("messages", [])[-1:] for r in requests]  # the re-sent turn reached the API
    # The resumed conversation, the re-sent prompt last. The prompt the 429 failed is in it
    # when the killed Claude Code had written it to its transcript already (timing: under
    # load it had, else not).
    sent = world.user_texts(2)
    assert sent.count("remember the word kumquat") == 1 and sent[-1] == "which word?", sent
    assert sent.count("which word?") in (1, 2), sent
    assert not set(first) & set(world.processes()), (first, world.processes())  # the ended processes are gone
    world.close_session(session)
    world.sc.close()
    records = [json.loads(line) for line in record.read_text().splitlines()]
    assert len([r for r in records if r.get("dir") == "spawn"]) == 2, [r for r in records if r.get("dir") == "spawn"]
    assert [r["process"] for r in records if r.get("dir") == "restart"] == [2]
    resumed = [json.loads(r["line"]) for r in records if r.get("dir") == "to_agent" and token in r["line"]]
    assert [m["method"] for m in resumed if m.get("method") in ("session/resume", "session/load")] == ["session/resume"]
    # The recording replays offline, the second process's lines played to the second fake.
    env = {**base_env(), "AGENTPROTO_DB": "off"}
    cmd = [sys.executable, "-m", "agentproto", "replay", str(record)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    assert done.returncode == 0 and "every response matched" in done.stderr, done.stderr
