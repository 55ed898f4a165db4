"""The one reader and the one writer: every pipe and socket agentproto reads or writes.

Rules of this file:
- Every read and write of a descriptor goes through ``loop.io`` (``read(fd, size)``,
  ``write(fd, data)``), so a test can put a fault-injecting one in its place (EAGAIN,
  short writes, EPIPE, ENOSPC) and watch every layer above it cope.
- Nothing here blocks: pipes and sockets are non-blocking and watched by the loop. The
  only exception is a descriptor the loop cannot poll (a tty, a regular file), which is
  written directly, as a terminal or a file takes the data at once.
- ``Reader`` hands over chunks as they were read; ``LineReader`` frames them into lines
  with bounded memory and pauses while its consumer is behind.
- ``Output`` queues lines each with an optional ``delivered(count)`` callback and calls it
  with how many of its lines were written (the engine's flow control: the engine hands a
  session's bound ``delivered``; this layer imports nothing above it). A big line costs
  time linear in its size however the descriptor takes it, and small lines are copied into
  a write once: what the descriptor did not take of a write is written next as it is.
  Lines are written at the end of the loop's pass, or at once past ``EARLY_WRITE`` queued
  bytes on a pipe or socket (a flood's reader starts on its first lines); a failure there
  is left to the pass's flush, never reported inside ``send``. When writing fails, the queue
  is dropped, its callbacks are told, and whoever waits for the queue to drain is told as
  well: a reader that went away must never keep a shutdown waiting. ``reader_gone`` says, without a
  write, whether a pipe's or socket's reader has gone (poll's POLLERR/POLLHUP, timeout 0).
"""

from __future__ import annotations

import errno
import os
import select
import stat
from collections import deque

from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import DEFAULT_MAX_LINE, LineFramer, TooLong
from agentproto.loopio.loop import Soon

if TYPE_CHECKING:
    from typing import Callable

    from agentproto.loopio.loop import Loop

    #: Told how many of the lines queued with it were written (or dropped): flow control.
    Delivered = Callable[[int], None]

WRITE_CHUNK = 256 * 1024
#: Queued bytes at which ``Output.send`` writes at once (a pipe or a socket, not waiting)
#: instead of at the end of the loop's pass: a flood's first lines reach their reader while
#: the rest of the same read is still relayed, so the two processes work side by side.
EARLY_WRITE = 16 * 1024


class Reader:
    """Chunks of one descriptor through the loop: ``on_data(bytes)`` per read, then
    ``on_eof()`` once (end of file, or a read error: the peer is gone either way)."""

    READ_SIZE = 256 * 1024

    def __init__(
        self,
        loop: "Loop",
        fd: int,
        on_data: Callable[[bytes], None],
        on_eof: Callable[[], None],
        size: int | None = None,
    ) -> None:
        self.loop = loop
        self.fd = fd
        self.on_data = on_data
        self.on_eof = on_eof
        self.size = size or self.READ_SIZE
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
        """Stop for good, without calling ``on_eof``."""
        self.eof = True
        self.pause()

    def _readable(self) -> None:
        try:
            data = self.loop.io.read(self.fd, self.size)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            self._ended()
            return
        self.on_data(data)

    def _ended(self) -> None:
        self.on_eof()


