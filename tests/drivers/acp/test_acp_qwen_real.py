"""The real pinned Qwen Code (``qwen --acp``, @qwen-code/qwen-code 0.24.4) through ``serve``,
against the fake Chat Completions API on 127.0.0.1 (tests/fakes/fake_chat.py;
``OPENAI_BASE_URL``/``OPENAI_API_KEY``/``OPENAI_MODEL``): what is Qwen's own, what becomes of
the app's tools. The scenarios it shares with the other ACP agents (probe, a streamed turn,
a shell command behind a permission, files, cancel, EOF) are test_acp_scenarios_real.py's.

Qwen runs shell commands itself (no terminal/*) and reads and writes through fs/*. Its
memory-extraction subagent (a second model call after each turn) is turned off in the
temp HOME's settings; the fake also takes only requests with Qwen Code's own system prompt
as the conversation's.
"""

from __future__ import annotations

import json

import pytest

from acp_real_support import QwenWorld, running, stop_of
from fake_chat import call, text
from listener_support import LOOKUP, text_result


@pytest.fixture
def world(tmp_path):
    with running(QwenWorld, tmp_path) as w:
        yield w


@pytest.fixture
def api(world):
    return world.api


def test_the_apps_tool_is_deferred_and_unannounced_yet_reaches_the_app_with_no_permission(world, api):
    """Qwen 0.24.4 connects to the listener and registers the app's tool as a *deferred*
    tool (behind its tool_search), but announces it nowhere: neither its name nor its
    schema is in any model request, so a model has no reason to look for it (asserted as
    it is, docs/agents.md; the day Qwen announces it this fails). Found with tool_search or
    called by its name ``mcp__agentproto__<tool>``, it reaches the app as a ToolCall, with
    no permission asked (titled ``<tool> (agentproto MCP Server)``, Gemini's spelling)."""
    api.script(
        text("no tool here"),
        call("tool_search", {"query": "lookup"}),
        call("mcp__agentproto__lookup", {"word": "qwen"}),
        text("looked up"),
    )
    session = world.open(tools=[LOOKUP])["id"]
    world.prompt(session, "look qwen up")
    assert stop_of(world.turn(session)) == "Completed"
    first = api.turns()[0]
    assert not [name for name in first.tool_names() if "lookup" in name] and "tool_search" in first.tool_names()
    assert "Look a word up" not in json.dumps(first.body)
    world.prompt(session, "search for it, then call it")
    request = world.request(session)
    assert list(request) == ["ToolCall"], request
    assert request["ToolCall"]["tool"] == "lookup" and request["ToolCall"]["arguments"] == {"word": "qwen"}
    world.answer(session, request["ToolCall"]["id"], text_result("a coding agent"))
    assert stop_of(world.turn(session)) == "Completed"
    results = json.dumps(api.turns()[-1].tool_results())
    assert "mcp__agentproto__lookup" in results and "Look a word up" in results  # what tool_search found
    assert "a coding agent" in results
