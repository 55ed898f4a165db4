"""The child-process transport (drivers/process.py) with real child processes: framing,
the exit report, the process group, flow control, the shutdown order, and every read and
write going through ``loop.io``."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentproto.loopio.process_transport import ProcessTransport, group_alive, run_capture
from agentproto.loopio.transport import Spawn
from agentproto.loopio.loop import Loop, SystemIO
from agentproto.loopio.record import Recorder, Wire


class Agent:
    """One child run through a ProcessTransport, and what it reported."""

    def __init__(self, code: str, loop: Loop | None = None, record_wire: Wire | None = None, **spawn: Any) -> None:
        self.loop = loop or Loop()
        self.lines: list[bytes] = []
        self.exits: list[tuple[str | None, str]] = []
        self.too_long: list[int] = []
        self.transport = ProcessTransport(
            self.loop,
            Spawn(
                argv=[sys.executable, "-c", textwrap.dedent(code)],
                cwd=None,
                env=dict(os.environ),
                on_line=self.lines.append,
                on_exit=lambda status, stderr: self.exits.append((status, stderr)),
                on_too_long=self.too_long.append,
                **spawn,
            ),
            record_wire,
        )

    def run(self, until: Any = None, timeout: float = 20.0) -> None:
        deadline = self.loop.time() + timeout
        done = until or (lambda: bool(self.exits))
        self.loop.run(until=lambda: done() or self.loop.time() > deadline)
        assert done(), f"timed out; lines {self.lines[-3:]}, exits {self.exits}"

    def close(self) -> None:
        self.loop.close()


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def agents():
    made: list[Agent] = []

    def make(code: str, **kwargs: Any) -> Agent:
        made.append(Agent(code, **kwargs))
        return made[-1]

    yield make
    for agent in made:
        if agent.transport.pid and group_alive(agent.transport.pid):
            os.killpg(agent.transport.pid, signal.SIGKILL)
        agent.close()


def test_lines_in_order_then_one_exit_with_status_and_stderr_tail(agents):
    agent = agents(r"""
        import sys
        sys.stdout.write("one\ntwo\r\n" + "x" * 300000 + "\nlast without newline")
        sys.stderr.write("E" * 20000 + "the end of stderr")
        sys.exit(3)
    """)
    agent.run()
    assert agent.lines == [b"one", b"two\r", b"x" * 300000, b"last without newline"]
    ((status, stderr),) = agent.exits
    assert status == "3"
    assert stderr.endswith("the end of stderr") and len(stderr) == ProcessTransport.STDERR_TAIL
    assert not agent.transport.running


def test_a_line_past_the_bound_is_skipped_not_buffered(agents):
    agent = agents(r"""
        import sys
        sys.stdout.write("a" * 5000 + "\nafter\n")
    """, max_line=1000)
    agent.run()
    assert agent.too_long == [5000] and agent.lines == [b"after"]


def test_the_child_leads_its_own_group(agents):
    agent = agents("import os, sys; print(os.getpgid(0), os.getsid(0)); sys.stdout.flush(); sys.stdin.read()")
    agent.run(until=lambda: bool(agent.lines))
    pid = agent.transport.pid
    assert agent.lines == [f"{pid} {pid}".encode()]
    agent.transport.close_stdin()
    agent.run()
    assert agent.exits[0][0] == "0"


def test_writes_reach_the_child_and_stdin_closes_after_them(agents):
    agent = agents(r"""
        import sys, hashlib
        data = sys.stdin.buffer.read()
        print(len(data), hashlib.sha256(data).hexdigest())
    """)
    payload = [json.dumps({"n": i, "pad": "p" * 1000}).encode() + b"\n" for i in range(4000)]
    for line in payload:
        agent.transport.write(line)
    agent.transport.close_stdin()  # only once all of it is written
    agent.run()
    import hashlib

    whole = b"".join(payload)
    assert agent.lines == [f"{len(whole)} {hashlib.sha256(whole).hexdigest()}".encode()]


class StingyIO(SystemIO):
    """Every read and write through loop.io, at most 7 bytes at a time, every other write
    refused with EAGAIN: the transport must cope and lose nothing."""

    def __init__(self) -> None:
        self.reads = self.writes = 0
        self._refuse = False

    def read(self, fd: int, size: int) -> bytes:
        self.reads += 1
        return super().read(fd, min(size, 7))

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.writes += 1
        self._refuse = not self._refuse
        if self._refuse:
            raise BlockingIOError
        return super().write(fd, data[:7])


def test_every_read_and_write_goes_through_loop_io(agents):
    io = StingyIO()
    agent = agents("import sys\nfor line in sys.stdin: sys.stdout.write(line.upper()); sys.stdout.flush()", loop=Loop(io))
    agent.transport.write_json({"say": "hello"})
    agent.transport.write_json({"say": "world"})
    agent.transport.close_stdin()
    agent.run()
    assert agent.lines == [b'{"SAY":"HELLO"}', b'{"SAY":"WORLD"}']
    assert io.writes >= 2 * 15 // 7 and io.reads >= 30 // 7


def run_passes(loop: Loop, count: int) -> None:
    """Run ``count`` passes of the loop, each selecting with no wait (a callback is due)."""
    passes = [0]

    def tick() -> None:
        passes[0] += 1
        if passes[0] <= count:
            loop.call_soon(tick)

    loop.call_soon(tick)
    loop.run(until=lambda: passes[0] > count)


def test_pause_stops_reading_and_resume_delivers_the_rest(agents):
    # The child writes in two steps, the second gated by the test: the second is in the pipe
    # (it says so on stderr once flushed) while the transport is paused, so a transport
    # that went on reading would have lines to deliver in the passes that follow.
    agent = agents("""
        import sys
        for i in range(1000): print(i)
        sys.stdout.flush()
        sys.stdin.readline()
        for i in range(1000, 2000): print(i)
        sys.stdout.flush()
        sys.stderr.write("second step written\\n")
        sys.stderr.flush()
        sys.stdin.read()
    """)
    agent.run(until=lambda: len(agent.lines) == 1000)
    agent.transport.pause()
    agent.transport.write_json({"go": True})
    agent.run(until=lambda: "second step written" in agent.transport.stderr_tail)
    run_passes(agent.loop, 3)  # each selects with the second step readable in the pipe
    assert len(agent.lines) == 1000
    agent.transport.resume()
    agent.run(until=lambda: len(agent.lines) == 2000)
    assert agent.lines == [str(i).encode() for i in range(2000)]
    agent.transport.close_stdin()
    agent.run()


def test_output_of_a_paused_agent_is_drained_after_it_exits(agents):
    agent = agents("import sys\nfor i in range(2000): print(i)")  # fits in the pipe: it exits
    agent.transport.pause()
    agent.run()  # the exit is reported only once everything written has been read
    assert len(agent.lines) == 2000 and agent.exits[0][0] == "0"


def test_shutdown_escalates_to_sigterm_then_sigkill_of_the_group(agents, tmp_path):
    marker = tmp_path / "child.pid"
    agent = agents(f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        open({str(marker)!r}, "w").write(str(child.pid))
        print("ready", flush=True)
        time.sleep(60)  # ignores the end of its input and SIGTERM
    """, wait_group=True)
    agent.run(until=lambda: bool(agent.lines))
    agent.transport.shutdown(0.1)
    agent.run()
    assert agent.exits[0][0] == "SIGKILL"
    grandchild = int(marker.read_text())
    assert not group_alive(agent.transport.pid)
    assert not alive(grandchild)


