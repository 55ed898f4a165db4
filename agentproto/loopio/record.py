"""The one recorder: every ``--record`` file and every ``record_wire`` file, one JSON line each.

A recording is a sequence of runs; each process that opens the file appends one run,
which starts with its header. Its lines (one JSON object each, appended):

- ``{"recording": 1, "agentproto", "frontend", "tmpdir", "mock", ...}``: the header: what
  replay needs to rebuild the same runtime (the ``--mock`` script's path, the sha256 of
  its bytes, its content and its text, which replay plays; agentproto's version; the
  frontend; the temp directory of the recording machine, whose paths replay maps onto
  its own).
- ``{"request": RAW, "response": RAW}``: the ops framings (the ``agent`` loop,
  ``--single-shot``, HTTP, JSON-RPC, MCP), exactly the seed's recorded-session pairs:
  ``request`` the raw request line, whitespace-trimmed; ``response`` every byte written
  for it, up to and including its ``done`` (or its final JSON-RPC response); an answer of
  more than 16 MiB keeps its first 16 MiB, and ``dropped`` says how many bytes followed
  (a request is never held whole in memory for its record). HTTP puts
  ``{"t", "dir": "post", "path"}`` before the pairs of each POST (a batch's requests share
  a default session, separate POSTs do not).
- ``{"t": NS, "dir": DIRECTION, ...}``: a transcript line. ``t`` is a monotonic clock in
  nanoseconds (only differences mean anything); ``conn`` tells Unix-socket connections
  apart, ``session`` ties an agent's wire to its session. Protocol 1: ``in`` and ``out``
  (``line``: the line without its newline) and ``eof`` (the app's input ended). An
  agent's wire: ``launch`` (the agent's installation), ``spawn`` (``argv``, ``cwd``),
  ``id`` (an id the driver made up: ``purpose``, ``value``), ``to_agent`` and
  ``from_agent`` (``line``; a from_agent line's ``read`` numbers the read it came in, so
  the lines read together stay together), ``control`` (``action``: close_stdin, shutdown,
  kill, signal), ``exit`` (``status``, ``stderr``) and ``restart`` (``process``: the
  agent process ended during a rate-limited turn and the session's next one, resumed by
  its token, starts: its ``spawn`` follows, and the lines after it are that process's).

Rules of this file:
- Best effort: a record that cannot be written costs one line on stderr (once per
  recorder) and never the session; later records are still tried. A write cut short
  (a full disk) is cut back off the file: it holds whole records only.
- Never in the loop's way: with a loop, records are buffered and written once per loop
  pass (one write of whole lines), up to ``MAX_BUFFER`` bytes waiting; beyond that, what
  cannot be kept is dropped with the one stderr line. ``close`` writes what is left.
- No secret reaches the file: every record is redacted by redact.py's rules first (its
  JSON texts and fields by their keys, every text by the secrets' shapes and the values
  learned so far); the header only by the latter (its mock script must keep its sha256).
  A launch teaches it the secrets of the agent's env and MCP servers.
- Records hold whole requests: the file is opened by ``private.open_append`` (created
  0600, never through a symlink, only a regular file of ours), append-only, kept open.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import time
from json.encoder import encode_basestring_ascii as _escape

from agentproto import __version__
from agentproto.core import redact
from agentproto.core.errors import log
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.loopio import private
from agentproto.loopio.loop import Soon

if TYPE_CHECKING:
    from typing import Any, Callable, TextIO

    from agentproto.core.wire_types import AgentInstallation
    from agentproto.loopio.loop import Loop

FORMAT = 1
#: Bytes of records that may wait for the next loop pass.
MAX_BUFFER = 64 * 1024 * 1024


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _json(value: Any) -> str:
    # The relay's records are strings and numbers: the C string encoder, not json.dumps's
    # whole machinery, per value (the same text json.dumps writes).
    if type(value) is str:
        return _escape(value)
    if type(value) is int:
        return str(value)
    return json.dumps(value)


def _record(record: dict[str, Any]) -> str:
    """``json.dumps(record)``, faster for the records of a relay."""
    return "{" + ", ".join(f"{_escape(key)}: {_json(value)}" for key, value in record.items()) + "}"


class RecordSink(Protocol):
    """What frontends and transports record through: a Recorder, or replay's checker."""

    def pair(self, request: bytes | str, response: bytes | str, dropped: int = 0) -> None: ...

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None: ...

    def note(self, direction: str, **fields: Any) -> None: ...


