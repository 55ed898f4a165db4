"""The wire layer, without I/O: the line framer, command parsing, error bodies and
line encoding.

The framer is fed byte by byte and in every kind of chunking, and fuzzed; parse_command
is fuzzed with arbitrary bytes and with near-frames. Every BadFrame rule of issue 2 has
a case here: not JSON, not an object, wrong types (naming the field and the expected
type), unknown or missing ``cmd`` (listing the valid commands), missing ``id``, invalid
UTF-8, an over-long line (discarded with bounded memory, still answered).
"""

from __future__ import annotations

import json
import math
import random
import string
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from sidecar import ROOT

from agentproto.core import wire
from agentproto.core.wire import (
    COMMAND_NAMES,
    AgentError,
    Command,
    FrameError,
    LineFramer,
    TooLong,
    encode,
    parse_command,
)

REFERENCE = json.loads((ROOT / "fixtures" / "anyagent-schema.json").read_text())
OURS = json.loads((ROOT / "agentproto" / "schema.json").read_text())


def _validator(schema: dict[str, Any], definition: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]})


OUR_FRAME = _validator(OURS, "Frame")
REFERENCE_ERROR = _validator(REFERENCE, "ErrorBody")
REFERENCE_LINE = _validator(REFERENCE, "Line")
OUR_LINE = _validator(OURS, "Line")


# -- the framer ---------------------------------------------------------------------------


def expected_lines(stream: bytes, max_line: int) -> list[Any]:
    """What a correct framer yields for ``stream`` fed whole, then closed."""
    parts = stream.split(b"\n")
    out: list[Any] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if last and not part:
            break
        out.append(("long", len(part), part[:256]) if len(part) > max_line else part)
    return out


def normalise(items: list[Any]) -> list[Any]:
    return [("long", x.size, x.head) if isinstance(x, TooLong) else x for x in items]


def feed_chunks(framer: LineFramer, stream: bytes, cuts: list[int]) -> list[Any]:
    """Feed ``stream`` cut at ``cuts``; check the memory bound after every feed."""
    out: list[Any] = []
    start = 0
    for cut in sorted(set(cuts)) + [len(stream)]:
        if cut <= start:
            continue
        out += framer.feed(stream[start:cut])
        start = cut
        assert framer.buffered <= framer.max_line, "the framer buffered more than one line's bound"
    out += framer.close()
    return normalise(out)


def check_long(got: list[Any], want: list[Any]) -> None:
    """Compare framer output; a TooLong's size may be reported as at least the bound."""
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        if isinstance(w, tuple):
            assert isinstance(g, tuple), (g, w)
            _, size, head = g
            _, true_size, true_head = w
            assert size <= true_size
            assert head == true_head[: len(head)] and len(head) > 0
        else:
            assert g == w


STREAM = (
    b'{"id":1,"cmd":"discover"}\n'
    b"\n"
    b'{"id":2,"cmd":"info","session":"s1"}\r\n'
    b'  {"id":3,"cmd":"close","session":"s1"}  \n'
    + "{\"id\":4,\"cmd\":\"prompt\",\"session\":\"s1\",\"text\":\"h\u00e9llo \u2603\"}\n".encode()
    + b'{"id":5,"cmd":"discover"}'  # no final newline: close() returns it
)


def test_framer_whole_stream() -> None:
    framer = LineFramer()
    got = framer.feed(STREAM) + framer.close()
    assert got == STREAM.split(b"\n")
    assert got[2].endswith(b"\r"), "a trailing CR is kept (JSON ignores it)"


def test_framer_byte_by_byte() -> None:
    framer = LineFramer()
    got: list[Any] = []
    for i in range(len(STREAM)):
        got += framer.feed(STREAM[i : i + 1])
    got += framer.close()
    assert got == STREAM.split(b"\n")
    # multi-byte UTF-8 split across feeds comes out whole
    assert json.loads(got[4])["text"] == "h\u00e9llo \u2603"


def test_framer_random_chunkings() -> None:
    rng = random.Random(4)
    want = STREAM.split(b"\n")
    for _ in range(500):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(0, 20)))
        assert feed_chunks(LineFramer(), STREAM, cuts) == want


def test_framer_close_is_idempotent_and_empty_feeds_are_harmless() -> None:
    framer = LineFramer()
    assert framer.feed(b"") == []
    assert framer.feed(b"ab") == []
    assert framer.feed(b"") == []
    assert framer.close() == [b"ab"]
    assert framer.close() == []