def test_wait_group_reports_the_exit_once_the_whole_group_is_gone(agents, tmp_path):
    marker = tmp_path / "helper.pid"
    agent = agents(f"""
        import subprocess, sys
        # A helper that outlives the leader a little (it finishes its work on SIGTERM).
        helper = subprocess.Popen([sys.executable, "-c",
            "import signal, sys, time\\n"
            "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.3), sys.exit(0)))\\n"
            "time.sleep(60)"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(marker)!r}, "w").write(str(helper.pid))
        print("ready", flush=True)
    """, wait_group=True)
    agent.run()
    helper = int(marker.read_text())
    assert not group_alive(agent.transport.pid)
    assert not alive(helper)


def test_signal_reaches_the_agent(agents):
    agent = agents(r"""
        import signal, sys, time
        signal.signal(signal.SIGINT, lambda *a: (print("interrupted", flush=True), sys.exit(0)))
        print("ready", flush=True)
        time.sleep(60)
    """)
    agent.run(until=lambda: bool(agent.lines))
    agent.transport.signal(signal.SIGINT)
    agent.run()
    assert agent.lines == [b"ready", b"interrupted"] and agent.exits[0][0] == "0"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_pipe_size_widens_the_agents_stdout(agents):
    import fcntl

    agent = agents("import sys; sys.stdin.read()", pipe_size=1 << 20)
    assert agent.transport.proc.stdout is not None
    assert fcntl.fcntl(agent.transport.proc.stdout.fileno(), 1032) == 1 << 20  # F_GETPIPE_SZ
    agent.transport.kill()
    agent.run()
    assert agent.exits[0][0] == "SIGKILL"


