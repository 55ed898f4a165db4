"""Fault injection through agentproto's two seams, for tests: ``loop.io`` and the agent transport.

- ``FaultyIO`` stands in for ``loop.io`` (agentproto/loopio/loop.py's ``SystemIO``): on the
  descriptors it watches, it refuses the Nth write with EAGAIN, writes only half of it,
  or fails it (and every later one) with EPIPE or ENOSPC; reads can be refused (EAGAIN)
  or fail (EIO). Every other descriptor is read and written as the system does.
- ``VirtualLoop`` is the real loop on a virtual clock: when nothing is ready it jumps to
  its next timer instead of waiting, so a hung agent's timeouts (minutes of grace, a 30
  minute turn timeout) pass in no time. In-process only: a real child keeps real time.
- ``FaultAgent`` is a scripted agent (tests/fakes/scripted.py's transport) that can die, hang,
  flood or write garbage when the test says; ``FaultyProcess`` wraps the real child-process
  transport and does the same to a real agent (SIGKILL, SIGSTOP, lines slipped into what
  it wrote).
- ``check_p1`` checks a protocol 1 transcript against the promises of docs/protocol-guide.md's "What
  agentproto guarantees"; ``Outcome`` checks one in-process session (tests/fakes/scripted.py's
  Conversation) the same way.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import time
from typing import Any, Callable

from agentproto.loopio.process_transport import ProcessTransport, group_alive
from agentproto.loopio.transport import Spawn
from agentproto.loopio.loop import Loop, SystemIO
from agentproto.core.wire import event_kind_name
from scripted import ScriptedTransport, encode
from wrapped import Wrapped

# -- loop.io ----------------------------------------------------------------------------------

WRITE_FAULTS = ("eagain", "short", "epipe", "enospc")
READ_FAULTS = ("eagain", "eio")
#: Faults after which a descriptor never takes a write again.
FATAL = {"epipe": errno.EPIPE, "enospc": errno.ENOSPC}


class FaultyIO(SystemIO):
    """``loop.io`` with faults planned by position on the descriptors it watches.

    ``write_plan[n]`` / ``read_plan[n]`` is the fault of the nth write / read (from 0)
    on a watched descriptor, counted across all of them. EPIPE and ENOSPC are sticky: the
    descriptor fails every write after that, as a closed pipe or a full disk does.
    """

    def __init__(self, cap: int | None = None) -> None:
        #: Every write on a watched descriptor takes at most this many bytes (more positions).
        self.cap = cap
        self.write_fds: set[int] = set()
        self.read_fds: set[int] = set()
        self.write_plan: dict[int, str] = {}
        self.read_plan: dict[int, str] = {}
        #: Read faults by lines instead: the first read once this many lines were read (the
        #: number of reads a child's lines take depends on timing; its lines do not).
        self.read_after_lines: dict[int, str] = {}
        self.writes = 0
        self.reads = 0
        self.lines_read = 0
        self.broken: dict[int, int] = {}  # fd -> errno of its sticky failure
        self.injected: list[tuple[str, int]] = []
        #: Called as each fault strikes (a test notes what state things were in then).
        self.on_inject: Callable[[str, int], None] | None = None

    def _strike(self, fault: str, index: int) -> None:
        self.injected.append((fault, index))
        if self.on_inject is not None:
            self.on_inject(fault, index)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if fd not in self.write_fds:
            return os.write(fd, data)
        if fd in self.broken:
            raise OSError(self.broken[fd], os.strerror(self.broken[fd]))
        if self.cap is not None:
            data = data[: self.cap]
        index = self.writes
        self.writes += 1
        fault = self.write_plan.get(index)
        if fault is None:
            return os.write(fd, data)
        self._strike(fault, index)
        if fault == "eagain":
            raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        if fault == "short":
            return os.write(fd, data[: max(1, len(data) // 2)])
        self.broken[fd] = FATAL[fault]
        raise OSError(FATAL[fault], os.strerror(FATAL[fault]))

    def read(self, fd: int, size: int) -> bytes:
        if fd not in self.read_fds:
            return os.read(fd, size)
        index = self.reads
        self.reads += 1
        fault = self.read_plan.get(index)
        for lines in [n for n in self.read_after_lines if n <= self.lines_read]:
            fault = self.read_after_lines.pop(lines)
            index = lines
        if fault is None:
            data = os.read(fd, size)
            self.lines_read += data.count(b"\n")
            return data
        self._strike(fault, index)
        if fault == "eagain":
            raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        raise OSError(errno.EIO, os.strerror(errno.EIO))


# -- the virtual clock ------------------------------------------------------------------------


class Deadlock(AssertionError):
    """Nothing is ready and no timer is set: a real loop would wait forever."""


class _JumpingSelector:
    """The loop's selector, asked without waiting; an idle wait moves the clock instead."""

    def __init__(self, inner: selectors.BaseSelector, loop: "VirtualLoop") -> None:
        self.inner = inner
        self.loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self.inner.select(0 if timeout == 0 else min(self.loop.grace, timeout or self.loop.grace))
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise Deadlock("nothing is ready and no timer is set: the loop would wait forever")
        self.loop.offset += timeout
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class VirtualLoop(Loop):
    """A real loop whose clock jumps to the next timer whenever nothing is ready.

    ``grace``: real seconds to wait for a descriptor before jumping, for what the kernel
    hands over asynchronously (a terminal's output reaches its master side a moment later).
    """

    def __init__(self, io: SystemIO | None = None, grace: float = 0.0) -> None:
        super().__init__(io)
        self.grace = grace
        self.offset = 0.0
        self._selector = _JumpingSelector(self._selector, self)  # type: ignore[assignment]

    def time(self) -> float:  # type: ignore[override]
        return time.monotonic() + self.offset


