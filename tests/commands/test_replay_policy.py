"""A recording of a session whose policy answered requests replays (issue 24): the live run
decides again, so the same requests are opened and closed by the same rules; a recording
whose policy was edited to answer differently is drift."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from policy_support import permission, run_turn, script
from sidecar import ROOT, Sidecar, base_env


def replay(path: Path) -> subprocess.CompletedProcess[str]:
    env = base_env()
    env["AGENTPROTO_DB"] = "off"
    return subprocess.run(
        [sys.executable, "-m", "agentproto", "replay", str(path)],
        capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120,
    )  # fmt: skip


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


POLICY = [
    {"action": "allow", "command": ["git status **"]},
    {"action": "deny", "command": ["rm **"], "reason": "no deleting here"},
    {"action": "allow", "kind": ["Edit"], "path": ["src/**"]},
]


def record_session(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    requests = [
        permission("git", "Execute", "git status"),
        permission("rm", "Execute", "rm -rf build"),
        permission("edit", "Edit", paths=("src/a.py",)),  # relative to dir: the replay moves dir
        permission("ls", "Execute", "ls"),  # no match: the app answers
    ]
    record = tmp_path / "policy.ndjson"
    with Sidecar(["--mock", script(tmp_path, requests), "--record", str(record)]) as sc:
        sid = sc.open(dir=str(work), policy=POLICY)
        events = run_turn(sc, sid)
        closed = [e for e in events if "RequestClosed" in e["kind"]]
        assert [e["extensions"].get("agentproto", {}).get("answered_by") for e in closed] == [
            {"policy": 0, "action": "allow"},
            {"policy": 1, "action": "deny"},
            {"policy": 2, "action": "allow"},
            None,
        ]
        sc.close_stdin()
        sc.drain()
    return record


def test_a_recording_with_policy_answers_replays(tmp_path: Path) -> None:
    record = record_session(tmp_path)
    assert 'answered_by' in record.read_text()
    done = replay(record)
    assert done.returncode == 0, done.stderr
    assert "every response matched" in done.stderr


def test_a_recording_whose_policy_no_longer_answers_is_drift(tmp_path: Path) -> None:
    recs = records(record_session(tmp_path))
    for rec in recs:
        if rec.get("dir") == "in" and '"policy"' in rec["line"]:
            frame = json.loads(rec["line"])
            frame["policy"] = POLICY[1:]  # git status is no longer allowed: the app is asked
            rec["line"] = json.dumps(frame)
    done = replay(write(tmp_path / "edited.ndjson", recs))
    assert done.returncode == 1, done.stderr


def test_a_recording_of_a_rate_limited_turn_sent_again_replays(tmp_path: Path) -> None:
    turns = [[{"RateLimit": {"retry_after_ms": 500}}], [{"Emit": {"TextDelta": {"message_id": "m", "text": "ok"}}},
                                                       {"End": {"Completed": {"source": "Protocol"}}}]]  # fmt: skip
    mock = tmp_path / "limits.json"
    mock.write_text(json.dumps({"turns": turns}))
    record = tmp_path / "limits.ndjson"
    with Sidecar(["--mock", str(mock), "--record", str(record)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 5})
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        sc.close_stdin()
        sc.drain()
    assert "retry_at" in record.read_text()
    done = replay(record)  # retry_at is the clock's: normalized; the wait is not waited out
    assert done.returncode == 0, done.stderr


def test_the_wait_before_a_rate_limited_turn_is_sent_again_is_the_clocks() -> None:
    # Regression: wait_s (and the Diagnostic's "sent again in N s") is retry_at minus the
    # clock when the turn failed: 0.5 recorded, 0.499 replayed under load was a drift.
    from agentproto.core.recording import Normalizer

    def line(wait: float) -> str:
        return json.dumps({"event": {"kind": {"Diagnostic": {
            "level": "Info", "message": f"rate limited: the turn is sent again in {wait:.1f} s (retry 1)"}},
            "extensions": {"agentproto": {"retry": {"wait_s": wait, "attempt": 1}}}}})  # fmt: skip

    normalizer = Normalizer(None, "/tmp/x", "/tmp/x/root", None)
    assert normalizer.recorded_side(line(0.5)) == normalizer.live_side(line(0.449))
    assert normalizer.recorded_side(line(0.5)) != normalizer.live_side(line(0.5).replace('"attempt": 1', '"attempt": 2'))
