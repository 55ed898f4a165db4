"""The ACP -> protocol 1 mapping, fed with what real agents sent (captured from the
pinned claude-agent-acp 0.23.1, codex-acp 0.16.0 and gemini-cli 0.61.0)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from agentproto.drivers.acp import mapping as m
from agentproto.core.wire import decode_json_line
from sidecar import ROOT

SCHEMA = json.loads((ROOT / "agentproto" / "schema.json").read_text())


def valid(definition: str, value: Any) -> None:
    schema = {"$ref": f"#/definitions/{definition}", "definitions": SCHEMA["definitions"]}
    jsonschema.validate(value, schema)


# Captured: the `authMethods` of each agent's initialize answer.
CLAUDE_AUTH = [
    {
        "description": "Run `claude /login` in the terminal",
        "name": "Log in with Claude",
        "id": "claude-login",
        "type": "terminal",
        "args": ["--cli"],
    }
]
CODEX_AUTH = [
    {
        "id": "chatgpt",
        "name": "Login with ChatGPT",
        "description": "Use your ChatGPT login with Codex CLI (requires a paid ChatGPT subscription)",
    },
    {
        "type": "env_var",
        "id": "codex-api-key",
        "name": "Use CODEX_API_KEY",
        "description": "Requires setting the `CODEX_API_KEY` environment variable.",
        "vars": [{"name": "CODEX_API_KEY"}],
    },
    {
        "type": "env_var",
        "id": "openai-api-key",
        "name": "Use OPENAI_API_KEY",
        "description": "Requires setting the `OPENAI_API_KEY` environment variable.",
        "vars": [{"name": "OPENAI_API_KEY"}],
    },
]
GEMINI_AUTH = [
    {"id": "oauth-personal", "name": "Log in with Google", "description": "Log in with your Google account"},
    {
        "id": "gemini-api-key",
        "name": "Gemini API key",
        "description": "Use an API key with Gemini Developer API",
        "_meta": {"api-key": {"provider": "google"}},
    },
    {"id": "vertex-ai", "name": "Vertex AI", "description": "Use an API key with Vertex AI GenAI API"},
    {
        "id": "gateway",
        "name": "AI API Gateway",
        "description": "Use a custom AI API Gateway",
        "_meta": {"gateway": {"protocol": "google", "restartRequired": "false"}},
    },
]
# Captured: claude-agent-acp's session/new answer (descriptions shortened).
CLAUDE_SESSION = {
    "sessionId": "55452a06",
    "models": {
        "availableModels": [
            {"modelId": "default", "name": "Default (recommended)"},
            {"modelId": "haiku", "name": "Haiku"},
        ],
        "currentModelId": "default",
    },
    "modes": {
        "currentModeId": "default",
        "availableModes": [
            {"id": "default", "name": "Default"},
            {"id": "acceptEdits", "name": "Accept Edits"},
            {"id": "plan", "name": "Plan Mode"},
        ],
    },
    "configOptions": [
        {
            "id": "mode",
            "name": "Mode",
            "description": "Session permission mode",
            "category": "mode",
            "type": "select",
            "currentValue": "default",
            "options": [
                {"value": "default", "name": "Default", "description": "Standard behavior"},
                {"value": "acceptEdits", "name": "Accept Edits"},
                {"value": "plan", "name": "Plan Mode"},
            ],
        },
        {
            "id": "model",
            "name": "Model",
            "description": "AI model to use",
            "category": "model",
            "type": "select",
            "currentValue": "default",
            "options": [{"value": "default", "name": "Default (recommended)"}, {"value": "haiku", "name": "Haiku"}],
        },
    ],
}


def test_login_steps_of_real_agents() -> None:
    argv = ["/opt/bin/claude-agent-acp"]
    assert m.login_steps(CLAUDE_AUTH, argv) == [
        {
            "Terminal": {
                "command": ["/opt/bin/claude-agent-acp", "--cli"],
                "env": {},
                "description": "Run `claude /login` in the terminal",
            }
        }
    ]
    assert m.login_steps(CODEX_AUTH, ["codex-acp"]) == [
        {"EnvVar": {"name": "CODEX_API_KEY"}},
        {"EnvVar": {"name": "OPENAI_API_KEY"}},
    ]
    # "agent" methods only become steps through the catalog's hints.
    assert m.login_steps(GEMINI_AUTH, ["gemini", "--acp"]) == []
    from agentproto.drivers.catalog import spec_for

    gemini = spec_for("gemini")
    assert gemini is not None
    steps = m.login_steps(GEMINI_AUTH, ["gemini", "--acp"], gemini.extra["login"])
    assert steps[0]["Terminal"]["command"] == ["gemini"]
    assert {"EnvVar": {"name": "GEMINI_API_KEY"}} in steps
    for step in steps:
        valid("LoginMethod", step)
    assert "Log in with Google, Gemini API key" in m.auth_message("key missing", GEMINI_AUTH)


def test_config_options_of_claude_agent_acp() -> None:
    options = m.map_config_options(CLAUDE_SESSION["configOptions"], CLAUDE_SESSION["modes"], CLAUDE_SESSION["models"])
    assert [(o["id"], how, acp_id) for o, how, acp_id in options] == [
        ("mode", "config", "mode"),
        ("model", "config", "model"),
    ]
    model = options[1][0]
    assert model["current"] == "default" and model["category"] == "model" and model["live"]
    assert [c["value"] for c in model["kind"]["Select"]["choices"]] == ["default", "haiku"]
    for option, _, _ in options:
        valid("ConfigOption", option)


def test_modes_and_models_fill_in_without_config_options() -> None:
    options = m.map_config_options(None, CLAUDE_SESSION["modes"], CLAUDE_SESSION["models"])
    assert [(o["id"], how) for o, how, _ in options] == [("mode", "mode"), ("model", "model")]
    assert options[0][0]["current"] == "default"
    assert options[1][0]["kind"]["Select"]["choices"][1] == {"value": "haiku", "label": "Haiku", "description": None}


def test_config_categories_take_well_known_ids_and_skip_unknown_types() -> None:
    options = m.map_config_options(
        [
            {
                "id": "reasoning",
                "name": "Effort",
                "category": "thought_level",
                "type": "select",
                "currentValue": "hi",
                "options": [{"value": "hi", "name": "High"}],
            },
            {"id": "x", "name": "X", "type": "slider", "currentValue": 3},
            {"id": "b", "name": "B", "type": "boolean", "currentValue": True},
            "garbage",
        ]
    )
    assert [(o["id"], acp_id) for o, _, acp_id in options] == [("effort", "reasoning"), ("b", "b")]


@pytest.mark.parametrize(
    ("reason", "stop", "warns"),
    [
        ("end_turn", {"Completed": {"source": "Protocol"}}, False),
        ("cancelled", "Cancelled", False),
        ("refusal", "Refused", False),
        ("max_tokens", {"Completed": {"source": "Protocol"}}, True),
        ("max_turn_requests", {"Completed": {"source": "Protocol"}}, True),
        ("something_new", {"Completed": {"source": "Protocol"}}, True),
    ],
)
def test_stop_reasons(reason: str, stop: Any, warns: bool) -> None:
    got, warning = m.map_stop_reason(reason)
    assert got == stop
    assert bool(warning) == warns
    valid("StopReason", got)


def test_tool_call_merges_partial_updates() -> None:
    first = m.merge_tool_call(
        None,
        {
            "toolCallId": "t1",
            "title": "Run ls",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "ls -la", "cwd": "/w"},
            "_meta": {"claudeCode": {"toolName": "Bash"}},
        },
    )
    assert first["input"] == {"Command": {"command": "ls -la", "cwd": "/w"}}
    assert first["raw"] == {"name": "Bash", "input": {"command": "ls -la", "cwd": "/w"}}
    second = m.merge_tool_call(
        first, {"toolCallId": "t1", "status": "in_progress", "content": [{"type": "terminal", "terminalId": "term-1"}]}
    )
    assert second["status"] == "Running" and second["title"] == "Run ls" and second["kind"] == "Execute"
    assert second["_terminals"] == ["term-1"]
    third = m.merge_tool_call(second, {"toolCallId": "t1", "status": "completed", "rawOutput": "total 0"})
    assert third["status"] == "Completed" and third["output"] == "total 0"
    assert third["raw"]["output"] == "total 0"
    for snapshot in (first, second, third):
        valid("ToolUpdate", m.public_tool(snapshot))


def test_tool_inputs_by_kind() -> None:
    assert m.tool_input("Read", {"file_path": "/a"}, []) == {"Path": "/a"}
    assert m.tool_input("Edit", None, ["/b"]) == {"Path": "/b"}
    assert m.tool_input("Search", {"pattern": "x.*"}, []) == {"Pattern": "x.*"}
    assert m.tool_input("Fetch", {"url": "https://e"}, []) == {"Url": "https://e"}
    assert m.tool_input("Fetch", {"query": "q"}, []) == {"Query": "q"}
    assert m.tool_input("Execute", {"command": ["git", "status"]}, []) == {
        "Command": {"command": "git status", "cwd": None}
    }
    assert m.tool_input("Other", {"anything": 1}, []) == "None"
    assert m.tool_input("Execute", 42, []) == "None"


def test_diffs_content_and_locations() -> None:
    snapshot = m.merge_tool_call(
        None,
        {
            "toolCallId": "t",
            "title": "Edit",
            "kind": "edit",
            "status": "completed",
            "locations": [{"path": "/w/a.py", "line": 3}, {"bad": 1}],
            "content": [
                {"type": "diff", "path": "/w/a.py", "oldText": None, "newText": "x"},
                {"type": "content", "content": {"type": "text", "text": "done"}},
                {"type": "content", "content": {"type": "resource_link", "uri": "file:///w/a.py", "name": "a.py"}},
            ],
        },
    )
    assert snapshot["diffs"] == [{"path": "/w/a.py", "old_text": None, "new_text": "x"}]
    assert snapshot["locations"] == ["/w/a.py"]
    assert snapshot["output"] == "done\n[a.py](file:///w/a.py)"
    valid("ToolUpdate", m.public_tool(snapshot))


def test_permission_outcome_goes_by_kind() -> None:
    options = [
        {"optionId": "allow", "name": "Allow", "kind": "allow_always"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    ]
    assert m.permission_outcome(options, {"Permission": "AllowAlways"}) == {"outcome": "selected", "optionId": "allow"}
    assert m.permission_outcome(options, {"Permission": "DenyAlways"}) == {"outcome": "selected", "optionId": "reject"}
    assert m.permission_outcome(options, {"Deny": {"message": "no"}}) == {"outcome": "selected", "optionId": "reject"}
    # Never widen an answer: allow once is not allow always.
    assert m.permission_outcome(options, {"Permission": "AllowOnce"}) == {"outcome": "cancelled"}
    assert m.permission_outcome(options, "Cancel") == {"outcome": "cancelled"}


def test_usage_plan_commands() -> None:
    assert m.map_context_usage({"used": 5, "size": 10, "cost": {"amount": 1.5, "currency": "EUR"}}) == {
        "used_tokens": 5,
        "window_tokens": 10,
        "cost_usd": None,
    }
    assert m.map_context_usage({"used": "x"}) is None
    assert m.map_usage({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}) == {
        "input_tokens": 3,
        "cached_input_tokens": 0,
        "output_tokens": 4,
    }
    assert m.map_usage(None) is None
    assert m.map_plan([{"content": "a", "status": "weird"}, 3]) == [{"text": "a", "status": "Pending"}]
    assert m.map_commands([{"name": "x", "description": "d", "input": None}, {"nope": 1}]) == [
        {"name": "x", "description": "d", "input_hint": None}
    ]


def test_mcp_servers_and_transport_checks() -> None:
    servers = [
        {"name": "s", "connection": {"Stdio": {"command": "/bin/s"}}},
        {"name": "h", "connection": {"Sse": {"url": "http://127.0.0.1/"}}},
    ]
    assert m.mcp_servers(servers, http=False, sse=True) == [
        {"name": "s", "command": "/bin/s", "args": [], "env": []},
        {"type": "sse", "name": "h", "url": "http://127.0.0.1/", "headers": []},
    ]
    with pytest.raises(m.AgentError) as raised:
        m.mcp_servers(servers, http=True, sse=False)
    assert raised.value.kind == "UnsupportedFeature"


def test_agent_lines_decode_with_the_one_line_decoder() -> None:
    # What ACP agents write (a CRLF, padding) decodes; anything else is one ValueError.
    assert decode_json_line(b'{"a":1}') == {"a": 1}
    assert decode_json_line(b'  {"a":1}  \r') == {"a": 1}
    assert decode_json_line(b'{"a":1}\r') == {"a": 1}
    for bad in (b"", b"not json", b'{"a":1} x', b'{"a":', b"\xff\xfe"):
        with pytest.raises(ValueError):
            decode_json_line(bad)


@pytest.mark.parametrize(
    ("tool_call", "earlier", "name"),
    [
        ({"title": "mcp__agentproto__lookup"}, None, "lookup"),
        ({"title": "Lookup", "_meta": {"claudeCode": {"toolName": "mcp__agentproto__lookup"}}}, None, "lookup"),
        ({"title": "mcp__other__lookup"}, None, None),
        # Gemini CLI: the title names the server; the bare name only when no title says otherwise.
        ({"toolCallId": "c1", "title": "lookup (agentproto MCP Server)"}, None, "lookup"),
        ({"toolCallId": "mcp_agentproto_lookup"}, None, "lookup"),
        ({"toolCallId": "c1", "title": "lookup (other MCP Server)"}, None, None),
        # A server named agentproto_x with a tool y is mcp_agentproto_x_y too: its title tells.
        ({"toolCallId": "mcp_agentproto_x_y", "title": "y (agentproto_x MCP Server)"}, None, None),
        ({"toolCallId": "mcp_agentproto_x_y", "title": "x_y (agentproto MCP Server)"}, None, "x_y"),
        ({"title": "lookup (agentproto MCP Server) extra"}, None, None),
        # codex-acp: rawInput.server_name, and the tool in this or an earlier update's title.
        ({"toolCallId": "c1", "rawInput": {"server_name": "agentproto"}}, {"title": "Tool: agentproto/lookup"}, "lookup"),
        ({"toolCallId": "c1", "rawInput": {"server_name": "agentproto"}, "title": "Tool: agentproto/lookup"}, None, "lookup"),
        ({"toolCallId": "c1", "rawInput": {"server_name": "other"}}, {"title": "Tool: agentproto/lookup"}, None),
        ({"toolCallId": "c1", "rawInput": {"server_name": "agentproto"}}, {"title": "Tool: other/lookup"}, None),
        ({"toolCallId": "c1", "rawInput": {"server_name": "agentproto"}}, None, None),
        ({"title": "Run ls"}, None, None),
    ],
)
def test_each_agents_spelling_of_an_app_tool(tool_call: Any, earlier: Any, name: str | None) -> None:
    assert m.app_tool_called(tool_call, earlier) == name


@pytest.mark.parametrize(
    ("tool_call", "servers", "name"),
    [
        # opencode: the title <server>_<tool>, kind other.
        ({"toolCallId": "call_3", "title": "agentproto_lookup", "kind": "other"}, (), "lookup"),
        ({"toolCallId": "call_3", "title": "agentproto_lookup"}, (), "lookup"),
        ({"toolCallId": "call_3", "title": "agentproto_lookup", "kind": "execute"}, (), None),
        ({"toolCallId": "call_3", "title": "other_lookup", "kind": "other"}, (), None),
        # A declared server agentproto_x with a tool y is agentproto_x_y too: never auto-allowed.
        ({"toolCallId": "call_3", "title": "agentproto_x_y", "kind": "other"}, ("agentproto_x",), None),
        ({"toolCallId": "call_3", "title": "agentproto_x_y", "kind": "other"}, ("other",), "x_y"),
        ({"toolCallId": "mcp_agentproto_x_y"}, ("agentproto_x",), None),
        ({"toolCallId": "mcp_agentproto_x_y"}, ("agentproto",), "x_y"),
        # A title that names the server settles it, whatever the declared servers.
        ({"toolCallId": "mcp_agentproto_x_y", "title": "x_y (agentproto MCP Server)"}, ("agentproto_x",), "x_y"),
    ],
)
def test_underscore_spellings_count_only_without_a_colliding_server(tool_call: Any, servers: Any, name: Any) -> None:
    assert m.app_tool_called(tool_call, None, servers) == name


def test_cost_of_a_usage_update_even_without_used():
    # claude-agent-acp sends "used": null when the API's usage lacks its cache fields; the cost still counts.
    assert m.cost_of({"used": None, "size": 200000, "cost": {"amount": 0.0105, "currency": "USD"}}) == 0.0105
    assert m.cost_of({"used": 5, "cost": {"amount": 1.5, "currency": "EUR"}}) is None
    assert m.cost_of({"used": 5, "cost": {"amount": True, "currency": "USD"}}) is None
    assert m.cost_of({"used": 5, "cost": {"amount": -1, "currency": "USD"}}) is None
    assert m.cost_of({"used": 5, "cost": "0.1"}) is None
    assert m.cost_of({"used": 5}) is None
