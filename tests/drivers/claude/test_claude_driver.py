"""The Claude Code driver's conversation, fed with stream-json lines through the scripted
transport (tests/fakes/scripted.py): the real runtime, session and driver, no CLI process."""

from __future__ import annotations

from typing import Any

import pytest

from scripted import NEVER_RUN, Conversation

CLAUDE = {"id": "claude", "path": NEVER_RUN}
INIT = {
    "account": {"apiKeySource": "ANTHROPIC_API_KEY", "apiProvider": "firstParty"},
    "models": [{"value": "default", "displayName": "Default"}, {"value": "haiku", "displayName": "Haiku"}],
    "commands": [{"name": "compact", "description": "Compact", "argumentHint": ""}],
}


def success(request_id: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}}


def open_claude(**args: Any) -> Conversation:
    conv = Conversation()
    conv.open(CLAUDE, **args)
    initialize, version = conv.transport.written
    assert initialize["request"] == {"subtype": "initialize", "hooks": None}
    assert version["request"] == {"subtype": "get_binary_version"}
    conv.feed(success(initialize["request_id"], INIT), success(version["request_id"], {"version": "2.1.197"}))
    info = conv.reply("open")
    assert info["details"]["version"] == "2.1.197"
    return conv


@pytest.fixture
def conv():
    conv = open_claude()
    yield conv
    conv.close()


def init(conv: Conversation) -> dict[str, Any]:
    """The CLI's system/init: it took the user message (the turn is acknowledged)."""
    return {"type": "system", "subtype": "init", "session_id": conv.reply("open")["resume_token"], "tools": []}


def stream(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stream_event", "event": event, "parent_tool_use_id": None, "session_id": "x"}


def test_argv_is_the_sdks_stream_json_with_a_fresh_session_id(conv):
    argv = conv.transport.spawn.argv
    assert argv[:8] == [NEVER_RUN, "--output-format", "stream-json", "--input-format", "stream-json",
                        "--verbose", "--include-partial-messages", "--permission-prompt-tool"]
    session_id = next(a for a in argv if a.startswith("--session-id=")).split("=", 1)[1]
    assert conv.reply("open")["resume_token"] == session_id


def test_a_turn_streams_merged_deltas_and_ends_on_result(conv):
    conv.command("prompt", text="hi")
    assert conv.transport.written[-1]["message"] == {"role": "user", "content": "hi"}
    conv.feed(
        init(conv),
        stream({"type": "message_start", "message": {"id": "msg_1"}}),
        stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
    )
    conv.feed(
        {"type": "assistant", "message": {"id": "msg_1", "content": [{"type": "text", "text": "Hello"}]}, "uuid": "u-1"},
        stream({"type": "message_stop"}),
        {"type": "result", "subtype": "success", "is_error": False, "result": "Hello", "total_cost_usd": 0.01,
         "usage": {"input_tokens": 3, "output_tokens": 1}},
    )
    assert conv.events("TextDelta") == [{"message_id": "msg_1", "text": "Hello"}]  # one read, one event
    assert conv.events("MessageEnded") == [{"message_id": "msg_1"}]
    assert conv.events("TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}


def test_control_cancel_request_withdraws_the_open_request(conv):
    conv.command("prompt", text="ls")
    conv.feed(init(conv))
    can_use = {"type": "control_request", "request_id": "req-7",
               "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_1"}}
    conv.feed(can_use)
    (opened,) = conv.events("RequestOpened")
    assert opened["Permission"]["id"] == "req-7" and opened["Permission"]["tool"]["kind"] == "Execute"
    cancel = {"type": "control_cancel_request", "request_id": "req-7"}
    conv.feed(cancel)
    conv.feed(cancel)  # already withdrawn: nothing more
    assert conv.events("RequestClosed") == [{"request_id": "req-7"}]


def test_a_permission_answer_is_the_control_response(conv):
    conv.command("prompt", text="ls")
    conv.feed(init(conv), {"type": "control_request", "request_id": "req-1",
               "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_1"}})
    conv.command("answer", request="req-1", answer={"Permission": "AllowOnce"})
    assert conv.transport.written[-1] == {"type": "control_response", "response": {
        "subtype": "success", "request_id": "req-1", "response": {"behavior": "allow", "updatedInput": {"command": "ls"}}}}


