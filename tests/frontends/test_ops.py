"""The ops framing: `agentproto agent` (the interactive loop) and `--single-shot`.

Every line read is validated against agentproto/schema.json's OpsLine.
"""

from __future__ import annotations

import json
import time

from ops_support import (
    SLOW_TURN,
    Proc,
    done_of,
    events_of,
    result_of,
    script,
    single_shot,
    text_of,
    write_script,
)

from agentproto.frontends.ops_framing import OPERATIONS

# -- single-shot ----------------------------------------------------------------------------


def test_single_shot_capabilities_is_the_negotiation_step():
    code, lines = single_shot('{"op": "capabilities"}')
    assert code == 0 and done_of(lines) == 0
    result = result_of(lines)
    assert result["ok"] is True
    assert result["contract"] == "agentproto/1" and result["protocol"] == 1
    assert result["operations"] == list(OPERATIONS)
    for op in ("capabilities", "explain", "halt", "open", "prompt", "answer", "generate", "close"):
        assert op in result["operations"]
    assert "mock" in result["agents"]
    assert {"stdio", "unix", "http", "jsonrpc", "mcp"} <= set(result["transports"])


def test_single_shot_through_the_agent_subcommand_too():
    code, lines = single_shot('{"op": "explain", "code": "SessionBusy"}', via_agent=True)
    assert code == 0
    result = result_of(lines)
    assert result["code"] == "SessionBusy" and "idle" in result["text"]


def test_single_shot_exit_codes_follow_done():
    code, lines = single_shot('{"op": "explain", "code": "NoSuchCode"}')
    assert code == 1 and done_of(lines) == 1
    assert result_of(lines)["ok"] is False and result_of(lines)["error"]["kind"] == "InvalidRequest"

    code, lines = single_shot('{"op": "explain"}')
    assert code == 2 and done_of(lines) == 2
    assert lines[0] == {"kind": "error", "message": "missing required `code`"}

    code, lines = single_shot('{"op": "frobnicate"}')
    assert code == 2 and lines[0]["message"].startswith("unknown op: frobnicate (valid ops: discover, probe, ")

    code, lines = single_shot("{nope")
    assert code == 2 and lines[0]["message"].startswith("malformed JSON")

    code, lines = single_shot("")
    assert code == 2 and lines[0]["message"].startswith("malformed JSON")

    code, lines = single_shot("[1, 2]")
    assert code == 2 and lines[0]["kind"] == "error"


def test_single_shot_bounds_its_request_and_survives_deep_nesting():
    from agentproto.core.wire import DEFAULT_MAX_LINE

    code, lines = single_shot(b'{"op": "explain", "code": "' + b"x" * DEFAULT_MAX_LINE + b'"}')
    assert code == 2 and lines == [
        {"kind": "error", "message": f"request too long: more than {DEFAULT_MAX_LINE} bytes; discarded"},
        {"kind": "done", "exit_code": 2},
    ]
    code, lines = single_shot("[" * 100_000)
    assert code == 2 and lines[0]["message"].startswith("malformed JSON") and done_of(lines) == 2


def test_single_shot_extra_objects_are_errors_and_ignored():
    code, lines = single_shot('{"op": "explain", "code": "BadFrame"}\n{"op": "halt"}\n{"op": "capabilities"} {oops')
    assert code == 0 and done_of(lines) == 0
    assert result_of(lines)["op"] == "explain"
    errors = [line["message"] for line in lines if line["kind"] == "error"]
    assert len(errors) == 3
    assert "extra request #2" in errors[0] and "extra request #3" in errors[1]
    assert errors[2].startswith("malformed JSON")


def test_single_shot_generate_streams_events_then_the_text():
    code, lines = single_shot(json.dumps({"op": "generate", "agent": "mock", "dir": "/tmp", "prompt": "one two three"}))
    assert code == 0
    assert result_of(lines) == {"kind": "result", "op": "generate", "ok": True, "text": "one two three"}
    assert "TurnStarted" in events_of(lines) and text_of(lines) == "one two three"
    assert lines.index(result_of(lines)) == len(lines) - 2


def test_generate_with_an_unknown_or_missing_agent_is_a_command_failure_not_a_protocol_error():
    code, lines = single_shot(json.dumps({"op": "generate", "agent": "no-such-agent", "dir": "/tmp", "prompt": "x"}))
    assert code == 1 and done_of(lines) == 1
    assert result_of(lines)["ok"] is False and result_of(lines)["error"]["kind"]
    code, lines = single_shot(
        json.dumps({"op": "generate", "agent": {"id": "claude", "path": "/nonexistent/claude"}, "dir": "/tmp", "prompt": "x"})
    )
    assert code == 1 and result_of(lines)["ok"] is False


