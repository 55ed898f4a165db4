"""What one answer may cost: generate collects its text in linear time and up to a bound,
and Claude's stream keeps a block's text without copying it per delta.

No timing here (scripts/bench_generate.py prints the figures): the tests count what a
collector copies. A ``Piece`` is a str that notes every ``text + piece``: growing one
string per delta copies the whole text so far each time (O(N^2) characters for N deltas);
keeping the pieces and joining them once copies nothing that way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ops_support import result_of, single_shot, write_script

from agentproto.loopio.loop import Loop
from agentproto.engine.runtime import Engine


class Piece(str):
    """A str whose ``other + piece`` is counted: how often, and how many characters of
    ``other`` (the text so far) were copied to make the result."""

    copies = 0
    copied = 0

    def __radd__(self, other: str) -> str:
        # Python tries a str subclass's reflected method before str.__add__.
        Piece.copies += 1
        Piece.copied += len(other)
        return str.__add__(other, str(self))


def count_from_zero() -> None:
    Piece.copies = Piece.copied = 0


def test_generate_keeps_the_answers_pieces_and_joins_them_once() -> None:
    """2,000 deltas of 100 characters through the real generate (the mock, in-process): the
    answer comes out whole and in order, and no delta was appended by copying the text
    before it (the old collector copied 199,900,000 characters for this 200,000 one)."""
    count_from_zero()
    deltas = 2000
    turn = [
        {"Emit": {"TextDelta": {"message_id": "m1" if i % 3 else "m2", "text": f"{i:099d}."}}} for i in range(deltas)
    ]
    from agentproto.drivers.mock import load_script

    script = load_script(json.dumps({"turns": [[*turn, {"End": {"Completed": {"source": "Protocol"}}}]]}))

    def spy(_session: Any, event: dict[str, Any]) -> None:
        # generate's on_event sees each event just before the collector does: the delta's
        # text becomes a Piece, so any `text_so_far + delta` is counted.
        kind = event["kind"]
        if isinstance(kind, dict) and "TextDelta" in kind:
            kind["TextDelta"]["text"] = Piece(kind["TextDelta"]["text"])

    loop = Loop()
    try:
        runtime = Engine(loop, mock_script=script)
        outcome: list[Any] = []
        runtime.generate({"agent": "mock", "dir": "/tmp", "prompt": "go"}, lambda v, e: outcome.append((v, e)), spy)
        loop.run(until=lambda: bool(outcome))
    finally:
        loop.close()
    [(answer, error)] = outcome
    assert error is None
    # The messages in the order they first spoke (m2 first: delta 0), each in its own order.
    want = "".join(f"{i:099d}." for i in range(0, deltas, 3)) + "".join(
        f"{i:099d}." for i in range(deltas) if i % 3
    )
    assert answer == want
    assert Piece.copied <= 2 * len(answer), f"{Piece.copies} appends copied {Piece.copied:,} characters"


def test_generate_fails_an_answer_past_its_bound(tmp_path: Path) -> None:
    """17 deltas of 1 MiB: past 16 MiB generate fails ProtocolFailed saying why, instead of
    keeping (and answering) whatever an agent streams."""
    chunk = "x" * (1 << 20)
    steps = [
        {"Repeat": {"times": 17, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": chunk}}}]}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]
    mock = write_script(tmp_path, "huge", [steps])
    request = json.dumps({"op": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "go"})
    code, lines = single_shot(request, "--mock", mock)
    result = result_of(lines)
    assert result["ok"] is False and code != 0, str(result)[:300]
    assert result["error"]["kind"] == "ProtocolFailed"
    assert "longer than 16 MiB" in result["error"]["message"]


def test_an_answer_just_under_the_bound_is_answered(tmp_path: Path) -> None:
    """The bound is the answer's length, not the deltas' count: 16 deltas of 1 MiB, less one
    character, make an answer generate returns whole."""
    chunk = "y" * (1 << 20)
    steps = [
        {"Repeat": {"times": 15, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": chunk}}}]}},
        {"Emit": {"TextDelta": {"message_id": "m1", "text": chunk[1:]}}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]
    mock = write_script(tmp_path, "big", [steps])
    request = json.dumps({"op": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "go"})
    code, lines = single_shot(request, "--mock", mock)
    result = result_of(lines)
    assert code == 0 and result["ok"] is True, str(result)[:300]
    assert len(result["text"]) == (16 << 20) - 1 and set(result["text"]) == {"y"}


class _Host:
    """What Claude's MessageStream needs of a session: a loop, emit and diagnostic."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.session_id = "s1"
        self.events: list[Any] = []

    def emit(self, kind: Any, extensions: Any = None, parent_tool_id: Any = None) -> None:
        self.events.append(kind)

    def diagnostic(self, level: str, message: str) -> None:
        self.events.append({"Diagnostic": message})


def test_claudes_stream_keeps_a_blocks_pieces_without_copying_them() -> None:
    """A text block of 2,000 streamed deltas, then the whole assistant message: the block's
    text is kept as its pieces (the old stream copied the whole block per delta), and the
    whole message still adds nothing the deltas carried."""
    from agentproto.drivers.claude.stream import MessageStream

    count_from_zero()
    loop = Loop()
    try:
        host = _Host(loop)
        stream = MessageStream(host, lambda purpose: f"made-up-{purpose}")  # type: ignore[arg-type]
        stream.on_stream_event({"event": {"type": "message_start", "message": {"id": "msg_1"}}})
        stream.on_stream_event(
            {"event": {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}}
        )
        pieces = [f"{i:049d}," for i in range(2000)]
        for piece in pieces:
            delta = {"type": "text_delta", "text": Piece(piece)}
            stream.on_stream_event({"event": {"type": "content_block_delta", "index": 0, "delta": delta}})
        stream.flush()
        streamed = "".join(e["TextDelta"]["text"] for e in host.events if "TextDelta" in e)
        whole = "".join(pieces)
        assert streamed == whole
        copied = Piece.copied
        stream.on_assistant({"message": {"id": "msg_1", "content": [{"type": "text", "text": whole + " and more"}]}})
        stream.flush()
        rest = [e["TextDelta"]["text"] for e in host.events if "TextDelta" in e][1:]
        assert rest == [" and more"]  # what the deltas did not carry, once
    finally:
        loop.close()
    assert copied <= 2 * len(whole), f"{Piece.copies} appends copied {copied:,} characters"


def test_generate_refuses_a_schema_whose_patterns_cost_too_much_to_compile(tmp_path: Path) -> None:
    """A generate line of 30 patterns of 9,990 distinct characters each (300 KB; 3 MB of
    them stalled every session for minutes): InvalidConfiguration saying so, before the
    agent starts."""
    patterns = ["".join(chr(0x4E00 + i * 10_000 + j) for j in range(9_990)) for i in range(30)]
    properties = {f"p{i}": {"type": "string", "pattern": p} for i, p in enumerate(patterns)}
    schema = {"type": "object", "properties": properties}
    request = json.dumps(
        {"op": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "go", "output_schema": schema}
    )
    code, lines = single_shot(request)
    result = result_of(lines)
    assert result["ok"] is False and code != 0, str(result)[:300]
    assert result["error"]["kind"] == "InvalidConfiguration", str(result)[:300]
    assert "its patterns take more than" in result["error"]["message"]
