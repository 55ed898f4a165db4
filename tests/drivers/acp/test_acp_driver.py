"""The ACP driver's conversation, fed with JSON-RPC lines through the scripted transport
(tests/fakes/scripted.py): the real runtime, session and driver, no agent process. The
end-to-end cases against a real ACP agent are in test_acp.py."""

from __future__ import annotations

from typing import Any

import pytest

from scripted import NEVER_RUN, Conversation

AGENT = {"acp": {"name": "scripted", "path": NEVER_RUN, "args": ["--acp"]}}
SESSION = "sess-1"
INITIALIZED = {
    "protocolVersion": 1,
    "agentCapabilities": {"loadSession": False, "promptCapabilities": {"image": False}},
    "authMethods": [],
    "agentInfo": {"name": "scripted", "version": "1.0"},
}


def rpc(rpc_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def update(update_kind: str, **body: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION, "update": {"sessionUpdate": update_kind, **body}}}


def chunk(text: str) -> dict[str, Any]:
    return update("agent_message_chunk", content={"type": "text", "text": text})


def open_acp(**args: Any) -> Conversation:
    conv = Conversation()
    conv.open(AGENT, **args)
    initialize = conv.transport.sent("initialize")
    assert initialize["params"]["protocolVersion"] == 1 and initialize["jsonrpc"] == "2.0"
    conv.feed(rpc(initialize["id"], INITIALIZED))
    conv.feed(rpc(conv.transport.sent("session/new")["id"], {"sessionId": SESSION}))
    assert conv.reply("open")["resume_token"] == SESSION
    return conv


@pytest.fixture
def conv():
    conv = open_acp()
    yield conv
    conv.close()


def prompt(conv: Conversation, text: str = "hi") -> dict[str, Any]:
    conv.command("prompt", text=text)
    return conv.transport.sent("session/prompt")


def test_the_agent_is_spawned_with_its_acp_args_a_wide_pipe_and_group_wait(conv):
    spawn = conv.transport.spawn
    assert spawn.argv == [NEVER_RUN, "--acp"]
    assert spawn.pipe_size == 1 << 20 and spawn.wait_group


def test_a_turn_streams_chunks_and_ends_with_the_prompt_answer(conv):
    request = prompt(conv)
    assert request["params"] == {"sessionId": SESSION, "prompt": [{"type": "text", "text": "hi"}]}
    conv.feed(chunk("Hel"), chunk("lo"))
    conv.feed(rpc(request["id"], {"stopReason": "end_turn"}))
    assert conv.events("TextDelta") == [{"message_id": "m1", "text": "Hel"}, {"message_id": "m1", "text": "lo"}]
    assert conv.names()[-3:] == ["MessageEnded", "TurnEnded", "StatusChanged"]
    assert conv.events("TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}


def test_a_permission_is_asked_and_answered_by_option_kind(conv):
    prompt(conv)
    conv.feed({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": {
        "sessionId": SESSION,
        "toolCall": {"toolCallId": "call-1", "title": "Write a file", "kind": "edit", "status": "pending"},
        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"}],
    }})
    permission = conv.events("RequestOpened")[0]["Permission"]
    assert permission["options"] == ["AllowOnce", "DenyOnce"]
    conv.command("answer", request=permission["id"], answer={"Permission": "DenyOnce"})
    assert conv.transport.written[-1] == rpc(7, {"outcome": {"outcome": "selected", "optionId": "no"}})


def test_an_unknown_request_is_method_not_found_and_garbage_a_diagnostic(conv):
    conv.feed({"jsonrpc": "2.0", "id": 3, "method": "brand/new", "params": {}}, b"not json at all")
    assert conv.transport.written[-1] == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "method not found: brand/new"}}
    assert conv.names() == ["Diagnostic"] and "not JSON" in conv.diagnostics()[0]


def test_cancel_sends_session_cancel_and_the_turn_ends_cancelled(conv):
    request = prompt(conv)
    conv.command("cancel")
    assert conv.transport.written[-1] == {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SESSION}}
    conv.feed(rpc(request["id"], {"stopReason": "cancelled"}))
    assert conv.events("TurnEnded")[0]["stop"] == "Cancelled"


def test_the_agent_exiting_mid_turn_is_process_exited():
    conv = open_acp()
    prompt(conv)
    conv.transport.exit("1", "agent crashed")
    conv.run_until(lambda: ("closed",) in conv.out)
    (error,) = conv.errors()
    assert error.kind == "ProcessExited" and "agent crashed" in str(error.body())
    conv.close()


def test_auth_required_at_session_new_is_auth_required():
    conv = Conversation()
    conv.open(AGENT)
    conv.feed(rpc(conv.transport.sent("initialize")["id"], {**INITIALIZED, "authMethods": [
        {"id": "key", "name": "API key", "type": "env_var", "varName": "SCRIPTED_KEY"}]}))
    new = conv.transport.sent("session/new")
    conv.feed({"jsonrpc": "2.0", "id": new["id"], "error": {"code": -32000, "message": "Authentication required"}})
    conv.run_until(lambda: bool(conv.replies("open")))
    ((value, error),) = conv.replies("open")
    assert value is None and error.kind == "AuthRequired"
    conv.close()


def test_a_protocol_failure_quotes_the_agents_line():
    conv = Conversation()
    conv.open(AGENT)
    conv.feed(rpc(conv.transport.sent("initialize")["id"], {**INITIALIZED, "protocolVersion": 2}))
    conv.run_until(lambda: bool(conv.replies("open")))
    ((value, error),) = conv.replies("open")
    assert error.kind == "ProtocolFailed" and "ACP version 2" in error.message
    assert '"protocolVersion":2' in error.body()["line"]
    conv.close()


def test_the_turn_timeout_counts_silence_not_the_turns_length():
    conv = open_acp(env={"AGENTPROTO_ACP_TURN_TIMEOUT": "0.4"})
    prompt(conv)
    deadline = conv.loop.time() + 1.2  # three timeouts of a turn that keeps streaming
    while conv.loop.time() < deadline:
        conv.feed(chunk("more "))
        conv.wait(0.1)
    assert conv.events("TurnEnded") == []  # never silent for 0.4 s
    conv.run_until(lambda: bool(conv.events("TurnEnded")))  # and now it is
    assert "did not answer the prompt within 0.4s" in conv.events("TurnEnded")[0]["stop"]["Failed"]["message"]
    # The turn is cancelled, and the prompt given up on (ACP's $/cancel_request).
    assert [m["method"] for m in conv.transport.written[-2:]] == ["session/cancel", "$/cancel_request"]
    assert conv.transport.written[-1]["params"] == {"requestId": conv.transport.written[-3]["id"]}
    conv.close()
