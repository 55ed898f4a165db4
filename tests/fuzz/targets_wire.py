"""Fuzz target: protocol 1 framing and commands (wire.LineFramer + wire.parse_command).

The contract: a byte stream splits into the same lines however it is fed (whole, one byte
at a time, in random chunks), with no line over the bound buffered; every line parses to a
``Command`` that only holds the command's own, checked fields, or raises ``FrameError``
and nothing else; the error carries the frame's id only when the id was readable, and
always encodes as one ASCII line.
"""

from __future__ import annotations

import json
from typing import Any

from fuzz.gen import damaged, dumps, json_values, mutated_object, nasty_json, splice_nasty
from fuzz.harness import regression, target
from fuzz.mutate import mutate_bytes
from hypothesis import strategies as st

from agentproto.core import wire
from agentproto.core.wire import COMMANDS, Command, FrameError, LineFramer, TooLong, parse_command

text = st.text(max_size=6)
AGENTS = st.sampled_from(["mock", {"id": "claude", "path": "/bin/x"}, {"acp": {"name": "a", "path": "/p", "args": ["-x"]}}])
ANSWERS = st.sampled_from(
    ["Cancel", {"Permission": "AllowOnce"}, {"Question": [{"Text": "t"}, {"Choices": ["a"]}]}, {"Deny": {"message": "m"}}]
)
SERVERS = st.sampled_from(
    [
        [],
        [{"name": "s", "connection": {"Stdio": {"command": "c", "args": [], "env": {"K": "v"}}}}],
        [{"name": "h", "connection": {"Http": {"url": "http://127.0.0.1/", "headers": {"A": "b"}}}}],
    ]
)
#: A valid value for each field any command takes.
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "agent": AGENTS,
    "answer": ANSWERS,
    "value": text | st.booleans(),
    "turns": st.integers(1, 2**64 - 1),
    "scope": st.sampled_from(["Conversation", "ConversationAndFiles"]),
    "permission_mode": st.sampled_from(["Ask", "AcceptEdits", "AutoApprove", None]),
    "mcp_servers": SERVERS,
    "configure": st.dictionaries(text, text | st.booleans(), max_size=2),
    "output_schema": st.sampled_from([{}, True, {"type": "object"}]),
    "env": st.dictionaries(text, text, max_size=2),
    "args": st.lists(text, max_size=2),
    "attachments": st.lists(text, max_size=2),
    "clear_queue": st.booleans() | st.none(),
}
FIELDS = sorted({k for required, optional in COMMANDS.values() for k in [*required, *optional]} | {"id", "cmd"})


@st.composite
def valid_frame(draw: Any) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(COMMANDS)))
    required, optional = COMMANDS[name]
    frame: dict[str, Any] = {"id": draw(st.integers(0, 2**64 - 1)), "cmd": name}
    for key in required:
        frame[key] = draw(VALUES.get(key, text))
    for key in draw(st.lists(st.sampled_from(sorted(optional) or ["x"]), max_size=3, unique=True)):
        if key in optional:
            frame[key] = draw(VALUES.get(key, text | st.none()))
    return frame


@st.composite
def frame_line(draw: Any) -> bytes:
    """One line's bytes: a valid frame, a damaged one, a spliced nasty value, or noise."""
    how = draw(st.sampled_from(["valid", "mutated", "damaged", "nasty", "noise", "json"]))
    if how == "noise":
        return draw(st.binary(max_size=40))
    if how == "json":
        return dumps(draw(json_values))
    frame = draw(valid_frame())
    if how == "valid":
        return dumps(frame)
    if how == "mutated":
        return dumps(draw(mutated_object(frame, FIELDS)))
    if how == "damaged":
        return draw(damaged(dumps(frame)))
    return splice_nasty(frame, draw(st.sampled_from(FIELDS)), draw(nasty_json))


@st.composite
def streams(draw: Any) -> tuple[bytes, int, list[int]]:
    lines = draw(st.lists(frame_line(), max_size=4))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n"]), min_size=len(lines), max_size=len(lines)))
    stream = b"".join(line + end for line, end in zip(lines, ends))
    if draw(st.booleans()):
        stream = stream.rstrip(b"\n")  # an unterminated last line, returned by close()
    max_line = draw(st.sampled_from([8, 64, 255, 300, 4096, wire.DEFAULT_MAX_LINE]))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    return stream, max_line, cuts