def test_single_shot_prompt_has_no_default_session():
    code, lines = single_shot('{"op": "prompt", "text": "hi"}')
    assert code == 2 and lines[0]["message"] == "missing required `session`"


# -- the interactive loop -------------------------------------------------------------------


def test_open_prompt_info_close_on_the_default_session():
    p = Proc(["agent"])
    try:
        lines = p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        opened = result_of(lines)
        assert opened["ok"] and opened["session"]["id"] == "s1" and done_of(lines) == 0

        lines = p.request({"op": "prompt", "text": "hello out there"})
        result = result_of(lines)
        assert result["ok"] and result["session_id"] == "s1" and result["prompt_id"] == "p1"
        assert result["stop"] == {"Completed": {"source": "Protocol"}}
        assert text_of(lines) == "hello out there"
        assert events_of(lines)[0] == "TurnStarted"
        # The turn's last StatusChanged (Idle) is part of the prompt's answer, before done.
        assert events_of(lines)[-2:] == ["TurnEnded", "StatusChanged"]
        assert lines[-3]["event"]["kind"] == {"StatusChanged": "Idle"}
        assert lines[-2] is result and done_of(lines) == 0

        lines = p.request({"op": "info"})
        info = result_of(lines)["session"]
        assert info["id"] == "s1" and info["status"] == "Idle"
        assert events_of(lines) == []  # nothing stale of the turn before

        lines = p.request({"op": "close", "session": "s1"})
        assert result_of(lines) == {"kind": "result", "op": "close", "ok": True, "session_id": "s1"}

        lines = p.request({"op": "prompt", "text": "again"})
        assert done_of(lines) == 2 and lines[0]["message"] == "missing required `session`"
        lines = p.request({"op": "prompt", "session": "s1", "text": "again"})
        assert done_of(lines) == 1 and result_of(lines)["error"]["kind"] == "SessionClosed"
        assert "Failed" in result_of(lines)["stop"]  # a prompt result always carries a stop
        p.close_stdin()
        assert p.rest() == [] and p.wait() == 0
    finally:
        p.stop()


def test_permission_request_waits_then_answer_streams_on():
    p = Proc(["agent", "--mock", script("turn")])
    try:
        p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        lines = p.request({"op": "prompt", "text": "run the tests"})
        result = result_of(lines)
        assert result["ok"] and "stop" not in result
        assert result["waiting"]["Permission"]["id"] == "r1"
        assert events_of(lines)[-2:] == ["RequestOpened", "StatusChanged"]  # NeedsInput: this request's

        lines = p.request({"op": "answer", "request": "r9", "answer": {"Permission": "AllowOnce"}})
        assert done_of(lines) == 1 and result_of(lines)["error"]["kind"] == "InvalidRequest"

        lines = p.request({"op": "answer", "request": "r1", "answer": {"Permission": "AllowOnce"}})
        result = result_of(lines)
        assert result["ok"] and result["stop"] == {"Completed": {"source": "Protocol"}} and result["turn_id"] == "t1"
        assert "RequestClosed" in events_of(lines) and text_of(lines) == "Done."
    finally:
        p.stop()


def test_question_waits_and_takes_a_question_answer():
    p = Proc(["agent", "--mock", script("question")])
    try:
        p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        result = result_of(p.request({"op": "prompt", "text": "ask me"}))
        assert result["waiting"]["Question"]["id"] == "q1"
        answer = {"Question": [{"Choices": ["c-blue"]}, {"Text": "Bluey"}]}
        result = result_of(p.request({"op": "answer", "request": "q1", "answer": answer}))
        assert result["ok"] and "Completed" in result["stop"]
    finally:
        p.stop()


def test_a_failed_turn_is_a_command_failure_with_the_session_error(tmp_path):
    die = write_script(tmp_path, "die", [[{"Emit": {"TextDelta": {"message_id": "m1", "text": "oh"}}}, "Die"]])
    p = Proc(["agent", "--mock", die])
    try:
        p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        lines = p.request({"op": "prompt", "text": "go"})
        result = result_of(lines)
        assert done_of(lines) == 1 and result["ok"] is False
        assert "Failed" in result["stop"] and result["error"]["kind"] == "ProcessExited"
    finally:
        p.stop()


def test_cancel_stops_a_turn_another_request_is_streaming(tmp_path):
    p = Proc(["agent", "--mock", write_script(tmp_path, "slow", [SLOW_TURN])])
    try:
        p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        p.send({"op": "prompt", "text": "take your time"})
        first = p.line()
        assert first["kind"] == "event"
        p.send({"op": "cancel"})
        prompt_lines = [first] + p.ops()
        result = result_of(prompt_lines)
        assert result["op"] == "prompt" and result["stop"] == "Cancelled" and done_of(prompt_lines) == 0
        cancel_lines = p.ops()
        assert result_of(cancel_lines) == {"kind": "result", "op": "cancel", "ok": True, "session_id": "s1"}
    finally:
        p.stop()