@pytest.mark.parametrize("size", [15, 16, 17, 40])
def test_framer_bound_is_exact(size: int) -> None:
    """A line of exactly max_line bytes passes; one byte more is discarded, whatever the chunking."""
    line = b"x" * size
    stream = b"a\n" + line + b"\nb\n"
    for cuts in [[], list(range(1, len(stream)))] + [[k] for k in range(1, len(stream))]:
        got = feed_chunks(LineFramer(max_line=16), stream, cuts)
        assert got[0] == b"a" and got[2] == b"b" and len(got) == 3
        if size <= 16:
            assert got[1] == line
        else:
            assert isinstance(got[1], tuple) and 16 < got[1][1] <= size, got[1]


def test_framer_over_long_line_bounded_memory() -> None:
    """A 20 MB line fed in 64 KB chunks is discarded as it arrives and answered once."""
    framer = LineFramer(max_line=1024)
    head = b'{"id": 77, "cmd": "prompt", "session": "s1", "text": "'
    out: list[Any] = []
    out += framer.feed(b'{"id":1,"cmd":"discover"}\n' + head)
    chunk = b"y" * 65536
    for _ in range(320):
        out += framer.feed(chunk)
        assert framer.buffered <= 1024
    out += framer.feed(b'"}\n{"id":2,"cmd":"discover"}\n')
    assert out[0] == b'{"id":1,"cmd":"discover"}'
    assert isinstance(out[1], TooLong) and out[1].size > 1024
    assert out[1].head.startswith(head[:200])
    assert out[2] == b'{"id":2,"cmd":"discover"}'
    assert len(out) == 3
    with pytest.raises(FrameError) as info:
        parse_command(out[1], 1024)
    assert info.value.frame_id == 77, "the id is recovered from the head of an over-long line"
    assert "too long" in info.value.message and "1024" in info.value.message


def test_framer_unterminated_over_long_line_at_eof() -> None:
    framer = LineFramer(max_line=8)
    assert framer.feed(b'{"id":5,"cmd":"xxxxxxxx') == []
    assert framer.buffered == 0
    (marker,) = framer.close()
    assert isinstance(marker, TooLong) and marker.size > 8
    assert framer.close() == []


