"""Regressions for what the fuzzers (tests/fuzz/) found, each through the interface a
user meets it by. The fuzz targets keep the minimal inputs as explicit examples too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, base_env


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"turns": ' + "1" * 5000 + "}", "not JSON: Exceeds the limit"),
        ("[" * 200_000, "not JSON: nested too deeply"),  # deeper than any version's C recursion
        # Loaded, then the engine raised reading the message id mid-turn (an internal
        # error, and the turn's End was never played).
        ('{"turns": [[{"Emit": {"TextDelta": 5}}, {"End": {"Completed": {"source": "Protocol"}}}]]}',
         "turns[0][0]: not a valid TextDelta: $.TextDelta: expected object, got number"),
        ('{"turns": [[{"Nested": ["t1", {"ToolUpdated": {"id": "t1"}}]}]]}', "turns[0][0]: not a valid ToolUpdated"),
    ],
    ids=["5000-digit-integer", "deep-nesting", "emit-of-the-wrong-shape", "nested-of-the-wrong-shape"],
)
def test_a_mock_script_that_cannot_be_played_is_refused_with_its_reason(tmp_path: Path, text: str, words: str) -> None:
    # load_script let ValueError / RecursionError out: `serve --mock` died with a traceback.
    path = tmp_path / "script.json"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "serve", "--mock", str(path)],
        input=b"",
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=60,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr and words in stderr, stderr


@pytest.mark.parametrize(
    "request_body",
    [b'{"op": ' + b"9" * 5000 + b"}", b'{"op": "capabilities"} ' + b"1" * 5000],
    ids=["the-request", "an-extra-object"],
)
def test_single_shot_answers_a_5000_digit_integer_with_done(request_body: bytes) -> None:
    # split_objects let the digit limit's ValueError out of the EOF callback: no done line,
    # and the process never exited.
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "--single-shot"],
        input=request_body,
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=60,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["kind"] == "done" and done.returncode == lines[-1]["exit_code"], lines
    assert any(line["kind"] == "error" and "Exceeds the limit" in line["message"] for line in lines), lines
    assert b"Traceback" not in done.stderr


def _generate(prompt: str, schema: Any) -> tuple[int, list[dict[str, Any]]]:
    request = {"op": "generate", "agent": "mock", "dir": str(ROOT), "prompt": prompt, "output_schema": schema}
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "--single-shot"],
        input=json.dumps(request).encode(),
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=30,
    )
    assert b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["kind"] == "done" and lines[-1]["exit_code"] == done.returncode, lines
    return done.returncode, [line for line in lines if line["kind"] == "result"]


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"pattern": "("}, "`pattern` must be a usable regular expression"),
        ({"pattern": "(?=a)"}, "lookahead"),
        ({"$ref": "#/definitions/missing"}, "does not resolve"),
        ({"$ref": "https://example.com/schema.json"}, "remote references"),
        ({"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"allOf": [{"$ref": "#/definitions/a"}]}}, "$ref": "#/definitions/a"},
         "loops back"),
        ({"required": 5}, "`required` must be an array of strings"),
        ({"properties": {"n": {"minimum": "0"}}}, "at #/properties/n: `minimum` must be a number"),
        ({"type": "strnig"}, "`type` must be a type name"),
    ],
    ids=["bad-regex", "lookahead", "missing-ref", "remote-ref", "ref-loop", "required-not-a-list", "minimum-a-string", "unknown-type"],
)
def test_generate_refuses_an_unusable_output_schema_before_it_runs(schema: Any, words: str) -> None:
    # Each of these raised inside the loop callback that checks the answer (or recursed
    # forever): the generate never got its reply.
    code, results = _generate('{"a": 1}', schema)
    error = results[0]["error"]
    assert code == 1 and error["kind"] == "InvalidConfiguration", results
    assert "output_schema" in error["message"] and words in error["message"], error["message"]


def test_generate_checks_a_catastrophic_pattern_without_backtracking() -> None:
    # re.search("^(a+)+$", "a" * 38 + "!") backtracks for hours, in a callback of the one loop.
    code, results = _generate('"' + "a" * 38 + '!"', {"type": "string", "pattern": "^(a+)+$"})
    assert code == 1 and results[0]["error"]["kind"] == "ProtocolFailed", results
    assert "does not match ^(a+)+$" in results[0]["error"]["message"]
    code, results = _generate('"' + "a" * 38 + '"', {"type": "string", "pattern": "^(a+)+$"})
    assert code == 0 and results[0]["text"] == '"' + "a" * 38 + '"', results


def test_generate_answers_an_answer_nested_too_deeply_to_check() -> None:
    # json.loads raised RecursionError inside the answer's check: no reply.
    code, results = _generate("[" * 200_000 + "]" * 200_000, {"type": "array"})  # too deep on every Python version
    assert code == 1 and "nested too deeply" in results[0]["error"]["message"], results


def test_an_unchecked_schema_never_raises_out_of_the_validator() -> None:
    # validate_json is also called on schemas nobody checked first (an app tool's
    # output_schema): their problems are its problems, never an exception.
    from agentproto.core.jsonschema_lite import validate_json

    for schema in ({"required": 5}, {"$ref": "#"}, {"pattern": "(a)\\1"}, {"enum": 3}, {"type": 7}, {"items": {"$ref": "#/x"}}):
        problems = validate_json([1], schema)
        assert problems and all("output_schema is not usable" in p for p in problems), (schema, problems)


def test_events_held_while_a_session_opens_keep_the_turn_they_were_sent_in() -> None:
    # Found by tests/fuzz (driver_lines): Codex wrote a warning, then a request that opened
    # an agent turn, before the open completed. The engine holds events until the open
    # reply is out, and stamped the held warning with the turn running at release: the app
    # saw an event of turn t1 before t1's TurnStarted.
    sys.path.insert(0, str(ROOT / "tests"))
    from fuzz import targets_drivers

    pool = targets_drivers._pool("codex")
    approval = next(i for i, line in enumerate(pool) if "requestApproval" in line)
    first_read = next(body for kind, body in targets_drivers._conversation("codex/command-approval.jsonl", []) if kind == "read")
    warning = next(i for i, line in enumerate(first_read) if "configWarning" in line)
    # The approval request goes in right after the warning, in the read before the open completes.
    targets_drivers.driver_lines(("codex/command-approval.jsonl", [("insert", 0, warning, [approval], None)]))


@pytest.mark.parametrize(
    "initialized",
    [
        {"agentInfo": {"name": "x", "version": 0}},
        {"agentCapabilities": {"promptCapabilities": [1], "sessionCapabilities": "yes", "mcpCapabilities": 5}},
    ],
    ids=["version-a-number", "capabilities-of-the-wrong-type"],
)
def test_acp_details_of_the_wrong_type_open_a_valid_session(initialized: dict[str, Any]) -> None:
    # Found by tests/fuzz (driver_lines): a numeric agentInfo.version went to the app as
    # AgentDetails.version (a string in the schema); capabilities that were not objects
    # raised in the initialize answer's callback, and the open hung until its timeout.
    from sidecar import check_line

    from scripted import NEVER_RUN, Conversation

    conv = Conversation()
    try:
        conv.open({"acp": {"name": "scripted", "path": NEVER_RUN, "args": []}})
        request = conv.transport.sent("initialize")
        conv.feed({"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": 1, **initialized}})
        conv.feed({"jsonrpc": "2.0", "id": conv.transport.sent("session/new")["id"], "result": {"sessionId": "sess-1"}})
        info = conv.reply("open")
        assert info["details"]["version"] in (None, "1.0")
        check_line({"id": 1, "ok": info})
        assert not conv.diagnostics(), conv.diagnostics()
    finally:
        conv.close()


def test_codex_answers_of_the_wrong_shape_do_not_stall_the_open_or_the_turn() -> None:
    # Found by tests/fuzz (driver_lines, strict): an initialize answer with a null result
    # (or a userAgent that is not a string) raised in its callback, caught by the line
    # guard, and the open waited for its handshake timeout; a turn/start answer whose turn
    # was not an object raised the same way and the turn was never acknowledged.
    from scripted import Conversation
    from tests.drivers.codex.test_codex_unit import CODEX, THREAD, answer

    conv = Conversation()
    try:
        conv.open(CODEX)
        answer(conv, "initialize", None)
        assert conv.transport.written[1] == {"method": "initialized"}
        answer(conv, "account/read", {"account": {"type": "apiKey"}, "requiresOpenaiAuth": True})
        answer(conv, "model/list", {"data": []})
        answer(conv, "thread/start", {"thread": {"id": THREAD, "name": None}, "model": "gpt-5"})
        assert conv.reply("open")["details"]["version"] is None
        conv.command("prompt", text="go")
        conv.feed({"id": conv.transport.sent("turn/start")["id"], "result": {"turn": ["not", "an", "object"]}})
        assert not [d for d in conv.diagnostics() if "could not handle" in d], conv.diagnostics()
    finally:
        conv.close()
