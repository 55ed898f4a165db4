"""The line guard: every agent line is handled on its own. Whatever one line does to a
driver (a shape it did not expect, a bug while mapping it) becomes a Diagnostic naming
the line, and the next line of the same read is handled as if nothing happened; an agent
request whose handling fails still gets an (error) answer, so the agent never waits.

Each case feeds the bad line and a good one in ONE read through the scripted transport,
which delivers a read as the child-process transport does (one loop callback): without
the guard the exception ends that callback and the good line is lost. The mock driver
has no agent wire (its script runs inside the driver), so it has no line to guard.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from scripted import Conversation
from tests.drivers.acp.test_acp_driver import SESSION, chunk, open_acp, prompt, update
from tests.drivers.claude.test_claude_driver import init, open_claude, stream
from tests.drivers.codex.test_codex_unit import THREAD, TURN, note, open_codex, start

# -- one driver each: how to open it, a turn, a good line, and a request ------------------


def codex_turn() -> Conversation:
    conv = open_codex()
    start(conv)
    return conv


def claude_turn() -> Conversation:
    conv = open_claude()
    conv.command("prompt", text="go")
    conv.feed(init(conv))
    return conv


def acp_turn() -> Conversation:
    conv = open_acp()
    prompt(conv)
    return conv


CODEX_GOOD = note("item/agentMessage/delta", itemId="msg_1", delta="still here")
CLAUDE_GOOD = {"type": "control_request", "request_id": "req-good", "request": {
    "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_good"}}
ACP_GOOD = chunk("still here")


def good_arrived(conv: Conversation) -> bool:
    texts = [d["text"] for d in conv.events("TextDelta")]
    permissions = [r["Permission"]["id"] for r in conv.events("RequestOpened")]
    return "still here" in texts or "req-good" in permissions


# -- the regressions: lines that raised out of the read loop -----------------------------

MALFORMED: list[tuple[str, Callable[[], Conversation], Any, Any, str]] = [
    # Codex's notification without itemId raised KeyError in the read loop.
    ("codex-no-itemId", codex_turn, note("item/commandExecution/outputDelta", delta="x"), CODEX_GOOD, "itemId"),
    ("codex-item-without-id", codex_turn, note("item/started", item={"type": "commandExecution"}), CODEX_GOOD, "id"),
    ("codex-list-params", codex_turn, {"method": "turn/plan/updated", "params": {"threadId": THREAD, "turnId": TURN, "plan": [1, "x"]}}, CODEX_GOOD, None),
    # json.loads raised RecursionError, which the Claude driver did not catch.
    ("claude-deep-nesting", claude_turn, b"[" * 100000, CLAUDE_GOOD, "nested"),
    ("claude-request-without-id", claude_turn, {"type": "control_request", "request": {"subtype": "can_use_tool"}}, CLAUDE_GOOD, "request_id"),
    ("claude-odd-stream-event", claude_turn, stream({"type": "message_start", "message": ["not", "an", "object"]}), CLAUDE_GOOD, "message id"),
    # A list as sessionUpdate or as an answer's id was unhashable: TypeError.
    ("acp-list-sessionUpdate", acp_turn, {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION, "update": {"sessionUpdate": [1]}}}, ACP_GOOD, "sessionUpdate"),
    ("acp-list-id", acp_turn, {"jsonrpc": "2.0", "id": [1], "result": {}}, ACP_GOOD, None),
]


@pytest.mark.parametrize("case, make, bad, good, diagnostic", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_line_costs_only_itself(case, make, bad, good, diagnostic):
    conv = make()
    before = len(conv.diagnostics())
    conv.feed(bad, good)  # one read
    assert good_arrived(conv), conv.names()
    new = conv.diagnostics()[before:]
    if diagnostic is None:
        assert new == []  # an update we do not know is skipped quietly
    else:
        assert len(new) == 1 and diagnostic in new[0], new
    conv.close()


@pytest.mark.parametrize("delta", [None, 5, ["a"], {"t": "x"}])
def test_codex_never_stringifies_a_delta(delta):
    conv = codex_turn()
    conv.feed(note("item/agentMessage/delta", itemId="msg_1", delta=delta), CODEX_GOOD)
    assert conv.events("TextDelta") == [{"message_id": "msg_1", "text": "still here"}]
    assert any("delta" in d and "string" in d for d in conv.diagnostics())
    conv.close()


def test_codex_approval_with_odd_fields_is_still_asked_and_answered():
    conv = codex_turn()
    # reason 5 with a grantRoot raised TypeError: the request was never answered.
    conv.feed({"method": "item/fileChange/requestApproval", "id": 4, "params": {
        "threadId": THREAD, "turnId": TURN, "itemId": "f1", "reason": 5, "grantRoot": "/w"}})
    permission = conv.events("RequestOpened")[0]["Permission"]
    assert permission["detail"] == "grant write access to /w"
    conv.command("answer", request=permission["id"], answer={"Permission": "AllowOnce"})
    assert conv.transport.written[-1] == {"id": 4, "result": {"decision": "accept"}}
    conv.close()


# -- the guard itself: any exception while one line is handled ----------------------------

DRIVERS = {
    "codex": (codex_turn, note("item/started", item={"type": "commandExecution", "id": "call_boom", "command": "boom"}), CODEX_GOOD),
    "claude": (claude_turn, {"type": "assistant", "message": {"id": "msg_0", "content": [
        {"type": "tool_use", "id": "toolu_boom", "name": "Read", "input": {"file_path": "/boom"}}]}}, CLAUDE_GOOD),
    "acp": (acp_turn, update("tool_call", **{"toolCallId": "boom", "title": "boom", "kind": "read"}), ACP_GOOD),
}


def boom(event: dict[str, Any]) -> bool:
    kind = event["kind"]
    return "boom" in repr(kind) and not (isinstance(kind, dict) and "Diagnostic" in kind)


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_any_exception_while_handling_a_line_is_a_diagnostic_naming_it(name, capfd):
    make, bad, good = DRIVERS[name]
    conv = make()
    conv.raise_on = boom
    conv.feed(bad, good)
    conv.settle()
    assert good_arrived(conv), conv.names()
    (diagnostic,) = [d for d in conv.events("Diagnostic") if "could not handle" in d["message"]]
    assert diagnostic["level"] == "Warning"
    assert "RuntimeError: injected: the sink failed" in diagnostic["message"] and "boom" in diagnostic["message"]
    assert "Traceback" in capfd.readouterr().err
    conv.close()


REQUESTS = {
    "codex": (codex_turn, {"method": "item/commandExecution/requestApproval", "id": 11, "params": {
        "threadId": THREAD, "turnId": TURN, "itemId": "call_boom", "command": "boom"}},
        lambda w: w == {"id": 11, "error": {"code": -32603, "message": "agentproto could not handle item/commandExecution/requestApproval"}}),
    "claude": (claude_turn, {"type": "control_request", "request_id": "req-boom", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "boom"}, "tool_use_id": "toolu_boom"}},
        lambda w: w == {"type": "control_response", "response": {"subtype": "error", "request_id": "req-boom", "error": "agentproto could not handle can_use_tool"}}),
    "acp": (acp_turn, {"jsonrpc": "2.0", "id": 12, "method": "session/request_permission", "params": {
        "sessionId": SESSION, "toolCall": {"toolCallId": "boom", "title": "boom"},
        "options": [{"optionId": "y", "name": "Allow", "kind": "allow_once"}]}},
        lambda w: w == {"jsonrpc": "2.0", "id": 12, "error": {"code": -32603, "message": "agentproto could not handle session/request_permission"}}),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_an_agent_request_whose_handling_raises_still_gets_an_answer(name, capfd):
    make, request, is_error_answer = REQUESTS[name]
    conv = make()
    conv.raise_on = boom
    conv.feed(request)
    conv.settle()
    assert any(is_error_answer(w) for w in conv.transport.written), conv.transport.written[-3:]
    assert any("could not handle" in d for d in conv.diagnostics())
    capfd.readouterr()
    conv.close()