lines_strategy = st.lists(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(lines=lines_strategy, final_newline=st.booleans(), max_line=st.integers(1, 24), data=st.data())
def test_framer_property_any_chunking(lines: list[bytes], final_newline: bool, max_line: int, data: Any) -> None:
    """Any chunking of any stream gives the same lines as splitting it whole."""
    stream = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    cuts = data.draw(st.lists(st.integers(0, max(0, len(stream))), max_size=len(stream) + 1))
    got = feed_chunks(LineFramer(max_line=max_line), stream, cuts)
    check_long(got, expected_lines(stream, max_line))


# -- parse_command: valid frames ------------------------------------------------------------

VALID_FRAMES: list[dict[str, Any]] = [
    {"cmd": "discover"},
    {"cmd": "probe", "agent": "mock"},
    {"cmd": "probe", "agent": "mock", "dir": "/tmp", "env": {"A": "b"}, "args": ["--x"], "config_home": "/tmp/c"},
    {"cmd": "plan_usage", "agent": {"id": "claude", "path": "/opt/claude"}, "config_home": None},
    {"cmd": "plan_usage_all", "dir": "/tmp", "agent_timeout": 2.5},
    {"cmd": "open", "agent": "mock", "dir": "."},
    {
        "cmd": "open",
        "agent": {"acp": {"name": "gemini", "path": "/usr/bin/gemini", "args": ["--acp"]}},
        "dir": ".",
        "resume": None,
        "fork": None,
        "fork_at": None,
        "permission_mode": "AcceptEdits",
        "mcp_servers": [
            {"name": "fs", "connection": {"Stdio": {"command": "mcp-fs", "args": ["/"], "env": {"K": "v"}}}},
            {"name": "web", "connection": {"Http": {"url": "http://127.0.0.1:1", "headers": {"X": "y"}}}},
            {"name": "sse", "connection": {"Sse": {"url": "http://127.0.0.1:2", "headers": {}}}},
        ],
        "configure": {"model": "opus", "fast": True},
        "instructions": "be brief",
        "output_schema": {"type": "object"},
        "env": {"TOKEN": "t"},
        "args": ["--verbose"],
        "config_home": "/tmp/home",
        "record_wire": "/tmp/wire.jsonl",
    },
    {"cmd": "open", "agent": "mock", "dir": ".", "permission_mode": "AutoApprove"},
    {"cmd": "generate", "agent": "mock", "dir": ".", "prompt": "title", "attachments": ["/tmp/a.png"],
     "output_schema": {"type": "string"}},
    {"cmd": "prompt", "session": "s1", "text": "hi"},
    {"cmd": "prompt", "session": "s1", "text": "hi", "attachments": []},
    {"cmd": "answer", "session": "s1", "request": "r1", "answer": {"Permission": "AllowOnce"}},
    {"cmd": "answer", "session": "s1", "request": "r1", "answer": {"Permission": "DenyAlways"}},
    {"cmd": "answer", "session": "s1", "request": "q1", "answer": {"Question": [{"Choices": ["c-red"]}, {"Text": "x"}]}},
    {"cmd": "answer", "session": "s1", "request": "r1", "answer": {"Deny": {"message": "not now"}}},
    {"cmd": "answer", "session": "s1", "request": "r1", "answer": "Cancel"},
    {"cmd": "configure", "session": "s1", "option": "model", "value": "opus"},
    {"cmd": "configure", "session": "s1", "option": "fast", "value": False},
    {"cmd": "cancel", "session": "s1"},
    {"cmd": "cancel", "session": "s1", "clear_queue": True, "turn": "t3"},
    {"cmd": "rollback", "session": "s1", "turns": 1, "scope": "Conversation"},
    {"cmd": "rollback", "session": "s1", "turns": 2, "scope": "ConversationAndFiles"},
    {"cmd": "dequeue", "session": "s1", "prompt": "p2"},
    {"cmd": "compact", "session": "s1"},
    {"cmd": "close", "session": "s1"},
    {"cmd": "info", "session": "s1"},
]


def test_commands_match_the_reference() -> None:
    """The reference Frame's fourteen commands, and plan_usage_all (anyagent HEAD's, as
    agentproto reads its API: the HEAD schema could not be fetched)."""
    names = {v["properties"]["cmd"]["const"] for v in REFERENCE["definitions"]["Frame"]["oneOf"]}
    assert set(COMMAND_NAMES) == names | {"plan_usage_all"}
    assert len(COMMAND_NAMES) == 15
    assert {f["cmd"] for f in VALID_FRAMES} == set(COMMAND_NAMES)


@pytest.mark.parametrize("frame", VALID_FRAMES, ids=lambda f: f["cmd"])
def test_valid_frames_parse(frame: dict[str, Any]) -> None:
    line = {"id": 41, **frame}
    # (the reference predates the Deny and Cancel answers; agentproto's schema adds them)
    assert not list(OUR_FRAME.iter_errors(line)), "the test frame must be a valid Frame"
    for raw in (json.dumps(line).encode(), json.dumps(line, indent=1).replace("\n", " ").encode() + b"\r"):
        command = parse_command(raw)
        assert isinstance(command, Command)
        assert command.id == 41 and command.name == frame["cmd"]
        assert command.args == {k: v for k, v in frame.items() if k != "cmd"}


def test_id_zero_and_large_ids() -> None:
    assert parse_command(b'{"id":0,"cmd":"discover"}').id == 0
    assert parse_command(b'{"id":18446744073709551615,"cmd":"discover"}').id == 2**64 - 1
    # Past u64, as the reference schema types ids: a BadFrame without an id to echo.
    with pytest.raises(FrameError) as raised:
        parse_command(b'{"id":18446744073709551616,"cmd":"discover"}')
    assert raised.value.frame_id is None


def test_command_get_default_for_null() -> None:
    command = parse_command(b'{"id":1,"cmd":"cancel","session":"s1","clear_queue":null}')
    assert command.get("clear_queue", False) is False
    assert command.get("turn", "none") == "none"


# -- parse_command: every BadFrame --------------------------------------------------------

ALL_COMMANDS_LISTED = list(COMMAND_NAMES)

BAD_FRAMES: list[tuple[str, bytes, int | None, list[str]]] = [
    # (case, raw line, the id the error must carry, words the message must contain)
    ("not-json", b"hello", None, ["not JSON"]),
    ("not-json-truncated", b'{"id": 3, "cmd": "open", "agent": "mo', 3, ["not JSON"]),
    ("not-json-trailing", b'{"id": 4, "cmd": "discover"} x', 4, ["not JSON"]),
    ("not-json-nan-id", b'{"id": NaN, "cmd": "discover"}', None, ["`id`"]),
    ("deeply-nested", b"[" * 100_000, None, ["nested too deeply"]),
    ("huge-integer", b'{"id": 1, "x": ' + b"9" * 5000 + b"}", 1, []),
    ("array", b'[{"id": 1, "cmd": "discover"}]', None, ["JSON object", "array"]),
    ("string", b'"discover"', None, ["JSON object", "string"]),
    ("number", b"42", None, ["JSON object", "number"]),
    ("null", b"null", None, ["JSON object", "null"]),
    ("missing-id", b'{"cmd": "discover"}', None, ["missing field `id`"]),
    ("id-string", b'{"id": "7", "cmd": "discover"}', None, ["`id`", "non-negative integer", "string"]),
    ("id-negative", b'{"id": -1, "cmd": "discover"}', None, ["`id`", "non-negative integer"]),
    ("id-float", b'{"id": 1.5, "cmd": "discover"}', None, ["`id`", "non-negative integer", "number"]),
    ("id-bool", b'{"id": true, "cmd": "discover"}', None, ["`id`", "boolean"]),
    ("missing-cmd", b'{"id": 5}', 5, ["missing field `cmd`", *ALL_COMMANDS_LISTED]),
    ("unknown-cmd", b'{"id": 6, "cmd": "launch"}', 6, ["unknown command `launch`", *ALL_COMMANDS_LISTED]),
    ("cmd-not-string", b'{"id": 7, "cmd": 3}', 7,
     ["field `cmd` must be a string (a command name), got number", *ALL_COMMANDS_LISTED]),
    ("enum-value-shown", b'{"id": 9, "cmd": "open", "agent": "mock", "dir": ".", "permission_mode": "Yolo"}', 9,
     ['field `permission_mode` must be one of "Ask", "AcceptEdits", "AutoApprove" or null, got string "Yolo"']),
    ("enum-number-shown", b'{"id": 10, "cmd": "rollback", "session": "s1", "turns": 1, "scope": 7}', 10,
     ['field `scope` must be one of "Conversation", "ConversationAndFiles", got number 7']),
    ("cmd-case", b'{"id": 8, "cmd": "Discover"}', 8, ["unknown command `Discover`"]),
    ("invalid-utf8", b'{"id": 9, "cmd": "prompt", "session": "s1", "text": "\xff\xfe"}', 9, ["invalid UTF-8"]),
    ("invalid-utf8-surrogate", b'{"id": 10, "cmd": "discover", "x": "\xed\xa0\x80"}', 10, ["invalid UTF-8"]),
    ("invalid-utf8-overlong", b'{"id": 11, "cmd": "discover", "x": "\xc0\xaf"}', 11, ["invalid UTF-8"]),
    ("open-missing-dir", b'{"id": 12, "cmd": "open", "agent": "mock"}', 12, ["open", "missing field `dir`"]),
    ("open-missing-agent", b'{"id": 13, "cmd": "open", "dir": "."}', 13, ["missing field `agent`"]),
    ("prompt-missing-session", b'{"id": 14, "cmd": "prompt", "text": "x"}', 14, ["missing field `session`"]),
    ("prompt-text-number", b'{"id": 15, "cmd": "prompt", "session": "s1", "text": 5}', 15,
     ["prompt", "field `text`", "a string", "got number"]),
    ("session-null", b'{"id": 16, "cmd": "info", "session": null}', 16, ["field `session`", "a string", "got null"]),
    ("agent-number", b'{"id": 17, "cmd": "open", "agent": 5, "dir": "."}', 17,
     ["field `agent`", "catalog id string", "got number"]),
    ("agent-empty", b'{"id": 18, "cmd": "open", "agent": "", "dir": "."}', 18, ["field `agent`"]),
    ("agent-object-no-path", b'{"id": 19, "cmd": "open", "agent": {"id": "claude"}, "dir": "."}', 19, ["field `agent`"]),
    ("acp-no-name", b'{"id": 20, "cmd": "open", "agent": {"acp": {"path": "/x"}}, "dir": "."}', 20, ["field `agent`"]),
    ("dir-array", b'{"id": 21, "cmd": "open", "agent": "mock", "dir": ["."]}', 21, ["field `dir`", "a string", "got array"]),
    ("permission-mode", b'{"id": 22, "cmd": "open", "agent": "mock", "dir": ".", "permission_mode": "Yolo"}', 22,
     ["field `permission_mode`", '"Ask"', '"AcceptEdits"', '"AutoApprove"']),
    ("env-values", b'{"id": 23, "cmd": "open", "agent": "mock", "dir": ".", "env": {"A": 1}}', 23,
     ["field `env`", "an object of strings"]),
    ("args-string", b'{"id": 24, "cmd": "open", "agent": "mock", "dir": ".", "args": "--x"}', 24,
     ["field `args`", "an array of strings", "got string"]),
    ("configure-map", b'{"id": 25, "cmd": "open", "agent": "mock", "dir": ".", "configure": {"m": 1}}', 25,
     ["field `configure`"]),
    ("mcp-servers", b'{"id": 26, "cmd": "open", "agent": "mock", "dir": ".", "mcp_servers": [{"name": "x"}]}', 26,
     ["field `mcp_servers`"]),
    ("output-schema", b'{"id": 27, "cmd": "generate", "agent": "mock", "dir": ".", "prompt": "p", "output_schema": "x"}',
     27, ["field `output_schema`", "JSON Schema"]),
    ("instructions", b'{"id": 28, "cmd": "open", "agent": "mock", "dir": ".", "instructions": 1}', 28,
     ["field `instructions`", "a string or null"]),
    ("generate-no-prompt", b'{"id": 29, "cmd": "generate", "agent": "mock", "dir": "."}', 29, ["missing field `prompt`"]),
    ("answer-permission", b'{"id": 30, "cmd": "answer", "session": "s1", "request": "r1", "answer": {"Permission": "Maybe"}}',
     30, ["field `answer`", "Permission"]),
    ("answer-deny", b'{"id": 31, "cmd": "answer", "session": "s1", "request": "r1", "answer": {"Deny": "no"}}',
     31, ["field `answer`", "Deny"]),
    ("answer-string", b'{"id": 32, "cmd": "answer", "session": "s1", "request": "r1", "answer": "Allow"}',
     32, ["field `answer`", "Cancel", "got string"]),
    ("answer-question", b'{"id": 33, "cmd": "answer", "session": "s1", "request": "q", "answer": {"Question": [{"Pick": 1}]}}',
     33, ["field `answer`"]),
    ("configure-value", b'{"id": 34, "cmd": "configure", "session": "s1", "option": "m", "value": 3}', 34,
     ["field `value`", "a string or a boolean", "got number"]),
    ("cancel-clear-queue", b'{"id": 35, "cmd": "cancel", "session": "s1", "clear_queue": "yes"}', 35,
     ["field `clear_queue`", "a boolean", "got string"]),
    ("cancel-turn", b'{"id": 36, "cmd": "cancel", "session": "s1", "turn": 3}', 36, ["field `turn`", "a string or null"]),
    ("rollback-zero", b'{"id": 37, "cmd": "rollback", "session": "s1", "turns": 0, "scope": "Conversation"}', 37,
     ["field `turns`", "an integer >= 1"]),
    ("rollback-scope", b'{"id": 38, "cmd": "rollback", "session": "s1", "turns": 1, "scope": "Files"}', 38,
     ["field `scope`", '"Conversation"', '"ConversationAndFiles"']),
    ("dequeue-prompt", b'{"id": 39, "cmd": "dequeue", "session": "s1", "prompt": 2}', 39, ["field `prompt`", "a string"]),
    ("attachments", b'{"id": 40, "cmd": "prompt", "session": "s1", "text": "x", "attachments": [1]}', 40,
     ["field `attachments`", "an array of strings"]),
]


@pytest.mark.parametrize("case,raw,frame_id,words", BAD_FRAMES, ids=[c[0] for c in BAD_FRAMES])
def test_bad_frames(case: str, raw: bytes, frame_id: int | None, words: list[str]) -> None:
    with pytest.raises(FrameError) as info:
        parse_command(raw)
    error = info.value
    assert error.frame_id == frame_id
    for word in words:
        assert word in error.message, f"{case}: {word!r} not in {error.message!r}"
    body = error.body()
    assert body["kind"] == "BadFrame" and body["message"] == error.message
    assert not list(REFERENCE_ERROR.iter_errors(body))
    # The line serve writes for it is a valid Line of both schemas.
    line = json.loads(wire.encode({"id": error.frame_id, "error": body}))
    assert not list(REFERENCE_LINE.iter_errors(line)) and not list(OUR_LINE.iter_errors(line))


def test_every_required_field_of_every_command_is_checked() -> None:
    """Dropping any required field, or giving it a wrong type, names that field."""
    for frame in VALID_FRAMES:
        base = {"id": 2, **frame}
        required = [k for k in wire.COMMANDS[frame["cmd"]][0]]
        for key in required:
            missing = {k: v for k, v in base.items() if k != key}
            with pytest.raises(FrameError) as info:
                parse_command(json.dumps(missing).encode())
            assert info.value.frame_id == 2 and f"missing field `{key}`" in info.value.message
            wrong = {**base, key: [[["nested"]]]}
            with pytest.raises(FrameError) as info:
                parse_command(json.dumps(wrong).encode())
            assert f"field `{key}` must be " in info.value.message and "got array" in info.value.message


def test_too_long_marker_without_readable_id() -> None:
    with pytest.raises(FrameError) as info:
        parse_command(TooLong(10_000_000, b"x" * 256), 1024)
    assert info.value.frame_id is None


# -- fuzzing ------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
FIELD_NAMES = sorted({k for req, opt in wire.COMMANDS.values() for k in [*req, *opt]} | {"id", "cmd"})


@st.composite
def frame_like(draw: Any) -> dict[str, Any]:
    """A valid frame with some members dropped, replaced by arbitrary JSON, or added."""
    obj: dict[str, Any] = {"id": draw(st.integers(0, 2**63) | json_scalars), **draw(st.sampled_from(VALID_FRAMES))}
    for key in draw(st.lists(st.sampled_from(sorted(obj)), max_size=3, unique=True)):
        if draw(st.booleans()):
            del obj[key]
        else:
            obj[key] = draw(json_values | st.sampled_from(COMMAND_NAMES))
    for key in draw(st.lists(st.sampled_from(FIELD_NAMES), max_size=2)):
        obj[key] = draw(json_values)
    return obj


def _parse_or_frame_error(raw: bytes | TooLong) -> Command | FrameError:
    try:
        return parse_command(raw)
    except FrameError as error:
        assert isinstance(error.message, str) and error.message
        assert error.frame_id is None or (isinstance(error.frame_id, int) and error.frame_id >= 0)
        # the answer is always encodable as one ASCII line
        encoded = wire.encode({"id": error.frame_id, "error": error.body()})
        assert encoded.count(b"\n") == 1
        return error


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
@example(b"\xff")
@example(b"[" * 5000)
@example(b'{"id": 1e999}')
@example(b'{"id": 3, "cmd": "\xed\xa0\x80"}')
def test_fuzz_arbitrary_bytes_only_frame_error(raw: bytes) -> None:
    _parse_or_frame_error(raw)


@settings(max_examples=800, deadline=None)
@given(frame_like())
def test_fuzz_frame_like_objects(obj: dict[str, Any]) -> None:
    """A JSON object: a Command, or a FrameError carrying its id when the id is valid."""
    result = _parse_or_frame_error(json.dumps(obj).encode())
    frame_id = obj.get("id")
    readable = isinstance(frame_id, int) and not isinstance(frame_id, bool) and 0 <= frame_id < 2**64
    if isinstance(result, Command):
        assert readable and result.id == frame_id and result.name == obj["cmd"]
    elif readable:
        assert result.frame_id == frame_id, "a readable id must be carried by the BadFrame"
    else:
        assert result.frame_id is None


@settings(max_examples=500, deadline=None)
@given(
    frame_id=st.integers(0, 2**63),
    space=st.sampled_from(["", " ", "  "]),
    garbage=st.binary(max_size=120),
)
def test_fuzz_broken_frames_recover_the_id(frame_id: int, space: str, garbage: bytes) -> None:
    """Not JSON, but starting like a frame: the BadFrame still carries the frame's id."""
    raw = f'{{"id":{space}{frame_id}, "cmd": '.encode() + garbage
    try:
        json.loads(raw)
        parsed_as_json = True
    except (ValueError, RecursionError):
        parsed_as_json = False
    result = _parse_or_frame_error(raw)
    if not parsed_as_json:
        assert isinstance(result, FrameError) and result.frame_id == frame_id


@settings(max_examples=300, deadline=None)
@given(frame=st.sampled_from(VALID_FRAMES), frame_id=st.integers(0, 2**63), cut=st.integers(0, 10_000), data=st.data())
def test_fuzz_mutated_valid_frames(frame: dict[str, Any], frame_id: int, cut: int, data: Any) -> None:
    """Truncated or byte-flipped valid frames never raise anything but FrameError."""
    raw = bytearray(json.dumps({"id": frame_id, **frame}).encode())
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=3))
    for pos, byte in flips:
        raw[pos] = byte
    truncated = bytes(raw[: cut % (len(raw) + 1)])
    _parse_or_frame_error(truncated)
    _parse_or_frame_error(bytes(raw))


