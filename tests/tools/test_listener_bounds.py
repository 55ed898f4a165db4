"""One session's agent cannot starve the others on the shared loopback listener (issue 19):
its connections, once their heads are in, and its unanswered tool calls are bounded per
session token; an excess call gets a JSON-RPC error (not a 429, which agents retry), and
another session's agent is still served. Against a real ``serve`` process, raw sockets and
http.client, on 127.0.0.1 only."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from listener_support import LOOKUP, BlockingMcp, InThread, Raw, opened_request, post, split, text_result
from sidecar import ROOT, Sidecar, kind_name, script

TOO_MANY = -32005


def open_tools(car: Sidecar) -> dict[str, Any]:
    info: dict[str, Any] = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]})
    return info


def mcp_session(url: str, version: str = "2025-06-18") -> str:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": version}}
    response = post(url, init)
    assert response.status == 200, response.body
    return response.headers["mcp-session-id"]


def call_request(url: str, mcp_id: str, rpc_id: Any, keep_alive: bool = True) -> bytes:
    """A raw ``tools/call`` POST (or a batch, for a list of ids)."""
    host, port, path = split(url)

    def one(i: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "lookup", "arguments": {"word": str(i)}}}

    body = json.dumps([one(i) for i in rpc_id] if isinstance(rpc_id, list) else one(rpc_id)).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Mcp-Session-Id: {mcp_id}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {len(body)}\r\n"
        + ("" if keep_alive else "Connection: close\r\n")
        + "\r\n"
    )
    return head.encode() + body


def hold_calls(url: str, mcp_id: str, count: int, first: int = 1) -> list[socket.socket]:
    """``count`` connections, each with a ``tools/call`` sent (and not answered yet)."""
    _, port, _ = split(url)
    held = []
    for i in range(first, first + count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(call_request(url, mcp_id, i, keep_alive=False))
        held.append(sock)
    return held


def answers(socks: list[socket.socket], wanted: int, timeout: float = 30.0) -> dict[socket.socket, Raw]:
    """The first ``wanted`` responses that come on ``socks`` (each read until its server closes it)."""
    got: dict[socket.socket, bytes] = {}
    done: dict[socket.socket, Raw] = {}
    deadline = time.monotonic() + timeout
    while len(done) < wanted and time.monotonic() < deadline:
        readable, _, _ = select.select([s for s in socks if s not in done], [], [], 0.5)
        for sock in readable:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            got[sock] = got.get(sock, b"") + data
            if not data:
                done[sock] = Raw(got[sock])
    return done


def test_one_sessions_held_tool_calls_cannot_lock_another_session_out() -> None:
    with Sidecar(["--mock", script("tools")], reference=False) as car:
        hog, other = open_tools(car), open_tools(car)
        hog_url = hog["tools_url"]
        held = hold_calls(hog_url, mcp_session(hog_url), 256)
        try:
            # 32 calls are the app's to answer; every one past them is refused at once with a
            # JSON-RPC error (HTTP 200: not a 429 that an agent would retry), and closed.
            refused = answers(held, 256 - 32)
            assert len(refused) == 256 - 32, f"{len(refused)} of the excess calls were answered"
            for response in refused.values():
                assert response.status == 200 and response.headers["content-type"] == "application/json", response.body
                error = response.json()["error"]
                assert error["code"] == TOO_MANY and "Too many" in error["message"], error
            pending = [sock for sock in held if sock not in refused]
            opened = [opened_request(car, hog["id"]) for _ in range(32)]
            assert {e["kind"]["RequestOpened"]["ToolCall"]["id"] for e in opened} == {f"call-{i}" for i in range(1, 33)}
            # The other session's agent is served meanwhile: its call reaches the app, and
            # the app's answer reaches it.
            client = BlockingMcp(other["tools_url"], timeout=30).initialize()
            call = InThread(lambda: client.call("lookup", {"word": "still here"}))
            request = opened_request(car, other["id"])["kind"]["RequestOpened"]["ToolCall"]
            assert request["arguments"] == {"word": "still here"}
            car.ok({"cmd": "answer", "session": other["id"], "request": request["id"], "answer": text_result("served")})
            assert call.result()["content"][0]["text"] == "served"
            client.close()
            # The hog's held calls are still its app's to answer.
            car.ok({"cmd": "answer", "session": hog["id"], "request": "call-1", "answer": text_result("one")})
            [answered] = answers(pending, 1).values()
            assert answered.status == 200 and answered.json()["result"]["content"][0]["text"] == "one"
        finally:
            for sock in held:
                sock.close()


def test_pending_tool_calls_are_bounded_per_session_even_once_their_clients_left() -> None:
    with Sidecar(["--mock", script("tools"), "--tool-calls", "2"], reference=False) as car:
        hog, other = open_tools(car), open_tools(car)
        url = hog["tools_url"]
        # 2025-03-26: the one revision with JSON-RPC batches (a batch is sent below).
        mcp_id = mcp_session(url, "2025-03-26")
        # Two calls whose clients give up at once: the calls stay the app's until answered.
        for sock in hold_calls(url, mcp_id, 2):
            sock.close()
        for _ in range(2):
            opened_request(car, hog["id"])
        third = post(url, json.loads(call_request(url, mcp_id, 3).partition(b"\r\n\r\n")[2]), {"Mcp-Session-Id": mcp_id})
        assert third.status == 200 and third.json()["error"]["code"] == TOO_MANY, third.body
        assert third.json()["id"] == 3
        # A batch past the bound: each call over it gets its own error, with its own id.
        car.ok({"cmd": "answer", "session": hog["id"], "request": "call-1", "answer": text_result("one")})
        batch = InThread(lambda: post(url, json.loads(call_request(url, mcp_id, [4, 5, 6]).partition(b"\r\n\r\n")[2]), {"Mcp-Session-Id": mcp_id}))
        request = opened_request(car, hog["id"])["kind"]["RequestOpened"]["ToolCall"]
        car.ok({"cmd": "answer", "session": hog["id"], "request": request["id"], "answer": text_result("four")})
        got = {entry["id"]: entry for entry in batch.result().json()}
        assert got[4]["result"]["content"][0]["text"] == "four"
        assert got[5]["error"]["code"] == TOO_MANY and got[6]["error"]["code"] == TOO_MANY
        # Another session has its own bound.
        client = BlockingMcp(other["tools_url"], timeout=30).initialize()
        call = InThread(lambda: client.call("lookup", {"word": "mine"}))
        request = opened_request(car, other["id"])["kind"]["RequestOpened"]["ToolCall"]
        car.ok({"cmd": "answer", "session": other["id"], "request": request["id"], "answer": text_result("yours")})
        assert call.result()["content"][0]["text"] == "yours"
        client.close()
        # Calls 5 and 6 never reached the app.
        opened = [line["event"]["kind"]["RequestOpened"]["ToolCall"] for line in car.seen
                  if "event" in line and kind_name(line["event"]["kind"]) == "RequestOpened"]
        assert [call["arguments"]["word"] for call in opened] == ["1", "2", "4", "mine"]


def test_at_its_bound_a_session_new_connection_closes_its_own_oldest_idle_one() -> None:
    with Sidecar(["--mock", script("tools"), "--tool-connections", "2"], reference=False) as car:
        info = open_tools(car)
        url = info["tools_url"]
        host, port, path = split(url)
        mcp_id = mcp_session(url)
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        body = json.dumps(listing).encode()
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Mcp-Session-Id: {mcp_id}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        # Two kept-alive connections, answered and idle, count against the session...
        kept = []
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(request)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            kept.append(sock)
        # ...so a third closes the oldest of them, and is served.
        third = socket.create_connection(("127.0.0.1", port), timeout=10)
        third.sendall(request)
        assert third.recv(65536).startswith(b"HTTP/1.1 200 ")
        kept[0].settimeout(10)
        assert kept[0].recv(16) == b""
        kept[1].sendall(request)
        assert kept[1].recv(65536).startswith(b"HTTP/1.1 200 ")
        # With both busy (held calls), one more is refused with a JSON-RPC error.
        for sock in (third, kept[1]):
            sock.sendall(call_request(url, mcp_id, 7))
        for _ in range(2):
            opened_request(car, info["id"])
        [refused] = answers(hold_calls(url, mcp_id, 1, first=9), 1).values()
        assert refused.status == 200 and refused.json() == {"jsonrpc": "2.0", "id": 9, "error": refused.json()["error"]}
        assert refused.json()["error"]["code"] == TOO_MANY and refused.headers.get("connection") == "close"
        for sock in (*kept, third):
            sock.close()


def test_a_hook_past_the_connection_bound_gets_503_and_the_held_one_its_answer() -> None:
    with Sidecar(["--mock", script("tools"), "--tool-connections", "1"], reference=False) as car:
        info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP], "hooks": ["Stop"]})
        hook_url = info["tools_url"].replace("/mcp/agentproto", "/hook/Stop")
        held = InThread(lambda: post(hook_url, {"n": 1}))
        hook = opened_request(car, info["id"], "Hook")["kind"]["RequestOpened"]["Hook"]
        refused = post(hook_url, {"n": 2})
        assert refused.status == 503 and refused.json()["error"].startswith("too many connections"), refused.body
        assert refused.headers.get("connection") == "close"
        car.ok({"cmd": "answer", "session": info["id"], "request": hook["id"], "answer": {"HookResult": {"ok": 1}}})
        assert held.result().json() == {"ok": 1}
        # The refused one never reached the app.
        hooks = [line for line in car.seen if "event" in line and kind_name(line["event"]["kind"]) == "RequestOpened"]
        assert len(hooks) == 1


@pytest.mark.parametrize("flag", ["--tool-connections", "--tool-calls", "--max-terminals"])
@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bound_flag_takes_a_whole_number_above_0(flag: str, value: str) -> None:
    """Regression: two hardening branches each defined cli_args._count, and the later one
    (0 allowed) replaced the earlier: `--tool-calls 0` was taken, a listener refusing every
    call. Each bound is a whole number above 0, else a usage error naming the flag."""
    done = subprocess.run([sys.executable, "-m", "agentproto", "serve", flag, value], cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr and "whole number above 0" in done.stderr
