"""Sessions opened over HTTP expire once idle (issue 19): ``serve --transport http
--session-idle-timeout SECONDS`` closes a session that has had no turn running or queued, no
open request, no request or event stream for it, for that long, as a ``close`` would, and
its agent process is reaped. A busy session is never closed meanwhile, and activity restarts
the clock (counted on the loop's clock in-process: no real half hour passes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lifetime_support import alive, pids_in, stubborn_agent
from listener_support import LOOKUP, BlockingMcp, InThread, text_result
from ops_support import result_of, script
from sidecar import ROOT, base_env
from tests.engine.test_engine import SkewedLoop, run_until
from tests.frontends.test_http import Server

from agentproto.frontends.ops_framing import OpsContext, OpsHub
from agentproto.engine.runtime import Engine

IDLE = 1.0


def info(server: Server, session: str) -> dict[str, Any]:
    return result_of(server.post({"op": "info", "session": session}))


def closed_for_idleness(server: Server, session: str, timeout: float = 30.0) -> None:
    """Wait until the server says it closed ``session`` for idleness; then it is SessionClosed."""
    deadline = time.monotonic() + timeout
    while f"{session}: idle for {IDLE:g} s" not in server.proc.stderr:
        assert time.monotonic() < deadline, f"{session} was not closed; stderr: {server.proc.stderr[-2000:]}"
        time.sleep(0.05)
    gone = info(server, session)
    assert gone["ok"] is False and gone["error"]["kind"] == "SessionClosed", gone


def test_an_idle_session_is_closed_and_its_agent_reaped(tmp_path: Path) -> None:
    server = Server("--port", "0", "--session-idle-timeout", str(IDLE))
    try:
        pids = tmp_path / "pids"
        opened = result_of(server.post({"op": "open", "dir": str(tmp_path), **stubborn_agent(pids, "")}))
        session = opened["session"]["id"]
        [pid] = pids_in(pids)
        closed_for_idleness(server, session)
        deadline = time.monotonic() + 15
        while alive(pid):
            assert time.monotonic() < deadline, "the agent process outlived its session"
            time.sleep(0.05)
        # The server goes on: a new session opens.
        assert result_of(server.post({"op": "open", "agent": "mock", "dir": str(tmp_path)}))["ok"] is True
    finally:
        server.stop()


def test_a_running_turn_and_its_event_stream_keep_a_session_until_it_is_idle(tmp_path: Path) -> None:
    server = Server("--port", "0", "--session-idle-timeout", str(IDLE))
    try:
        pids = tmp_path / "pids"
        opened = result_of(server.post({"op": "open", "dir": str(tmp_path), **stubborn_agent(pids, "")}))
        session = opened["session"]["id"]
        # The stubborn agent's turn runs until cancelled; its POST streams it meanwhile.
        prompt = InThread(lambda: server.post({"op": "prompt", "session": session, "text": "go"}))
        deadline = time.monotonic() + 15
        while info(server, session)["session"]["status"] != "Working":
            assert time.monotonic() < deadline, "the turn did not start"
            time.sleep(0.05)
        time.sleep(4 * IDLE)
        assert info(server, session)["ok"] is True
        assert "idle for" not in server.proc.stderr
        server.post({"op": "cancel", "session": session})
        prompt.result()
        # Idle from now on: closed, and its agent reaped.
        closed_for_idleness(server, session)
        [pid] = pids_in(pids)
        deadline = time.monotonic() + 15
        while alive(pid):
            assert time.monotonic() < deadline, "the agent process outlived its session"
            time.sleep(0.05)
    finally:
        server.stop()


def test_an_open_tool_call_keeps_a_session_until_it_is_answered(tmp_path: Path) -> None:
    server = Server("--port", "0", "--session-idle-timeout", str(IDLE), "--mock", script("tools"))
    try:
        opened = result_of(server.post({"op": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]}))
        session, url = opened["session"]["id"], opened["session"]["tools_url"]
        client = BlockingMcp(url, timeout=60).initialize()
        call = InThread(lambda: client.call("lookup", {"word": "wait"}))
        time.sleep(4 * IDLE)  # the call is open (outside any turn) all along
        assert call.thread.is_alive()
        assert info(server, session)["ok"] is True and "idle for" not in server.proc.stderr
        answered = result_of(server.post({"op": "answer", "session": session, "request": "call-1", "answer": text_result("done")}))
        assert answered["ok"] is True, answered
        assert call.result()["content"][0]["text"] == "done"
        client.close()
        closed_for_idleness(server, session)
    finally:
        server.stop()


def test_zero_never_expires_and_the_flag_is_http_only(tmp_path: Path) -> None:
    server = Server("--port", "0", "--session-idle-timeout", "0")
    try:
        session = result_of(server.post({"op": "open", "agent": "mock", "dir": str(tmp_path)}))["session"]["id"]
        time.sleep(2 * IDLE)
        assert info(server, session)["ok"] is True
    finally:
        server.stop()

    for argv in (["--session-idle-timeout", "-1", "--transport", "http", "--port", "0"], ["--session-idle-timeout", "5"]):
        done = subprocess.run([sys.executable, "-m", "agentproto", "serve", *argv], capture_output=True, env=base_env(),
                              cwd=str(ROOT), stdin=subprocess.DEVNULL, timeout=60)
        assert done.returncode == 2 and b"--session-idle-timeout" in done.stderr, done.stderr


class _Lines:
    """An ops ``Out`` that keeps its lines and counts them delivered."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def line(self, obj: dict[str, Any], session: Any = None) -> None:
        self.lines.append(json.loads(json.dumps(obj)))
        if session is not None:
            session.delivered(1)

    def done(self, exit_code: int) -> None:
        self.lines.append({"kind": "done", "exit_code": exit_code})


def test_activity_restarts_the_idle_clock_counted_on_the_loops_clock() -> None:
    loop = SkewedLoop()
    try:
        runtime = Engine(loop)
        hub = OpsHub(runtime, shared=True, idle_timeout=100.0)
        ctx = OpsContext(hub)
        out = _Lines()
        ctx.run({"op": "open", "agent": "mock", "dir": str(ROOT)}, out)
        run_until(loop, lambda: any(line["kind"] == "done" for line in out.lines))
        session = ctx.default
        assert session is not None and session in runtime.sessions

        def still_open_after(seconds: float) -> bool:
            loop.ahead += seconds
            ticks = [0]

            def tick() -> None:
                ticks[0] += 1
                if ticks[0] < 5:
                    loop.call_soon(tick)

            loop.call_soon(tick)
            loop.run(until=lambda: ticks[0] >= 5)
            return session in runtime.sessions

        assert still_open_after(60)
        info = _Lines()
        ctx.run({"op": "info"}, info)  # activity at 60 s: the clock starts again
        run_until(loop, lambda: any(line["kind"] == "done" for line in info.lines))
        assert still_open_after(60)  # 120 s after the open, 60 s after the info
        loop.ahead += 50  # 110 s after the info: closed, as a close op closes it
        run_until(loop, lambda: session not in runtime.sessions)
        assert hub.boxes.get(session) is None  # nothing left of it
    finally:
        loop.close()
