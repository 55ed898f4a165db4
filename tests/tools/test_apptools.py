"""The app's own tools and hooks: declarations, answers and the wire's shapes (issue 10).

Sans-IO checks run directly (apptools.py); what the app sees runs through a real sidecar.
The listener's own tests (HTTP, the MCP SDK client, the mock's CallTool) are in
tests/tools/test_listener.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonschema
import pytest
from sidecar import ROOT, Sidecar

from agentproto.tools import apptools
from agentproto.core.errors import AgentError

SCHEMA = json.loads((ROOT / "agentproto" / "schema.json").read_text())


def _definition(name: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}", "definitions": SCHEMA["definitions"]})


LOOKUP = {"name": "lookup", "description": "Look a word up", "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}


# -- declarations ------------------------------------------------------------------------------


def test_declarations_are_kept_verbatim_with_the_default_input_schema() -> None:
    plain = {"name": "ping", "description": ""}
    typed = {**LOOKUP, "output_schema": {"type": "object", "required": ["meaning"]}}
    assert apptools.check_tools([plain, typed]) == [
        {"name": "ping", "description": "", "input_schema": {"type": "object"}},
        typed,
    ]
    assert apptools.check_tools(None) == [] and apptools.check_tools([]) == []


@pytest.mark.parametrize(
    ("tools", "named"),
    [
        ("lookup", "tools: expected an array"),
        ([5], "tools[0]: expected an object"),
        ([{"description": "x"}], "tools[0].name"),
        ([{"name": "has space", "description": "x"}], "tools[0].name"),
        ([{"name": "x" * 65, "description": "x"}], "tools[0].name"),
        ([{"name": "é", "description": "x"}], "tools[0].name"),
        ([LOOKUP, LOOKUP], "tools[1].name: lookup is declared twice"),
        ([{"name": "a"}], "tools[0] (a).description"),
        ([{"name": "a", "description": "x", "input_schema": []}], "tools[0] (a).input_schema"),
        ([{"name": "a", "description": "x", "input_schema": {"type": "string"}}], "tools[0] (a).input_schema"),
        ([{"name": "a", "description": "x", "output_schema": True}], "tools[0] (a).output_schema"),
        ([{"name": "a", "description": "x", "inputSchema": {}}], "tools[0]: unknown field `inputSchema`"),
    ],
)
def test_a_bad_declaration_is_invalid_configuration_naming_entry_and_field(tools: Any, named: str) -> None:
    with pytest.raises(AgentError) as caught:
        apptools.check_tools(tools)
    assert caught.value.kind == "InvalidConfiguration"
    assert named in caught.value.message, caught.value.message


@pytest.mark.parametrize(("hooks", "named"), [(["Pre Tool"], "hooks[0]"), (["Stop", "Stop"], "hooks[1]: Stop"), ([3], "hooks[0]")])
def test_a_bad_hook_name_is_invalid_configuration(hooks: Any, named: str) -> None:
    with pytest.raises(AgentError) as caught:
        apptools.check_hooks(hooks)
    assert caught.value.kind == "InvalidConfiguration" and named in caught.value.message


def test_drivers_that_cannot_take_tools_or_hooks_are_named() -> None:
    assert apptools.refusal("mock", True, frozenset(), [LOOKUP], []) is None
    error = apptools.refusal("gemini", False, frozenset(), [LOOKUP], [])
    assert error is not None and error.kind == "UnsupportedFeature" and "gemini" in error.message
    error = apptools.refusal("codex", True, frozenset(), [], ["Stop"])
    assert error is not None and "codex has no hook channel" in error.message
    error = apptools.refusal("claude", True, frozenset({"PreToolUse"}), [], ["PreInvocation"])
    assert error is not None and "PreInvocation" in error.message and "PreToolUse" in error.message


# -- answers -----------------------------------------------------------------------------------


def test_a_tool_result_becomes_mcps_call_tool_result() -> None:
    png = base64.b64encode(b"\x89PNG...").decode()
    answer = {"ToolResult": {"content": [{"type": "text", "text": "hi"}, {"type": "image", "data": png, "mime_type": "image/png"}], "is_error": False}}
    assert apptools.tool_result(LOOKUP, answer) == {
        "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": png, "mimeType": "image/png"}],
        "isError": False,
    }
    assert apptools.tool_result(LOOKUP, {"Deny": {"message": "not now"}}) == apptools.error_result("not now")
    assert apptools.tool_result(LOOKUP, "Cancel") == apptools.error_result("cancelled")
    # A structured result with no content also comes as its JSON text (MCP's backwards rule).
    structured = apptools.tool_result(LOOKUP, {"ToolResult": {"content": [], "is_error": False, "structured": {"a": 1}}})
    assert structured == {"content": [{"type": "text", "text": '{"a":1}'}], "isError": False, "structuredContent": {"a": 1}}


def test_a_tool_result_without_is_error_is_not_an_error() -> None:
    """An app that leaves is_error out means a result, not a failure (it was "expected a
    boolean, got null")."""
    answer = {"ToolResult": {"content": [{"type": "text", "text": "found"}]}}
    assert _definition("Answer").is_valid(answer)
    assert apptools.tool_result(LOOKUP, answer) == {"content": [{"type": "text", "text": "found"}], "isError": False}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"Permission": "AllowOnce"}, "a tool call takes a ToolResult, Deny or Cancel answer"),
        ({"ToolResult": {"content": [], "is_error": None}}, "ToolResult.is_error: expected a boolean, got null"),
        ({"ToolResult": {"content": [], "is_error": "no"}}, "ToolResult.is_error: expected a boolean, got string"),
        ({"ToolResult": {"content": "hi", "is_error": False}}, "ToolResult.content"),
        ({"ToolResult": {"content": [{"type": "text"}], "is_error": False}}, "ToolResult.content[0]"),
        ({"ToolResult": {"content": [{"type": "text", "text": "a", "extra": 1}], "is_error": False}}, "ToolResult.content[0]"),
        ({"ToolResult": {"content": [{"type": "audio", "data": ""}], "is_error": False}}, 'ToolResult.content[0].type: expected "text" or "image"'),
        ({"ToolResult": {"content": [{"type": "image", "data": "%%%", "mime_type": "image/png"}], "is_error": False}}, "not base64"),
        ({"ToolResult": {"content": [{"type": "image", "data": "", "mime_type": "text/plain"}], "is_error": False}}, "mime_type"),
        ({"ToolResult": {"content": [], "is_error": False, "structured": [1]}}, "ToolResult.structured: expected an object"),
        ({"ToolResult": {"content": [], "is_error": False, "more": 1}}, "unknown field `more`"),
    ],
)
def test_a_result_of_the_wrong_shape_is_refused_with_the_reason(answer: Any, why: str) -> None:
    problem = apptools.tool_result(LOOKUP, answer)
    assert isinstance(problem, str) and why in problem, problem


