"""The child-process transport: an agent as a child process, its line conversation
through the loop (the ``LineTransport`` of transport.py that runs every agent; the seam's
other implementation, replay_transport.py, plays a recorded agent back).

Rules of this file:
- The agent leads its own process group: agents leave helpers behind, so every signal
  goes to the group, and once the leader has exited whatever is left of the group is
  sent SIGTERM, then SIGKILL. "The group" is the agent's whole tree (proctree.py): what
  it detached with ``setsid`` too, found by the mark in its environment.
- Its pipes are non-blocking; every read and write goes through ``loop.io``, so a
  fault-injecting IO can stand in for the system's: stdout and stderr are read through
  ``streams.Reader``, and the agent's stdin is written through ``streams.Output``, the one
  writer (a line is queued and written, in order, as the pipe takes it; a write that
  fails with anything but EAGAIN means the agent is unreachable).
- Lines are framed with a bound (a longer one is skipped, never buffered); the last
  8 KiB of stderr are kept for the exit report.
- ``shutdown`` runs: close stdin, wait, SIGTERM the group, wait, SIGKILL the group.
  ``kill`` sends SIGKILL first and closes stdin after: its exit is always the kill's.
- An agent whose output ends, or whose input refuses a write, while it runs is shut down
  the same way: it can never finish a turn then, and would hang its session forever.
- An agent is not started when its pipes would leave fewer than ``descriptors.FLOOR``
  descriptors free (an OSError saying so: the open fails ``SpawnFailed``).
- With a session's ``record.Wire`` (``--record``, ``record_wire``), everything that passes is
  recorded as it passes: the spawn, each line both ways (the agent's with the number of
  the read it came in), each shutdown step, and the exit.
- ``start_tree`` is the one place a session's child starts (agents, version probes, ACP
  terminals). ``refuse_children(reason)`` makes it refuse every start with a
  ``PermissionError`` saying ``reason`` until it is called with None: replay (replay.py)
  runs a recording from anyone and starts no process.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys

from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import LineFramer, TooLong
from agentproto.loopio import descriptors, proctree
from agentproto.loopio.loop import Alarm
from agentproto.loopio.streams import Output, Reader
from agentproto.loopio.transport import Spawn

if TYPE_CHECKING:
    import subprocess
    from typing import Any, Callable

    from agentproto.loopio.loop import Loop, Timer
    from agentproto.loopio.record import Wire
    from agentproto.loopio.transport import LineTransport, TransportFactory


#: Why no child may start now (``refuse_children``), or None.
_refusal: str | None = None


def refuse_children(reason: str | None) -> None:
    """From now on ``start_tree`` refuses every start, saying ``reason`` (None: it starts
    them again). Replay's rule: it never starts a process."""
    global _refusal
    _refusal = reason


def start_tree(
    argv: list[str], cwd: str | None, env: dict[str, str], stdin: int, stderr: int
) -> tuple[subprocess.Popen[bytes], proctree.Tree]:
    """Start a child that leads its own session and process group, holding none of our
    descriptors but its pipes (its stdout a pipe), and its ``Tree``: the mark put in its
    environment finds what it starts, however detached."""
    if _refusal is not None:
        raise PermissionError(errno.EPERM, _refusal)
    import subprocess

    env, mark = proctree.mark_env(env)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
        close_fds=True,
    )
    return proc, proctree.Tree(proc.pid, mark)


def process_transport(loop: "Loop", spawn: Spawn, wire: "Wire | None" = None) -> LineTransport:
    """The default ``TransportFactory``: the agent as a child process."""
    return ProcessTransport(loop, spawn, wire)


def describe_status(returncode: int | None) -> str | None:
    """A child's exit status as the wire reports it: "0", "1", "SIGKILL"..."""
    if returncode is None:
        return None
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return str(returncode)


_F_SETPIPE_SZ = 1031  # Linux's fcntl command; other systems keep their pipe size


