"""Line framing: a byte stream split into lines with bounded memory. Sans-IO.

Rules of this file:
- A line longer than the bound is never buffered: its bytes are discarded as they arrive
  and a ``TooLong`` marker (its size, its first bytes to recover an id from) stands in
  for it, so one flood costs its reader nothing but the bound.
- Nothing here touches a descriptor: bytes go in, lines come out.
"""

from __future__ import annotations

DEFAULT_MAX_LINE = 8 * 1024 * 1024


class TooLong:
    """Marker yielded in place of a line that exceeded the framer's bound."""

    __slots__ = ("size", "head")

    def __init__(self, size: int, head: bytes) -> None:
        self.size = size  # bytes seen (at least), discarded
        self.head = head  # the first bytes, to recover an id from

    def __repr__(self) -> str:
        return f"TooLong({self.size})"


class LineFramer:
    """Splits a byte stream into lines with bounded memory.

    ``feed(data)`` returns the complete lines (without the newline; a trailing ``\\r`` is
    kept, since JSON ignores it) and ``TooLong`` markers for lines longer than
    ``max_line``: their bytes are discarded as they arrive, never buffered.
    ``close()`` returns the final unterminated line, if any.
    """

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._discarding = 0  # bytes discarded so far of an over-long line
        self._head = b""

    def feed(self, data: bytes) -> list[bytes | TooLong]:
        buf = self._buf
        if not self._discarding and len(buf) + len(data) <= self.max_line:
            # No line of this read can be too long: one split finds them all (a relay reads
            # thousands of lines at a time; finding them one by one cost as much again).
            lines = data.split(b"\n")
            rest = lines.pop()
            if buf and lines:
                lines[0] = bytes(buf) + lines[0]
                buf.clear()
            buf += rest
            return lines  # type: ignore[return-value]  # (list[bytes]: no TooLong in it)
        out: list[bytes | TooLong] = []
        start = 0
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                self._discarding += len(data)
                return out
            out.append(TooLong(self._discarding + nl, self._head))
            self._discarding = 0
            self._head = b""
            start = nl + 1
        if buf:
            nl = data.find(b"\n", start)
            if nl < 0:
                buf += data[start:] if start else data
                self._check_overflow(out)
                return out
            buf += data[start:nl]
            if len(buf) > self.max_line:
                out.append(TooLong(len(buf), bytes(buf[:256])))
            else:
                out.append(bytes(buf))
            buf.clear()
            start = nl + 1
        end = len(data)
        while start < end:
            nl = data.find(b"\n", start)
            if nl < 0:
                buf += data[start:]
                self._check_overflow(out)
                break
            if nl - start > self.max_line:
                out.append(TooLong(nl - start, data[start : min(nl, start + 256)]))
            else:
                out.append(data[start:nl])
            start = nl + 1
        return out

    def _check_overflow(self, out: list[bytes | TooLong]) -> None:
        if len(self._buf) > self.max_line:
            self._discarding = len(self._buf)
            self._head = bytes(self._buf[:256])
            self._buf.clear()

    def close(self) -> list[bytes | TooLong]:
        if self._discarding:
            marker = TooLong(self._discarding, self._head)
            self._discarding = 0
            return [marker]
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            return [line]
        return []

    @property
    def buffered(self) -> int:
        return len(self._buf)
