"""The app's own tools and hooks under the real, pinned ``claude`` (tests/agents/package.json) against the fake
Messages API on 127.0.0.1, through ``serve``: the model calls ``mcp__agentproto__<tool>``
(the listener is an ``http`` server in the CLI's --mcp-config file), the app answers the
ToolCall and the model's next request carries that answer as the tool_result; hooks are
control-protocol callbacks registered at ``initialize``, and the app's HookResult is the
callback's answer."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from agentproto.drivers.claude.mapping import HOOK_EVENTS
from fake_anthropic import FakeAnthropic, claude_bin, processes_with_env, text, tool_use
from fake_mcp import cmdlines
from listener_support import LOOKUP, text_result
from sidecar import Sidecar, kind_name


@pytest.fixture
def api():
    with FakeAnthropic() as fake:
        yield fake


class World:
    def __init__(self, api: FakeAnthropic, tmp: Path) -> None:
        self.api = api
        self.work = tmp / "work"
        self.config = tmp / "config"
        self.tmp = tmp / "tmp"  # the sidecar's TMPDIR: its private area is in it
        for path in (self.work, self.config, self.tmp):
            path.mkdir()
        # Tools and hooks are agentproto's additions to anyagent's schema.
        self.sc = Sidecar(env={"AGENTPROTO_CLAUDE_BIN": claude_bin(), "TMPDIR": str(self.tmp)}, reference=False)

    def open(self, **options: Any) -> dict[str, Any]:
        env = self.api.cli_env(str(self.config))
        del env["CLAUDE_CONFIG_DIR"]  # given as config_home instead
        cmd = {"cmd": "open", "agent": "claude", "dir": str(self.work), "env": env, "config_home": str(self.config)}
        return self.sc.ok({**cmd, **options}, timeout=60)

    def next_event(self, session: str, name: str, timeout: float = 60) -> dict[str, Any]:
        line = self.sc.wait_for(
            lambda l: "event" in l and l["event"]["session_id"] == session and kind_name(l["event"]["kind"]) == name,
            timeout,
        )
        return line["event"]

    def processes(self) -> list[int]:
        return processes_with_env(str(self.config))


@pytest.fixture
def world(api, tmp_path):
    w = World(api, tmp_path)
    try:
        yield w
    finally:
        w.sc.close()
        deadline = time.monotonic() + 5
        while w.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = w.processes()
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"claude processes left behind: {left}"


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e["kind"][name] for e in events if kind_name(e["kind"]) == name]


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a Messages API request's last user message."""
    user = [m for m in body["messages"] if m.get("role") == "user"][-1]
    content = user["content"] if isinstance(user["content"], list) else []
    return [block for block in content if block.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def test_the_model_calls_the_apps_tool_and_gets_the_apps_answer(world):
    world.api.push(tool_use("mcp__agentproto__lookup", {"word": "claude"}, tool_id="toolu_lookup_1"), text("Looked up."))
    info = world.open(tools=[LOOKUP])  # the default permission mode: the CLI asks can_use_tool
    session, url = info["id"], info["tools_url"]
    world.sc.ok({"cmd": "prompt", "session": session, "text": "look claude up"})
    request = world.next_event(session, "RequestOpened")["kind"]["RequestOpened"]
    # The app sees the call itself, never a Permission for it.
    assert list(request) == ["ToolCall"]
    call = request["ToolCall"]
    assert call["tool"] == "lookup" and call["arguments"] == {"word": "claude"}
    # The model was offered the tool under its MCP name, with the app's schema verbatim.
    first = world.api.main_requests()[0].body
    offered = {tool["name"]: tool for tool in first["tools"]}
    assert offered["mcp__agentproto__lookup"]["input_schema"] == LOOKUP["input_schema"]
    # No process shows the URL's token; the CLI's --mcp-config is a 0600 file.
    token = url.split("/")[3]
    pids = world.processes()
    assert pids and all(token.encode() not in line for line in cmdlines(pids).values())
    (leader,) = [p for p in pids if os.getpgid(p) == p]
    argv = cmdlines([leader])[leader].split(b"\0")
    config = Path(argv[argv.index(b"--mcp-config") + 1].decode())
    assert stat.S_IMODE(config.lstat().st_mode) == 0o600
    assert json.loads(config.read_text())["mcpServers"]["agentproto"]["url"] == url
    world.sc.ok({"cmd": "answer", "session": session, "request": call["id"], "answer": text_result("one who writes code")})
    events = world.sc.events(session, "TurnEnded", 60)
    assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
    assert of(events, "RequestOpened") == []
    second = world.api.wait_requests(2)[1].body
    (block,) = tool_results(second)
    assert block["tool_use_id"] == "toolu_lookup_1" and not block.get("is_error")
    assert result_text(block) == "one who writes code"
    world.sc.ok({"cmd": "close", "session": session}, timeout=30)
    world.sc.wait_for(lambda l: l.get("closed") == session, 15)
    assert not config.exists()


def test_a_pretooluse_hook_answered_deny_blocks_the_bash_tool(world):
    target = world.work / "blocked.txt"
    world.api.push(
        tool_use("Bash", {"command": f"echo no > {target}", "description": "Write a file"}, tool_id="toolu_bash_1"),
        text("It was blocked."),
    )
    session = world.open(hooks=["PreToolUse"])["id"]
    assert "Hooks" in world.sc.ok({"cmd": "info", "session": session})["details"]["capabilities"]["features"]
    world.sc.ok({"cmd": "prompt", "session": session, "text": "write the file"})
    event = world.next_event(session, "RequestOpened")
    hook = event["kind"]["RequestOpened"]["Hook"]
    assert hook["event"] == "PreToolUse" and event["turn_info"] is not None
    assert hook["input"]["hook_event_name"] == "PreToolUse"
    assert hook["input"]["tool_name"] == "Bash" and hook["input"]["tool_input"]["command"].startswith("echo no")
    deny = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": "not in this repository"}}
    world.sc.ok({"cmd": "answer", "session": session, "request": hook["id"], "answer": {"HookResult": deny}})
    events = world.sc.events(session, "TurnEnded", 60)
    assert of(events, "RequestClosed") == [{"request_id": hook["id"]}]
    assert of(events, "RequestOpened") == []  # blocked before any permission was asked
    (block,) = tool_results(world.api.wait_requests(2)[1].body)
    assert block["tool_use_id"] == "toolu_bash_1" and block.get("is_error")
    assert "not in this repository" in result_text(block)
    assert not target.exists()


def test_every_offered_hook_fires_and_a_neutral_answer_lets_the_turn_go_on(world):
    target = world.work / "made.txt"
    world.api.push(tool_use("Bash", {"command": f"echo yes > {target}", "description": "Make a file"}), text("Made."))
    session = world.open(hooks=sorted(HOOK_EVENTS), permission_mode="AutoApprove")["id"]
    world.sc.ok({"cmd": "prompt", "session": session, "text": "make the file"})
    seen = []
    while True:
        line = world.sc.wait_for(lambda l: "event" in l and l["event"]["session_id"] == session, 60)
        kind = line["event"]["kind"]
        if kind_name(kind) == "TurnEnded":
            break
        if kind_name(kind) == "RequestOpened" and "Hook" in kind["RequestOpened"]:
            hook = kind["RequestOpened"]["Hook"]
            seen.append(hook["event"])
            world.sc.ok({"cmd": "answer", "session": session, "request": hook["id"], "answer": "Cancel"})
    assert target.read_text() == "yes\n"
    assert seen[0] == "UserPromptSubmit" and seen[-1] == "Stop"
    assert {"PreToolUse", "PostToolUse"} <= set(seen)


def test_a_hook_the_cli_cannot_deliver_is_refused_by_name(world):
    error = world.sc.error({"cmd": "open", "agent": "claude", "dir": str(world.work), "hooks": ["Notification"]}, 30)
    assert error["kind"] == "UnsupportedFeature" and "claude has no hook Notification" in error["detail"]
    assert world.processes() == []


def test_a_call_the_app_does_not_answer_in_time_gets_the_timeout_error(world):
    world.api.push(tool_use("mcp__agentproto__lookup", {"word": "late"}, tool_id="toolu_late"), text("Gave up."))
    session = world.open(tools=[LOOKUP], tool_timeout=1)["id"]
    world.sc.ok({"cmd": "prompt", "session": session, "text": "look it up"})
    events = world.sc.events(session, "TurnEnded", 60)
    assert [list(r) for r in of(events, "RequestOpened")] == [["ToolCall"]]
    (block,) = tool_results(world.api.wait_requests(2)[1].body)
    assert block["tool_use_id"] == "toolu_late" and block.get("is_error")
    assert "timed out" in result_text(block)
