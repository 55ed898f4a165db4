"""A real ``claude`` and a real ``codex`` session, recorded with ``--record`` against the fake
model APIs, then replayed with the CLIs gone (their executables removed, nothing of them on
PATH) and the fake APIs stopped: the replay transport plays their recorded wire to the
real drivers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import fake_openai as fo
from fake_anthropic import claude_bin
from recordings import claude, codex
from tests.commands.test_replay import replay


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_a_real_session_replays_with_its_cli_and_api_gone(name: str, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable = bin_dir / name
    executable.symlink_to(claude_bin() if name == "claude" else fo.pinned_codex())
    record = tmp_path / f"{name}.ndjson"
    root = tmp_path / "root"
    root.mkdir()
    (claude if name == "claude" else codex)(record, str(root), str(executable))  # the fake API stops at its end
    executable.unlink()
    bin_dir.rmdir()
    recs = [json.loads(line) for line in record.read_text().splitlines()]
    assert recs[0]["frontend"] == "serve"
    spawn = next(r for r in recs if r.get("dir") == "spawn")
    assert spawn["argv"][0] == str(executable) and not os.path.exists(spawn["argv"][0])
    assert sum(r.get("dir") == "from_agent" for r in recs) > 5
    if name == "claude":  # the id the driver made up, recorded and handed back on replay
        made_up = next(r for r in recs if r.get("dir") == "id")
        assert made_up["purpose"] == "session" and f"--session-id={made_up['value']}" in spawn["argv"]
    done = replay(record)
    assert done.returncode == 0, done.stderr