def mock_facts(path: str, raw: bytes) -> dict[str, Any]:
    """The header's ``mock``: the path of the script that is played, the sha256 of its
    bytes ``raw``, its content and its text (``raw`` holds a script that loaded: it is JSON
    text, so UTF-8). Replay plays ``text``, checked against ``sha256``, and never opens
    ``path``."""
    return {"path": os.path.abspath(path), "sha256": hashlib.sha256(raw).hexdigest(), "script": json.loads(raw),
            "text": raw.decode("utf-8")}  # fmt: skip


class Recorder:
    """Appends records to one file, best effort."""

    def __init__(
        self,
        path: str,
        clock: Callable[[], int] = time.monotonic_ns,
        *,
        loop: "Loop | None" = None,
        frontend: str | None = None,
        mock: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self.clock = clock
        self.file: TextIO | None = None
        self.warned = False
        #: The run's header, written before its first record (None: no header, a test's).
        self.header: dict[str, Any] | None = None
        if frontend is not None:
            redact.SECRETS.learn_environment(os.environ)  # what every agent inherits
            self.header = {"recording": FORMAT, "agentproto": __version__, "frontend": frontend,
                           "tmpdir": tempfile.gettempdir(), "mock": mock, "t": clock()}  # fmt: skip
        self._buffer: list[str] = []
        self._buffered = 0
        #: The next pass's flush of what is buffered; None without a loop: each record is
        #: written at once.
        self._flush_soon = None if loop is None else Soon(loop, self.flush)

    def open(self) -> None:
        """Open the file now, raising what refuses it (``private.UnsafePath``, OSError): for
        a caller that must refuse a bad path up front (``record_wire`` fails the ``open``).
        Without it the file is opened by the first record, best effort."""
        if self.file is None:
            self.file = private.open_append(self.path)

    # -- records -------------------------------------------------------------------------
    def pair(self, request: bytes | str, response: bytes | str, dropped: int = 0) -> None:
        """One request of an ops framing and everything written for it (its first
        ``stdio.MAX_CAPTURE`` bytes: ``dropped`` counts the bytes of it not kept)."""
        secrets = redact.SECRETS
        text = secrets.redact_json(_text(request).strip())
        record: dict[str, Any] = {"request": text, "response": secrets.redact_json(_text(response), lines=True)}
        if dropped:
            record["dropped"] = dropped
        self._write(record)

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None:
        """One line of a transcript, without its newline."""
        text = redact.SECRETS.redact_json(_text(line))
        # The relay's hottest record (each event out, each agent line): formatted by hand,
        # the same text json.dumps would write for the dict.
        record = f'{{"t": {self.clock()}, "dir": {_escape(direction)}, "line": {_escape(text)}'
        for key, value in tags.items():
            record += f", {_escape(key)}: {_json(value)}"
        self._put_record(record + "}")

    def note(self, direction: str, **fields: Any) -> None:
        """A transcript record other than a line (eof, launch, spawn, id, control, exit, post)."""
        self._write({"t": self.clock(), "dir": direction, **redact.SECRETS.redact_value(fields)})

    # -- writing -------------------------------------------------------------------------
    def _write(self, record: dict[str, Any]) -> None:
        self._put_record(_record(record))

    def _put_record(self, record: str) -> None:
        if self.header is not None:
            header, self.header = self.header, None
            self._write(header)
        data = redact.scrub(record) + "\n"  # ASCII: every other character is escaped
        if self._flush_soon is None:
            self._put(data.encode("ascii"))
            return
        if self._buffered + len(data) > MAX_BUFFER:
            self._failed(OSError(errno.ENOBUFS, f"more than {MAX_BUFFER} bytes of records waiting; some were dropped"))
            return
        self._buffer.append(data)
        self._buffered += len(data)
        self._flush_soon.request()

    def flush(self) -> None:
        """Write what is buffered (one write of whole records)."""
        if self._buffer:
            data = "".join(self._buffer).encode("ascii")
            self._buffer.clear()
            self._buffered = 0
            self._put(data)

    def _put(self, data: bytes) -> None:
        written = 0
        try:
            if self.file is None:
                self.file = private.open_append(self.path)
            # Whole lines straight to the descriptor: a failed write never leaves half a
            # record in a buffer to be flushed in front of the next one.
            fd = self.file.fileno()
            view = memoryview(data)
            while view:
                count = os.write(fd, view)
                if count <= 0:
                    raise OSError(errno.ENOSPC, "no space left on device")
                written += count
                view = view[count:]
        except OSError as exc:
            torn = written - (data.rfind(b"\n", 0, written) + 1)
            if torn:
                self._cut_back(torn)
            self._failed(exc)

    def _cut_back(self, torn: int) -> None:
        """A write cut short (a full disk) inside a record: that record's head, at the
        file's end (O_APPEND), is cut off again, so that the file holds whole records only
        and the next one that fits starts a line of its own (a torn line would make the
        whole file unreplayable)."""
        assert self.file is not None
        try:
            fd = self.file.fileno()
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - torn))
        except OSError:
            pass  # best effort, as the write was

    def _failed(self, exc: OSError) -> None:
        if not self.warned:
            self.warned = True
            log(f"--record {self.path}: {exc.strerror or exc}; recording skipped, the session goes on")

    def close(self) -> None:
        self.flush()
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None


