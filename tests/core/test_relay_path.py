"""The relay's per-event shortcuts say exactly what the general code says.

``wire.encode_event`` formats an event line from a template instead of running the whole
envelope through the JSON encoder, and ``LineFramer.feed`` splits a read in one call when
no line of it can be too long. Both are checked here against the plain way (``encode``,
and a framer written the obvious way), over varied input, byte for byte.
"""

from __future__ import annotations

import json
import math
import random
import time
from typing import Any

import pytest

from agentproto.core import wire
from agentproto.core.wire import LineFramer, TooLong, encode, encode_event

TEXTS = ["", "1 ", "héllo wörld", "日本語のテキスト", "emoji \U0001f600", "lone \ud800 surrogate", 'quote " and \\',
         "tab\tnew\nline\r", "\x00\x1f\x7f", "</script>"]
NUMBERS = [0, -1, 2**70, 1.5, -0.0, 1e308, math.nan, math.inf, -math.inf, True, False, None]


def engine_event(rng: random.Random) -> dict[str, Any]:
    """An event as EngineSession._send builds it, with varied content."""
    ns = time.time_ns() + rng.randrange(10**12)
    kind: Any = rng.choice([
        {"TextDelta": {"message_id": rng.choice(TEXTS), "text": rng.choice(TEXTS)}},
        {"Usage": {"input_tokens": rng.choice(NUMBERS), "cost": rng.choice(NUMBERS)}},
        {"ToolUpdated": {"tool_id": "t", "input": {"nested": [rng.choice(NUMBERS), {"x": rng.choice(TEXTS)}]}}},
        "Idle",
        {rng.choice(TEXTS): None},
    ])
    extensions: Any = rng.choice([{}, {}, {"x-ext": rng.choice(TEXTS)}, {"n": rng.choice(NUMBERS)}])
    turn: Any = rng.choice([None, {"id": rng.choice(TEXTS), "parent_tool_id": None},
                            {"id": "turn-1", "parent_tool_id": rng.choice(TEXTS)}])
    return {
        "sequence": rng.randrange(1, 2**40),
        "occurred_at": {"secs_since_epoch": ns // 10**9, "nanos_since_epoch": ns % 10**9},
        "session_id": rng.choice(["1", "42", *TEXTS]),
        "turn_info": turn,
        "kind": kind,
        "extensions": extensions,
    }


def odd_event(rng: random.Random) -> dict[str, Any]:
    """An engine event with one thing off the shape the template is for."""
    event = engine_event(rng)
    change = rng.randrange(10)
    if change == 0:
        event = dict(reversed(list(event.items())))  # members in another order
    elif change == 1:
        event["sequence"] = rng.choice([True, 1.5, "7", None])
    elif change == 2:
        event["occurred_at"] = {"nanos_since_epoch": 5, "secs_since_epoch": 6}
    elif change == 3:
        event["occurred_at"] = {"secs_since_epoch": 1.25, "nanos_since_epoch": False}
    elif change == 4:
        event["session_id"] = rng.choice([5, None, ["a"]])
    elif change == 5:
        event["turn_info"] = rng.choice([{"parent_tool_id": None, "id": "t"}, {"id": "t", "parent_tool_id": None,
                                         "more": 1}, {"id": 5, "parent_tool_id": None}, "turn", []])
    elif change == 6:
        event["extensions"] = rng.choice([None, [], "", 0, False])
    elif change == 7:
        event["extra"] = 1
    elif change == 8:
        event["kind"] = rng.choice([{"TextDelta": {"text": "t", "message_id": "m"}},
                                    {"TextDelta": {"message_id": "m", "text": "t", "more": 1}},
                                    {"TextDelta": {"message_id": 5, "text": "t"}},
                                    {"TextDelta": {"message_id": "m", "text": None}},
                                    {"TextDelta": {"message_id": "m", "text": "t"}, "Other": {}},
                                    {"TextDelta": ["m", "t"]}, {"TextDelta": None}])
    else:
        del event["kind"]
    return event


@pytest.mark.parametrize("make", [engine_event, odd_event])
def test_encode_event_is_encode_byte_for_byte(make: Any) -> None:
    rng = random.Random(1234)
    for _ in range(3000):
        event = make(rng)
        expected = encode({"event": event})
        assert encode_event(event) == expected, event
        json.loads(expected)  # strict JSON: a non-finite number became null, not NaN


def test_non_finite_numbers_become_null_the_same_way() -> None:
    rng = random.Random(5)
    event = engine_event(rng)
    event["kind"] = {"Usage": {"cost": math.nan, "more": [math.inf, -math.inf, 1.0]}}
    event["extensions"] = {"x": math.inf}
    line = encode_event(event)
    assert line == encode({"event": event})
    decoded = json.loads(line)["event"]
    assert decoded["kind"] == {"Usage": {"cost": None, "more": [None, None, 1.0]}}
    assert decoded["extensions"] == {"x": None}


def test_unencodable_values_fail_the_same_way() -> None:
    event = engine_event(random.Random(6))
    event["kind"] = {"TextDelta": {"text": object()}}
    with pytest.raises(TypeError) as plain:
        encode({"event": event})
    with pytest.raises(TypeError) as fast:
        encode_event(event)
    assert str(fast.value) == str(plain.value)


def test_a_real_session_writes_its_events_through_encode_event() -> None:
    # The template's member order is the engine's: an event the engine built takes the
    # template, not encode's general way (the shortcut is really used).
    calls: list[str] = []
    original = wire.encode

    def counting(obj: Any) -> bytes:
        calls.append("encode")
        return original(obj)

    event = engine_event(random.Random(7))
    event["kind"] = {"TextDelta": {"message_id": "m", "text": "x"}}
    event["extensions"] = {}
    wire.encode = counting  # encode_event reaches encode through the module
    try:
        line = encode_event(event)
    finally:
        wire.encode = original
    assert calls == [] and line == encode({"event": event})


# -- framing ---------------------------------------------------------------------------


def reference_lines(stream: bytes, max_line: int) -> list[bytes | tuple[int, bytes]]:
    """What a framer must give for the whole stream: each line, or (size, the line) for one
    longer than max_line; the unterminated end as close() gives it."""
    *lines, rest = stream.split(b"\n")
    out: list[bytes | tuple[int, bytes]] = [(len(line), line) if len(line) > max_line else line for line in lines]
    if rest:
        out.append((len(rest), rest) if len(rest) > max_line else rest)
    return out


def framed(stream: bytes, cuts: list[int], max_line: int) -> list[bytes | TooLong]:
    framer = LineFramer(max_line)
    got: list[bytes | TooLong] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        got += framer.feed(stream[start:cut])
        assert framer.buffered <= max_line  # never more than one line's bound held
        start = cut
    return got + framer.close()


def same(got: list[bytes | TooLong], expected: list[bytes | tuple[int, bytes]], max_line: int) -> bool:
    """Line for line; a TooLong has the line's whole size and a head that starts it: its
    first 256 bytes, or as many as had arrived when it became too long (more than max_line)."""
    if len(got) != len(expected):
        return False
    for item, want in zip(got, expected):
        if isinstance(want, bytes):
            if type(item) is not bytes or item != want:
                return False
            continue
        size, line = want
        if not isinstance(item, TooLong) or item.size != size or not line.startswith(item.head):
            return False
        if len(item.head) < min(len(line), 256, max_line + 1):
            return False
    return True


def test_framing_is_the_same_however_the_stream_is_split() -> None:
    rng = random.Random(99)
    for _ in range(2000):
        max_line = rng.choice([1, 3, 8, 40, 300, 1000])
        pieces = []
        for _ in range(rng.randrange(0, 12)):
            size = rng.choice([0, 1, 2, max_line - 1, max_line, max_line + 1, 2 * max_line, rng.randrange(600)])
            pieces.append(bytes(rng.choice(b"ab{}\r\"\xff") for _ in range(max(size, 0))))
        stream = b"\n".join(pieces) + rng.choice([b"", b"\n", b"tail"])
        cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randrange(0, 8))))
        got = framed(stream, cuts, max_line)
        assert same(got, reference_lines(stream, max_line), max_line), (stream, cuts, max_line)


def test_a_read_of_many_lines_keeps_a_partial_line_for_the_next() -> None:
    framer = LineFramer(64)
    assert framer.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert framer.feed(b':2}\n\n{"c":3}\r\n{') == [b'{"b":2}', b"", b'{"c":3}\r']
    assert framer.buffered == 1
    assert framer.feed(b"x" * 70) == []  # too long now: discarded as it arrives
    assert framer.buffered == 0
    [marker, line] = framer.feed(b"y\nok\n")
    assert isinstance(marker, TooLong) and marker.size == 72 and marker.head == b"{" + b"x" * 70
    assert line == b"ok"