# -- the agent transport ----------------------------------------------------------------------

AGENT_FAULTS = ("die", "hang", "flood", "garbage")

#: What a broken agent writes: not JSON, not UTF-8, not an object, an empty object, a line
#: cut short, a control character.
GARBAGE = [
    b"this is not json",
    b"\xff\xfe\x00 not utf-8",
    b"[1, 2, 3]",
    b"{}",
    b'{"jsonrpc": "2.0", "id": ',
    b"\x1b[31merror: something broke\x1b[0m",
    b"null",
]


class FaultAgent(ScriptedTransport):
    """A scripted agent that can die, hang, flood or write garbage when told.

    Once ``hang()`` is called it says nothing more and ignores its input ending, a
    shutdown and signals: only ``kill`` (SIGKILL) ends it, as with a stopped process.
    Otherwise it exits when its input is closed, shut down or killed.
    """

    def __init__(self, loop: Loop, spawn: Spawn, record_wire: str | None) -> None:
        super().__init__(loop, spawn, record_wire, auto_exit=True)
        self.hung = False

    def close_stdin(self) -> None:
        super().close_stdin()
        if not self.hung:
            self.exit("0")

    def shutdown(self, grace: float) -> None:
        self.stdin_closed = True
        self.shutdown_grace = grace
        if not self.hung:
            self.exit("0")

    def kill(self) -> None:
        self.killed = True
        self.stdin_closed = True
        self.exit("SIGKILL")

    def feed(self, *lines: Any) -> None:
        if not self.hung:
            super().feed(*lines)

    def die(self, status: str = "1", stderr: str = "injected: the agent died") -> None:
        self.exit(status, stderr)

    def hang(self) -> None:
        self.hung = True

    def flood(self, lines: list[bytes], reads: int = 20) -> None:
        for _ in range(reads):
            self.feed(*lines)

    def garbage(self) -> None:
        self.feed(*GARBAGE)


