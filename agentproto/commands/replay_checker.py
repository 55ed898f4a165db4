"""The checker of a replay (replay.py): what the live run records, compared with what the
recording holds.

It is the live run's recorder (``record.RecordSink``): each record it is given goes to the next
expectation of its stream (a connection's lines out, a session's agent wire, the HTTP pairs)
and is compared with it, normalized (core/recording.py's ``Normalizer``). Every difference
is a drift, reported as text naming the request and its first differing line, recorded vs
live; the replay's exit status is 1 when there is any.

Rules of this file:
- A pair answers one request: each drifted pair is reported. A transcript's lines are not
  tied to one request: once one differs, the rest of its stream is not compared.
- With ``update`` every record also goes to the new file (``replay --update``).
"""

from __future__ import annotations

import json
from typing import Any

from agentproto.core.recording import EXPECTED_DIRS, Expected, Normalizer, Timeline, first_difference
from agentproto.loopio.record import Recorder


class Checker:
    """The recorder of the live run (record.RecordSink): each record is compared with the next
    expectation of its stream; with ``update``, every record also goes to the new file."""

    def __init__(self, timeline: Timeline, normalizer: Normalizer, drifts: list[str], label: str,
                 update: Recorder | None) -> None:  # fmt: skip
        self.timeline = timeline
        self.normalizer = normalizer
        self.drifts = drifts
        self.label = label
        self.update = update
        self.cursor: dict[tuple[Any, ...], int] = dict.fromkeys(timeline.streams, 0)
        self.drifted: set[tuple[Any, ...]] = set()
        self.progress = 0

    # record.RecordSink
    def pair(self, request: bytes | str, response: bytes | str, dropped: int = 0) -> None:
        if self.update is not None:
            self.update.pair(request, response, dropped)
        self._live(("pairs",), _text(response), _text(request))

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None:
        if self.update is not None:
            self.update.line(direction, line, **tags)
        if direction == "out":
            self._live(("conn", tags.get("conn")), _text(line), None)
        elif direction == "to_agent":
            self._live(("wire", tags["session"]), _text(line), None)
        else:
            self.progress += 1

    def note(self, direction: str, **fields: Any) -> None:
        if self.update is not None:
            self.update.note(direction, **fields)
        if direction in EXPECTED_DIRS:
            body = {k: v for k, v in fields.items() if k != "session"}
            if direction == "spawn":
                text = json.dumps({"argv": body["argv"], "cwd": body.get("cwd")})
            else:
                text = json.dumps(body, sort_keys=True)
            self._live(("wire", fields["session"]), text, None)
        else:
            self.progress += 1

    # comparing
    def _live(self, stream: tuple[Any, ...], text: str, request: str | None) -> None:
        self.progress += 1
        expected = self.timeline.streams.get(stream, [])
        index = self.cursor.get(stream, 0)
        self.cursor[stream] = index + 1
        if stream in self.drifted:
            return
        live = self.normalizer.live_side(text)
        if index >= len(expected):
            self.drifted.add(stream)
            where = f"request {request}" if request is not None else _name(stream)
            self.drift(f"{where}: a record the recording does not have\n  live:     {_cut(live)}")
            return
        want = expected[index]
        if want.text != live:
            # A pair answers one request: the next pair is compared all the same (each
            # drifted request is reported). A transcript's lines are not tied to one
            # request: once one differs, the rest of its stream would all seem to.
            if stream != ("pairs",):
                self.drifted.add(stream)
            number, recorded_line, live_line = first_difference(want.text, live)
            what = f"line {number} of its response differs" if stream == ("pairs",) else f"{_name(stream)} differs"
            at = next((i for i, (a, b) in enumerate(zip(recorded_line, live_line)) if a != b), None)
            if at is None:
                at = min(len(recorded_line), len(live_line))
            where = f", at character {at + 1}" if len(recorded_line) > CUT or len(live_line) > CUT else ""
            self.drift(f"request {_cut(want.request)}: {what} (recorded at line {want.lineno}{where})\n"
                        f"  recorded: {_around(recorded_line, at)}\n  live:     {_around(live_line, at)}")  # fmt: skip

    def drift(self, text: str) -> None:
        """Report one drift (``text`` says where and how), under this run's label."""
        self.drifts.append(f"{self.label}: {text}")

    def never_came(self, want: Expected) -> None:
        """Report an expectation the live run never met (the replay gave up waiting)."""
        what = "its response" if want.stream == ("pairs",) else _name(want.stream)
        self.drift(f"request {want.request}: {what} never came (recorded at line {want.lineno})\n"
                   f"  recorded: {_cut(want.text.split(chr(10))[0])}")  # fmt: skip

    def met_before(self, position: float) -> bool:
        """Whether every expectation recorded before ``position`` has its live record."""
        for stream, expected in self.timeline.streams.items():
            index = self.cursor.get(stream, 0)
            if index < len(expected) and expected[index].position < position:
                return False
        return True

    def missing(self) -> list[Expected]:
        left = []
        for stream, expected in self.timeline.streams.items():
            index = self.cursor.get(stream, 0)
            if index < len(expected) and stream not in self.drifted:
                left.append(expected[index])
        return left


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


CUT = 400


def _cut(text: str, limit: int = CUT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _around(text: str, at: int) -> str:
    """A long line shown around character ``at`` (where it first differs)."""
    if len(text) <= CUT:
        return text
    start = max(0, at - CUT // 3)
    return ("…" if start else "") + text[start : start + CUT] + ("…" if start + CUT < len(text) else "")


def _name(stream: tuple[Any, ...]) -> str:
    if stream[0] == "conn":
        return "a line out" if stream[1] is None else f"a line out on connection {stream[1]}"
    if stream[0] == "wire":
        return f"what the driver of {stream[1]} wrote to its agent"
    return "a response"
