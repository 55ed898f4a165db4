"""MCP tools under the real pinned ``codex app-server`` (0.171.0) against the fake
Responses API on 127.0.0.1, through ``serve``: the model calls a tool as Codex offers it
(a ``function_call`` in the namespace ``mcp__<server>``), Codex asks before the call
(``mcpServer/elicitation/request``), and what the tool gave reaches the model's next
request as the call's ``function_call_output``."""

from __future__ import annotations

import json
from typing import Any

import pytest

import fake_openai as fo
from fake_mcp import HttpMcp, cmdlines
from sidecar import Sidecar, kind_name


@pytest.fixture
def world(tmp_path):
    w = fo.CodexWorld(str(tmp_path))
    yield w
    w.close()


@pytest.fixture
def mcp():
    server = HttpMcp()
    yield server
    server.close()


def output_text(output: Any) -> str:
    """A function_call_output's text (Codex writes MCP results as input_text items)."""
    if isinstance(output, str):
        return output
    return "\n".join(part.get("text", "") for part in output or [] if isinstance(part, dict))


def opened_requests(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["kind"]["RequestOpened"] for e in events if kind_name(e["kind"]) == "RequestOpened"]


def tool_calls(mcp: HttpMcp) -> list[Any]:
    return [body for method, _h, body in mcp.requests if isinstance(body, dict) and body.get("method") == "tools/call"]


def remote(mcp: HttpMcp) -> list[dict[str, Any]]:
    return [{"name": "remote", "connection": {"Http": {"url": mcp.url}}}]


@pytest.mark.parametrize("allowed", [True, False])
def test_a_call_of_the_apps_own_mcp_server_is_a_permission_the_app_answers(world, mcp, allowed):
    world.api.script(fo.mcp_call("remote", "shout", {"text": "hi"}), fo.text("done"))
    with Sidecar(env=world.env) as sc:
        session = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, "mcp_servers": remote(mcp)}, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": session, "text": "shout hi"})
        line = sc.wait_for(
            lambda l: l.get("event", {}).get("session_id") == session
            and kind_name(l["event"]["kind"]) == "RequestOpened", timeout=60
        )
        permission = line["event"]["kind"]["RequestOpened"]["Permission"]
        assert permission["tool"]["kind"] == {"Mcp": {"server": "remote", "tool": "shout"}}
        assert permission["detail"] == 'Allow the remote MCP server to run tool "shout"?'
        assert "AllowOnce" in permission["options"] and "DenyOnce" in permission["options"]
        assert tool_calls(mcp) == []  # Codex waits for the app's answer
        choice = "AllowOnce" if allowed else "DenyOnce"
        sc.ok({"cmd": "answer", "session": session, "request": permission["id"], "answer": {"Permission": choice}})
        events = sc.events(session, "TurnEnded", timeout=60)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        second = world.api.wait_requests(2)[1]
        (output,) = second.function_outputs().values()
        if allowed:
            assert [c["params"]["arguments"] for c in tool_calls(mcp)] == [{"text": "hi"}]
            assert "HI" in output_text(output)
        else:
            assert tool_calls(mcp) == []
            assert "HI" not in output_text(output) and "rejected" in output_text(output)
        sc.ok({"cmd": "close", "session": session}, timeout=30)
    assert world.wait_no_codex() == []


def test_auto_approve_lets_the_call_run_without_asking(world, mcp):
    world.api.script(fo.mcp_call("remote", "shout", {"text": "quiet"}), fo.text("done"))
    with Sidecar(env=world.env) as sc:
        options = {"mcp_servers": remote(mcp), "permission_mode": "AutoApprove"}
        session = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, **options}, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": session, "text": "shout"})
        events = sc.events(session, "TurnEnded", timeout=60)
        assert opened_requests(events) == []
        assert [c["params"]["arguments"] for c in tool_calls(mcp)] == [{"text": "quiet"}]
        assert "QUIET" in json.dumps(world.api.wait_requests(2)[1].function_outputs())
    assert world.wait_no_codex() == []