class FaultyProcess(Wrapped):
    """The real child-process transport with a fault at the agent's nth line.

    ``fault`` is one of AGENT_FAULTS, ``at`` the index (from 0) of the agent's line it
    strikes before: ``die`` SIGKILLs the agent's group, ``hang`` SIGSTOPs it (a stopped
    process ignores everything but SIGKILL), ``garbage`` and ``flood`` slip lines in
    before that line (garbage; that line repeated 500 times).
    """

    #: How long an app waits on a hung agent before it gives up (the hung() it asks).
    HUNG_FOR = 1.0

    def __init__(self, loop: Loop, spawn: Spawn, record_wire: str | None, fault: str | None, at: int) -> None:
        self.fault = fault
        self.at = at
        self.lines = 0
        self.struck = False
        self.struck_at = 0.0
        self.inner: ProcessTransport
        super().__init__(loop, spawn, record_wire, ProcessTransport, on_line=self._line)

    def _line(self, line: bytes) -> None:
        index = self.lines
        self.lines += 1
        if self.fault is not None and index == self.at and not self.struck:
            self.struck = True
            self.struck_at = self.loop.time()
            if self.fault == "die":
                os.killpg(self.inner.pgid, signal.SIGKILL)
                return
            if self.fault == "hang":
                os.killpg(self.inner.pgid, signal.SIGSTOP)
                self.loop.call_later(self.HUNG_FOR + 0.1, lambda: None)  # an app waiting on it looks again
                return
            for extra in GARBAGE if self.fault == "garbage" else [line] * 500:
                self.spawn.on_line(extra)
        if self.struck and self.fault in ("die", "hang"):
            return  # it wrote this before the signal landed: as if it never had
        self.spawn.on_line(line)

    def alive(self) -> bool:
        return group_alive(self.inner.pgid)

    def hung(self) -> bool:
        """Stopped for HUNG_FOR seconds already: an app waiting on it gives up."""
        return self.fault == "hang" and self.struck and self.loop.time() - self.struck_at >= self.HUNG_FOR


# -- what the app saw: protocol 1 ----------------------------------------------------------------