class ProcessTransport:
    """One agent as a child process in its own process group, through the loop."""

    STDERR_TAIL = 8192
    READ_SIZE = 256 * 1024
    #: After the leader exits, how long its group gets before SIGKILL.
    ORPHAN_GRACE = 1.0
    #: A grandchild may hold the pipes open after the leader exits: stop waiting then.
    EOF_GRACE = 2.0
    #: ``wait_group``: the longest the exit report waits for the rest of the group.
    GROUP_GRACE = 3.0
    #: ``shutdown``: between SIGTERM and SIGKILL.
    TERM_GRACE = 2.0
    #: The agent's output ended, or its input refused a write, while it still runs: it can
    #: never finish a turn now, so it is shut down after this grace (it may be exiting).
    GONE_GRACE = 2.0

    def __init__(self, loop: "Loop", spawn: Spawn, wire: "Wire | None" = None) -> None:
        self.loop = loop
        self.spawn = spawn
        self.argv = spawn.argv
        self._framer = LineFramer(spawn.max_line)
        self._stderr_tail = bytearray()
        self._returncode: int | None = None
        self._reported = False
        self._group_deadline: float | None = None
        self._group_check = Alarm(loop, self._maybe_exited)
        self._timers: list["Timer"] = []
        self._gone = False
        self._wire = wire
        self._read_no = 0  # the number of the read being delivered (for the wire's record)
        # subprocess (and the threading it imports) only once an agent starts: see cli.py.
        import subprocess

        short = descriptors.short(3, descriptors.FLOOR)  # stdin, stdout and stderr
        if short is not None:
            import errno

            raise OSError(errno.EMFILE, f"not started: {short}")
        loop.spawning()  # the sidecar adopts what the agent will detach
        self.proc, self.tree = start_tree(spawn.argv, spawn.cwd, spawn.env, subprocess.PIPE, subprocess.PIPE)
        if wire is not None:
            wire.spawned(spawn.argv, spawn.cwd)
        self.pid: int | None = self.proc.pid  # start_new_session: it leads its own group
        self.pgid = self.proc.pid
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            os.set_blocking(stream.fileno(), False)
        #: The agent's stdin (None once closed): what it has not taken yet waits in its queue.
        self._stdin: Output | None = Output(loop, self.proc.stdin.fileno(), self._stdin_failed)
        if spawn.pipe_size:
            _widen_pipe(self.proc.stdout.fileno(), spawn.pipe_size)
        self._stdout = Reader(loop, self.proc.stdout.fileno(), self._read, self._stdout_ended, self.READ_SIZE)
        self._stderr = Reader(loop, self.proc.stderr.fileno(), self._read_stderr, self._stderr_ended, 65536)
        self._stdout.start()
        self._stderr.start()
        loop.watch_child(self.proc, self._reaped)

    # -- to the agent ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        stdin = self._stdin
        if stdin is None:
            return
        if self._wire is not None:
            self._wire.to_agent(data)
        stdin.send(data)

    def write_json(self, obj: Any) -> None:
        self.write((json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass"))

    def _stdin_failed(self, _exc: OSError) -> None:
        self._unreachable()  # the agent closed its input (or died): nothing to send to

    def _drop_stdin(self) -> None:
        stdin = self._stdin
        if stdin is None:
            return
        self._stdin = None
        stdin.close()  # what it still holds is dropped, and a flush asked for does not run
        self.loop.forget(stdin.fd)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def _unreachable(self) -> None:
        """What was sent is lost and nothing more can be: an agent in that state only
        hangs its session (waiting for an answer it never got), so it is shut down."""
        self._drop_stdin()
        self._give_up()

    def _give_up(self) -> None:
        # Not ``shutdown``: the driver did not ask for this, so the wire's record (which
        # holds what the driver did) does not get it; a replay sees the agent's own exit.
        if not self._gone and self._returncode is None:
            self._gone = True
            self._shut(self.GONE_GRACE)

    def _recorded(self, what: str, **fields: Any) -> None:
        """Put what the driver asked of the agent's process on the wire's record."""
        if self._wire is not None:
            self._wire.control(what, **fields)

    def close_stdin(self) -> None:
        self._recorded("close_stdin")
        self._end_input()

    def _end_input(self) -> None:
        stdin = self._stdin
        if stdin is not None and stdin.queue:
            stdin.on_drained = self._drop_stdin  # once written (or never will be)
        else:
            self._drop_stdin()

    # -- from the agent --------------------------------------------------------------

    def _read(self, data: bytes) -> None:
        # The relay's hot path: a plain line goes straight to the driver (recorded, it goes
        # through _deliver, which records it with the number of its read).
        on_line = self.spawn.on_line
        plain = self._wire is None
        reader = self._stdout
        self._read_no = 0  # numbered by its first whole line (a read may bring none)
        for line in self._framer.feed(data):
            if plain and type(line) is bytes:
                on_line(line)
            else:
                self._deliver(line)
            if reader.eof:
                break  # forced to an end while delivering (the grace after exit ran out)

    def _deliver(self, line: bytes | TooLong) -> None:
        if isinstance(line, TooLong):
            if self.spawn.on_too_long is not None:
                self.spawn.on_too_long(line.size)
            return
        if self._wire is not None:
            if not self._read_no:
                self._read_no = self._wire.new_read()
            self._wire.from_agent(line, self._read_no)
        self.spawn.on_line(line)

    def _stdout_ended(self) -> None:
        self._read_no = 0
        for line in self._framer.close():
            self._deliver(line)
        # Its output is over (closed, or a read failed): it can never say a turn ended.
        self._give_up()
        self._maybe_exited()

    def _read_stderr(self, data: bytes) -> None:
        tail = self._stderr_tail
        tail += data
        if len(tail) > self.STDERR_TAIL:
            del tail[: len(tail) - self.STDERR_TAIL]
        if self.spawn.on_stderr is not None:
            self.spawn.on_stderr(data)

    def _stderr_ended(self) -> None:
        self._maybe_exited()

    # Flow control is stdout's reader: it stops reading until resumed (a no-op at its EOF).
    def pause(self) -> None:
        self._stdout.pause()

    def resume(self) -> None:
        self._stdout.start()

    # -- the agent's end -------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._returncode is None

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace")

    def _reaped(self, returncode: int) -> None:
        self._returncode = returncode
        # The leader is gone; anything else of its tree is an orphan to clean up.
        if self._signal_group(signal.SIGTERM):
            self.loop.call_later(self.ORPHAN_GRACE, lambda: self._signal_group(signal.SIGKILL))
        self._group_deadline = self.loop.time() + self.GROUP_GRACE
        # Drain what the agent wrote before it died, even while the app is behind.
        self.resume()
        self._timers.append(self.loop.call_later(self.EOF_GRACE, self._force_eof))
        self._maybe_exited()

    def _force_eof(self) -> None:
        if self._reported:
            return
        self._signal_group(signal.SIGKILL)
        for reader in (self._stdout, self._stderr):
            reader.close()
        self._maybe_exited()

    def _maybe_exited(self) -> None:
        if self._reported or self._returncode is None:
            return
        if not (self._stdout.eof and self._stderr.eof):
            return
        if self.spawn.wait_group and self.tree.alive():
            # Helpers may still be dying from the group's SIGTERM; the exit report
            # promises they are gone.
            assert self._group_deadline is not None
            if self.loop.time() < self._group_deadline:
                if not self._group_check.armed:
                    self._group_check.set(0.02)
                return
            self._signal_group(signal.SIGKILL)
        self._reported = True
        for timer in self._timers:
            timer.cancel()
        self._drop_stdin()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                self.loop.forget(stream)
                try:
                    stream.close()
                except OSError:
                    pass
        status = describe_status(self._returncode)
        if self._wire is not None:
            self._wire.exited(status, self.stderr_tail)
        self.spawn.on_exit(status, self.stderr_tail)

    def _signal_group(self, signum: int) -> bool:
        """Signal the agent's whole tree; whether any of it was alive."""
        return self.tree.signal(signum)

    def signal(self, signum: int) -> None:
        self._recorded("signal", signum=signum)
        if self._returncode is None:
            try:
                os.kill(self.pgid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def shutdown(self, grace: float = 3.0) -> None:
        self._recorded("shutdown")
        self._shut(grace)

    def _shut(self, grace: float) -> None:
        self._end_input()
        if self._returncode is None:
            self._timers.append(self.loop.call_later(grace, self._terminate))

    def _terminate(self) -> None:
        if self._returncode is None:
            self._signal_group(signal.SIGTERM)
            self._timers.append(self.loop.call_later(self.TERM_GRACE, self._kill))

    def kill(self) -> None:
        self._recorded("kill")
        self._kill()

    def _kill(self) -> None:
        # SIGKILL before the input closes: an agent that ends at EOF must not exit cleanly
        # ("0") in between, as it could when the sidecar is preempted there.
        self._signal_group(signal.SIGKILL)
        self._drop_stdin()


def _widen_pipe(fd: int, size: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import fcntl

        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
    except OSError:
        pass  # above /proc/sys/fs/pipe-max-size: the default size still works


def group_alive(pgid: int) -> bool:
    """Whether a live process is left in group ``pgid`` (zombies do not count).

    ``killpg(pgid, 0)`` alone also succeeds for zombies, and an orphaned zombie waits for
    init to reap it, which some container inits do late or never: /proc tells them apart.
    """
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return proctree.Tree(pgid).alive()


def run_capture(
    loop: "Loop",
    argv: list[str],
    done: Callable[[int | None, str, str], None],
    *,
    timeout: float = 10.0,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    factory: TransportFactory = process_transport,
) -> None:
    """Run a short command through the loop; ``done(returncode, stdout, stderr)``.

    returncode is None when the command could not start (stderr says why), was killed by
    a signal, or ran past ``timeout`` (its group is killed then).
    """
    out = bytearray()
    finished = False
    timed_out = False

    def on_line(line: bytes) -> None:
        out.extend(line + b"\n")

    def on_exit(status: str | None, stderr: str) -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        timer.cancel()
        code = int(status) if status is not None and status.isdigit() and not timed_out else None
        done(code, out.decode("utf-8", "replace"), stderr)

    def on_timeout() -> None:
        nonlocal timed_out
        timed_out = True
        transport.kill()

    spawn = Spawn(
        argv=argv, cwd=cwd, env=env if env is not None else dict(os.environ), on_line=on_line, on_exit=on_exit
    )
    try:
        transport = factory(loop, spawn, None)
    except OSError as exc:
        reason = str(exc)  # ``exc`` is unbound once the except block ends
        loop.call_soon(lambda: done(None, "", reason))
        return
    transport.close_stdin()
    timer = loop.call_later(timeout, on_timeout)
