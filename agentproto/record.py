"""The one recorder: every ``--record`` file and every ``record_wire`` file, one JSON line each.

Two kinds of line share one file format (one JSON object per line, appended):

- ``{"request": RAW, "response": RAW}``: the ops framings (the ``agent`` loop,
  ``--single-shot``, HTTP, JSON-RPC, MCP), exactly the seed's recorded-session pairs:
  ``request`` the raw request line, whitespace-trimmed; ``response`` every byte written
  for it, up to and including its ``done`` (or its final JSON-RPC response).
- ``{"t": NS, "dir": DIRECTION, "line": TEXT, ...tags}``: a transcript line, for
  conversations where lines in and out interleave: protocol 1 (``"in"``, ``"out"``), and
  an agent's wire (``"to_agent"``, ``"from_agent"``). ``t`` is a monotonic clock in
  nanoseconds (only differences mean anything); tags tell conversations apart in one
  file (``conn`` for a Unix-socket connection, ``session`` for an agent's wire).

Rules of this file:
- Best effort: a record that cannot be written costs one line on stderr (once per
  recorder) and never the session; later records are still tried.
- Records hold whole requests (env, keys): the file is opened by ``private.open_append``
  (created 0600, never through a symlink, only a regular file of ours), append-only, and
  kept open (one ``write`` per record).
- A record is written whole in one call, so two recorders on one file never interleave
  inside a line.
"""

from __future__ import annotations

import errno
import json
import os
import time
from typing import Any, Callable, TextIO

from agentproto import private
from agentproto.errors import log


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Recorder:
    """Appends records to one file, best effort."""

    def __init__(self, path: str, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = path
        self.clock = clock
        self.file: TextIO | None = None
        self.warned = False

    def open(self) -> None:
        """Open the file now, raising what refuses it (``private.UnsafePath``, OSError): for
        a caller that must refuse a bad path up front (``record_wire`` fails the ``open``).
        Without it the file is opened by the first record, best effort."""
        if self.file is None:
            self.file = private.open_append(self.path)

    def pair(self, request: bytes | str, response: bytes | str) -> None:
        """One request of an ops framing and everything written for it."""
        self._write({"request": _text(request).strip(), "response": _text(response)})

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None:
        """One line of a transcript, without its newline."""
        self._write({"t": self.clock(), "dir": direction, "line": _text(line), **tags})

    def _write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record) + "\n").encode("ascii")
        try:
            if self.file is None:
                self.file = private.open_append(self.path)
            # Whole lines straight to the descriptor: a failed write never leaves half a
            # record in a buffer to be flushed in front of the next one.
            fd = self.file.fileno()
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, "no space left on device")
                view = view[written:]
        except OSError as exc:
            if not self.warned:
                self.warned = True
                log(f"--record {self.path}: {exc.strerror or exc}; recording skipped, the session goes on")

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None
