"""The Claude Code driver through agentproto's Python client (``agentproto.client``),
against the real, pinned ``claude`` CLI and the fake Anthropic API.

The sidecar gets a minimal environment (PATH and HOME, no ANTHROPIC_* variable); the
CLI's endpoint, key and state dir reach it only through the session options.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agentproto.client import AgentProtoError, Runtime, kind_of
from fake_anthropic import (
    FakeAnthropic,
    claude_bin,
    pinned_claude_version,
    processes_with_env,
    text,
    tool_use,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def setup(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "config"
    config.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "AGENTPROTO_CLAUDE_BIN": claude_bin(),
    }
    with FakeAnthropic() as api:
        rt = Runtime.start(env=env)
        try:
            yield rt, api, work, config
        finally:
            rt.close(timeout=15)
            deadline = time.monotonic() + 5
            while processes_with_env(str(config)) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = processes_with_env(str(config))
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            assert not left, f"claude processes left behind: {left}"


def options(
    api: FakeAnthropic, work: Path, config: Path, **extra: Any
) -> dict[str, Any]:
    env = api.cli_env(str(config))
    del env["CLAUDE_CONFIG_DIR"]
    return {"dir": str(work), "env": env, "config_home": str(config), **extra}


def until_turn_end(session, timeout: float = 60) -> list[dict[str, Any]]:
    out = []
    for event in session.events(timeout=timeout):
        out.append(event)
        if kind_of(event) == "TurnEnded":
            return out
    raise AssertionError("the session ended before the turn did")


def test_client_turn_with_a_permission_and_resume(setup):
    rt, api, work, config = setup
    api.push(
        tool_use("Bash", {"command": "echo from-claude > out.txt"}),
        text("Wrote out.txt."),
        text("Still here."),
    )
    session = rt.open("claude", **options(api, work, config))
    assert session.info["details"]["version"] == pinned_claude_version()
    session.prompt("write a file")
    texts = []
    for event in session.events(timeout=60):
        kind = kind_of(event)
        if kind == "RequestOpened":
            permission = event["kind"]["RequestOpened"]["Permission"]
            assert (
                permission["tool"]["input"]["Command"]["command"]
                == "echo from-claude > out.txt"
            )
            session.answer(permission["id"], {"Permission": "AllowOnce"})
        elif kind == "TextDelta":
            texts.append(event["kind"]["TextDelta"]["text"])
        elif kind == "TurnEnded":
            assert event["kind"]["TurnEnded"]["stop"] == {
                "Completed": {"source": "Protocol"}
            }
            break
    assert "".join(texts) == "Wrote out.txt."
    assert (work / "out.txt").read_text() == "from-claude\n"
    token = session.resume_token
    session.close()
    assert any(config.rglob(f"{token}.jsonl")), (
        "the CLI keeps its transcripts under config_home"
    )
    resumed = rt.open("claude", **options(api, work, config, resume=token))
    resumed.prompt("are you there?")
    events = until_turn_end(resumed)
    assert (
        "".join(
            e["kind"]["TextDelta"]["text"] for e in events if kind_of(e) == "TextDelta"
        )
        == "Still here."
    )
    assert "Wrote out.txt." in str(api.main_requests()[-1].body["messages"])
    resumed.close()


def test_client_generate_and_probe(setup):
    rt, api, work, config = setup
    api.push(text("A generated line."))
    assert (
        rt.generate("claude", "one line", **options(api, work, config))
        == "A generated line."
    )
    details = rt.probe("claude", **options(api, work, config))
    assert details["version"] == pinned_claude_version()
    assert "Authenticated" in details["auth"]


def test_client_env_reaches_the_cli_whole(setup, tmp_path):
    rt, api, work, config = setup
    marker = tmp_path / "marker.txt"
    api.push(
        tool_use(
            "Bash", {"command": f'printf "%s" "$AGENTPROTO_TEST_ANY_VAR" > {marker}'}
        ),
        text("ok"),
    )
    opts = options(api, work, config, permission_mode="AutoApprove")
    opts["env"]["AGENTPROTO_TEST_ANY_VAR"] = "any value, whole"
    session = rt.open("claude", **opts)
    session.prompt("run it")
    until_turn_end(session)
    assert marker.read_text() == "any value, whole"
    session.close()


def test_client_auth_required_without_a_key(setup):
    rt, api, work, config = setup
    opts = options(api, work, config)
    del opts["env"]["ANTHROPIC_API_KEY"]
    with pytest.raises(AgentProtoError) as caught:
        rt.open("claude", **opts)
    assert caught.value.kind == "AuthRequired"
    assert caught.value.login[1] == {"EnvVar": {"name": "ANTHROPIC_API_KEY"}}