# -- error bodies -------------------------------------------------------------------------


def test_error_bodies_have_their_variant_fields() -> None:
    cases = {
        "NotInstalled": (AgentError.not_installed("claude"), {"agent": "claude"}),
        "AuthRequired": (AgentError.auth_required("log in", [{"label": "x"}]), {"login": [{"label": "x"}]}),
        "ProcessExited": (AgentError.process_exited("9", "mock died"), {"status": "9", "stderr": "mock died"}),
        "UnknownSession": (AgentError.unknown_session("s9"), {"session": "s9"}),
        "SessionClosed": (AgentError.session_closed("s2"), {"detail": "s2"}),
    }
    for kind in ("SpawnFailed", "HandshakeTimeout", "UnsupportedFeature", "InvalidConfiguration",
                 "InvalidRequest", "ResumeFailed", "SessionBusy", "ProtocolFailed", "BadFrame",
                 "ConsumerLagged", "BudgetExceeded", "Internal"):
        cases[kind] = (AgentError.detail(kind, "why"), {"detail": "why"})
    assert set(cases) == set(wire.ERROR_KINDS)
    for kind, (error, fields) in cases.items():
        body = error.body()
        assert body["kind"] == kind and isinstance(body["message"], str) and body["message"]
        for key, value in fields.items():
            assert body[key] == value
        assert not list(REFERENCE_ERROR.iter_errors(body))
        again = wire.error_from_body(json.loads(json.dumps(body)))
        assert again.body() == body, "errors keep every field through the wire"
    assert AgentError.process_exited(None, "").body()["status"] is None


