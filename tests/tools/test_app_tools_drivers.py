"""The app's tools and hooks in each driver, fed with agent lines through the scripted
transport (tests/fakes/scripted.py): the real runtime, its real loopback listener, the real
driver, no agent process. The end-to-end cases with the real CLIs are in
test_claude_app_tools.py, test_codex_app_tools.py and test_acp_app_tools.py."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from scripted import NEVER_RUN, Conversation
from tests.drivers.acp.test_acp_driver import AGENT, INITIALIZED, SESSION, rpc
from tests.drivers.claude.test_claude_driver import CLAUDE, INIT, init, success
from tests.drivers.codex.test_codex_unit import THREAD, open_codex, start
from tests.drivers.codex.test_codex_mcp_approval import elicitation

LOOKUP = {"name": "lookup", "description": "Look a word up", "input_schema": {"type": "object"}}


def open_claude(**args: Any) -> Conversation:
    conv = Conversation()
    conv.open(CLAUDE, **args)
    initialize, version = conv.transport.written
    conv.feed(success(initialize["request_id"], INIT), success(version["request_id"], {"version": "2.1.197"}))
    conv.reply("open")
    return conv


def control(request_id: str, **request: Any) -> dict[str, Any]:
    return {"type": "control_request", "request_id": request_id, "request": request}


def answers_to(conv: Conversation, request_id: str) -> list[dict[str, Any]]:
    return [m["response"] for m in conv.transport.written
            if m.get("type") == "control_response" and m["response"]["request_id"] == request_id]


# -- Claude ------------------------------------------------------------------------------


def test_claude_registers_one_callback_per_hook_and_the_apps_output_answers_it():
    conv = open_claude(hooks=["PreToolUse", "Stop"])
    try:
        assert conv.transport.written[0]["request"] == {"subtype": "initialize", "hooks": {
            "PreToolUse": [{"matcher": None, "hookCallbackIds": ["agentproto_PreToolUse"]}],
            "Stop": [{"matcher": None, "hookCallbackIds": ["agentproto_Stop"]}],
        }}
        conv.command("prompt", text="go")
        hook_input = {"hook_event_name": "Stop", "stop_hook_active": False}
        conv.feed(init(conv), control("cli-1", subtype="hook_callback", callback_id="agentproto_Stop", input=hook_input))
        hook = conv.events("RequestOpened")[-1]["Hook"]
        assert hook == {"id": hook["id"], "event": "Stop", "input": hook_input}
        assert answers_to(conv, "cli-1") == []  # the CLI waits for the app
        output = {"decision": "block", "reason": "one more thing"}
        conv.command("answer", request=hook["id"], answer={"HookResult": output})
        assert answers_to(conv, "cli-1") == [{"subtype": "success", "request_id": "cli-1", "response": output}]
        # A callback id that is not ours gets the neutral output at once, and no request.
        conv.feed(control("cli-2", subtype="hook_callback", callback_id="someone_else", input={}))
        assert answers_to(conv, "cli-2") == [{"subtype": "success", "request_id": "cli-2", "response": {}}]
        assert len(conv.events("RequestOpened")) == 1
    finally:
        conv.close()


def test_claude_sends_nothing_for_a_hook_callback_it_withdrew():
    conv = open_claude(hooks=["PreToolUse"])
    try:
        conv.command("prompt", text="go")
        conv.feed(init(conv), control("cli-1", subtype="hook_callback", callback_id="agentproto_PreToolUse", input={}))
        hook = conv.events("RequestOpened")[-1]["Hook"]
        conv.feed({"type": "control_cancel_request", "request_id": "cli-1"})
        conv.command("answer", request=hook["id"], answer={"HookResult": {"continue": False}})
        assert answers_to(conv, "cli-1") == []
    finally:
        conv.close()


def test_claude_allows_the_apps_own_tool_itself_and_asks_for_any_other():
    conv = open_claude(tools=[LOOKUP])
    try:
        conv.command("prompt", text="go")
        conv.feed(init(conv), control("cli-1", subtype="can_use_tool", tool_name="mcp__agentproto__lookup",
                                      input={"word": "x"}, tool_use_id="toolu_1"))
        assert answers_to(conv, "cli-1") == [{"subtype": "success", "request_id": "cli-1",
                                              "response": {"behavior": "allow", "updatedInput": {"word": "x"}}}]
        assert conv.events("RequestOpened") == []
        assert [t["status"] for t in conv.events("ToolUpdated")] == ["Pending", "Running"]
        # Not declared by the app (another server's, or a name it never gave): asked.
        for n, name in enumerate(["mcp__agentproto__undeclared", "mcp__other__lookup"], start=2):
            conv.feed(control(f"cli-{n}", subtype="can_use_tool", tool_name=name, input={}, tool_use_id=f"toolu_{n}"))
            assert conv.events("RequestOpened")[-1]["Permission"]["id"] == f"cli-{n}"
            assert answers_to(conv, f"cli-{n}") == []
    finally:
        conv.close()


@pytest.mark.parametrize(("tool_timeout", "timeout_ms"), [(30, 35000), (2**31, 2**31 - 1)])
def test_claude_gets_the_tools_url_in_its_mcp_config_file_not_on_its_command_line(tool_timeout, timeout_ms):
    conv = open_claude(tools=[LOOKUP], tool_timeout=tool_timeout)
    try:
        url = conv.reply("open")["tools_url"]
        argv = conv.transport.spawn.argv
        assert not any(url in arg or url.split("/")[3] in arg for arg in argv)
        with open(argv[argv.index("--mcp-config") + 1], encoding="utf-8") as f:
            config = json.load(f)
        # Its deadline just past the app's (a JavaScript timer takes at most 2^31 - 1 ms).
        entry = {"type": "http", "url": url, "timeout": timeout_ms, "alwaysLoad": True}
        assert config == {"mcpServers": {"agentproto": entry}}
    finally:
        conv.close()


# -- Codex -------------------------------------------------------------------------------


def test_codex_gets_the_apps_server_in_the_thread_config_and_accepts_its_elicitation():
    conv = open_codex(tools=[LOOKUP], tool_timeout=30)
    try:
        url = conv.reply("open")["tools_url"]
        assert conv.transport.spawn.argv == [NEVER_RUN, "app-server"]  # nothing of it on the command line
        assert conv.transport.sent("thread/start")["params"]["config"] == {
            "mcp_servers.agentproto.url": url,
            "mcp_servers.agentproto.default_tools_approval_mode": "approve",
            "mcp_servers.agentproto.tool_timeout_sec": 35.0,
        }
        start(conv)
        # Should Codex ask anyway, the app's own tool is accepted without asking the app.
        conv.feed(elicitation(9, server="agentproto", tool="lookup"))
        assert conv.transport.written[-1] == {"id": 9, "result": {"action": "accept", "content": None, "_meta": None}}
        assert conv.events("RequestOpened") == []
        # One it did not declare is a permission like any other server's.
        conv.feed(elicitation(10, server="agentproto", tool="undeclared"))
        assert conv.events("RequestOpened")[-1]["Permission"]["id"] == "codex-10"
    finally:
        conv.close()


def test_codex_resume_and_fork_get_the_apps_server_too():
    for option, method in (("resume", "thread/resume"), ("fork", "thread/fork")):
        conv = Conversation()
        try:
            conv.open({"id": "codex", "path": NEVER_RUN}, tools=[LOOKUP], **{option: THREAD})
            conv.feed({"id": conv.transport.sent("initialize")["id"], "result": {"userAgent": "x/0.171.0"}})
            conv.feed({"id": conv.transport.sent("account/read")["id"], "result": {"account": None}},
                      {"id": conv.transport.sent("model/list")["id"], "result": {"data": []}})
            config = conv.transport.sent(method)["params"]["config"]
            assert config["mcp_servers.agentproto.default_tools_approval_mode"] == "approve"
            assert config["mcp_servers.agentproto.url"].endswith("/mcp/agentproto")
        finally:
            conv.close()


# -- ACP ---------------------------------------------------------------------------------


def open_acp(http: bool, **args: Any) -> Conversation:
    conv = Conversation()
    conv.open(AGENT, tools=[LOOKUP], **args)
    caps = {**INITIALIZED["agentCapabilities"], "mcpCapabilities": {"http": http, "sse": False}}
    conv.feed(rpc(conv.transport.sent("initialize")["id"], {**INITIALIZED, "agentCapabilities": caps}))
    return conv


def test_acp_without_http_gets_the_bridge_with_its_url_in_the_environment():
    servers = [{"name": "other", "connection": {"Stdio": {"command": "/bin/other", "args": ["-x"], "env": {}}}}]
    conv = open_acp(False, mcp_servers=servers)
    try:
        entries = conv.transport.sent("session/new")["params"]["mcpServers"]
        assert entries[0] == {"name": "other", "command": "/bin/other", "args": ["-x"], "env": []}
        bridge = entries[1]
        conv.feed(rpc(conv.transport.sent("session/new")["id"], {"sessionId": SESSION}))
        url = conv.reply("open")["tools_url"]
        assert bridge["name"] == "agentproto" and bridge["command"] == sys.executable
        assert bridge["env"] == [{"name": "AGENTPROTO_TOOLS_URL", "value": url}]
        assert not any(url.split("/")[3] in arg for arg in bridge["args"])
        # The entry runs this agentproto's bridge wherever the agent runs it: here from /,
        # with nothing of the caller's environment, its stdin closed at once (exit 0).
        done = subprocess.run([bridge["command"], *bridge["args"]], cwd="/", input=b"", capture_output=True,
                              env={e["name"]: e["value"] for e in bridge["env"]}, timeout=30)
        assert done.returncode == 0, done.stderr
    finally:
        conv.close()


def test_acp_with_http_gets_the_url_itself():
    conv = open_acp(True)
    try:
        (entry,) = conv.transport.sent("session/new")["params"]["mcpServers"]
        conv.feed(rpc(conv.transport.sent("session/new")["id"], {"sessionId": SESSION}))
        assert entry == {"type": "http", "name": "agentproto", "url": conv.reply("open")["tools_url"], "headers": []}
    finally:
        conv.close()


@pytest.mark.parametrize("where", ["title", "meta"])
def test_acp_allows_a_permission_for_the_apps_own_tool_itself(where):
    conv = open_acp(True)
    try:
        conv.feed(rpc(conv.transport.sent("session/new")["id"], {"sessionId": SESSION}))
        conv.command("prompt", text="go")
        name = "mcp__agentproto__lookup"
        call = {"toolCallId": "c1", "title": name} if where == "title" else {
            "toolCallId": "c1", "title": "lookup", "_meta": {"claudeCode": {"toolName": name}}}
        options = [{"optionId": "no", "name": "No", "kind": "reject_once"}, {"optionId": "yes", "name": "Yes", "kind": "allow_once"}]
        conv.feed({"jsonrpc": "2.0", "id": 5, "method": "session/request_permission",
                   "params": {"sessionId": SESSION, "toolCall": call, "options": options}})
        assert conv.transport.written[-1] == {"jsonrpc": "2.0", "id": 5, "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}}
        assert conv.events("RequestOpened") == []
    finally:
        conv.close()