# -- the app's own tools (the listener as the MCP server ``agentproto``) -------------------

LOOKUP = {
    "name": "lookup",
    "description": "Look a word up",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
}


def next_request(sc: Sidecar, session: str, timeout: float = 60) -> dict[str, Any]:
    line = sc.wait_for(
        lambda l: l.get("event", {}).get("session_id") == session and kind_name(l["event"]["kind"]) == "RequestOpened",
        timeout,
    )
    return line["event"]["kind"]["RequestOpened"]


def test_the_model_calls_the_apps_tool_next_to_another_server_and_each_answer_reaches_it(world, mcp):
    world.api.script(
        fo.mcp_call("agentproto", "lookup", {"word": "codex"}),
        fo.mcp_call("remote", "shout", {"text": "both"}),
        fo.text("done"),
    )
    # Tools are agentproto's additions to anyagent's schema.
    with Sidecar(env=world.env, reference=False) as sc:
        info = sc.ok(
            {"cmd": "open", "agent": "codex", "dir": world.work, "tools": [LOOKUP], "mcp_servers": remote(mcp)},
            timeout=60,
        )
        session, url = info["id"], info["tools_url"]
        sc.ok({"cmd": "prompt", "session": session, "text": "look it up"})
        # The app's own tool: no Permission first (Codex was told the server approves its tools).
        request = next_request(sc, session)
        assert list(request) == ["ToolCall"] and request["ToolCall"]["arguments"] == {"word": "codex"}
        # Offered to the model as the namespace mcp__agentproto, the app's schema verbatim.
        first = world.api.response_requests()[0]
        (lookup,) = first.namespaces()["mcp__agentproto"]
        assert lookup["name"] == "lookup" and lookup["parameters"] == LOOKUP["input_schema"]
        assert "mcp__remote" in first.namespaces()  # the app's other server is there too
        # The URL holds the session's token: it is on no command line (it went over stdin).
        token = url.split("/")[3]
        pids = world.codex_processes()
        assert pids and all(token.encode() not in line for line in cmdlines(pids).values())
        answer = {"ToolResult": {"content": [{"type": "text", "text": "a coding agent"}], "is_error": False}}
        sc.ok({"cmd": "answer", "session": session, "request": request["ToolCall"]["id"], "answer": answer})
        # The other server's tool is still the app's to allow.
        permission = next_request(sc, session)["Permission"]
        assert permission["tool"]["kind"] == {"Mcp": {"server": "remote", "tool": "shout"}}
        sc.ok({"cmd": "answer", "session": session, "request": permission["id"], "answer": {"Permission": "AllowOnce"}})
        events = sc.events(session, "TurnEnded", timeout=60)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        requests = world.api.wait_requests(3)
        (lookup_output,) = requests[1].function_outputs().values()
        assert "a coding agent" in output_text(lookup_output)
        assert "BOTH" in json.dumps(requests[2].function_outputs())
        sc.ok({"cmd": "close", "session": session}, timeout=30)
    assert world.wait_no_codex() == []


def test_a_call_the_app_does_not_answer_in_time_gets_the_timeout_error(world):
    world.api.script(fo.mcp_call("agentproto", "lookup", {"word": "late"}), fo.text("done"))
    with Sidecar(env=world.env, reference=False) as sc:
        options = {"tools": [LOOKUP], "tool_timeout": 1}
        session = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, **options}, timeout=60)["id"]
        sc.ok({"cmd": "prompt", "session": session, "text": "look it up"})
        events = sc.events(session, "TurnEnded", timeout=60)
        assert [list(r) for r in opened_requests(events)] == [["ToolCall"]]
        (output,) = world.api.wait_requests(2)[1].function_outputs().values()
        assert "timed out" in output_text(output)
    assert world.wait_no_codex() == []
