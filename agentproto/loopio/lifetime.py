"""What every stdio frontend shares: the server scaffold, ordered output, and lifetime.

``run_stdio`` is the one scaffold of protocol 1 ``serve``, the ops ``agent`` loop,
``--single-shot``, JSON-RPC and MCP: stdout as a non-blocking ``Output``, SIGTERM/SIGINT/
SIGHUP and a stdout that stops taking writes wind the server down, and the process
exits once what was written has drained. ``Pipeline`` keeps a stdio framing's answers in
request order. ``watch_lifetime`` ends the socket servers with their parent.

Rules of this file:
- Nothing blocks: stdout is written through ``streams.Output``, stdin read through
  ``streams.Reader``/``LineReader`` (so ``loop.io`` sees every byte).
- A server winds down once (``end``) whatever asked first (EOF, a signal, a failed
  stdout, ``halt``), and the loop stops only when its lines are written or can never be.
- A signal, a stdout that stopped taking writes, or (for a socket server) its parent gone
  bounds the wind-down (``Lifetime``): sessions get ``SIGNAL_GRACE`` seconds to close as
  usual, then every agent is killed, and ``KILL_GRACE`` later the loop stops whatever is
  still unwritten (a reader that never reads cannot keep the process alive). A second
  signal kills every agent and stops the loop at once.
- A stdout whose reader went away (EPIPE) ends the process quietly with status 1, and so
  does one found gone while nothing is written (a silent turn): a pipe or socket stdout
  is looked at every ``READER_CHECK`` seconds (``Output.reader_gone``, never blocking).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from collections import deque

from agentproto.core.errors import log
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.loopio.loop import Alarm, Loop, Timer
from agentproto.loopio.streams import Output, Reader

if TYPE_CHECKING:
    from typing import Callable

    from agentproto.loopio.streams import Delivered

EXIT_OK, EXIT_FAILED = 0, 1
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StdioServer(Protocol):
    """A frontend on stdin/stdout, as ``run_stdio`` drives it."""

    def start(self) -> None: ...

    def end(self) -> None:
        """Wind down (idempotent): close its sessions, then call its ``finished``."""


def when_drained(output: Output, then: Callable[[], None]) -> None:
    """``then()`` once ``output`` has written everything it holds (or never will): now,
    or when it drains."""
    if not output.queue or output.failed:
        then()
    else:
        output.on_drained = then


def finish_when_drained(loop: Loop, output: Output) -> None:
    """Stop the loop once ``output`` has written everything (or never will)."""
    when_drained(output, loop.stop)


#: After a signal, how long the lines still queued for stdout may wait for their reader.
#: A reader that stopped reading (a full pipe nobody drains) must not keep a process that
#: was told to stop alive: past this, what is left is dropped and the process exits.
SIGNAL_DRAIN_GRACE = 2.0


def stdout_failed(exc: OSError) -> None:
    """Say why stdout stopped taking writes, unless its reader just went away: a closed
    pipe (``| head``) is how Unix tools end, and ends us quietly."""
    if not isinstance(exc, BrokenPipeError):
        log(f"stdout stopped accepting writes: {exc.strerror or exc}")


def abandon_when_stuck(loop: Loop, output: Output) -> Callable[[], None]:
    """An ``arm()`` for a shutdown: from then on, once ``output`` has made no progress for a
    whole ``SIGNAL_DRAIN_GRACE``, what it still holds is dropped. A slow reader that still
    reads gets every line; one that stopped cannot keep the process alive."""
    state: dict[str, object] = {}

    def position() -> object:
        return (len(output.queue), output.offset) if output.waiting else None

    def check() -> None:
        now = position()
        if now is not None and now == state["position"]:
            output.abandon()
            return
        state["position"] = now
        loop.call_later(SIGNAL_DRAIN_GRACE, check)

    def arm() -> None:
        if "position" not in state:
            state["position"] = position()
            loop.call_later(SIGNAL_DRAIN_GRACE, check)

    return arm


def stop_on_signals(
    loop: Loop, output: Output, end: Callable[[], None], signals: tuple[int, ...] = SIGNALS
) -> None:
    """Each of ``signals`` calls ``end`` (wind down), and lines still queued for ``output``
    get ``SIGNAL_DRAIN_GRACE`` to reach a reader that has stopped reading."""
    arm = abandon_when_stuck(loop, output)

    def signalled() -> None:
        arm()
        end()

    for signum in signals:
        loop.add_signal_handler(signum, signalled)


#: After the first signal: how long sessions get to close as usual before every agent is
#: killed. With KILL_GRACE, what keeps "SIGTERM ends the process within 5 s" whatever
#: its agents, sessions and readers do.
SIGNAL_GRACE = 2.0
#: After the kill: how long the last lines (``closed``) get to be written before the loop
#: stops anyway.
KILL_GRACE = 1.0


class Lifetime:
    """How a server ends when it is told to (a signal), or when nobody is left to serve
    (its stdout gone, a socket server's parent gone): ``wind_down`` as on EOF, bounded in
    time; a second signal ends it at once. ``kill`` kills every agent now (their sessions
    then close as their exits are seen)."""

    def __init__(self, loop: Loop, wind_down: Callable[[], None], kill: Callable[[], None] | None) -> None:
        self.loop = loop
        self.wind_down = wind_down
        self.kill = kill if kill is not None else (lambda: None)
        self.signals = 0
        self.deadline: Timer | None = None

    def install(self) -> None:
        for signum in SIGNALS:
            self.loop.add_signal_handler(signum, self.signalled)

    def signalled(self) -> None:
        self.signals += 1
        if self.signals > 1:
            # Asked twice: no more grace. What is not written by now is not.
            if self.deadline is not None:
                self.deadline.cancel()
            self.kill()
            self.loop.stop()
            return
        self.bounded()

    def bounded(self) -> None:
        """Wind down now, and end the loop within SIGNAL_GRACE + KILL_GRACE whatever happens."""
        if self.deadline is None:
            self.deadline = self.loop.call_later(SIGNAL_GRACE, self._expired)
        self.wind_down()

    def _expired(self) -> None:
        self.kill()
        self.loop.call_later(KILL_GRACE, self.loop.stop)


#: How often a pipe or socket stdout is looked at for a reader gone while nothing is written.
READER_CHECK = 1.0


def watch_reader(loop: Loop, output: Output) -> None:
    """Every ``READER_CHECK`` seconds, fail ``output`` as EPIPE would if its reader is gone
    (a write finds out at once, but a silent turn makes none)."""
    if not output.pollable:
        return

    def check() -> None:
        if output.failed:
            return
        if output.reader_gone():
            output.fail_reader_gone()
            return
        alarm.set(READER_CHECK)

    alarm = Alarm(loop, check)
    alarm.set(READER_CHECK)


def run_stdio(
    loop: Loop, make: Callable[[Output, Callable[[], None]], StdioServer], kill: Callable[[], None] | None = None
) -> int:
    """Run ``make(stdout, finished)``'s server on the loop until it has finished and its
    output has drained (or a ``Lifetime`` bound ran out: ``kill`` kills every agent). The
    exit status: the server's ``exit_code`` (0 when it has none), or 1 when stdout stopped
    taking writes."""
    status = [EXIT_OK]

    def failed(exc: OSError) -> None:
        stdout_failed(exc)
        status[0] = EXIT_FAILED
        lifetime.bounded()  # nobody reads what its sessions say: no reason to wait on them

    output = Output(loop, sys.stdout.fileno(), failed)
    server = make(output, lambda: finish_when_drained(loop, output))
    lifetime = Lifetime(loop, server.end, kill)
    lifetime.install()
    watch_reader(loop, output)
    server.start()
    try:
        loop.run()
    finally:
        output.close()
    if status[0] != EXIT_OK:
        return status[0]
    return int(getattr(server, "exit_code", EXIT_OK))


def watch_lifetime(loop: Loop, shutdown: Callable[[], None], kill: Callable[[], None] | None = None) -> Lifetime:
    """Socket servers end on SIGTERM/SIGINT/SIGHUP, and on EOF of stdin when a parent holds
    it (a pipe or a socket; /dev/null or a terminal does not end a server), bounded in time
    as a signal is (``Lifetime``)."""
    lifetime = Lifetime(loop, shutdown, kill)
    lifetime.install()
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError):
        return lifetime
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        # What the parent writes is ignored: only the end of it matters. Its parent gone,
        # nobody may be left to read what its clients are owed: bounded, as a signal.
        Reader(loop, fd, lambda _data: None, lifetime.bounded, 65536).start()
    return lifetime


# -- ordered output -------------------------------------------------------------------------

#: Bytes of one request's answer kept for its ``--record`` pair; past it the rest is only
#: counted (the pair says how many bytes it dropped): a request streaming a long turn must
#: not hold the whole turn in memory until its ``done``.
MAX_CAPTURE = 16 * 1024 * 1024


class Capture:
    """One request's answer as its ``--record`` pair will hold it: bounded."""

    __slots__ = ("parts", "size", "dropped")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        if not self.dropped and self.size + len(data) <= MAX_CAPTURE:  # a head: whole lines
            self.parts.append(data)
            self.size += len(data)
        else:
            self.dropped += len(data)

    def value(self) -> bytes:
        return b"".join(self.parts)


class _NoCapture(Capture):
    """Without ``--record`` nothing of an answer is kept once it is written."""

    __slots__ = ()

    def add(self, data: bytes) -> None:
        pass


NO_CAPTURE: Capture = _NoCapture()


def capture(recording: bool) -> Capture:
    """A new request's capture: a real one only when it will be recorded."""
    return Capture() if recording else NO_CAPTURE


class Job:
    """One request of a stdio framing: started once, finished once, its output captured
    (under ``--record``)."""

    __slots__ = ("run", "eager", "raw", "op", "started", "finished", "buffer", "captured", "exit_code")

    def __init__(self, run: Callable[["Job"], None], raw: bytes, eager: bool = False, op: str | None = None) -> None:
        self.run = run
        self.raw = raw
        self.eager = eager
        self.op = op  # the op (or method), when known: an eager job never overtakes an `open`
        self.started = False
        self.finished = False
        self.buffer: list[tuple[bytes, "Delivered | None"]] = []
        self.captured = NO_CAPTURE  # the pipeline's, when it records
        self.exit_code: int | None = None


class Pipeline:
    """Runs jobs one after another and writes their output in submission order.

    Only an ``eager`` job (``cancel``) starts at once, so it can stop a turn an earlier
    request is streaming; its lines still come out after the earlier requests' lines.
    """

    def __init__(
        self,
        loop: Loop,
        send: Callable[[bytes, "Delivered | None"], None],
        after: Callable[[Job], bool],
        recording: bool = False,
    ) -> None:
        self.loop = loop
        self.send = send
        self.after = after  # called as each job completes, in order; False stops the pipeline
        self.recording = recording  # each job captures its answer for its --record pair
        self.jobs: deque[Job] = deque()
        self.advancing = False
        self.stopped = False

    def __len__(self) -> int:
        return len(self.jobs)

    def submit(self, job: Job) -> None:
        if self.stopped:
            return
        overtakes_open = any(queued.op == "open" for queued in self.jobs)
        job.captured = capture(self.recording)
        self.jobs.append(job)
        if len(self.jobs) == 1 or (job.eager and not overtakes_open):
            self._start(job)

    def write(self, job: Job, data: bytes, delivered: "Delivered | None" = None) -> None:
        """Queue ``data`` as ``job``'s; ``delivered(1)`` once it is written (or dropped)."""
        job.captured.add(data)
        if self.jobs and self.jobs[0] is job and not self.stopped:
            self.send(data, delivered)
        elif job.finished and job not in self.jobs:
            if delivered is not None:
                delivered(1)
        else:
            job.buffer.append((data, delivered))

    def finish(self, job: Job) -> None:
        job.finished = True
        self._advance()

    def _start(self, job: Job) -> None:
        job.started = True
        job.run(job)

    def _start_later(self, job: Job) -> None:
        # A job usually finishes inside an engine callback (a TurnEnded being sent): the
        # next one must not run in the middle of the engine's bookkeeping.
        job.started = True
        self.loop.call_soon(lambda: None if self.stopped else job.run(job))

    def _advance(self) -> None:
        if self.advancing:
            return
        self.advancing = True
        try:
            while self.jobs and self.jobs[0].finished:
                job = self.jobs.popleft()
                if not self.after(job):
                    self.stopped = True
                    for dropped in self.jobs:
                        for _, delivered in dropped.buffer:
                            if delivered is not None:
                                delivered(1)
                    self.jobs.clear()
                    return
                if self.jobs:
                    head = self.jobs[0]
                    buffered, head.buffer = head.buffer, []
                    for data, delivered in buffered:
                        self.send(data, delivered)
                    if not head.started:
                        self._start_later(head)
        finally:
            self.advancing = False
