"""An HTTP batch is flow-controlled (issue 13: a 4 MiB batch sent by a client that does not
read grew the server by 155 MB): its next request runs only while the connection's output
holds at most ``http_ops.BATCH_HIGH_WATER`` chunks, so its answers are produced as fast as
the client reads them, and none is lost.

In-process (the real OpsHttp handler on the real HttpServer and Loop, a real loopback
socket), so the output can be looked at as each request of the batch is answered: the
recorder the handler is given sees every answer, and notes the connection's backlog then.
The client reads slowly from a thread; the bound holds however fast either side runs.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from agentproto.frontends.ops_http import BATCH_HIGH_WATER, OpsHttp
from agentproto.loopio.httpserver import HttpServer
from agentproto.loopio.sockets import bind_tcp, tcp_address
from agentproto.loopio.loop import Loop
from agentproto.engine.runtime import Engine

REQUESTS = 20_000


class Backlog:
    """A record.RecordSink that keeps, per answered request, the server's output backlog."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.pairs = 0
        self.most = 0

    def pair(self, request: bytes | str, response: bytes | str, dropped: int = 0) -> None:
        self.pairs += 1
        backlog = max((len(conn.output) for conn in self.server.connections), default=0)
        self.most = max(self.most, backlog)

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None:
        pass

    def note(self, direction: str, **fields: Any) -> None:
        pass


def slow_client(port: int, body: bytes, got: dict[str, Any]) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    head = (
        f"POST /v1/agent/batch HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-ndjson\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    received = bytearray()
    sock.settimeout(60)
    while True:
        data = sock.recv(16384)
        if not data:
            break
        received += data
        time.sleep(0.001)  # a slow reader: at most ~16 MB/s, far below the server's pace
    sock.close()
    got["body"] = bytes(received)


def test_a_batch_runs_only_as_fast_as_its_client_reads() -> None:
    loop = Loop()
    try:
        runtime = Engine(loop)
        server = HttpServer(loop, OpsHttp(runtime, None, None))
        backlog = Backlog(server)
        server.handler.recorder = backlog  # type: ignore[attr-defined]
        _, port = server.listen(bind_tcp(*tcp_address("127.0.0.1", 0)))
        body = b"".join(b'{"op":"capabilities"}\n' for _ in range(REQUESTS))
        got: dict[str, Any] = {}
        client = threading.Thread(target=slow_client, args=(port, body, got), daemon=True)
        client.start()
        deadline = time.monotonic() + 120

        def tick() -> None:  # wakes the loop up to see the client thread end
            if client.is_alive() and time.monotonic() < deadline:
                loop.call_later(0.05, tick)

        tick()
        loop.run(until=lambda: not client.is_alive() or time.monotonic() > deadline)
        client.join(1)
        assert "body" in got, "the client did not finish"
        assert backlog.pairs == REQUESTS
        # Each request adds its two lines (its result, its done); the batch stops above the mark.
        assert backlog.most <= BATCH_HIGH_WATER + 4, backlog.most
        # Nothing lost, in order: every request's done is there.
        assert got["body"].count(b'"kind":"done"') == REQUESTS
        server.close()
    finally:
        loop.close()