def test_unknown_types_are_skipped_and_garbage_is_a_diagnostic(conv):
    conv.feed({"type": "from_a_future_cli", "x": 1}, b"this is {not json", b"[1,2]")
    assert conv.names() == ["Diagnostic", "Diagnostic"]
    assert "not JSON" in conv.diagnostics()[0]


def test_an_unknown_control_request_is_refused(conv):
    conv.feed({"type": "control_request", "request_id": "r9", "request": {"subtype": "brand_new"}})
    assert conv.transport.written[-1] == {"type": "control_response", "response": {
        "subtype": "error", "request_id": "r9", "error": "agentproto does not handle brand_new"}}


def test_the_cli_exiting_before_it_is_ready_is_spawn_failed():
    conv = Conversation()
    conv.open(CLAUDE)
    conv.transport.exit("1", "Error: unknown option")
    conv.settle()
    ((value, error),) = conv.replies("open")
    assert value is None and error.kind == "SpawnFailed" and "unknown option" in error.message
    conv.close()


def test_configure_takes_any_model_id_and_only_a_listed_mode(conv):
    # The CLI resolves a model id itself, listed or not; mode and effort are its fixed choices.
    for option, value in [("model", " "), ("mode", "anything"), ("model", "claude-unlisted")]:
        conv.command("configure", option=option, value=value)
    errors = [error for _, error in conv.replies("configure")[:2]]
    assert errors[0] is not None and errors[0].message == "invalid configuration: model: expects a model id"
    assert errors[1] is not None and errors[1].message.startswith("invalid configuration: mode: expects one of ")
    assert conv.transport.written[-1]["request"] == {"subtype": "set_model", "model": "claude-unlisted"}


def test_deltas_held_before_a_line_that_is_not_json_go_out_before_its_diagnostic(conv):
    # claude decodes through LineDriver.decode like every line driver: the deltas of the
    # read go out first, then the Warning quoting the line as text; a blank line is nothing.
    conv.command("prompt", text="hi")
    conv.feed(
        init(conv),
        stream({"type": "message_start", "message": {"id": "msg_1"}}),
        stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        b"  ",
        b"not json \xff",
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
    )
    assert [n for n in conv.names() if n in ("TextDelta", "Diagnostic")] == ["TextDelta", "Diagnostic", "TextDelta"]
    assert conv.diagnostics() == ["claude wrote a line that is invalid UTF-8 at byte 9: not json \ufffd"]


def answer(message_id: str, text: str) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": message_id, "content": [{"type": "text", "text": text}]}}


def result(text: str) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, "result": text,
            "usage": {"input_tokens": 3, "output_tokens": 1}}


def test_a_turn_the_cli_runs_by_itself_ends_on_its_result_and_the_queued_prompt_follows(conv):
    # Claude Code 2.1.332, a background subagent done: the CLI tells the model by itself.
    conv.command("prompt", text="delegate")
    conv.feed(init(conv), answer("msg_1", "waits"), result("waits"))
    conv.feed(answer("msg_2", "saw it"))
    assert [e["origin"] for e in conv.events("TurnStarted")][-1] == "Agent"
    conv.command("prompt", text="next")  # queued behind the CLI's own turn
    assert conv.transport.written[-1]["message"]["content"] == "delegate"
    conv.feed(result("saw it"))
    assert [e["stop"] for e in conv.events("TurnEnded")] == [{"Completed": {"source": "Protocol"}}] * 2
    assert conv.transport.written[-1]["message"]["content"] == "next"


def test_a_background_subagents_prompt_is_its_user_message(conv):
    conv.command("prompt", text="delegate")
    task = {"type": "system", "subtype": "task_started", "tool_use_id": "toolu_1", "prompt": "do sub work",
            "is_backgrounded": True, "uuid": "u-task"}
    front = {**task, "tool_use_id": "toolu_2", "prompt": "in front", "is_backgrounded": False, "uuid": "u-front"}
    conv.feed(init(conv), task, front)
    assert conv.events("UserMessage") == [{"message_id": "u-task", "text": "do sub work"}]
    started = [e for e in conv.out if e[0] == "event" and "UserMessage" in e[1]["kind"]]
    assert started[0][1]["turn_info"]["parent_tool_id"] == "toolu_1"