def test_protocol_errors_keep_the_loop_going_and_blank_lines_are_ignored():
    p = Proc(["agent"])
    try:
        p.write(b"\n   \n\t\n{not json\n")
        lines = p.ops()
        assert lines[0]["kind"] == "error" and lines[0]["message"].startswith("malformed JSON") and done_of(lines) == 2
        lines = p.request({"op": "prompt", "session": "s1", "text": 5})
        assert lines[0]["message"].startswith("invalid `text`") and done_of(lines) == 2
        lines = p.request({"op": "info", "session": "s404"})
        assert done_of(lines) == 1 and result_of(lines)["error"]["kind"] == "UnknownSession"
        lines = p.request({"op": "capabilities", "surprise": [1, 2], "id": 7})  # unknown keys are ignored
        assert result_of(lines)["ok"] is True
        lines = p.request({"no_op": True})
        assert lines[0]["message"] == "missing required `op`"
    finally:
        p.stop()


def test_every_line_is_flushed_as_written():
    p = Proc(["agent"])
    try:
        start = time.monotonic()
        lines = p.request({"op": "capabilities"}, timeout=10)
        assert result_of(lines)["ok"] and time.monotonic() - start < 10
        assert p.proc.poll() is None  # stdin still open: the answer came out by itself
    finally:
        p.stop()


def test_halt_ends_the_loop_at_once_with_stdin_still_open():
    p = Proc(["agent"])
    try:
        p.request({"op": "open", "agent": "mock", "dir": "/tmp"})
        p.write(b'{"op": "halt"}\n{"op": "capabilities"}\n')
        lines = p.ops()
        assert result_of(lines) == {"kind": "result", "op": "halt", "ok": True} and done_of(lines) == 0
        assert p.wait(15) == 0
        assert p.rest() == []  # nothing after halt's done
    finally:
        p.stop()


def test_eof_ends_the_loop_after_answering_what_was_asked():
    p = Proc(["agent"])
    try:
        p.write(b'{"op": "open", "agent": "mock", "dir": "/tmp"}\n{"op": "prompt", "text": "last words"}\n')
        p.close_stdin()
        first, second = p.ops(), p.ops()
        assert result_of(first)["op"] == "open" and result_of(second)["stop"]
        assert text_of(second) == "last words"
        assert p.rest() == [] and p.wait() == 0
    finally:
        p.stop()


def test_record_appends_one_pair_per_request(tmp_path):
    record = tmp_path / "trace.ndjson"
    record.write_text('{"request": "earlier", "response": "kept"}\n')
    p = Proc(["agent", "--record", str(record)])
    try:
        p.write(b'  {"op": "capabilities"}  \n{"op": "nope"}\n')
        p.ops()
        p.ops()
        p.close_stdin()
        assert p.wait() == 0
    finally:
        p.stop()
    records = [json.loads(line) for line in record.read_text().splitlines()]
    # This run's header follows what was there; then the pairs.
    assert records[1]["recording"] == 1 and records[1]["frontend"] == "agent"
    pairs = [records[0], *records[2:]]
    assert pairs[0] == {"request": "earlier", "response": "kept"}
    assert pairs[1]["request"] == '{"op": "capabilities"}'
    assert pairs[1]["response"].endswith('{"kind":"done","exit_code":0}\n')
    assert pairs[2]["request"] == '{"op": "nope"}'
    assert pairs[2]["response"].startswith('{"kind":"error","message":"unknown op: nope (valid ops: discover, ')
    assert pairs[2]["response"].endswith(')"}\n{"kind":"done","exit_code":2}\n')


def test_record_to_an_unwritable_path_never_halts_the_session(tmp_path):
    p = Proc(["agent", "--record", str(tmp_path / "no" / "such" / "dir" / "trace")])
    try:
        assert result_of(p.request({"op": "capabilities"}))["ok"]
        assert result_of(p.request({"op": "explain", "code": "BadFrame"}))["ok"]
    finally:
        p.stop()
    assert "recording skipped" in p.stderr


def test_cancel_never_overtakes_a_queued_open():
    p = Proc(["agent"])
    try:
        p.write(b'{"op": "open", "agent": "mock", "dir": "/tmp"}\n{"op": "cancel"}\n')
        assert result_of(p.ops())["op"] == "open"
        cancel = p.ops()
        assert result_of(cancel) == {"kind": "result", "op": "cancel", "ok": True, "session_id": "s1"}
    finally:
        p.stop()
