"""Fault injection at ``loop.io``: every write and every read of a frontend's pipes, in turn,
refused (EAGAIN), cut short, or failed (EPIPE, ENOSPC; EIO for a read).

The frontends run in-process on pipes through their real scaffold (``stdio.run_stdio``, as
``serve`` and ``agent`` run them), with the mock on a virtual clock; the app, on the same
loop, reacts to what it reads: two sessions, each a turn with a permission it answers, then
close, then EOF. A fault-free run gives the transcript and the number of writes and reads;
then each position is struck:

- EAGAIN and short writes, and EAGAIN on a read, change nothing: the app reads the very
  same lines, in order, and the server exits 0;
- EPIPE or ENOSPC on stdout: what the app got is a prefix of that transcript; the server
  closes every session and exits 1 (a reader that went away never keeps it running);
- EIO on stdin is its end: every session opened gets its ``closed`` and the server exits 0;
- on the Unix-socket transport, one connection whose writes fail (EPIPE, ENOSPC, at each
  of its writes) loses its sessions, and the other connection's run to their ends as if
  nothing happened, the server still serving.

Every event carries the wall clock (``occurred_at``), whose nanoseconds are written in as
many digits as they have: with writes of at most 256 bytes, the number of writes followed
the time of day (31 instead of 32 when a few events' nanoseconds had fewer digits). Each
run here gets a wall clock of its own, of fixed width, so that a run's writes, and the
positions the faults strike, are the same every time.

The same faults on the agent's own pipes (the child-process transport's writes to the
agent and reads of it) are in test_faults_io_agent.py.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from agentproto.drivers.mock import load_script
from agentproto.frontends.ops_stdio import OpsStream
from agentproto.engine import session as engine_session
from agentproto.engine.runtime import Engine
from agentproto.frontends.serve import P1Connection
from agentproto.loopio.lifetime import run_stdio
from agentproto.loopio.streams import Output
from agentproto.core.wire import event_kind_name
from faults import READ_FAULTS, WRITE_FAULTS, FaultyIO, VirtualLoop, check_p1, normalized, parse_lines
from sidecar import SCRIPTS, check_line

SCRIPT = load_script((SCRIPTS / "turn.json").read_text())
DIR = str(Path(__file__).resolve().parents[1] / "fakes")


class _Stdout:
    """What run_stdio takes stdout from: here, the write end of the app's pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class App:
    """The app's end of a frontend's pipes, on the sidecar's loop: it reads what the
    sidecar writes (without loop.io: faults strike the sidecar's side only) and writes
    its next command when what it read calls for one."""

    def __init__(self, loop: VirtualLoop, tty: bool = False) -> None:
        self.loop = loop
        self.in_r, self.in_w = os.pipe()
        if tty:
            # A terminal: the one kind of stdout the loop writes directly, not through a
            # poll (a raw one, so that lines arrive as they were written).
            self.out_r, self.out_w = os.openpty()
            termios_raw(self.out_w)
        else:
            self.out_r, self.out_w = os.pipe()
        os.set_blocking(self.out_r, False)
        self.raw = bytearray()
        self.lines: list[dict[str, Any]] = []
        self.sent: dict[Any, str] = {}
        self.ended = False
        loop.add_reader(self.out_r, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.out_r, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self.loop.remove_reader(self.out_r)
            return
        self.take(data)

    def take(self, data: bytes) -> None:
        """Bytes the server wrote: each whole line is read as the app reads it."""
        self.raw += data
        while b"\n" in self.raw:
            line, _, rest = bytes(self.raw).partition(b"\n")
            self.raw = bytearray(rest)
            if line.strip():
                obj = json.loads(line)
                self.lines.append(obj)
                self.react(obj)

    def write(self, obj: dict[str, Any]) -> None:
        if not self.ended:
            os.write(self.in_w, json.dumps(obj).encode() + b"\n")  # small: the pipe takes it at once

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            os.close(self.in_w)

    def react(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        for fd in (self.in_r, self.out_r, self.out_w) + (() if self.ended else (self.in_w,)):
            with contextlib.suppress(OSError):
                os.close(fd)


def termios_raw(fd: int) -> None:
    import tty

    tty.setraw(fd)


class P1App(App):
    """Two sessions: open, prompt, answer the permission, close once the turn ended; EOF
    once both are closed."""

    SESSIONS = 2

    def __init__(self, loop: VirtualLoop, tty: bool = False) -> None:
        super().__init__(loop, tty)
        self.next_id = 0
        self.closed = 0

    def command(self, name: str, **fields: Any) -> None:
        self.next_id += 1
        self.sent[self.next_id] = name
        self.write({"id": self.next_id, "cmd": name, **fields})

    def react(self, obj: dict[str, Any]) -> None:
        if "hello" in obj:
            for _ in range(self.SESSIONS):
                self.command("open", agent="mock", dir=DIR)
        elif "ok" in obj and self.sent.get(obj["id"]) == "open":
            self.command("prompt", session=obj["ok"]["id"], text="go")
        elif "event" in obj:
            event = obj["event"]
            name = event_kind_name(event["kind"])
            if name == "RequestOpened":
                request = event["kind"]["RequestOpened"]["Permission"]["id"]
                self.command("answer", session=event["session_id"], request=request, answer={"Permission": "AllowOnce"})
            elif name == "TurnEnded":
                self.command("close", session=event["session_id"])
        elif "closed" in obj:
            self.closed += 1
            if self.closed == self.SESSIONS:
                self.end()


class OpsApp(App):
    """The ops loop: open, prompt (it stops waiting on the permission), answer (the turn
    then ends), close; EOF after close's done."""

    def __init__(self, loop: VirtualLoop, tty: bool = False) -> None:
        super().__init__(loop, tty)
        self.requests: list[str] = []
        self.result: dict[str, Any] | None = None
        loop.call_soon(lambda: self.request("open", agent="mock", dir=DIR))

    def request(self, op: str, **fields: Any) -> None:
        self.requests.append(op)
        self.write({"op": op, **fields})

    def react(self, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "result":
            self.result = obj
        if obj.get("kind") != "done":
            return
        last, result = self.requests[-1], self.result
        if last == "open":
            self.request("prompt", text="go")
        elif last == "prompt" and result is not None and "waiting" in result:
            self.request("answer", request=result["waiting"]["Permission"]["id"], answer={"Permission": "AllowOnce"})
        elif last == "answer":
            self.request("close")
        else:
            self.end()


def ops_server(runtime: Engine, in_fd: int, output: Output, finished: Callable[[], None]) -> OpsStream:
    return OpsStream(runtime, in_fd, output, finished)


def p1_server(runtime: Engine, in_fd: int, output: Output, finished: Callable[[], None]) -> P1Connection:
    return P1Connection(runtime, in_fd, output, lambda _conn: finished())


FRONTENDS = {"p1": (p1_server, P1App), "ops": (ops_server, OpsApp)}
#: Each frontend also with writes of at most 256 bytes (faults then strike inside lines
#: too), and with a terminal for stdout (written directly: it is not polled).
VARIANTS = {
    "p1": ("p1", None, False),
    "ops": ("ops", None, False),
    "p1-256": ("p1", 256, False),
    "ops-256": ("ops", 256, False),
    "p1-tty": ("p1", 256, True),
}


#: The wall clock of every run (ns): its nanoseconds keep 9 digits for a million events.
WALL_CLOCK = 1_700_000_000_123_456_789


class Run:
    """One frontend run with a FaultyIO; what the app saw, and how the server ended."""

    def __init__(self, variant: str, plan: dict[str, dict[int, str]], monkeypatch: pytest.MonkeyPatch) -> None:
        frontend, cap, tty = VARIANTS[variant]
        wall = itertools.count(WALL_CLOCK, 1000)
        monkeypatch.setattr(engine_session, "time_ns", lambda: next(wall))
        server, app_class = FRONTENDS[frontend]
        self.io = FaultyIO(cap)
        self.io.write_plan = plan.get("write", {})
        self.io.read_plan = plan.get("read", {})
        loop = VirtualLoop(self.io, grace=0.5 if tty else 0.0)
        runtime = Engine(loop, mock_script=SCRIPT)
        app = app_class(loop, tty)
        self.io.write_fds = {app.out_w}
        self.io.read_fds = {app.in_r}
        monkeypatch.setattr(sys, "stdout", _Stdout(app.out_w))
        # A server that never ends would let the virtual clock run on: stop it then.
        self.timed_out = False

        def give_up() -> None:
            self.timed_out = True
            loop.stop()

        guard = loop.call_later(24 * 3600, give_up)
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                self.status = run_stdio(loop, lambda output, finished: server(runtime, app.in_r, output, finished))
            guard.cancel()
            app._readable()  # what the last flush wrote
            self.lines = app.lines
            self.rest = bytes(app.raw)
            self.sent = app.sent
            self.stderr = stderr.getvalue()
            self.sessions = dict(runtime.sessions)
        finally:
            loop.close()
            app.close()

    def check_ran(self) -> None:
        assert not self.timed_out, "the server never ended"
        assert "Traceback" not in self.stderr, self.stderr[-3000:]
        assert not self.sessions, f"sessions left open: {list(self.sessions)}"


_BASELINES: dict[str, Any] = {}


def baseline(frontend: str, monkeypatch: pytest.MonkeyPatch) -> Run:
    if frontend not in _BASELINES:
        run = Run(frontend, {}, monkeypatch)
        run.check_ran()
        assert run.status == 0
        for line in run.lines:
            if frontend.startswith("p1"):
                check_line(line)
        _BASELINES[frontend] = run
    run = _BASELINES[frontend]
    assert isinstance(run, Run)
    return run


#: Writes and reads of each frontend's fault-free run (checked by the first test; the
#: faults strike each of these positions). The same every run: the bytes written are, with
#: the run's own wall clock.
POSITIONS = {
    "p1": {"write": 7, "read": 5},
    "ops": {"write": 7, "read": 5},
    "p1-256": {"write": 32, "read": 8},
    "ops-256": {"write": 18, "read": 5},
    "p1-tty": {"write": 31, "read": 5},
}


@pytest.mark.parametrize("frontend", VARIANTS)
def test_the_fault_free_run_keeps_the_promises(frontend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run = baseline(frontend, monkeypatch)
    if frontend.startswith("p1"):
        check_p1(run.lines, run.sent, complete=True, eof=True)
        assert sum("closed" in line for line in run.lines) == P1App.SESSIONS
    else:
        assert [line["exit_code"] for line in run.lines if line["kind"] == "done"] == [0, 0, 0, 0]
    # Every event's time is the run's own clock's, in as many digits: the bytes written, and
    # so the writes counted, are the same every run.
    times = [line["event"]["occurred_at"] for line in run.lines if "event" in line]
    assert {(t["secs_since_epoch"], len(str(t["nanos_since_epoch"]))) for t in times} == {(WALL_CLOCK // 10**9, 9)}
    assert {"write": run.io.writes, "read": run.io.reads} == POSITIONS[frontend]


def write_params() -> list[Any]:
    return [
        pytest.param(frontend, at, fault, id=f"{frontend}-write{at}-{fault}")
        for frontend, counts in POSITIONS.items()
        for at in range(counts["write"])
        for fault in WRITE_FAULTS
    ]


def read_params() -> list[Any]:
    return [
        pytest.param(frontend, at, fault, id=f"{frontend}-read{at}-{fault}")
        for frontend, counts in POSITIONS.items()
        for at in range(counts["read"])
        for fault in READ_FAULTS
    ]


def streams(frontend: str, lines: list[dict[str, Any]]) -> Any:
    """What must not change between runs. Ops answers in request order, all of it; protocol 1
    keeps order per session (its events, error, closed), and each command has its one reply,
    while sessions interleave as timing has it."""
    lines = normalized(lines)
    if not frontend.startswith("p1"):
        return lines
    per: dict[str, list[Any]] = {}
    replies: dict[Any, Any] = {}
    for line in lines:
        if "hello" in line:
            continue
        if "id" in line:
            replies[line["id"]] = line
            continue
        sid = line["event"]["session_id"] if "event" in line else line.get("session", line.get("closed"))
        per.setdefault(sid, []).append(line)
    return per, replies


def is_prefix(frontend: str, got: list[dict[str, Any]], whole: list[dict[str, Any]]) -> bool:
    if not frontend.startswith("p1"):
        return normalized(got) == normalized(whole)[: len(got)]
    (per, replies), (all_per, all_replies) = streams(frontend, got), streams(frontend, whole)
    return all(all_replies.get(i) == r for i, r in replies.items()) and all(
        all_per.get(sid, [])[: len(lines)] == lines for sid, lines in per.items()
    )


@pytest.mark.parametrize(("frontend", "at", "fault"), write_params())
def test_a_fault_at_every_write(frontend: str, at: int, fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = baseline(frontend, monkeypatch)
    run = Run(frontend, {"write": {at: fault}}, monkeypatch)
    run.check_ran()
    if frontend == "p1-tty" and not run.io.injected:
        # A terminal takes what it can at once: this run wrote in fewer pieces than the
        # baseline and never reached write `at`. It must then be the clean run.
        assert run.io.writes <= at and run.status == 0, (run.io.writes, run.status)
        assert streams(frontend, run.lines) == streams(frontend, clean.lines)
        return
    assert run.io.injected == [(fault, at)]
    if fault in ("eagain", "short"):
        assert run.status == 0
        assert streams(frontend, run.lines) == streams(frontend, clean.lines), "a refused or short write changed what the app read"
        assert run.rest == b""
        return
    assert run.status == 1, "stdout failed and the server did not exit 1"
    # A reader that went away (EPIPE) ends it quietly, as Unix tools end; any other failure is said.
    assert ("stdout stopped accepting writes" in run.stderr) == (fault != "epipe"), run.stderr
    assert is_prefix(frontend, run.lines, clean.lines), "what the app read is not a prefix of the transcript"
    if frontend.startswith("p1"):
        check_p1(run.lines, run.sent, complete=False, eof=False)


@pytest.mark.parametrize(("frontend", "at", "fault"), read_params())
def test_a_fault_at_every_read(frontend: str, at: int, fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = baseline(frontend, monkeypatch)
    run = Run(frontend, {"read": {at: fault}}, monkeypatch)
    run.check_ran()
    assert run.io.injected == [(fault, at)]
    assert run.status == 0
    if fault == "eagain":
        assert streams(frontend, run.lines) == streams(frontend, clean.lines), "a refused read changed what the app read"
        return
    # A read error is the input's end: every session closes, and the server exits 0.
    if frontend.startswith("p1"):
        check_p1(run.lines, run.sent, complete=False, eof=True)
    else:
        dones = [line for line in run.lines if line["kind"] == "done"]
        assert len(dones) <= 4 and all(d["exit_code"] in (0, 1) for d in dones), run.lines


# -- one Unix-socket connection's faults cost no other connection -------------------------------


class SocketApp(P1App):
    """A P1App on a Unix-socket connection: one descriptor both ways; EOF is a half-close."""

    def __init__(self, loop: VirtualLoop, path: str) -> None:
        import socket

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.loop = loop
        self.in_w = self.out_r = self.sock.fileno()
        self.raw = bytearray()
        self.lines = []
        self.sent = {}
        self.ended = False
        self.next_id = 0
        self.closed = 0
        self.hung_up = False  # the server closed this connection
        self.sock.setblocking(False)
        loop.add_reader(self.out_r, self._readable)

    def _readable(self) -> None:
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.hung_up = True
            self.loop.remove_reader(self.out_r)
            return
        self.take(data)

    def write(self, obj: dict[str, Any]) -> None:
        if not self.ended and not self.hung_up:
            try:
                self.sock.send(json.dumps(obj).encode() + b"\n")  # small: the socket takes it at once
            except OSError:
                self.hung_up = True  # the server hung up this connection meanwhile

    def end(self) -> None:
        import socket

        if not self.ended:
            self.ended = True
            self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.loop.forget(self.out_r)
        self.sock.close()


class UnixRun:
    """Two connections to one Unix-socket server; faults strike the first one's writes."""

    def __init__(self, plan: dict[int, str], tmp_path: Path) -> None:
        from agentproto.frontends.unix import UnixServer

        self.io = FaultyIO()
        self.io.write_plan = plan
        loop = VirtualLoop(self.io)
        runtime = Engine(loop, mock_script=SCRIPT)
        io_ = self.io

        class Server(UnixServer):
            def _serve(self, sock: Any) -> None:
                super()._serve(sock)
                if self.accepted == 1:
                    io_.write_fds.add(sock.fileno())  # before its hello is flushed

            def _finished(self, conn: P1Connection) -> None:
                # Its descriptor is closed next, and its number may be the next connection's.
                io_.write_fds.discard(conn.in_fd)
                io_.broken.pop(conn.in_fd, None)
                super()._finished(conn)

        path = str(tmp_path / "ap.sock")
        server = Server(runtime, path)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            server.start()
            first = SocketApp(loop, path)
            loop.call_soon(lambda: None)
            run_for_loop(loop, lambda: server.accepted >= 1)
            second = SocketApp(loop, path)
            run_for_loop(loop, lambda: (first.ended or first.hung_up) and second.ended and not server.conns, 3600)
            self.server_running = server.listener is not None
            server.shutdown()
            server.close_listener()
        self.first, self.second = first.lines, second.lines
        self.first_sent, self.second_sent = first.sent, second.sent
        self.sessions = dict(runtime.sessions)
        self.stderr = stderr.getvalue()
        first.close()
        second.close()
        loop.close()


def run_for_loop(loop: VirtualLoop, until: Callable[[], bool], seconds: float = 60.0) -> None:
    from faults import run_for

    run_for(loop, seconds, until)
    assert until(), "the server never got there"


UNIX_WRITES = 7


def test_the_fault_free_unix_run(tmp_path: Path) -> None:
    run = UnixRun({}, tmp_path)
    check_p1(run.first, run.first_sent, complete=True, eof=True)
    check_p1(run.second, run.second_sent, complete=True, eof=True)
    assert run.io.writes == UNIX_WRITES


@pytest.mark.parametrize("fault", ["epipe", "enospc"])
@pytest.mark.parametrize("at", range(UNIX_WRITES))
def test_a_failed_connection_costs_no_other(at: int, fault: str, tmp_path: Path) -> None:
    run = UnixRun({at: fault}, tmp_path)
    assert run.io.injected == [(fault, at)]
    assert "Traceback" not in run.stderr, run.stderr
    assert run.server_running, "one connection's failure ended the server"
    assert not run.sessions, f"sessions left open: {list(run.sessions)}"
    check_p1(run.first, run.first_sent, complete=False, eof=False)
    # The other connection's two sessions ran to their ends as if nothing happened.
    check_p1(run.second, run.second_sent, complete=True, eof=True)
    assert sum("closed" in line for line in run.second) == P1App.SESSIONS
