"""Real ACP agents, without credentials: each must report AuthRequired cleanly, and
closing must leave none of their processes behind.

The pinned npm agents are installed by `.ci/run` into .cache/agents (tests/agents/
package.json). A missing one fails its test with that instruction; nothing is skipped.
The agents run with a throwaway HOME, so no login of this machine can leak in.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from agentproto.client import AgentProtoError, Runtime, kind_of
from sidecar import Sidecar

ROOT = Path(__file__).resolve().parents[3]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"


def agent_bin(name: str) -> str:
    path = BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run `.ci/run` (it installs tests/agents/package.json)", pytrace=False)
    return str(path)


def isolated_env(home: Path) -> dict[str, str]:
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""}
    if os.geteuid() == 0:
        # claude-agent-acp refuses to start its Claude Code child as root unless told it
        # runs in a sandbox (session/new then fails with an internal error).
        env["IS_SANDBOX"] = "1"
    return env


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def assert_all_gone(pids: set[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {p for p in pids if running(p)}
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes left behind after close: {sorted(left)}")


def watch_reply(sc: Sidecar, frame: int, timeout: float) -> tuple[set[int], dict[str, Any]]:
    """The reply to ``frame``, and every process the sidecar had below it meanwhile."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen |= descendants(sc.proc.pid)
        try:
            return seen, sc.reply(frame, timeout=0.02)
        except AssertionError:
            continue
    raise AssertionError(f"no reply to frame {frame} within {timeout} s")


AUTH_AT_OPEN = [
    ("gemini", "gemini"),
    ("codex-acp", "codex-acp"),
]


@pytest.mark.parametrize(("agent_id", "command"), AUTH_AT_OPEN)
def test_auth_required_at_session_start(agent_id: str, command: str, tmp_path: Path) -> None:
    path = agent_bin(command)
    home = tmp_path / "home"
    home.mkdir()
    with Sidecar(env=isolated_env(home)) as sc:
        frame = sc.send({"cmd": "open", "agent": {"id": agent_id, "path": path}, "dir": str(tmp_path)})
        spawned, reply = watch_reply(sc, frame, 90)
        error = reply["error"]
        assert error["kind"] == "AuthRequired", error
        assert error["login"], error  # the agent's auth methods as steps a person can take
        assert "authentication required" in error["message"]
        assert spawned, "the agent was never started"
        assert_all_gone(spawned)
        # probe tells the auth state instead of failing.
        details = sc.ok({"cmd": "probe", "agent": {"id": agent_id, "path": path}, "dir": str(tmp_path)}, timeout=90)
        assert details["auth"] == {"Unauthenticated": {"login": error["login"]}}
        assert details["version"]
    assert not descendants(sc.proc.pid)


def test_gemini_login_steps(tmp_path: Path) -> None:
    path = agent_bin("gemini")
    home = tmp_path / "home"
    home.mkdir()
    with Sidecar(env=isolated_env(home)) as sc:
        error = sc.error({"cmd": "open", "agent": {"id": "gemini", "path": path}, "dir": str(tmp_path)}, timeout=90)
    assert {"EnvVar": {"name": "GEMINI_API_KEY"}} in error["login"]
    assert any("Terminal" in step and step["Terminal"]["command"] == ["gemini"] for step in error["login"])


def test_codex_acp_login_steps(tmp_path: Path) -> None:
    path = agent_bin("codex-acp")
    home = tmp_path / "home"
    home.mkdir()
    with Sidecar(env=isolated_env(home)) as sc:
        error = sc.error({"cmd": "open", "agent": {"id": "codex-acp", "path": path}, "dir": str(tmp_path)}, timeout=90)
    # codex-acp's env_var methods name their variables; its ChatGPT login is `codex login`.
    assert {"EnvVar": {"name": "CODEX_API_KEY"}} in error["login"]
    assert {"EnvVar": {"name": "OPENAI_API_KEY"}} in error["login"]


def test_claude_agent_acp_auth_required_at_prompt(tmp_path: Path) -> None:
    path = agent_bin("claude-agent-acp")
    home = tmp_path / "home"
    home.mkdir()
    with Sidecar(env=isolated_env(home)) as sc:
        info = sc.ok({"cmd": "open", "agent": {"id": "claude-acp", "path": path}, "dir": str(tmp_path)}, timeout=90)
        session = info["id"]
        options = {o["id"]: o for o in info["details"]["config_options"]}
        assert "model" in options and "mode" in options
        assert info["details"]["capabilities"]["mcp_transports"] == ["Stdio", "Http", "Sse"]
        spawned = descendants(sc.proc.pid)
        assert spawned
        sc.ok({"cmd": "prompt", "session": session, "text": "hello"})
        events = sc.events(session, "TurnEnded", 90)
        assert "Failed" in events[-1]["kind"]["TurnEnded"]["stop"]
        error = sc.wait_for(lambda line: line.get("session") == session and "error" in line, 30)["error"]
        assert error["kind"] == "AuthRequired"
        # Its terminal auth method reruns the agent with --cli.
        assert error["login"] == [
            {"Terminal": {"command": [path, "--cli"], "env": {}, "description": "Run `claude /login` in the terminal"}}
        ]
        sc.wait_for(lambda line: line.get("closed") == session, 30)
        assert_all_gone(spawned | descendants(sc.proc.pid))


def test_claude_agent_acp_through_the_python_client(tmp_path: Path) -> None:
    path = agent_bin("claude-agent-acp")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, **isolated_env(home)}
    env.pop("ANTHROPIC_API_KEY", None)
    with Runtime.start(env=env) as rt:
        session = rt.open({"id": "claude-acp", "path": path}, dir=str(tmp_path))
        spawned = descendants(rt.proc.pid)
        session.prompt("hello")
        seen: list[str] = []
        with pytest.raises(AgentProtoError) as raised:
            for event in session.events(timeout=90):
                seen.append(kind_of(event))
        assert raised.value.kind == "AuthRequired"
        assert raised.value.login[0]["Terminal"]["command"] == [path, "--cli"]
        assert "TurnEnded" in seen
        session.close()
    assert_all_gone(spawned)


def test_gemini_through_the_python_client(tmp_path: Path) -> None:
    path = agent_bin("gemini")
    home = tmp_path / "home"
    home.mkdir()
    env: dict[str, Any] = {**os.environ, **isolated_env(home)}
    with Runtime.start(env=env) as rt:
        with pytest.raises(AgentProtoError) as raised:
            rt.open({"id": "gemini", "path": path}, dir=str(tmp_path))
        assert raised.value.kind == "AuthRequired"
        spawned = descendants(rt.proc.pid)
    assert_all_gone(spawned)


def test_discover_finds_acp_agents_through_their_overrides(tmp_path: Path) -> None:
    env = {
        **isolated_env(tmp_path),
        "AGENTPROTO_GEMINI_BIN": agent_bin("gemini"),
        "AGENTPROTO_CODEX_ACP_BIN": agent_bin("codex-acp"),
    }
    with Sidecar(env=env) as sc:
        report = sc.ok({"cmd": "discover"}, 60)
    agents = {a["id"]: a for a in report["agents"]}
    assert agents["gemini"]["acp_args"] == ["--acp"]
    assert agents["gemini"]["source"] == "EnvOverride"
    assert agents["gemini"]["version"] == "0.61.0"
    assert agents["codex-acp"]["acp_args"] == []
    assert agents["codex-acp"]["executable_path"] == agent_bin("codex-acp")
