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
- Records hold whole requests (env, keys): the file is created 0600, opened without
  following a symlink, append-only, and kept open (one ``write`` per record).
- A record is written whole in one call, so two recorders on one file never interleave
  inside a line.
"""

from __future__ import annotations

import errno
import json
import os
import time
from typing import Any, Callable

from agentproto.errors import log


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Recorder:
    """Appends records to one file, best effort."""

    def __init__(self, path: str, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = path
        self.clock = clock
        self.fd: int | None = None
        self.warned = False

    def pair(self, request: bytes | str, response: bytes | str) -> None:
        """One request of an ops framing and everything written for it."""
        self._write({"request": _text(request).strip(), "response": _text(response)})

    record = pair  # what httpd.py calls, until the HTTP layer is rebuilt on this recorder

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None:
        """One line of a transcript, without its newline."""
        self._write({"t": self.clock(), "dir": direction, "line": _text(line), **tags})

    def _write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            if self.fd is None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                self.fd = os.open(self.path, flags, 0o600)
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, "no space left on device")
                view = view[written:]
        except OSError as exc:
            if not self.warned:
                self.warned = True
                log(f"--record {self.path}: {exc.strerror or exc}; recording skipped, the session goes on")

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