class LineReader(Reader):
    """Lines of one descriptor through the loop, with bounded memory and back-pressure.

    Every framing reads its input this way. A line of nothing but white space is no
    message in any of them (protocol 1, ops, JSON-RPC, MCP, the control socket): it is
    skipped here, never handed on. While ``busy()`` says the consumer is behind
    (its replies wait unwritten, its jobs pile up), reading pauses and the kernel's pipe
    or socket buffer throttles the writer; ``busy`` is checked again every ``RECHECK``
    seconds. ``close()`` stops at once, even in the middle of a chunk (``halt``).
    """

    RECHECK = 0.05

    def __init__(
        self,
        loop: "Loop",
        fd: int,
        on_line: Callable[[bytes | TooLong], None],
        on_eof: Callable[[], None],
        busy: Callable[[], bool] | None = None,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        super().__init__(loop, fd, self._data, on_eof)
        self.on_line = on_line
        self.busy = busy
        self.framer = LineFramer(max_line)

    def _ended(self) -> None:
        for line in self.framer.close():
            if not isinstance(line, bytes) or line.strip():
                self.on_line(line)
        self.on_eof()

    def _data(self, data: bytes) -> None:
        for line in self.framer.feed(data):
            if isinstance(line, bytes) and not line.strip():
                continue
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


class Output:
    """A bounded, non-blocking line writer for one descriptor.

    Lines are queued each with an optional ``delivered`` callback; each flush writes as much
    as the descriptor takes in one write and calls the callbacks of the lines it finished
    with how many were written (the engine's flow control). Pipes and sockets are written without blocking; a tty or a
    regular file, which cannot be polled, is written directly.
    """

    def __init__(self, loop: "Loop", fd: int, on_error: Callable[[OSError], None]) -> None:
        self.loop = loop
        self.fd = fd
        self.on_error = on_error
        self.queue: deque[tuple[bytes, "Delivered | None"]] = deque()
        self.offset = 0  # bytes of queue[0] already written
        self.queued = 0  # bytes queued and not written yet
        #: The unwritten rest of the last blob the descriptor took part of: written next as
        #: it is, not built again from the queue (a full pipe takes 64 KiB of a WRITE_CHUNK).
        self._rest: memoryview | None = None
        self.sent = 0  # bytes written so far (a reader's progress: httpserver's stall check)
        self._flush_soon = Soon(loop, self.flush)
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

    def send(self, data: bytes, delivered: "Delivered | None" = None) -> None:
        if self.failed:
            if delivered is not None:
                delivered(1)  # nobody will read it; don't hold the agent back
            return
        self.queue.append((data, delivered))
        self.queued += len(data)
        if not self.waiting:
            self._flush_soon.request()
            if self.queued >= EARLY_WRITE and self.pollable:
                self._write_early()

    def _next_blob(self) -> memoryview:
        """What to write next: queue[0]'s unwritten rest, plus whole lines after it up to
        WRITE_CHUNK. A view, never a copy of a big line's rest."""
        rest = self._rest
        if rest is not None:
            self._rest = None
            return rest
        queue = self.queue
        first = queue[0][0]
        if len(first) - self.offset >= WRITE_CHUNK or len(queue) == 1:
            return memoryview(first)[self.offset :]
        chunks = [memoryview(first)[self.offset :]]
        size = len(first) - self.offset
        for index in range(1, len(queue)):
            data = queue[index][0]
            chunks.append(memoryview(data))
            size += len(data)
            if size >= WRITE_CHUNK:
                break
        return memoryview(b"".join(chunks))

    def flush(self) -> None:
        """Write what the descriptor takes now. While it is full (``waiting`` for it to take
        more), nothing: the loop writes then, and a try per call would rebuild a blob of up
        to WRITE_CHUNK only to get EAGAIN (a caller flushing per line paid its queue squared)."""
        if not self.waiting:
            self._write()

    def _write(self) -> None:
        io = self.loop.io
        while self.queue and not self.failed:
            blob = self._next_blob()
            try:
                written = io.write(self.fd, blob) if self.pollable else self._write_all(blob)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                self._fail(exc)
                return
            # The rest is known before the delivery callbacks run: one that sends enough
            # for an early write takes up exactly where this write stopped.
            self._rest = blob[written:] if written < len(blob) else None
            self._account(written)
            if written < len(blob):
                if not self.waiting:
                    self.waiting = True
                    self.loop.add_writer(self.fd, self._write)
                return
        if self.waiting:
            self.waiting = False
            self.loop.remove_writer(self.fd)
        if not self.queue:
            self._drained()

    def _write_early(self) -> None:
        """One write, in the middle of the loop's pass (``EARLY_WRITE``). What fails here is
        left to the pass's flush, already asked for, which meets it again and reports it: an
        error handler does not run inside the ``send`` of whoever is relaying."""
        blob = self._next_blob()
        try:
            written = self.loop.io.write(self.fd, blob)
        except BlockingIOError:
            written = 0
        except OSError:
            self._rest = blob
            return
        self._rest = blob[written:] if written < len(blob) else None  # before the callbacks (_write)
        self._account(written)
        if written < len(blob) and not self.waiting:
            self.waiting = True
            self.loop.add_writer(self.fd, self._write)

    def _write_all(self, blob: memoryview) -> int:
        """As much of ``blob`` as the descriptor takes now. A terminal may refuse with
        EAGAIN part way (another program made it non-blocking): what was written is then
        counted, so that the rest is written once, when the terminal takes it."""
        total = 0
        write = self.loop.io.write
        while total < len(blob):
            try:
                written = write(self.fd, blob[total:])
            except BlockingIOError:
                break
            if written <= 0:
                break
            total += written
        return total

    def _account(self, written: int) -> None:
        self.sent += written
        self.queued -= written
        queue = self.queue
        remaining = written + self.offset
        counts: dict["Delivered", int] = {}
        while queue:
            data, delivered = queue[0]
            if len(data) > remaining:
                break
            remaining -= len(data)
            queue.popleft()
            if delivered is not None:
                counts[delivered] = counts.get(delivered, 0) + 1
        self.offset = remaining
        for delivered, count in counts.items():
            delivered(count)

    def _drained(self) -> None:
        then, self.on_drained = self.on_drained, None
        if then is not None:
            then()

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        if self.waiting:
            self.waiting = False
            self.loop.remove_writer(self.fd)
        dropped = self.queue
        self.queue = deque()
        self.offset = self.queued = 0
        self._rest = None
        for _, delivered in dropped:
            if delivered is not None:
                delivered(1)
        self.on_error(exc)
        # Nothing will ever be written now: a shutdown waiting for the drain goes on.
        self._drained()

    def reader_gone(self) -> bool:
        """Whether the descriptor's reader is known to be gone now, without writing: a pipe
        whose read end is closed (POLLERR), a socket shut both ways (POLLHUP). A write would
        find out too (EPIPE), but a silent process may have none to make."""
        if not self.pollable or self.failed:
            return False
        poller = select.poll()
        poller.register(self.fd, 0)  # only the conditions poll always reports
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))

    def fail_reader_gone(self) -> None:
        """Stop as a write failing with EPIPE would (``on_error`` is told)."""
        if not self.failed:
            self._fail(BrokenPipeError(errno.EPIPE, "the reader is gone"))

    def abandon(self) -> None:
        """Give up on what is still queued (a shutdown's reader that stopped reading): drop
        it as a failed write would, without calling ``on_error``, and stop writing."""
        if not self.failed:
            on_error, self.on_error = self.on_error, lambda _exc: None
            self._fail(OSError("abandoned"))
            self.on_error = on_error

    def close(self) -> None:
        """Stop writing for good: a flush already asked for does not run (the descriptor
        may be closed and its number given to another file next), and later lines are
        dropped and counted as delivered."""
        self.failed = True
        self._flush_soon.cancel()
        if self.waiting:
            self.loop.remove_writer(self.fd)
            self.waiting = False
        if self._restore_blocking is not None:
            try:
                os.set_blocking(self.fd, self._restore_blocking)
            except OSError:
                pass
