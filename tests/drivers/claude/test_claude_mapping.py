"""The Claude driver's pure mapping, on values captured from the real CLI (2.1.197)."""

from __future__ import annotations

import json

from agentproto.drivers.claude import mapping as claude
from agentproto.drivers.base import Launch


def launch(**kw):
    base = {
        "agent_id": "claude",
        "installation": {},
        "executable": "/opt/claude",
        "dir": "/w",
    }
    base.update(kw)
    return Launch(**base)


def test_tool_kinds():
    assert claude.tool_kind("Bash") == "Execute"
    assert claude.tool_kind("Read") == "Read"
    for name in ("Edit", "Write", "MultiEdit"):
        assert claude.tool_kind(name) == "Edit"
    assert claude.tool_kind("Grep") == claude.tool_kind("Glob") == "Search"
    assert claude.tool_kind("WebFetch") == claude.tool_kind("WebSearch") == "Fetch"
    assert claude.tool_kind("Task") == claude.tool_kind("Agent") == "Subagent"
    assert claude.tool_kind("mcp__github__create_issue") == {
        "Mcp": {"server": "github", "tool": "create_issue"}
    }
    assert claude.tool_kind("mcp__srv__tool__with__dunders") == {
        "Mcp": {"server": "srv", "tool": "tool__with__dunders"}
    }
    assert claude.tool_kind("SomethingNew") == "Other"


def test_tool_snapshot_inputs():
    bash = claude.tool_snapshot(
        "t1", "Bash", {"command": "ls -la", "description": "List files"}
    )
    assert bash["input"] == {"Command": {"command": "ls -la", "cwd": None}}
    assert bash["title"] == "Bash: List files" and bash["status"] == "Pending"
    assert bash["raw"] == {
        "name": "Bash",
        "input": {"command": "ls -la", "description": "List files"},
    }
    edit = claude.tool_snapshot(
        "t2", "Edit", {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"}
    )
    assert edit["input"] == {"Path": "/w/a.py"} and edit["locations"] == ["/w/a.py"]
    assert edit["diffs"] == [{"path": "/w/a.py", "old_text": "a", "new_text": "b"}]
    assert claude.tool_snapshot("t3", "Grep", {"pattern": "TODO"})["input"] == {
        "Pattern": "TODO"
    }
    assert claude.tool_snapshot("t4", "WebFetch", {"url": "https://x"})["input"] == {
        "Url": "https://x"
    }
    assert claude.tool_snapshot("t5", "WebSearch", {"query": "q"})["input"] == {
        "Query": "q"
    }
    assert claude.tool_snapshot(
        "t6", "Agent", {"prompt": "do it", "description": "Sub"}
    )["input"] == {"Text": "do it"}
    assert claude.tool_snapshot("t7", "Odd", "not a dict")["input"] == "None"


def test_auth_from_the_initialize_account():
    assert claude.auth_status(
        {
            "tokenSource": "none",
            "apiKeySource": "ANTHROPIC_API_KEY",
            "apiProvider": "firstParty",
        },
        "c",
    ) == {"Authenticated": {"kind": "ApiKey", "account": None}}
    sub = claude.auth_status(
        {
            "tokenSource": "claude.ai",
            "apiProvider": "firstParty",
            "email": "a@b.c",
            "subscriptionType": "max",
        },
        "c",
    )
    assert sub == {
        "Authenticated": {
            "kind": "Subscription",
            "account": {"email": "a@b.c", "plan": "max"},
        }
    }
    assert (
        claude.auth_status({"apiProvider": "bedrock"}, "c")["Authenticated"]["kind"]
        == "CloudProvider"
    )
    missing = claude.auth_status(
        {"tokenSource": "none", "apiProvider": "firstParty"}, "/bin/claude"
    )
    assert missing["Unauthenticated"]["login"][0]["Terminal"]["command"] == [
        "/bin/claude",
        "/login",
    ]


def test_stop_reasons_of_results():
    ok = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "Hello",
        "stop_reason": "end_turn",
    }
    assert claude.stop_reason(ok, False) == {"Completed": {"source": "Protocol"}}
    interrupted = {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "stop_reason": None,
    }
    assert claude.stop_reason(interrupted, True) == "Cancelled"
    assert claude.stop_reason(interrupted, False) == {
        "Failed": {"message": "claude ended the turn with error_during_execution"}
    }
    api_error = {
        "subtype": "success",
        "is_error": True,
        "result": "API Error: 400 bad thing here",
        "api_error_status": 400,
    }
    assert claude.stop_reason(api_error, False) == {
        "Failed": {"message": "API Error: 400 bad thing here"}
    }
    assert (
        claude.stop_reason(
            {"subtype": "success", "is_error": False, "stop_reason": "refusal"}, False
        )
        == "Refused"
    )