def test_kill_is_a_kill_even_when_the_agent_would_exit_at_the_end_of_its_input(agents):
    # Under load the sidecar can be preempted between the steps of a kill; here it is,
    # right after the agent's input closes, until the agent has exited. An agent that ends
    # at EOF must not get to exit cleanly ("0") meanwhile: the SIGKILL comes first.
    agent = agents("import sys; print('ready', flush=True); sys.stdin.read()")
    agent.run(until=lambda: bool(agent.lines))
    transport = agent.transport
    drop = transport._drop_stdin

    def preempted() -> None:
        drop()
        os.waitid(os.P_PID, transport.pid, os.WEXITED | os.WNOWAIT)  # until it has exited

    transport._drop_stdin = preempted
    transport.kill()
    transport._drop_stdin = drop
    agent.run()
    assert agent.exits[0][0] == "SIGKILL"


def test_the_wire_records_everything_that_passes_in_order(agents, tmp_path):
    wire = tmp_path / "wire.jsonl"
    recorder = Recorder(str(wire))
    # Two lines in one read, then one more in another: each read keeps its own number.
    code = """
        import sys, time
        sys.stdin.readline()
        sys.stdout.write('a\\nb\\n'); sys.stdout.flush(); time.sleep(0.3)
        print('c', flush=True); sys.stdin.read(); sys.stderr.write('bye')
    """
    agent = agents(code, record_wire=Wire("s1", [recorder]))
    agent.transport.write(b"ping\n")
    agent.run(until=lambda: len(agent.lines) == 3)
    agent.transport.close_stdin()
    agent.run()
    recorder.close()
    entries = [json.loads(line) for line in wire.read_text().splitlines()]
    assert all(isinstance(e["t"], int) and e["session"] == "s1" for e in entries)
    assert entries[0]["dir"] == "spawn" and entries[0]["argv"] == agent.transport.argv
    lines = [(e["dir"], e["line"], e.get("read")) for e in entries if "line" in e]
    first = lines[1][2]
    assert lines == [("to_agent", "ping", None), ("from_agent", "a", first), ("from_agent", "b", first),
                     ("from_agent", "c", first + 1)]
    rest = [(e["dir"], e.get("action"), e.get("status"), e.get("stderr")) for e in entries if "line" not in e][1:]
    assert rest == [("control", "close_stdin", None, None), ("exit", None, "0", "bye")]


def test_an_executable_that_cannot_start_raises_and_leaves_nothing(tmp_path):
    loop = Loop()
    spawn = Spawn(argv=[str(tmp_path / "missing")], cwd=None, env={}, on_line=print, on_exit=print)
    with pytest.raises(OSError):
        ProcessTransport(loop, spawn)
    loop.close()


def test_run_capture_reports_code_output_and_timeouts(tmp_path):
    loop = Loop()
    results: dict[str, Any] = {}

    def capture(name: str, argv: list[str], **kwargs: Any) -> None:
        run_capture(loop, argv, lambda *result: results.setdefault(name, result), **kwargs)

    capture("ran", [sys.executable, "-c", "import sys; print('v1.2'); sys.stderr.write('warn'); sys.exit(2)"])
    capture("slow", [sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.2)
    capture("missing", [str(tmp_path / "missing")])
    deadline = loop.time() + 20
    loop.run(until=lambda: len(results) == 3 or loop.time() > deadline)
    loop.close()
    assert results["ran"] == (2, "v1.2\n", "warn")
    assert results["slow"] == (None, "", "")
    code, out, reason = results["missing"]
    assert code is None and out == "" and "missing" in reason
