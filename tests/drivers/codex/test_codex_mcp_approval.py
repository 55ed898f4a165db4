"""Codex's approval of MCP tool calls, fed through the scripted transport: the
``mcpServer/elicitation/request`` that app-server 0.171.0 sends before every MCP tool call
(``_meta.codex_approval_kind: "mcp_tool_call"``) is a Permission request for the app's
other MCP servers, honouring the permission mode; any other elicitation (a server's own
form) is declined, as protocol 1 has no forms."""

from __future__ import annotations

from typing import Any

import pytest

from scripted import Conversation
from tests.drivers.codex.test_codex_unit import CODEX, THREAD, TURN, note, open_codex, start


def elicitation(rpc_id: int, server: str = "remote", tool: str = "shout", **meta: Any) -> dict[str, Any]:
    """The request exactly as app-server 0.171.0 wrote it (captured against tests/fakes/fake_mcp.py)."""
    return {
        "method": "mcpServer/elicitation/request",
        "id": rpc_id,
        "params": {
            "threadId": THREAD,
            "turnId": TURN,
            "serverName": server,
            "environmentId": None,
            "mode": "form",
            "_meta": {
                "codex_approval_kind": "mcp_tool_call",
                "persist": ["session", "always"],
                "tool_name": tool,
                "tool_description": "Upper-cases text",
                "tool_params": {"text": "hi"},
                "tool_params_display": [{"name": "text", "value": "hi", "display_name": "text"}],
                **meta,
            },
            "message": f'Allow the {server} MCP server to run tool "{tool}"?',
            "requestedSchema": {"type": "object", "properties": {}},
        },
    }


def mcp_item(item_id: str = "call_1", server: str = "remote", tool: str = "shout") -> dict[str, Any]:
    return {
        "type": "mcpToolCall", "id": item_id, "server": server, "tool": tool, "status": "inProgress",
        "arguments": {"text": "hi"}, "result": None, "error": None,
    }


@pytest.fixture
def conv():
    conv = open_codex()
    yield conv
    conv.close()


def test_a_tool_call_of_another_mcp_server_is_a_permission_request(conv):
    start(conv)
    conv.feed(note("item/started", item=mcp_item()), elicitation(0))
    permission = conv.events("RequestOpened")[-1]["Permission"]
    assert permission["id"] == "codex-0"
    assert permission["options"] == ["AllowOnce", "AllowAlways", "DenyOnce"]
    assert permission["detail"] == 'Allow the remote MCP server to run tool "shout"?'
    tool = permission["tool"]
    # The call's own item, which Codex started before it asked.
    assert (tool["id"], tool["kind"], tool["status"]) == ("call_1", {"Mcp": {"server": "remote", "tool": "shout"}}, "Pending")
    assert conv.transport.written[-1].get("id") != 0  # nothing answered yet: the app decides
    conv.command("answer", request="codex-0", answer={"Permission": "AllowOnce"})
    assert conv.transport.written[-1] == {"id": 0, "result": {"action": "accept", "content": None, "_meta": None}}


@pytest.mark.parametrize(
    ("answer", "result"),
    [
        ({"Permission": "AllowAlways"}, {"action": "accept", "content": None, "_meta": {"persist": "session"}}),
        ({"Permission": "DenyOnce"}, {"action": "decline", "content": None, "_meta": None}),
        ({"Deny": {"message": "no"}}, {"action": "decline", "content": None, "_meta": None}),
        ("Cancel", {"action": "cancel", "content": None, "_meta": None}),
    ],
)
def test_each_answer_is_codexs_elicitation_result(conv, answer, result):
    start(conv)
    conv.feed(elicitation(3))
    permission = conv.events("RequestOpened")[-1]["Permission"]
    # No item known: the tool is shown from the request itself.
    assert permission["tool"]["kind"] == {"Mcp": {"server": "remote", "tool": "shout"}}
    assert permission["tool"]["raw"] == {"name": "shout", "input": {"text": "hi"}}
    conv.command("answer", request=permission["id"], answer=answer)
    assert conv.transport.written[-1] == {"id": 3, "result": result}
    assert conv.events("RequestClosed") == [{"request_id": permission["id"]}]


def test_without_session_persistence_there_is_no_allow_always(conv):
    start(conv)
    conv.feed(elicitation(4, persist=[]))
    assert conv.events("RequestOpened")[-1]["Permission"]["options"] == ["AllowOnce", "DenyOnce"]


def test_auto_approve_accepts_it_without_asking_the_app():
    conv = open_codex(permission_mode="AutoApprove")
    try:
        start(conv)
        conv.feed(elicitation(5))
        assert conv.transport.written[-1] == {"id": 5, "result": {"action": "accept", "content": None, "_meta": None}}
    finally:
        conv.close()


def test_a_servers_own_form_is_still_declined(conv):
    start(conv)
    form = elicitation(6)
    del form["params"]["_meta"]
    form["params"]["requestedSchema"] = {"type": "object", "properties": {"name": {"type": "string"}}}
    conv.feed(form)
    assert conv.events("RequestOpened") == []
    assert conv.transport.written[-1] == {"id": 6, "result": {"action": "decline", "content": None, "_meta": None}}


def test_codex_has_no_hook_channel():
    conv = Conversation()
    try:
        conv.open(CODEX, hooks=["PreToolUse"])
        ((value, error),) = conv.replies("open")
        assert value is None and error.kind == "UnsupportedFeature"
        assert error.message.endswith("hooks: codex has no hook channel")
        assert conv.transports == []  # refused before anything started
    finally:
        conv.close()