def test_turn_usage_counts_cache_as_input():
    result = {
        "usage": {
            "input_tokens": 12,
            "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 100,
            "output_tokens": 7,
        }
    }
    assert claude.turn_usage(result) == {
        "input_tokens": 115,
        "cached_input_tokens": 100,
        "output_tokens": 7,
    }
    assert claude.turn_usage({}) is None


def test_questions_and_their_answers():
    tool_input = {
        "questions": [
            {
                "question": "Which color?",
                "header": "Color",
                "options": [{"label": "Red", "description": "warm"}, {"label": "Blue"}],
                "multiSelect": False,
            },
            {
                "question": "Which sizes?",
                "header": "Size",
                "options": [{"label": "S"}, {"label": "M"}],
                "multiSelect": True,
            },
        ]
    }
    request = claude.question_request("r1", tool_input)
    first, second = request["Question"]["questions"]
    assert first["choices"][0] == {"id": "Red", "label": "Red", "description": "warm"}
    assert second["multi_select"] is True and first["allows_free_text"] is True
    answers = claude.question_answers(
        request, [{"Text": "Green"}, {"Choices": ["S", "M"]}]
    )
    assert answers == {"Which color?": "Green", "Which sizes?": "S, M"}


def test_mcp_config_for_each_transport():
    servers = [
        {
            "name": "a",
            "connection": {
                "Stdio": {"command": "srv", "args": ["-x"], "env": {"K": "V"}}
            },
        },
        {
            "name": "b",
            "connection": {
                "Http": {"url": "http://127.0.0.1:1/mcp", "headers": {"H": "1"}}
            },
        },
        {"name": "c", "connection": {"Sse": {"url": "http://127.0.0.1:1/sse"}}},
    ]
    assert claude.mcp_config(servers) == {
        "mcpServers": {
            "a": {"type": "stdio", "command": "srv", "args": ["-x"], "env": {"K": "V"}},
            "b": {
                "type": "http",
                "url": "http://127.0.0.1:1/mcp",
                "headers": {"H": "1"},
            },
            "c": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
        }
    }


def test_argv_for_the_launch_options():
    argv = claude.build_argv(
        launch(
            resume="abc",
            fork="abc",
            fork_at="u-1",
            instructions="Be brief.",
            configure={"model": "any-model-id", "effort": "high"},
            permission_mode="AcceptEdits",
            args=["--extra"],
            mcp_servers=[{"name": "a", "connection": {"Stdio": {"command": "srv"}}}],
        ),
        "new-id",
        "/private/claude-x/mcp.json",
    )
    assert argv[0] == "/opt/claude"
    for flag in (
        "--output-format",
        "--input-format",
        "--verbose",
        "--include-partial-messages",
    ):
        assert flag in argv
    assert argv[argv.index("--permission-prompt-tool") + 1] == "stdio"
    assert argv[argv.index("--model") + 1] == "any-model-id"
    assert argv[argv.index("--effort") + 1] == "high"
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert (
        "--resume=abc" in argv
        and "--fork-session" in argv
        and "--resume-session-at=u-1" in argv
    )
    assert "--session-id=new-id" in argv
    assert argv[argv.index("--append-system-prompt") + 1] == "Be brief."
    # The config is a private file's path: its values never go on the command line.
    assert argv[argv.index("--mcp-config") + 1] == "/private/claude-x/mcp.json"
    assert argv[-1] == "--extra"
    assert claude.build_argv(launch(tools_disabled=True), None)[-2:] == ["--tools", ""]
    assert "--permission-mode" not in claude.build_argv(
        launch(permission_mode="AutoApprove"), None
    )


def test_config_options_from_the_initialize_models():
    init = {
        "models": [
            {
                "value": "default",
                "displayName": "Default (recommended)",
                "description": "d",
            },
            {"value": "haiku", "displayName": "Haiku"},
        ]
    }
    model, mode, effort = claude.config_options(init, None, "default", None)
    assert [c["value"] for c in model["kind"]["Select"]["choices"]] == [
        "default",
        "haiku",
    ]
    assert model["current"] == "default" and model["live"]
    assert "plan" in [c["value"] for c in mode["kind"]["Select"]["choices"]]
    assert effort["current"] is None