def _feed(stream: bytes, max_line: int, cuts: list[int]) -> list[bytes | TooLong]:
    framer = LineFramer(max_line)
    out: list[bytes | TooLong] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        if cut > start:
            out += framer.feed(stream[start:cut])
            start = cut
        assert framer.buffered <= max_line, "the framer buffered more than one line's bound"
    return out + framer.close()


def _key(item: bytes | TooLong) -> Any:
    return ("TooLong", item.size) if isinstance(item, TooLong) else item


def _check_framing(stream: bytes, max_line: int, items: list[bytes | TooLong]) -> None:
    """The items are exactly the stream's lines, in order, the long ones marked."""
    pos = 0
    for item in items:
        size = item.size if isinstance(item, TooLong) else len(item)
        piece = stream[pos : pos + size]
        assert len(piece) == size and b"\n" not in piece, "a line does not match the stream"
        if isinstance(item, TooLong):
            assert size > max_line and item.head and piece.startswith(item.head)
        else:
            assert len(item) <= max_line and piece == item
        pos += size + 1
    assert pos in (len(stream), len(stream) + 1), "the lines do not cover the stream"


def _json_of(line: bytes) -> Any:
    """The oracle: what the line is as JSON, or NOT_JSON (None when undecidable)."""
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return NOT_JSON
    except RecursionError:
        return UNDECIDABLE


NOT_JSON, UNDECIDABLE = object(), object()


def _is_uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def _check_line(item: bytes | TooLong, max_line: int) -> None:
    try:
        command = parse_command(item, max_line)
    except FrameError as error:
        body = error.body()
        assert body["kind"] == "BadFrame" and isinstance(body["message"], str) and body["message"]
        line = wire.encode({"id": error.frame_id, "error": body})
        assert line.endswith(b"\n") and line.count(b"\n") == 1 and json.loads(line)["error"]["kind"] == "BadFrame"
        assert error.frame_id is None or _is_uint(error.frame_id)
        if isinstance(item, TooLong):
            assert error.frame_id == wire.salvage_id(item.head)
            return
        obj = _json_of(item)
        if obj is UNDECIDABLE:
            return
        if obj is NOT_JSON:
            # Salvaged from the text: the digits must be there.
            assert error.frame_id is None or str(error.frame_id) in item.decode("latin-1")
        elif isinstance(obj, dict) and _is_uint(obj.get("id")):
            assert error.frame_id == obj["id"], "a readable id must be carried by the BadFrame"
        else:
            assert error.frame_id is None, "an unreadable id was made up"
        return
    assert isinstance(command, Command) and not isinstance(item, TooLong)
    obj = _json_of(item)
    if obj is UNDECIDABLE:
        return
    assert isinstance(obj, dict), "a non-object parsed as a command"
    assert command.id == obj["id"] and _is_uint(command.id) and command.name == obj["cmd"]
    required, optional = COMMANDS[command.name]
    assert set(required) <= set(command.args) <= set(required) | set(optional)
    for key, value in command.args.items():
        assert repr(value) == repr(obj[key])


@target("wire_frames", streams(), examples=250, mutate=lambda v, rng: (mutate_bytes(v[0], rng), v[1], v[2]))
def wire_frames(case: tuple[bytes, int, list[int]]) -> None:
    """Protocol 1 frames: framing independent of the split, FrameError and nothing else."""
    stream, max_line, cuts = case
    whole = _feed(stream, max_line, [])
    _check_framing(stream, max_line, whole)
    chunked = _feed(stream, max_line, cuts)
    _check_framing(stream, max_line, chunked)
    assert [_key(i) for i in chunked] == [_key(i) for i in whole], "chunked feeding differs from one feed"
    if len(stream) <= 1000:
        one_by_one = _feed(stream, max_line, list(range(len(stream))))
        assert [_key(i) for i in one_by_one] == [_key(i) for i in whole], "byte-by-byte feeding differs from one feed"
    for item in whole:
        _check_line(item, max_line)


regression("wire_frames", (b'{"id": 1, "cmd": ' + b"[" * 3000 + b"\n", 8 * 1024 * 1024, [5]))
