"""``list`` and ``probe`` against the pinned Claude Code and Codex CLIs, each pointed at its
fake model API on 127.0.0.1 (a temp HOME, a temp config dir): every installed agent is
probed (login, models, commands, capabilities) and no model is called: the fake APIs get no
model request (Claude Code's own reachability check, a ``HEAD /``, is all they see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from fake_anthropic import FakeAnthropic, claude_bin
from sidecar import ROOT, base_env

import fake_openai as fo


@pytest.fixture
def apis(tmp_path: Path) -> Iterator[tuple[FakeAnthropic, fo.CodexWorld, dict[str, str]]]:
    with FakeAnthropic() as anthropic:
        world = fo.CodexWorld(str(tmp_path / "codex"))
        config = tmp_path / "claude"
        config.mkdir()
        env = base_env({**anthropic.cli_env(str(config)), **world.env, "AGENTPROTO_CLAUDE_BIN": claude_bin()})
        # Only the two pinned CLIs: the other agents' directories off PATH.
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".cache" not in p)
        try:
            yield anthropic, world, env
        finally:
            world.close()


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentproto", *args], capture_output=True, text=True, env=env,
                          cwd=str(ROOT), timeout=120)  # fmt: skip


def no_model_request(anthropic: FakeAnthropic, world: fo.CodexWorld) -> None:
    assert anthropic.main_requests() == [] and world.api.requests == []
    assert all(request.method in ("GET", "HEAD") for request in anthropic.requests), anthropic.requests


def test_list_probes_claude_and_codex_without_a_model_call(apis: Any) -> None:
    anthropic, world, env = apis
    done = run(env, "list", "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    agents = {agent["id"]: agent for agent in json.loads(done.stdout)["agents"]}
    assert set(agents) == {"mock", "claude", "codex"}
    claude = agents["claude"]["details"]
    assert claude["auth"] == {"Authenticated": {"kind": "ApiKey", "account": None}}
    models = {o["id"]: o for o in claude["config_options"]}["model"]["kind"]["Select"]["choices"]
    assert "sonnet" in [choice["value"] for choice in models]
    assert claude["commands"] and "Resume" in claude["capabilities"]["features"]
    codex = agents["codex"]["details"]
    assert {o["id"]: o for o in codex["config_options"]}["model"]["current"] == "fake-model"
    no_model_request(anthropic, world)
    table = run(env, "list")
    assert table.returncode == 0 and table.stderr == "", table.stderr
    lines = table.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("claude "))
    assert lines[row + 1].strip() == "login: logged in (API key)"
    assert lines[row + 2].strip().startswith("models: default*, ")
    assert any(line.strip().startswith("commands: /") for line in lines[row:])
    no_model_request(anthropic, world)
    assert world.wait_no_codex() == []


def test_probe_checks_the_login_of_one_agent(apis: Any) -> None:
    anthropic, world, env = apis
    done = run(env, "probe", "claude")
    assert done.returncode == 0, done.stderr
    assert "login         logged in (API key)" in done.stdout.splitlines()
    signed_out = {k: v for k, v in env.items() if k != "ANTHROPIC_API_KEY"}
    out = run(signed_out, "probe", "claude", "--json")
    assert out.returncode == 0, out.stderr
    login = json.loads(out.stdout)["auth"]["Unauthenticated"]["login"]
    assert {"EnvVar": {"name": "ANTHROPIC_API_KEY"}} in login
    table = run(signed_out, "probe", "claude").stdout
    assert "login         NOT logged in: run `" in table and "or set ANTHROPIC_API_KEY" in table
    no_model_request(anthropic, world)
