"""The agent transport seam: how a driver talks to its agent, whatever carries the lines.

A driver never starts a process itself. It asks its host to ``spawn`` a ``Spawn``
(argv, cwd, env, and the callbacks that receive the agent's lines) and gets back a
``LineTransport``: write lines, lines arrive, the agent's output ends, it exits. The
child-process transport is the one that runs agents; a test feeds a driver lines through
another one, the replay transport plays a recorded agent wire back, and a fault-injecting
one makes the agent die, hang, flood or write garbage at any step.

Rules of this file:
- ``on_line`` gets each line the agent wrote, without its newline, in order. Lines that
  arrived in one read are delivered in one loop callback, one after another, so a driver
  that merges what was read together (text deltas) sees the same chunks whichever
  transport carries them.
- ``on_exit(status, stderr_tail)`` runs exactly once, after the last ``on_line``: the
  agent has exited and its output has ended (and with ``wait_group``, no process of its
  group is left). ``status`` is ``describe_status``'s text, None when unknown.
- ``close_stdin``, ``shutdown`` and ``kill`` may be called in any order, any number of
  times; each still ends in exactly one ``on_exit``.

The seam and its two implementations live together in loopio/: this file is only the
interface, the child-process transport is process_transport.py and the replay transport
replay_transport.py. The driver seam (drivers/base.py) names this file alone, so a driver
depends on no implementation (tests/fakes/ holds the scripted and fault-injecting ones).
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.core.wire import Record

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.loopio.loop import Loop
    from agentproto.loopio.proctree import Tree
    from agentproto.loopio.record import Wire

#: An agent line may be long (a file's content in a tool result), but not endless.
MAX_AGENT_LINE = 64 * 1024 * 1024


class Spawn(Record):
    """What a driver asks its host to start."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    on_line: Callable[[bytes], None]
    on_exit: Callable[[str | None, str], None]
    #: A line longer than ``max_line`` was skipped (its size).
    on_too_long: Callable[[int], None] | None = None
    #: Each chunk the agent wrote on stderr (the tail is kept either way).
    on_stderr: Callable[[bytes], None] | None = None
    max_line: int = MAX_AGENT_LINE
    #: Report the exit only once every process of the agent's group is gone (an agent
    #: whose helpers hold files a resumed session needs, as Codex's do).
    wait_group: bool = False
    #: Ask the kernel for a bigger pipe from the agent (a streaming agent then wakes us
    #: once per thousands of lines instead of once per 64 KiB).
    pipe_size: int | None = None


class LineTransport(Protocol):
    """A line conversation with one agent."""

    #: The agent's process id (and process group), None when no process carries it.
    pid: int | None

    @property
    def tree(self) -> Tree | None:
        """Its processes, wherever they went (proctree.py): what ``kill`` reaches, for
        whoever must reap them before exiting; None when no process carries it."""

    def write(self, data: bytes) -> None:
        """Send whole lines (each ending in a newline); never blocks."""

    def write_json(self, obj: Any) -> None:
        """Send one JSON value as one line."""

    def close_stdin(self) -> None:
        """End the agent's input once what is queued has been written."""

    def shutdown(self, grace: float) -> None:
        """Close stdin, wait ``grace`` seconds, SIGTERM the group, wait, SIGKILL it."""

    def kill(self) -> None:
        """SIGKILL the whole group now."""

    def signal(self, signum: int) -> None:
        """Send one signal to the agent process (SIGINT interrupts some agents' turns)."""

    def pause(self) -> None:
        """Stop reading the agent's output (the pipe then throttles the agent)."""

    def resume(self) -> None: ...

    @property
    def running(self) -> bool: ...

    @property
    def stderr_tail(self) -> str: ...


if TYPE_CHECKING:
    #: Starts a ``Spawn`` on a loop. The third argument is the session's ``record.Wire``
    #: (None when nothing records it): a transport records what passes through it there,
    #: and the replay transport knows by its ``session`` which recorded conversation to play.
    TransportFactory = Callable[["Loop", Spawn, "Wire | None"], LineTransport]
    #: Starts a ``Spawn`` with the loop and the record already chosen (a one-shot's process).
    Spawner = Callable[[Spawn], LineTransport]