def test_encode_is_one_ascii_line() -> None:
    data = wire.encode({"text": "h\u00e9 \u2603 \ud800 \n end"})
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    data.decode("ascii")
    assert json.loads(data)["text"] == "h\u00e9 \u2603 \ud800 \n end"


def test_salvage_id_needs_a_whole_number() -> None:
    assert wire.salvage_id(b'{"id": 12, "cmd') == 12
    assert wire.salvage_id(b'{"id":12abc') is None
    assert wire.salvage_id(b'{"cmd": "x"') is None
    assert wire.salvage_id("".join(random.Random(1).choices(string.ascii_letters, k=50)).encode()) is None


def test_encode_is_strict_ascii_json_on_one_line() -> None:
    line = encode({"text": "é\ud800\n", "n": [1, 2.5, float("nan"), float("inf")], "ok": None})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    line.decode("ascii")  # raises if anything is not ASCII
    # Non-finite numbers are not JSON: they become null rather than NaN/Infinity.
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in output")) == {
        "text": "é\ud800\n",
        "n": [1, 2.5, None, None],
        "ok": None,
    }


# -- Record (plain data without importing dataclasses at start-up) ----------------------------


class _Point(wire.Record):
    x: int
    y: int = 0
    tags: list[str] = []
    meta: dict[str, str] = {}


def test_record_builds_like_a_dataclass() -> None:
    a, b = _Point(1), _Point(2, 3, tags=["t"])
    assert (a.x, a.y, a.tags, a.meta) == (1, 0, [], {}) and (b.x, b.y, b.tags) == (2, 3, ["t"])
    a.tags.append("mine")
    a.meta["k"] = "v"
    assert _Point(4).tags == [] and _Point(4).meta == {}, "a list or dict default is never shared"
    assert repr(b) == "_Point(x=2, y=3, tags=['t'], meta={})"
    with pytest.raises(TypeError, match="missing x"):
        _Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="no field z"):
        _Point(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="too many"):
        _Point(1, 2, [], {}, 5)  # type: ignore[call-arg]


def test_start_up_imports_no_dataclasses() -> None:
    """Importing dataclasses pulls in inspect, ast, dis and tokenize: milliseconds of every
    cold start, for nothing the package needs before its first session."""
    import subprocess
    import sys

    code = "import sys, agentproto.cli; print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