class Wire:
    """One session's agent wire, recorded into the frontend's file and/or the session's
    ``record_wire`` file (which it owns and closes), tagged with the session's id."""

    def __init__(self, session: str, sinks: list[RecordSink], owned: list[Recorder] | None = None) -> None:
        self.session = session
        self.sinks = sinks
        self.owned = owned or []
        self.reads = 0

    def _note(self, direction: str, **fields: Any) -> None:
        for sink in self.sinks:
            sink.note(direction, session=self.session, **fields)

    def launch(self, installation: AgentInstallation, env: dict[str, str], mcp_servers: list[Any]) -> None:
        redact.SECRETS.learn_env(env)
        redact.learn({"mcp_servers": mcp_servers})
        self._note("launch", agent=installation)

    def made_up(self, purpose: str, value: str) -> None:
        self._note("id", purpose=purpose, value=value)

    def restarted(self, process: int) -> None:
        """The session's agent process ended and a new one (its ``process``-th) starts,
        resumed by the session's token: its spawn follows (engine/restart.py)."""
        self._note("restart", process=process)

    def spawned(self, argv: list[str], cwd: str | None) -> None:
        self._note("spawn", argv=argv, cwd=cwd)

    def to_agent(self, data: bytes) -> None:
        for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
            for sink in self.sinks:
                sink.line("to_agent", line, session=self.session)

    def new_read(self) -> int:
        """A read of the agent's output begins: its lines share the number returned."""
        self.reads += 1
        return self.reads

    def from_agent(self, line: bytes, read: int) -> None:
        for sink in self.sinks:
            sink.line("from_agent", line, session=self.session, read=read)

    def control(self, action: str, **fields: Any) -> None:
        self._note("control", action=action, **fields)

    def exited(self, status: str | None, stderr: str) -> None:
        self._note("exit", status=status, stderr=stderr)

    def close(self) -> None:
        for recorder in self.owned:
            recorder.close()
        self.owned = []


def session_wire(
    loop: "Loop", session: str, recorder: RecordSink | None, record_wire: str | None
) -> Wire | None:
    """The wire of a new session: into the frontend's record (``--record``) and its own
    ``record_wire`` file, opened now (OSError, UnsafePath: the open fails, nothing starts)."""
    sinks: list[RecordSink] = [] if recorder is None else [recorder]
    owned: list[Recorder] = []
    if record_wire:
        own = Recorder(record_wire, loop=loop, frontend="record_wire")
        own.open()
        sinks.append(own)
        owned.append(own)
    return Wire(session, sinks, owned) if sinks else None