def parse_lines(raw: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The complete lines of ``raw`` as JSON, and the unfinished rest."""
    *whole, rest = raw.split(b"\n")
    return [json.loads(line) for line in whole if line.strip()], rest


def normalized(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lines without their wall-clock times (two runs of one conversation differ only there)."""
    out = []
    for line in lines:
        if "event" in line:
            line = {**line, "event": {k: v for k, v in line["event"].items() if k != "occurred_at"}}
        out.append(line)
    return out


def check_p1(lines: list[dict[str, Any]], sent: dict[Any, str], *, complete: bool, eof: bool) -> None:
    """Assert a protocol 1 transcript keeps the guarantees of docs/protocol-guide.md.

    ``sent``: command id -> command name, every command the app wrote. ``complete``: the
    app read everything the sidecar wrote (every command then has its reply); ``eof``: the
    app's input ended, so every session it opened has its ``closed``.
    """
    if not lines and not complete:
        return  # the app got nothing at all (its pipe broke at the first write)
    assert lines and "hello" in lines[0], f"the first line is not the hello: {lines[:1]}"
    replies: dict[Any, dict[str, Any]] = {}
    opened: dict[str, Any] = {}  # session id -> the open's command id
    state: dict[str, dict[str, Any]] = {}
    for at, line in enumerate(lines[1:], 1):
        where = f"line {at}: {json.dumps(line)[:300]}"
        if "id" in line:
            assert line["id"] not in replies, f"a second reply to command {line['id']}; {where}"
            assert line["id"] in sent, f"a reply to no command; {where}"
            replies[line["id"]] = line
            if sent[line["id"]] == "open" and "ok" in line:
                sid = line["ok"]["id"]
                assert sid not in opened, f"session {sid} opened twice; {where}"
                opened[sid] = line["id"]
                state[sid] = {"seq": 0, "turn": None, "after_end": False, "error": False, "closed": False}
            continue
        sid = line.get("session") if "session" in line else line.get("closed")
        if "event" in line:
            sid = line["event"]["session_id"]
        assert sid in state, f"a line of a session before its open reply; {where}"
        s = state[sid]
        assert not s["closed"], f"a line after the session's closed; {where}"
        if "closed" in line:
            assert s["turn"] is None, f"closed while turn {s['turn']} runs; {where}"
            s["closed"] = True
        elif "error" in line:
            assert not s["error"], f"a second session error; {where}"
            assert s["turn"] is None, f"the session error came while turn {s['turn']} runs; {where}"
            s["error"] = True
        else:
            event = line["event"]
            assert not s["error"], f"an event after the session error; {where}"
            s["seq"] += 1
            assert event["sequence"] == s["seq"], f"sequence {event['sequence']}, expected {s['seq']}; {where}"
            _check_turn_order(s, event, where)
    if complete:
        missing = sorted(set(sent) - set(replies), key=str)
        assert not missing, f"commands never answered: {[(i, sent[i]) for i in missing]}"
    if eof:
        unclosed = [sid for sid, s in state.items() if not s["closed"]]
        assert not unclosed, f"sessions without their closed after EOF: {unclosed}"


def _check_turn_order(s: dict[str, Any], event: dict[str, Any], where: str) -> None:
    """Every turn opens with TurnStarted and ends with TurnEnded, then StatusChanged Idle or
    the next turn; nothing of a turn outside it."""
    kind = event["kind"]
    name = event_kind_name(kind)
    turn = (event.get("turn_info") or {}).get("id")
    if s["after_end"]:
        assert name == "TurnStarted" or kind == {"StatusChanged": "Idle"}, f"{name} right after TurnEnded; {where}"
        s["after_end"] = False
    if name == "TurnStarted":
        assert s["turn"] is None, f"a turn started inside turn {s['turn']}; {where}"
        s["turn"] = turn
    elif name == "TurnEnded":
        assert s["turn"] is not None and turn == s["turn"], f"TurnEnded of a turn not running; {where}"
        s["turn"], s["after_end"] = None, True
        s["last_stop"] = kind["TurnEnded"]["stop"]
    elif turn is not None:
        assert turn == s["turn"], f"{name} of turn {turn} outside it; {where}"


# -- what the app saw: one in-process session -------------------------------------------------------


class Outcome:
    """Checks one Conversation's ``out`` (replies, events, the session error, closed)."""

    def __init__(self, out: list[tuple[Any, ...]]) -> None:
        self.out = out

    def check(self, *, opened: bool, ended: bool = True) -> None:
        """The engine's promises: sequences from 1, turns well formed, a session error
        only after its turn ended, nothing after it but ``closed``, ``closed`` exactly once
        and last (``ended``: the session is over), none for a session that never opened."""
        out = [o for o in self.out if o[0] != "reply"]
        seq = 0
        s: dict[str, Any] = {"turn": None, "after_end": False}
        error_at: int | None = None
        for at, entry in enumerate(out):
            where = f"entry {at}: {entry!r:.300}"
            if entry[0] == "event":
                assert error_at is None, f"an event after the session error; {where}"
                seq += 1
                assert entry[1]["sequence"] == seq, f"sequence {entry[1]['sequence']}, expected {seq}; {where}"
                _check_turn_order(s, entry[1], where)
            elif entry[0] == "error":
                assert error_at is None, f"a second session error; {where}"
                assert s["turn"] is None, f"the session error came while turn {s['turn']} runs; {where}"
                error_at = at
            else:
                assert at == len(out) - 1, f"something after closed: {out[at + 1:][:3]!r:.300}"
        closed = [o for o in out if o[0] == "closed"]
        if not opened:
            # Only its ``closed``, when the app's input ended while it was opening (docs/protocol-guide.md:
            # EOF closes every session, even one whose open is in flight).
            assert not out or out == [("closed",)], f"a session that never opened said something: {out[:3]!r:.300}"
        elif ended:
            assert len(closed) == 1, f"closed {len(closed)} times"
            assert s["turn"] is None, "a turn never ended"

    def failed_turns(self) -> list[Any]:
        return [
            o[1]["kind"]["TurnEnded"]["stop"]
            for o in self.out
            if o[0] == "event" and event_kind_name(o[1]["kind"]) == "TurnEnded"
        ]

    def running_turn(self) -> bool:
        """Whether a turn has started and not ended, as far as the app has seen."""
        running = False
        for o in self.out:
            if o[0] == "event":
                name = event_kind_name(o[1]["kind"])
                if name == "TurnStarted":
                    running = True
                elif name == "TurnEnded":
                    running = False
        return running

    def errors(self) -> list[Any]:
        return [o[1] for o in self.out if o[0] == "error"]


def run_for(loop: Loop, seconds: float, until: Callable[[], bool] | None = None) -> None:
    """Let ``seconds`` of the loop's clock pass (its timers run), or stop once ``until()``."""
    end = loop.time() + seconds
    wake = loop.call_later(seconds, lambda: None)
    loop.run(until=lambda: loop.time() >= end or (until is not None and until()))
    wake.cancel()


__all__ = ["encode"]
