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
    from agentproto.stdio import SIGNAL_GRACE

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
