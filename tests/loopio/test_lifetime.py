"""SIGTERM ends every frontend within 5 s in every state, and a second SIGTERM at once; EOF
closes every session and exits 0; a reader that goes away never keeps a frontend alive.
Nothing any of them started is left behind.

Each frontend (serve, agent, --single-shot, jsonrpc, mcp, unix, http) is a real process
(lifetime_support.py), put in a state, then signalled: idle; its output queued and never
read (a mock turn streaming far more than any pipe holds); a session still opening, of an
agent that never answers its handshake; a turn running, of an agent that ignores SIGTERM
and the end of its input and has detached a ``setsid`` process of its own. The 5 s bound
is the guarantee under test (the frontend waits SIGNAL_GRACE + KILL_GRACE = 3 s at most),
with margin: not a measure of speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lifetime_support import FRONTENDS, Frontend, assert_all_gone, stubborn_agent, wait_for_pids

BOUND = 5.0
STATES = ("idle", "unread", "opening", "turn")


def enter(frontend: Frontend, state: str, tmp_path: Path) -> list[int]:
    """Put ``frontend`` in ``state``; the pids of what its agent started (to be gone after)."""
    pids = tmp_path / "pids"
    single = frontend.name == "single-shot"
    if state == "idle":
        if single:
            frontend.request("capabilities", {}, None)  # answered at once, then it exits
        return []
    if state == "unread":
        if single:
            frontend.generate({"agent": "mock"}, wait=False)
        else:
            frontend.open({"agent": "mock"})
            frontend.prompt(wait=False)
        import time

        time.sleep(1.5)  # the turn streams on; nothing of it is read
        return []
    if state == "opening":
        frontend.open(stubborn_agent(pids, "hang-open,ignore-term,ignore-eof"), wait=False)
        return wait_for_pids(pids, 1)
    # A turn running on an agent that ignores SIGTERM and EOF, with a detached process.
    agent = stubborn_agent(pids, "detach,ignore-term,ignore-eof")
    if single:
        frontend.generate(agent)
    else:
        frontend.open(agent)
        frontend.prompt()
    return wait_for_pids(pids, 2)


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("name", FRONTENDS)
def test_sigterm_ends_every_frontend_within_5_s(name: str, state: str, tmp_path: Path) -> None:
    frontend = Frontend(name, tmp_path)
    try:
        pids = enter(frontend, state, tmp_path)
        if name == "single-shot" and state == "idle":
            frontend.proc.wait(20)  # already done: nothing to signal
            assert frontend.proc.returncode == 0
            return
        took = frontend.sigterm()
        assert frontend.proc.poll() is not None, f"{name} still runs {took:.1f} s after SIGTERM ({state})"
        assert took < BOUND, f"{name} took {took:.1f} s to end after SIGTERM ({state})"
        # --single-shot exits with its request's exit_code: one cut short by the signal failed.
        expected = 1 if name == "single-shot" else 0
        assert frontend.proc.returncode == expected, (frontend.proc.returncode, frontend.stderr[-2000:])
        assert_all_gone(pids)
    finally:
        frontend.finish()


@pytest.mark.parametrize("name", FRONTENDS)
def test_a_second_sigterm_ends_it_at_once(name: str, tmp_path: Path) -> None:
    from agentproto.loopio.lifetime import SIGNAL_GRACE

    frontend = Frontend(name, tmp_path)
    try:
        pids = enter(frontend, "turn", tmp_path)
        took = frontend.sigterm(times=2)
        assert frontend.proc.poll() is not None, f"{name} still runs after two SIGTERMs"
        assert took < SIGNAL_GRACE, f"{name} took {took:.1f} s after two SIGTERMs: it waited out the grace"
        assert_all_gone(pids)
    finally:
        frontend.finish()


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_unix_client_gone_without_a_half_close_costs_only_its_connection(how: str, tmp_path: Path) -> None:
    """A Unix client that leaves (a close, or a reset) while a turn streams to it and its
    output is queued unread: its session closes and its agent is gone, the server serves the
    next client as ever, and SIGTERM still ends it within the bound."""
    import socket
    import struct

    frontend = Frontend("unix", tmp_path)
    try:
        frontend.open({"agent": "mock"})
        frontend.prompt(wait=False)  # the flood: far more than the socket holds, never read
        pids = tmp_path / "pids"
        second = frontend.connect()
        second.write({"id": 1, "cmd": "open", "dir": str(tmp_path), **stubborn_agent(pids, "ignore-term,ignore-eof")})
        end = second.read_until(b'"id":1,"ok":{"id":"')
        session = bytes(second.data[end : second.data.index(b'"', end)]).decode()  # ids are the runtime's
        second.write({"id": 2, "cmd": "prompt", "session": session, "text": "go"})
        second.read_until(b"TurnStarted")
        agent = wait_for_pids(pids, 1)
        import time

        time.sleep(1.0)  # the first client's output is queued, unread
        for stream in (frontend.main, second):
            sock = stream.sock  # type: ignore[attr-defined]
            if how == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        assert_all_gone(agent, timeout=15)  # its session closed: the agent that ignores SIGTERM too
        third = frontend.connect()  # read_until its hello: still served
        third.write({"id": 1, "cmd": "open", "dir": str(tmp_path), "agent": "mock"})
        third.read_until(b'"id":1,"ok":{"id":"')
        took = frontend.sigterm()
        assert frontend.proc.poll() == 0 and took < BOUND, (took, frontend.stderr[-2000:])
    finally:
        frontend.finish()


@pytest.mark.parametrize("name", ["serve", "unix", "http"])
def test_eof_closes_every_session_and_exits_0_with_nothing_left(name: str, tmp_path: Path) -> None:
    """EOF on stdin (for a socket server: its parent's end of stdin) during a turn of an agent
    that ignores SIGTERM and EOF and has detached a process: every session closes, the agent
    and what it detached are gone, and the process exits 0."""
    frontend = Frontend(name, tmp_path)
    try:
        pids = enter(frontend, "turn", tmp_path)
        assert frontend.proc.stdin is not None
        frontend.proc.stdin.close()
        try:
            frontend.proc.wait(20)
        except Exception:
            pass
        assert frontend.proc.poll() is not None, f"{name} still runs 20 s after EOF"
        if name in ("serve", "unix"):
            frontend.main.read_until(b'"closed"')  # protocol 1 says so
        assert frontend.proc.returncode == 0, (frontend.proc.returncode, frontend.stderr[-2000:])
        assert_all_gone(pids)
    finally:
        frontend.finish()


@pytest.mark.parametrize("name", ["agent", "jsonrpc", "mcp"])
def test_after_eof_the_ops_frontends_answer_what_was_asked_and_sigterm_still_ends_them(
    name: str, tmp_path: Path
) -> None:
    """The request framings end at EOF once every request is answered (a script of requests
    piped in gets all its answers): a turn that never ends keeps them, and SIGTERM still
    ends them within the bound, with nothing left."""
    frontend = Frontend(name, tmp_path)
    try:
        pids = enter(frontend, "turn", tmp_path)
        assert frontend.proc.stdin is not None
        frontend.proc.stdin.close()
        import time

        time.sleep(1.0)
        assert frontend.proc.poll() is None, "it ended before answering the prompt"
        took = frontend.sigterm()
        assert frontend.proc.poll() == 0 and took < BOUND, (took, frontend.proc.returncode, frontend.stderr[-2000:])
        assert_all_gone(pids)
    finally:
        frontend.finish()


@pytest.mark.parametrize("name", ["serve", "agent", "single-shot", "jsonrpc", "mcp"])
def test_after_eof_a_reader_that_closes_its_pipe_ends_the_process(name: str, tmp_path: Path) -> None:
    """Output queued and unread at EOF, then the reader closes its end of stdout: the lines
    can never be written, so the process ends at once (status 1, quietly), not waiting on them."""
    frontend = Frontend(name, tmp_path)
    try:
        enter(frontend, "unread", tmp_path)
        assert frontend.proc.stdin is not None and frontend.proc.stdout is not None
        if name != "single-shot":
            frontend.proc.stdin.close()
        import time

        time.sleep(0.5)
        frontend.proc.stdout.close()
        started = time.monotonic()
        try:
            frontend.proc.wait(15)
        except Exception:
            pass
        took = time.monotonic() - started
        assert frontend.proc.poll() is not None and took < BOUND, f"{name} still runs {took:.1f} s after EPIPE"
        assert frontend.proc.returncode == 1, (frontend.proc.returncode, frontend.stderr[-2000:])
        assert "Traceback" not in frontend.stderr
    finally:
        frontend.finish()


@pytest.mark.parametrize("name", ["serve", "agent", "single-shot", "jsonrpc", "mcp"])
def test_a_reader_gone_during_a_silent_turn_ends_the_process(name: str, tmp_path: Path) -> None:
    """The app closes its end of stdout while a turn runs on an agent that writes nothing
    (and ignores SIGTERM and EOF, and detached a process); stdin stays open. With nothing to
    write there is no EPIPE to find out: the frontend still notices (it looks at its stdout),
    ends quietly with status 1 and leaves nothing behind."""
    frontend = Frontend(name, tmp_path)
    try:
        pids = enter(frontend, "turn", tmp_path)
        assert frontend.proc.stdout is not None
        frontend.proc.stdout.close()
        try:
            frontend.proc.wait(20)
        except Exception:
            pass
        assert frontend.proc.poll() == 1, (name, frontend.proc.poll(), frontend.stderr[-2000:])
        assert "Traceback" not in frontend.stderr
        assert_all_gone(pids)
    finally:
        frontend.finish()
