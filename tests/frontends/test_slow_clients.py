"""Slow clients at the connection bound (issue 19's red-team pass): clients that never read
their answers cannot keep the HTTP server's slots (the HTTP transport's and the listener's)
for ever, nor lock the other clients out. In-process, on a loop of the test's, with a small
bound; the client side runs in a thread."""

from __future__ import annotations

import socket
import time
from typing import Any

from tests.loopio.test_http_server import Handler, Running, read_response

from agentproto.core.http1 import Request
from agentproto.loopio.httpserver import Response

#: A chunk of a stream that never ends (``/flood``).
PIECE = b"x" * 65536


class Flooding(Handler):
    """The test server's routes, and ``/flood``: an answer that streams for as long as its
    client reads (a prompt streaming a long turn, a batch), and never ends."""

    def __init__(self) -> None:
        super().__init__()
        self.floods: list[Response] = []

    def handle(self, request: Request, response: Response) -> None:
        if request.path != "/flood":
            super().handle(request, response)
            return
        response.stream(200, "application/octet-stream")
        self.floods.append(response)
        self.more(response)

    def more(self, response: Response) -> None:
        # Flow control as the batch does it: more once what was written has drained.
        if response.gone:
            return
        for _ in range(16):
            response.write(PIECE)
        output = response.conn.output
        output.on_drained = lambda: response.conn.loop.call_soon(lambda: self.more(response))


def flooding(**options: Any) -> Running:
    running = Running(**options)
    running.handler = Flooding()
    running.server.handler = running.handler
    return running


def pipeline_unread(running: Running, seconds: float = 3.0) -> socket.socket:
    """A connection that pipelines requests and never reads their answers, until the server
    stops taking them (its answers fill the socket buffers)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((running.host, running.port))
    sock.setblocking(False)
    blob = b"GET /json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port * 2000
    refused_since: float | None = None
    while refused_since is None or time.monotonic() - refused_since < seconds:
        try:
            sock.send(blob)
            refused_since = None
        except BlockingIOError:
            refused_since = refused_since or time.monotonic()
            time.sleep(0.05)
    return sock


def test_clients_that_never_read_their_answers_cannot_fill_the_bound() -> None:
    running = Running(max_connections=2)  # idle_timeout 60 s: no timeout helps here
    try:
        def client() -> Any:
            stuck = [pipeline_unread(running) for _ in range(2)]
            newest = running.raw()
            newest.sendall(b"GET /json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            return stuck, read_response(newest, bytearray())[0]

        stuck, head = running.client(client, timeout=60)
        # Both were whole answers waiting for their readers: the oldest made room.
        assert head.startswith(b"HTTP/1.1 200 ")
        for sock in stuck:
            sock.close()
    finally:
        running.close()


def test_an_answer_its_client_does_not_read_is_cut_after_the_idle_timeout() -> None:
    running = flooding(idle_timeout=1.0, request_timeout=1.0)
    try:
        def client() -> Any:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((running.host, running.port))
            sock.sendall(b"GET /flood HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            return sock

        sock = running.client(client)
        running.run_until(lambda: bool(running.handler.floods))
        # It never reads: nothing of the answer can be written, and the connection goes.
        deadline = time.monotonic() + 30
        running.run_until(lambda: not running.server.connections or time.monotonic() > deadline)
        assert not running.server.connections, "a client that never reads keeps its slot"
        assert running.handler.floods[0].gone
        sock.close()
    finally:
        running.close()


def test_a_client_reading_a_long_answer_is_not_cut() -> None:
    running = flooding(idle_timeout=1.0, request_timeout=1.0)
    try:
        def client() -> int:
            sock = running.raw()
            sock.sendall(b"GET /flood HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            received, until = 0, time.monotonic() + 4.0  # longer than the idle timeout
            while time.monotonic() < until:
                data = sock.recv(65536)
                assert data, f"cut off after {received} bytes while reading"
                received += len(data)
            sock.close()
            return received

        assert running.client(client, timeout=30) > 4 * len(PIECE)
    finally:
        running.close()
