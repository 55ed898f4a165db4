"""The replay transport: a recorded agent played back to the session's real driver.

When a recording holds a session's agent wire, replay does not start the agent. The
session's driver spawns as usual and gets this ``LineTransport``: what the driver writes
is recorded through the session's ``record.Wire`` exactly as the child-process transport
records it, so replay's checker compares it with the recorded lines (a difference is
drift); and the agent's recorded lines are handed to the driver when replay's timeline
says their turn has come, in the reads they were recorded in (all lines of one read in
one loop callback, as the child-process transport delivers them), then its exit.

So a session recorded once against the real ``claude``, ``codex`` or an ACP agent replays
with no CLI installed and no network, through the real driver code.

Rules of this file:
- It keeps the LineTransport contract (transport.py, the seam, beside this file and the
  child-process transport, process_transport.py): ``on_exit`` once, after the last line;
  ``pause`` holds the reads back until ``resume``; once the driver killed it or the
  recorded exit came, nothing more is delivered.
- It records what passes through it into the wire (the spawn, each line both ways, each
  shutdown step, the exit), like the child-process transport: that is what replay checks,
  and what ``replay --update`` writes.
"""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

from agentproto.loopio.loop import Soon
from agentproto.loopio.transport import Spawn

if TYPE_CHECKING:
    from agentproto.loopio.loop import Loop
    from agentproto.loopio.proctree import Tree
    from agentproto.loopio.record import Wire


class ReplayTransport:
    """One session's agent, as its recording has it."""

    def __init__(self, loop: "Loop", spawn: Spawn, wire: "Wire") -> None:
        self.spawn = spawn
        self.wire = wire
        self.session = wire.session
        self.pid: int | None = None
        self.tree: Tree | None = None
        #: Reads fed and not delivered yet: one per loop pass, as they come off a pipe (a
        #: driver that merges what one read brought flushes between two reads).
        self._reads: deque[list[bytes]] = deque()
        self._delivery = Soon(loop, self._next)
        self._paused = False
        self._stdin_open = True
        self._exited = False
        self._exit_pending: tuple[str | None, str] | None = None
        self._stderr = ""
        wire.spawned(spawn.argv, spawn.cwd)

    # -- the driver's side ----------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._stdin_open and not self._exited:
            self.wire.to_agent(data)

    def write_json(self, obj: Any) -> None:
        self.write((json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass"))

    def close_stdin(self) -> None:
        self._stop("close_stdin")

    def shutdown(self, grace: float) -> None:
        self._stop("shutdown")

    def kill(self) -> None:
        self._stop("kill")

    def _stop(self, action: str) -> None:
        """A shutdown step, recorded: nothing the driver writes after it reaches the agent."""
        self.wire.control(action)
        self._stdin_open = False

    def signal(self, signum: int) -> None:
        self.wire.control("signal", signum=signum)

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._schedule()  # nothing twice: a delivery already asked for is not asked for again

    @property
    def running(self) -> bool:
        return not self._exited

    @property
    def stderr_tail(self) -> str:
        return self._stderr

    # -- the recording's side (replay's timeline calls these) ------------------------------
    def feed(self, lines: list[bytes]) -> None:
        """One recorded read of the agent's output, delivered in one loop callback."""
        self._reads.append(lines)
        self._schedule()

    def exit(self, status: str | None, stderr: str) -> None:
        """The recorded exit, after the reads fed before it."""
        self._exit_pending = (status, stderr)
        self._schedule()

    def _schedule(self) -> None:
        if not self._paused:
            self._delivery.request()

    def _next(self) -> None:
        if self._exited or self._paused:
            return
        if self._reads:
            lines = self._reads.popleft()
            read = self.wire.new_read()
            for line in lines:
                self.wire.from_agent(line, read)
                self.spawn.on_line(line)
                if self._exited:
                    return
            self._schedule()  # after what this read made the driver schedule
        elif self._exit_pending is not None:
            self._report_exit()

    def _report_exit(self) -> None:
        if self._exited or self._exit_pending is None:
            return
        status, stderr = self._exit_pending
        self._exited = True
        self._stderr = stderr
        self.wire.exited(status, stderr)
        self.spawn.on_exit(status, stderr)

    def abandon(self) -> None:
        """Replay is over and the recording never said this agent exited: it is gone now."""
        if not self._exited:
            self._reads.clear()
            self._exit_pending = self._exit_pending or ("SIGKILL", "")
            self._report_exit()