def test_a_result_must_keep_to_the_tools_output_schema() -> None:
    tool = {**LOOKUP, "output_schema": {"type": "object", "properties": {"meaning": {"type": "string"}}, "required": ["meaning"]}}
    missing = apptools.tool_result(tool, {"ToolResult": {"content": [{"type": "text", "text": "x"}], "is_error": False}})
    assert isinstance(missing, str) and "needs `structured`" in missing
    wrong = apptools.tool_result(tool, {"ToolResult": {"content": [], "is_error": False, "structured": {"meaning": 42}}})
    assert isinstance(wrong, str) and "output_schema" in wrong and "$.meaning" in wrong
    good = apptools.tool_result(tool, {"ToolResult": {"content": [], "is_error": False, "structured": {"meaning": "hi"}}})
    assert isinstance(good, dict) and good["structuredContent"] == {"meaning": "hi"}
    # An error result need not keep to it.
    assert isinstance(apptools.tool_result(tool, {"ToolResult": {"content": [], "is_error": True}}), dict)


def test_hook_answers_pass_through_and_cancel_is_neutral() -> None:
    output = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
    assert apptools.hook_output({"HookResult": output}) == output
    assert apptools.hook_output("Cancel") == {}
    assert isinstance(apptools.hook_output({"ToolResult": {"content": [], "is_error": False}}), str)


# -- the schema ------------------------------------------------------------------------------


