"""Protocol 1 frames over a byte stream: the ``serve`` frontend, and its stdout writer.

A ``P1Connection`` reads command lines from one descriptor and writes hello, replies,
events, session errors and ``closed`` to an ``Output``. Stdio is one connection; the
Unix-socket transport runs one per accepted socket. Each connection owns the sessions
it opened and cannot touch another connection's.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from typing import Any, Callable

from agentproto import PROTOCOL, __version__
from agentproto.engine import Session, log
from agentproto.runtime import Runtime, Scope
from agentproto.loop import Loop
from agentproto.wire import DEFAULT_MAX_LINE, AgentError, FrameError, LineFramer, TooLong, encode, parse_command

#: anyagent's clients check the hello's ``anyagent`` member; this is the anyagent release
#: whose protocol 1 agentproto speaks.
ANYAGENT_COMPAT = "0.0.5"

WRITE_CHUNK = 256 * 1024
#: Stop reading commands while this many lines wait unwritten (an app that writes
#: commands but never reads replies must not grow our memory without bound).
INPUT_PAUSE_LINES = 8192


def hello_line() -> bytes:
    return encode({"hello": {"protocol": PROTOCOL, "agentproto": __version__, "anyagent": ANYAGENT_COMPAT}})


class Output:
    """A bounded, non-blocking line writer for one descriptor.

    Lines are queued with the session they belong to; each flush writes as many as the
    descriptor takes in one ``os.write`` and tells their sessions how many were written
    (the engine's flow control). Pipes and sockets are written without blocking; a tty
    or a regular file, which cannot be polled, is written directly.
    """

    def __init__(self, loop: Loop, fd: int, on_error: Callable[[OSError], None]) -> None:
        self.loop = loop
        self.fd = fd
        self.on_error = on_error
        self.queue: deque[tuple[bytes, Session | None]] = deque()
        self.offset = 0
        self.scheduled = False
        self.waiting = False  # registered for EVENT_WRITE
        self.failed = False
        self.on_drained: Callable[[], None] | None = None
        mode = os.fstat(fd).st_mode
        self.pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        self._restore_blocking: bool | None = None
        if self.pollable:
            self._restore_blocking = os.get_blocking(fd)
            os.set_blocking(fd, False)

    def __len__(self) -> int:
        return len(self.queue)

    def send(self, data: bytes, session: Session | None = None) -> None:
        if self.failed:
            if session is not None:
                session.delivered(1)  # nobody will read it; don't hold the agent back
            return
        self.queue.append((data, session))
        if not self.scheduled and not self.waiting:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        queue = self.queue
        while queue and not self.failed:
            chunks: list[bytes] = []
            size = -self.offset
            for data, _ in queue:
                chunks.append(data)
                size += len(data)
                if size >= WRITE_CHUNK:
                    break
            blob = b"".join(chunks)
            if self.offset:
                blob = blob[self.offset :]
            try:
                written = os.write(self.fd, blob) if self.pollable else self._write_all(blob)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                self._fail(exc)
                return
            self._account(written)
            if written < len(blob):
                if not self.waiting:
                    self.waiting = True
                    self.loop.add_writer(self.fd, self._writable)
                return
        if self.waiting:
            self.waiting = False
            self.loop.remove_writer(self.fd)
        if not queue and self.on_drained is not None:
            self.on_drained()

    def _writable(self) -> None:
        self.flush()

    def _write_all(self, blob: bytes) -> int:
        view = memoryview(blob)
        total = 0
        while total < len(blob):
            total += os.write(self.fd, view[total:])
        return total

    def _account(self, written: int) -> None:
        queue = self.queue
        remaining = written + self.offset
        counts: dict[Session, int] = {}
        while queue:
            data, session = queue[0]
            if len(data) > remaining:
                break
            remaining -= len(data)
            queue.popleft()
            if session is not None:
                counts[session] = counts.get(session, 0) + 1
        self.offset = remaining
        for session, count in counts.items():
            session.delivered(count)

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        if self.waiting:
            self.waiting = False
            self.loop.remove_writer(self.fd)
        dropped = self.queue
        self.queue = deque()
        for _, session in dropped:
            if session is not None:
                session.delivered(1)
        self.on_error(exc)

    def close(self) -> None:
        if self.waiting:
            self.loop.remove_writer(self.fd)
            self.waiting = False
        if self._restore_blocking is not None:
            try:
                os.set_blocking(self.fd, self._restore_blocking)
            except OSError:
                pass


class LineReader:
    """Lines of one descriptor through the loop, with bounded memory and back-pressure.

    Every framing reads its input this way. While ``busy()`` says the consumer is behind
    (its replies wait unwritten, its jobs pile up), reading pauses and the kernel's pipe
    or socket buffer throttles the writer; ``busy`` is checked again every ``RECHECK``
    seconds. ``close()`` stops at once, even in the middle of a chunk (``halt``).
    """

    READ_SIZE = 256 * 1024
    RECHECK = 0.05

    def __init__(
        self,
        loop: Loop,
        fd: int,
        on_line: Callable[[bytes | TooLong], None],
        on_eof: Callable[[], None],
        busy: Callable[[], bool] | None = None,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        self.loop = loop
        self.fd = fd
        self.on_line = on_line
        self.on_eof = on_eof
        self.busy = busy
        self.framer = LineFramer(max_line)
        self.reading = False
        self.eof = False

    def start(self) -> None:
        if not self.reading and not self.eof:
            self.reading = True
            self.loop.add_reader(self.fd, self._readable)

    def pause(self) -> None:
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.fd)

    def close(self) -> None:
        self.eof = True
        self.pause()

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, self.READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            for line in self.framer.close():
                self.on_line(line)
            self.on_eof()
            return
        for line in self.framer.feed(data):
            self.on_line(line)
            if self.eof:
                return
        if self.reading and self.busy is not None and self.busy():
            self.pause()
            self.loop.call_later(self.RECHECK, self._resume)

    def _resume(self) -> None:
        if self.eof:
            return
        if self.busy is not None and self.busy():
            self.loop.call_later(self.RECHECK, self._resume)
        else:
            self.start()


class P1Connection:
    """One protocol 1 conversation: commands in, frames out."""

    def __init__(
        self,
        runtime: Runtime,
        in_fd: int,
        output: Output,
        on_finished: Callable[["P1Connection"], None],
        *,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.in_fd = in_fd
        self.output = output
        self.on_finished = on_finished
        self.max_line = max_line
        self.reader = LineReader(
            self.loop, in_fd, self._line, self.end_input, lambda: len(self.output) > INPUT_PAUSE_LINES, max_line
        )
        self.scope = Scope(runtime)
        self.scope.on_empty = self._maybe_finished
        self.eof = False
        self.finished = False

    # -- input --------------------------------------------------------------------------
    def start(self) -> None:
        self.output.send(hello_line())
        self.reader.start()

    def _line(self, line: Any) -> None:
        if isinstance(line, bytes) and not line.strip():
            return
        try:
            command = parse_command(line, self.max_line)
        except FrameError as error:
            self.output.send(encode({"id": error.frame_id, "error": error.body()}))
            return
        frame_id = command.id

        def done(value: Any, error: AgentError | None) -> None:
            if error is not None:
                self.output.send(encode({"id": frame_id, "error": error.body()}))
            else:
                self.output.send(encode({"id": frame_id, "ok": value}))

        try:
            self.runtime.execute(command.name, command.args, self, self.scope, done)
        except Exception as exc:  # a bug must cost one command, never the sidecar
            log(f"internal error on {command.name}: {exc!r}")
            done(None, AgentError.detail("ProtocolFailed", f"internal error: {exc!r}"))

    def end_input(self) -> None:
        """EOF (or shutdown): close every session of this connection, then finish."""
        if self.eof:
            return
        self.eof = True
        self.reader.close()
        if self.in_fd != self.output.fd:  # a socket is its own output: keep its writer
            self.loop.forget(self.in_fd)
        self.runtime.close_all(self.scope.sessions())
        self._maybe_finished()

    def _maybe_finished(self) -> None:
        if self.eof and not self.scope.live and not self.scope.hidden and not self.finished:
            self.finished = True
            self.on_finished(self)

    # -- Sink ---------------------------------------------------------------------------
    def event(self, session: Session, event: dict[str, Any]) -> None:
        self.output.send(encode({"event": event}), session)

    def session_error(self, session: Session, error: AgentError) -> None:
        self.output.send(encode({"session": session.id, "error": error.body()}))

    def session_closed(self, session: Session) -> None:
        self.output.send(encode({"closed": session.id}))
