"""The app's own tools under an ACP agent, end to end: ``serve`` drives the SDK-built test
agent (tests/fakes/acp_test_agent.py), which calls the tool with the official MCP SDK's client
through the ``mcpServers`` entry it was given at ``session/new``: the listener's URL
itself when it advertises MCP over HTTP, otherwise ``agentproto mcp-bridge`` as a stdio
server whose URL is in its environment, never on its command line."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from fake_mcp import cmdlines, descendants
from listener_support import LOOKUP, text_result
from sidecar import Sidecar, kind_name
from tests.drivers.acp.test_acp import agent_ref

CALL = 'calltool agentproto lookup {"word": "acp"}'


@pytest.fixture
def sidecar():
    # Tools and hooks are agentproto's additions: anyagent's reference schema has no Tools
    # capability, no tools_url, no ToolCall.
    with Sidecar(reference=False) as sc:
        yield sc


def open_with_tools(sc: Sidecar, work: str, env: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
    cmd = {"cmd": "open", "agent": agent_ref(), "dir": work, "tools": [LOOKUP], "env": env or {}, **options}
    return sc.ok(cmd, timeout=30)


def next_request(sc: Sidecar, session: str, timeout: float = 30) -> dict[str, Any]:
    line = sc.wait_for(
        lambda l: isinstance(l, dict) and l.get("event", {}).get("session_id") == session
        and kind_name(l["event"]["kind"]) == "RequestOpened", timeout
    )
    return line["event"]


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (entry.decode("utf-8", "replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")


def gone(pids: list[int], timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and b"Z" not in _state(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return b"Z"


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_the_agent_calls_the_apps_tool_through_its_mcp_servers_entry(sidecar, tmp_path, transport):
    env = {"ACP_TEST_NO_HTTP": "1"} if transport == "stdio" else {}
    info = open_with_tools(sidecar, str(tmp_path), env)
    session, url = info["id"], info["tools_url"]
    token = url.split("/")[3]
    sidecar.ok({"cmd": "prompt", "session": session, "text": CALL})
    event = next_request(sidecar, session)
    call = event["kind"]["RequestOpened"]["ToolCall"]
    assert call["tool"] == "lookup" and call["arguments"] == {"word": "acp"}
    assert event["turn_info"] is not None  # the running turn's call
    # While the call waits for the app: every process the session runs, and what any
    # local user can read of them.
    processes = [pid for pid in descendants(sidecar.proc.pid) if pid != sidecar.proc.pid]
    assert processes and all(token.encode() not in line for line in cmdlines(processes).values())
    bridges = [pid for pid in processes if b"mcp-bridge" in cmdlines([pid]).get(pid, b"")]
    if transport == "stdio":
        (bridge,) = bridges
        assert environ(bridge)["AGENTPROTO_TOOLS_URL"] == url
    else:
        assert bridges == []
    sidecar.ok({"cmd": "answer", "session": session, "request": call["id"], "answer": text_result("one who acts")})
    events = sidecar.events(session, "TurnEnded", timeout=30)
    assert text_of(events) == f"via {transport}, tools lookup: one who acts"
    assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
    sidecar.ok({"cmd": "close", "session": session}, timeout=20)
    sidecar.wait_for(lambda l: l.get("closed") == session, 20)
    assert gone(processes) == []


#: How each agent titles an MCP tool call (tests/fakes/acp_test_agent.py plays each one).
TITLES = {
    "claude": "mcp__agentproto__undeclared",
    "gemini": "undeclared (agentproto MCP Server)",
    "codex": "Tool: agentproto/undeclared",
}


@pytest.mark.parametrize("naming", sorted(TITLES))
def test_a_permission_for_the_apps_own_tool_is_never_asked(sidecar, tmp_path, naming):
    # Regression: Gemini CLI's spelling (a title "<tool> (agentproto MCP Server)") and
    # codex-acp's (rawInput.server_name, the tool in an earlier update's title "Tool:
    # agentproto/<tool>") made the app answer a Permission for its own tool.
    info = open_with_tools(sidecar, str(tmp_path), {"ACP_TEST_TOOL_NAMING": naming})
    session = info["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "calltool-ask agentproto lookup {\"word\": \"asked\"}"})
    # The agent asked permission for the app's lookup: the driver allowed it, the
    # app sees only the call itself.
    request = next_request(sidecar, session)["kind"]["RequestOpened"]
    assert list(request) == ["ToolCall"] and request["ToolCall"]["arguments"] == {"word": "asked"}
    sidecar.ok({"cmd": "answer", "session": session, "request": request["ToolCall"]["id"], "answer": text_result("ok")})
    assert text_of(sidecar.events(session, "TurnEnded", timeout=30)) == "via http, tools lookup: ok"
    # A tool the app did not declare is not the app's: that permission is the app's to give.
    sidecar.ok({"cmd": "prompt", "session": session, "text": "calltool-ask agentproto undeclared {}"})
    permission = next_request(sidecar, session)["kind"]["RequestOpened"]["Permission"]
    assert permission["tool"]["title"] == TITLES[naming]
    sidecar.ok({"cmd": "answer", "session": session, "request": permission["id"], "answer": {"Permission": "DenyOnce"}})
    assert text_of(sidecar.events(session, "TurnEnded", timeout=30)) == "permission: mcp-no"


def test_acp_agents_have_no_hook_channel(sidecar, tmp_path):
    error = sidecar.error({"cmd": "open", "agent": agent_ref(), "dir": str(tmp_path), "hooks": ["PreToolUse"]}, timeout=30)
    assert error["kind"] == "UnsupportedFeature" and "hooks: acp-test has no hook channel" in error["detail"]

