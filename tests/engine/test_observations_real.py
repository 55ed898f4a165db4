"""The observations database with the real CLIs against the fake model APIs: each ended turn's
tokens are what the fake API reported, and Claude's cost is its running ``total_cost_usd``
differenced per turn."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

import fake_openai as fo
from fake_anthropic import FakeAnthropic, claude_bin, text
from sidecar import Sidecar


def rows(db: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    return conn.execute("SELECT * FROM turns ORDER BY id").fetchall()


def test_claude_turns_cost_what_the_cli_reported(tmp_path: Path) -> None:
    db, record = tmp_path / "obs.db", tmp_path / "rec.ndjson"
    work, config = tmp_path / "work", tmp_path / "config"
    work.mkdir()
    config.mkdir()
    # (The fake API reports input and output tokens; no cache.)
    usages = [{"input_tokens": 1200, "output_tokens": 34}, {"input_tokens": 2500, "output_tokens": 77}]
    with FakeAnthropic() as api:
        api.push(*(text(f"answer {i}", usage=usage) for i, usage in enumerate(usages)))
        with Sidecar(["--db", str(db), "--record", str(record)]) as sc:
            session = sc.open({"id": "claude", "path": claude_bin()}, dir=str(work), env=api.cli_env(str(config)))
            for prompt in ("first", "second"):
                sc.ok({"cmd": "prompt", "session": session, "text": prompt})
                sc.events(session, until="TurnEnded", timeout=60)
    found = rows(db)
    assert [(r["agent"], r["session"], r["turn"], r["stop"]) for r in found] == [
        ("claude", "s1", "t1", "Completed"), ("claude", "s1", "t2", "Completed")]  # fmt: skip
    for row, usage in zip(found, usages):
        assert (row["input_tokens"], row["output_tokens"], row["cached_input_tokens"]) == (
            usage["input_tokens"], usage["output_tokens"], 0)  # fmt: skip
        assert row["model"] and row["duration_ms"] >= 0
    # The CLI's own running total, from the recorded wire: each row is one turn's share.
    results = [json.loads(r["line"]) for r in map(json.loads, record.read_text().splitlines())
               if r.get("dir") == "from_agent" and '"type":"result"' in r["line"]]  # fmt: skip
    totals = [result["total_cost_usd"] for result in results]
    assert len(totals) == 2 and totals[1] > totals[0] > 0
    assert [r["cost_usd"] for r in found] == pytest.approx([totals[0], totals[1] - totals[0]])


def test_codex_turn_tokens_are_what_the_api_reported(tmp_path: Path) -> None:
    db = tmp_path / "obs.db"
    world = fo.CodexWorld(str(tmp_path))
    try:
        world.api.script(fo.text("Hello from Codex", chunks=2))
        with Sidecar(["--db", str(db)], env=world.env) as sc:
            session = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work}, timeout=60)["id"]
            sc.ok({"cmd": "prompt", "session": session, "text": "say hello"})
            ended = sc.events(session, until="TurnEnded", timeout=60)[-1]["kind"]["TurnEnded"]
    finally:
        world.close()
    (row,) = rows(db)
    reported = fo.usage()  # what the fake Responses API sent with its response
    assert (row["agent"], row["input_tokens"], row["output_tokens"]) == ("codex", reported["input_tokens"], reported["output_tokens"])
    assert row["cached_input_tokens"] == reported["input_tokens_details"]["cached_tokens"]
    assert ended["usage"]["input_tokens"] == row["input_tokens"] and row["cost_usd"] is None
    assert os.stat(db).st_mode & 0o777 == 0o600


def test_an_acp_agents_usage_update_cost_goes_into_the_database(tmp_path: Path) -> None:
    # The SDK-built test agent reports usage_update (used 1234 of 200000, cumulative cost
    # 0.25 USD) and the prompt's own tokens in each "chunks" turn.
    from tests.drivers.acp.test_acp import agent_ref

    db = tmp_path / "obs.db"
    with Sidecar(["--db", str(db)]) as sc:
        session = sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(tmp_path)}, timeout=30)["id"]
        sc.ok({"cmd": "prompt", "session": session, "text": "chunks"})
        events = sc.events(session, until="TurnEnded", timeout=30)
        sc.ok({"cmd": "close", "session": session}, timeout=30)
        sc.wait_for(lambda line: line.get("closed") == session, 30)
    assert [e["kind"]["ContextUsage"] for e in events if "ContextUsage" in e["kind"]] == [
        {"used_tokens": 1234, "window_tokens": 200000, "cost_usd": 0.25}]  # fmt: skip
    (row,) = rows(db)
    assert (row["agent"], row["input_tokens"], row["output_tokens"]) == ("acp-test", 20, 10)
    assert row["cost_usd"] == pytest.approx(0.25)
