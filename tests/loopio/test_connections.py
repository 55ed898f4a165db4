"""The socket servers' connections: out of descriptors, a server backs off instead of
spinning and says so once; at their bound, idle connections make room for new ones; a
handler's bug is logged without the request's path (the listener's paths hold tokens).

The EMFILE cases run a real ``serve --transport http|unix`` with RLIMIT_NOFILE lowered
(the server's own limit, set before it starts) and fill its descriptors with connections.
The bounds run the HTTP server and the Unix server in-process on a loop of the test's.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, base_env, script
from tests.loopio.test_http_server import Handler, Running, closed_by_server, read_response

from agentproto.loopio.httpserver import HttpServer
from agentproto.loopio.sockets import bind_tcp, tcp_address
from agentproto.loopio.loop import Loop

#: The sidecar's descriptor limit: the last 16 are never accepted into (descriptors.FLOOR),
#: so about 20 connections are served before accepting stops.
NOFILE = 48


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(transport: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Any, Path]:
    """The server, its address, and the file its stderr goes to."""
    err = tmp_path / "stderr"
    args = ["--listen", str(tmp_path / "ap.sock")] if transport == "unix" else ["--port", "0"]

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve", "--transport", transport, "--mock", script("turn"), *args],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=open(err, "wb"), env=base_env(), cwd=str(ROOT),
        preexec_fn=few_descriptors,
    )
    deadline = time.monotonic() + 20
    while "listening on" not in err.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, err.read_text()
        time.sleep(0.02)
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", err.read_text())
    address: Any = ("127.0.0.1", int(found.group(1))) if found else str(tmp_path / "ap.sock")
    return proc, address, err


def connect(transport: str, address: Any) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX if transport == "unix" else socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(address)
    return sock


def answered(transport: str, sock: socket.socket, address: Any, timeout: float = 10.0) -> bool:
    """Whether the server serves this connection (a Unix one gets its hello; an HTTP one an
    answer to a version request) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        if transport == "http":
            sock.sendall(b"GET /v1/agent/version HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % address[1])
            return sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        return b'"hello"' in sock.recv(65536)
    except (socket.timeout, OSError):
        return False


@pytest.mark.parametrize("transport", ["http", "unix"])
def test_out_of_descriptors_the_server_backs_off_logs_once_and_accepts_again(transport: str, tmp_path: Path) -> None:
    proc, address, err = start_server(transport, tmp_path)
    socks: list[socket.socket] = []
    try:
        for _ in range(NOFILE + 8):  # the rest wait in the listen backlog
            socks.append(connect(transport, address))
        time.sleep(0.5)
        before = cpu_seconds(proc.pid)
        time.sleep(2.0)
        spent = cpu_seconds(proc.pid) - before
        text = err.read_text()
        assert text.count("not accepting connections until a descriptor frees") == 1, text[-2000:]
        assert len(text) < 4096, f"{len(text)} bytes of stderr in 2.5 s"
        assert spent < 1.0, f"{spent:.2f} s of CPU in 2 s while out of descriptors: it spins"
        # Descriptors free as clients leave: the waiting connections are accepted and served.
        for sock in socks[: NOFILE - 8]:  # more than wait in the backlog
            sock.close()
        assert answered(transport, socks[-1], address), err.read_text()[-2000:]
        assert "accepting connections again" in err.read_text()
    finally:
        for sock in socks:
            sock.close()
        proc.kill()
        proc.wait()


# -- bounds, in-process ------------------------------------------------------------------------


def test_at_the_bound_a_new_http_connection_closes_the_oldest_idle_one() -> None:
    running = Running(max_connections=3)
    try:
        def client() -> Any:
            busy = running.raw()
            busy.sendall(b"GET /later HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            time.sleep(0.1)
            oldest, newer = running.raw(), running.raw()
            time.sleep(0.1)
            newest = running.raw()  # the bound: the oldest idle one makes room
            newest.sendall(b"GET /json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            head, _ = read_response(newest, bytearray())
            return busy, oldest, newer, head

        busy, oldest, newer, head = running.client(client)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert closed_by_server(oldest)
        newer.settimeout(0.3)
        with pytest.raises(socket.timeout):
            newer.recv(1)  # still open
        assert running.handler.later, "the busy one is still being answered"
        running.handler.later.pop().json(200, {"late": True})
        busy.settimeout(10)
        assert running.client(lambda: read_response(busy, bytearray()))[0].startswith(b"HTTP/1.1 200 ")
    finally:
        running.close()


def test_at_the_bound_with_every_connection_busy_the_new_one_is_closed() -> None:
    running = Running(max_connections=2)
    try:
        def client() -> Any:
            socks = [running.raw(), running.raw()]
            for sock in socks:
                sock.sendall(b"GET /later HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            time.sleep(0.2)
            return socks, closed_by_server(running.raw())

        socks, refused = running.client(client)
        assert refused and len(running.handler.later) == 2
    finally:
        running.close()


def test_a_crowded_server_cuts_idle_connections_sooner() -> None:
    running = Running(max_connections=4, idle_timeout=60.0, request_timeout=60.0)
    running.server.CROWDED_TIMEOUT = 0.3
    try:
        def client() -> Any:
            alone = running.raw()
            time.sleep(0.1)
            crowd = [running.raw() for _ in range(3)]  # the last ones arrive at 3/4 of the bound
            started = time.monotonic()
            head, _ = read_response(crowd[-1], bytearray())
            return alone, crowd, head, time.monotonic() - started

        alone, crowd, head, after = running.client(client)
        assert head.startswith(b"HTTP/1.1 408 ") and after < 10, "a silent connection of a crowded server waits 60 s"
        alone.settimeout(0.2)
        with pytest.raises(socket.timeout):
            alone.recv(1)  # it came while there was room: its 60 s hold
    finally:
        running.close()


def test_unix_at_the_bound_a_new_connection_closes_the_oldest_idle_one(tmp_path: Path) -> None:
    from agentproto.engine.runtime import Engine
    from agentproto.frontends.unix import UnixServer

    loop = Loop()
    runtime = Engine(loop)
    server = UnixServer(runtime, str(tmp_path / "ap.sock"), max_connections=2)
    server.start()
    done: dict[str, Any] = {}

    def client() -> None:
        def conn() -> socket.socket:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(str(tmp_path / "ap.sock"))
            assert b"hello" in sock.recv(65536)
            return sock

        busy = conn()
        busy.sendall(json.dumps({"id": 1, "cmd": "open", "agent": "mock", "dir": str(tmp_path)}).encode() + b"\n")
        assert b'"ok"' in busy.recv(65536)
        idle = conn()
        newest = conn()  # the bound: the idle one makes room, the one with a session stays
        done["idle_closed"] = idle.recv(1) == b""
        busy.settimeout(0.3)
        try:
            done["busy_data"] = busy.recv(1)
        except socket.timeout:
            done["busy_data"] = None
        done["socks"] = (busy, newest)

    import threading

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20

    def tick() -> None:
        if thread.is_alive() and time.monotonic() < deadline:
            loop.call_later(0.01, tick)

    tick()
    loop.run(until=lambda: not thread.is_alive() or time.monotonic() > deadline)
    try:
        assert done.get("idle_closed") is True, done
        assert done["busy_data"] is None, "the connection with a session was closed"
    finally:
        server.shutdown()
        server.close_listener()
        loop.close()


# -- logging ----------------------------------------------------------------------------------


def test_a_handler_bug_is_logged_without_the_path(capsys: pytest.CaptureFixture[str]) -> None:
    loop = Loop()
    handler = Handler()
    server = HttpServer(loop, handler)
    host, port = server.listen(bind_tcp(*tcp_address("127.0.0.1", 0)))
    running = Running.__new__(Running)
    running.loop, running.handler, running.server, running.host, running.port = loop, handler, server, host, port
    secret = "Zq8dXv3ecretToken0123456789"
    original = handler.handle

    def handle(request: Any, response: Any) -> None:
        if secret in request.path:
            raise RuntimeError("a handler bug")
        original(request, response)

    handler.handle = handle  # type: ignore[method-assign]
    try:
        def client() -> bytes:
            sock = running.raw()
            sock.sendall(b"GET /%s/mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (secret.encode(), port))
            return read_response(sock, bytearray())[0]

        assert running.client(client).startswith(b"HTTP/1.1 500 ")
        err = capsys.readouterr().err
        assert "a handler bug" in err and "internal error answering a GET request" in err
        assert secret not in err
    finally:
        running.close()
