"""The listener in-process, on a real loop whose clock can run ahead: a client too slow with
its request is cut off after 30 s (no real half minute passes), while another session's
tool call, made by the mock over HTTP on the same loop, completes undelayed."""

from __future__ import annotations

import socket
from typing import Any

from listener_support import LOOKUP, split, text_result
from sidecar import ROOT, kind_name
from tests.engine.test_engine import Recorder, SkewedLoop, execute, run_until

from agentproto.drivers.mock import load_script
from agentproto.tools.listener import REQUEST_TIMEOUT
from agentproto.engine.runtime import Engine, Scope

SCRIPT = load_script((ROOT / "fixtures" / "mock-scripts" / "tools.json").read_text())


def _received(sock: socket.socket) -> bytes | None:
    """What the server sent so far (b"" once it closed), or None when nothing yet."""
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return b""
    return data


def test_a_slow_client_is_cut_off_without_delaying_another_session() -> None:
    loop = SkewedLoop()
    runtime = Engine(loop, mock_script=SCRIPT)
    scope = Scope(runtime)
    sink = Recorder(writes=True)
    slow: list[socket.socket] = []
    try:
        [(first, error)] = execute(runtime, scope, sink, "open", agent="mock", dir=str(ROOT), tools=[LOOKUP])
        assert error is None
        [(second, error)] = execute(runtime, scope, sink, "open", agent="mock", dir=str(ROOT), tools=[LOOKUP])
        assert error is None
        host, port, path = split(first["tools_url"])
        # One client stops in the middle of its head, another in the middle of its body.
        for data in (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Ty".encode(),
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"".encode(),
        ):
            sock = socket.create_connection((host, port))
            sock.setblocking(False)
            sock.sendall(data)
            slow.append(sock)
        # Meanwhile the other session's turn calls its tool through the listener, and ends.
        execute(runtime, scope, sink, "prompt", session=second["id"], text="go")

        def opened() -> Any:
            return next((e for e in sink.events if kind_name(e["kind"]) == "RequestOpened"), None)

        run_until(loop, lambda: opened() is not None)
        call = opened()["kind"]["RequestOpened"]["ToolCall"]
        session = runtime.sessions[second["id"]]
        session.answer(call["id"], text_result("quick"), lambda _v, _e: None)

        def ended() -> bool:
            return any(kind_name(e["kind"]) == "TurnEnded" and e["session_id"] == second["id"] for e in sink.events)

        run_until(loop, ended)
        outputs = [e["kind"]["ToolUpdated"]["output"] for e in sink.events if kind_name(e["kind"]) == "ToolUpdated"]
        assert outputs[-1] == "quick"
        assert all(_received(sock) is None for sock in slow)  # not cut off yet: little time has passed
        # Past the request timeout (on the loop's clock), both slow clients get 408 and are closed.
        loop.ahead += REQUEST_TIMEOUT + 1
        got: dict[int, bytes] = {i: b"" for i in range(len(slow))}
        closed: set[int] = set()

        def cut_off() -> bool:
            for i, sock in enumerate(slow):
                if i in closed:
                    continue
                data = _received(sock)
                if data == b"":
                    closed.add(i)
                elif data:
                    got[i] += data
            return len(closed) == len(slow)

        run_until(loop, cut_off)
        assert all(got[i].startswith(b"HTTP/1.1 408 ") for i in got), got
        # And the listener serves on.
        [(third, error)] = execute(runtime, scope, sink, "open", agent="mock", dir=str(ROOT), tools=[LOOKUP])
        assert error is None and split(third["tools_url"])[1] == port  # the same one socket
    finally:
        for sock in slow:
            sock.close()
        runtime.close_all()
        run_until(loop, lambda: not runtime.sessions)
        if runtime.listener is not None:
            runtime.listener.close()
        loop.close()