def test_the_schema_has_the_new_shapes() -> None:
    frame = _definition("Frame")
    frame.validate({"id": 1, "cmd": "open", "agent": "mock", "dir": ".", "tools": [LOOKUP], "tool_timeout": 5, "hooks": ["Stop"], "hook_timeout": 2.5})
    assert list(frame.iter_errors({"id": 1, "cmd": "open", "agent": "mock", "dir": ".", "tools": [{"name": "bad name", "description": ""}]}))
    answer = _definition("Answer")
    answer.validate({"ToolResult": {"content": [{"type": "text", "text": "x"}], "is_error": False, "structured": {"a": 1}}})
    answer.validate({"HookResult": {"decision": "block"}})
    request = _definition("Request")
    request.validate({"ToolCall": {"id": "call-1", "tool": "lookup", "arguments": {}}})
    request.validate({"Hook": {"id": "hook-1", "event": "Stop", "input": {}}})
    _definition("Capability").validate("Tools")
    _definition("Capability").validate("Hooks")
    assert SCHEMA["definitions"]["SessionInfo"]["properties"]["tools_url"]["type"] == ["string", "null"]


# -- through a real sidecar --------------------------------------------------------------------


@pytest.fixture
def sidecar() -> Any:
    car = Sidecar()
    yield car
    car.close()


def test_the_wire_refuses_mistyped_fields_and_open_names_the_bad_entry(sidecar: Sidecar) -> None:
    error = sidecar.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": {"name": "x"}})
    assert error["kind"] == "BadFrame" and "`tools`" in error["message"]
    error = sidecar.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tool_timeout": 0})
    assert error["kind"] == "BadFrame" and "`tool_timeout`" in error["message"]
    error = sidecar.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "hooks": "Stop"})
    assert error["kind"] == "BadFrame" and "`hooks`" in error["message"]
    error = sidecar.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP, {"name": "x"}]})
    assert error["kind"] == "InvalidConfiguration" and "tools[1] (x).description" in error["message"]
    error = sidecar.error({"cmd": "generate", "agent": "mock", "dir": str(ROOT), "prompt": "hi", "tools": [{"name": "x y", "description": ""}]})
    assert error["kind"] == "InvalidConfiguration" and "tools[0].name" in error["message"]
    servers = [{"name": "agentproto", "connection": {"Http": {"url": "http://127.0.0.1:9/mcp"}}}]
    error = sidecar.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP], "mcp_servers": servers})
    assert error["kind"] == "InvalidConfiguration" and "mcp_servers" in error["message"]


def test_hooks_for_an_agent_without_a_hook_channel_are_unsupported(sidecar: Sidecar) -> None:
    error = sidecar.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "hooks": ["PreToolUse"]})
    assert error["kind"] == "UnsupportedFeature" and "mock has no hook channel" in error["message"]
    # Nothing declared is nothing served: the session has no tools_url.
    info = sidecar.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [], "hooks": []})
    assert info["tools_url"] is None and "Tools" not in info["details"]["capabilities"]["features"]


def test_tool_answers_are_checked_by_shape_on_the_wire(sidecar: Sidecar) -> None:
    session = sidecar.open()
    error = sidecar.error({"cmd": "answer", "session": session, "request": "call-1", "answer": {"ToolResult": "done"}})
    assert error["kind"] == "BadFrame" and "ToolResult" in error["message"]
    error = sidecar.error({"cmd": "answer", "session": session, "request": "call-1", "answer": {"HookResult": {}}})
    assert error["kind"] == "InvalidRequest" and "no open request call-1" in error["message"]


def test_a_tool_result_without_is_error_completes_the_call_on_the_wire() -> None:
    """Through a real `agent` process: the mock calls `lookup`, the app answers with content
    only, and the call completes (the agent gets the text, the turn goes on)."""
    from ops_support import Proc, result_of
    from sidecar import kind_name, script

    proc = Proc(["agent", "--mock", script("tools")])
    try:
        opened = result_of(proc.request({"op": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]}))
        assert opened["ok"], opened
        call = result_of(proc.request({"op": "prompt", "text": "go"}))["waiting"]["ToolCall"]
        lines = proc.request({"op": "answer", "request": call["id"],
                              "answer": {"ToolResult": {"content": [{"type": "text", "text": "found"}]}}})  # fmt: skip
        done = result_of(lines)
        assert done["ok"] and done["stop"] == {"Completed": {"source": "Protocol"}}, lines
        updated = [line["event"]["kind"]["ToolUpdated"] for line in lines
                   if line["kind"] == "event" and kind_name(line["event"]["kind"]) == "ToolUpdated"]  # fmt: skip
        assert updated and updated[-1]["status"] == "Completed", updated
    finally:
        proc.stop()
