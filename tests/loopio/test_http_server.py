"""httpserver.py, the generic HTTP/1.1 layer, in-process with a handler of the test's own:
keep-alive (two requests on one http.client connection), Connection: close, HTTP/1.0,
pipelining, NDJSON streams, errors closing, idle and request timeouts, the connection
bound, and a close() that leaves the loop running. The ops frontend on it is tested in
test_http.py; the parser byte by byte in test_http_parser.py."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any, Callable

import pytest

from agentproto.core.http1 import Request
from agentproto.loopio.httpserver import HttpServer, Refusal, Response
from agentproto.loopio.sockets import bind_tcp, tcp_address
from agentproto.loopio.loop import Loop


class Handler:
    """``/json`` answers a JSON body, ``/stream`` three NDJSON lines, ``/later`` waits for
    the test to answer it, ``/boom`` raises; a ``X-Deny`` header is refused."""

    def __init__(self) -> None:
        self.later: list[Response] = []
        self.seen: list[tuple[str, str, bytes]] = []

    def refuse(self, request: Request) -> Refusal | None:
        if "x-deny" in request.headers:
            return 401, {"error": "denied"}, {"WWW-Authenticate": "Bearer"}
        return None

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message, "status": status}

    def handle(self, request: Request, response: Response) -> None:
        self.seen.append((request.method, request.path, request.body))
        if request.path == "/json":
            response.json(200, {"path": request.path, "body": request.body.decode()})
        elif request.path == "/stream":
            response.stream(200, "application/x-ndjson", close="close-stream" in request.target)
            for i in range(3):
                response.write(b'{"n":%d}\n' % i)
            response.end()
        elif request.path == "/later":
            self.later.append(response)
        elif request.path == "/boom":
            raise RuntimeError("a handler bug")
        else:
            response.json(404, {"error": "no route"})


class Running:
    """A server on a loop in this thread; ``client(fn)`` runs fn in a thread meanwhile."""

    def __init__(self, **options: Any) -> None:
        self.loop = Loop()
        self.handler = Handler()
        self.server = HttpServer(self.loop, self.handler, **options)
        self.host, self.port = self.server.listen(bind_tcp(*tcp_address("127.0.0.1", 0)))

    def client(self, fn: Callable[[], Any], timeout: float = 20.0) -> Any:
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["value"] = fn()
            except BaseException as exc:  # handed to the test's thread
                result["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        self.run_until(lambda: not thread.is_alive() or time.monotonic() > deadline)
        thread.join(1)
        assert not thread.is_alive(), "the client did not finish"
        if "error" in result:
            raise result["error"]
        return result.get("value")

    def run_until(self, done: Callable[[], bool]) -> None:
        """Run the loop until ``done()`` (a ticker wakes it to look, as nothing else may)."""

        def tick() -> None:
            if not done():
                self.loop.call_later(0.01, tick)

        tick()
        self.loop.run(until=done)

    def http(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    def raw(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=10)

    def close(self) -> None:
        self.server.close()
        self.loop.close()


@pytest.fixture
def running():
    r = Running()
    yield r
    r.close()


def read_response(sock: socket.socket, buffered: bytearray) -> tuple[bytes, bytes]:
    """One response (head, body) from a raw socket, by Content-Length or chunks."""
    while b"\r\n\r\n" not in buffered:
        piece = sock.recv(65536)
        assert piece, bytes(buffered)
        buffered += piece
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    del buffered[:]
    buffered += rest
    fields = dict(line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:])
    body = b""
    if "Content-Length" in fields:
        while len(buffered) < int(fields["Content-Length"]):
            buffered += sock.recv(65536)
        body = bytes(buffered[: int(fields["Content-Length"])])
        del buffered[: int(fields["Content-Length"])]
        return head, body
    while True:
        while b"\r\n" not in buffered:
            buffered += sock.recv(65536)
        size_line, _, rest = bytes(buffered).partition(b"\r\n")
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += sock.recv(65536)
        del buffered[:]
        buffered += rest[size + 2 :]
        if size == 0:
            return head, body
        body += rest[:size]


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


# -- keep-alive ----------------------------------------------------------------------------------


def test_two_requests_on_one_http_client_connection(running):
    def client() -> Any:
        conn = running.http()
        conn.request("POST", "/json", body=b"one", headers={"Content-Type": "application/json"})
        first = conn.getresponse()
        first_body = json.loads(first.read())
        sock = conn.sock
        conn.request("GET", "/stream")
        second = conn.getresponse()
        lines = [json.loads(line) for line in second.read().splitlines()]
        same = conn.sock is sock and sock is not None  # http.client reconnects when the server closes
        conn.close()
        return first.status, first.getheader("Connection"), first_body, second.getheader("Transfer-Encoding"), lines, same

    status, connection, body, encoding, lines, same = running.client(client)
    assert (status, connection, body) == (200, None, {"path": "/json", "body": "one"})
    assert encoding == "chunked" and lines == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert same
    assert [seen[1] for seen in running.handler.seen] == ["/json", "/stream"]


def test_connection_close_is_honoured(running):
    def client() -> Any:
        sock = running.raw()
        sock.sendall(b"GET /json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % running.port)
        head, body = read_response(sock, bytearray())
        return head, body, closed_by_server(sock)

    head, body, closed = running.client(client)
    assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nConnection: close" in head and closed
    assert json.loads(body)["path"] == "/json"


def test_http_10_closes_unless_it_asks_to_keep_alive(running):
    def client() -> Any:
        plain = running.raw()
        plain.sendall(b"GET /json HTTP/1.0\r\n\r\n")
        plain_head, _ = read_response(plain, bytearray())
        kept = running.raw()
        buffered = bytearray()
        kept.sendall(b"GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        kept_head, _ = read_response(kept, buffered)
        kept.sendall(b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        _, again = read_response(kept, buffered)
        return plain_head, closed_by_server(plain), kept_head, again

    plain_head, plain_closed, kept_head, again = running.client(client)
    assert b"Connection: close" in plain_head and plain_closed
    assert b"Connection: keep-alive" in kept_head and again.count(b"\n") == 3


def test_pipelined_requests_are_answered_in_order(running):
    def client() -> Any:
        sock = running.raw()
        host = b"Host: 127.0.0.1:%d\r\n" % running.port
        sock.sendall(
            b"POST /json HTTP/1.1\r\n" + host + b"Content-Length: 1\r\n\r\nA"
            + b"GET /stream HTTP/1.1\r\n" + host + b"\r\n"
            + b"POST /json HTTP/1.1\r\n" + host + b"Connection: close\r\nContent-Length: 1\r\n\r\nB"
        )
        buffered = bytearray()
        answers = [read_response(sock, buffered) for _ in range(3)]
        return answers, closed_by_server(sock)

    answers, closed = running.client(client)
    assert json.loads(answers[0][1])["body"] == "A"
    assert answers[1][1].count(b"\n") == 3
    assert json.loads(answers[2][1])["body"] == "B" and closed


def test_a_streaming_answer_may_close_the_connection(running):
    def client() -> Any:
        sock = running.raw()
        sock.sendall(b"GET /stream?close-stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
        head, body = read_response(sock, bytearray())
        return head, body, closed_by_server(sock)

    head, body, closed = running.client(client)
    assert b"Connection: close" in head and body.count(b"\n") == 3 and closed


def test_an_answer_given_later_keeps_the_connection(running):
    def client() -> Any:
        conn = running.http()
        conn.request("GET", "/later")
        first = conn.getresponse().read()
        conn.request("GET", "/json")
        second = conn.getresponse().read()
        conn.close()
        return first, second

    thread_result: dict[str, Any] = {}

    def answer_when_asked() -> None:
        if running.handler.later:
            response = running.handler.later.pop()
            response.stream(200, "application/x-ndjson")
            running.loop.call_later(0.05, lambda: (response.write(b'{"late":true}\n'), response.end()))
        else:
            running.loop.call_later(0.01, answer_when_asked)

    running.loop.call_soon(answer_when_asked)
    thread_result["value"] = running.client(client)
    first, second = thread_result["value"]
    assert json.loads(first) == {"late": True} and json.loads(second)["path"] == "/json"


# -- errors and limits ---------------------------------------------------------------------------


def test_errors_refusals_and_a_handler_bug_close_the_connection(running):
    def exchange(data: bytes) -> tuple[bytes, bytes, bool]:
        sock = running.raw()
        sock.sendall(data)
        head, body = read_response(sock, bytearray())
        return head, body, closed_by_server(sock)

    def client() -> Any:
        host = b"Host: 127.0.0.1:%d\r\n" % running.port
        return [
            exchange(b"garbage\r\n\r\n"),
            exchange(b"GET /json HTTP/1.1\r\n" + host + b"X-Deny: 1\r\n\r\n"),
            exchange(b"GET /json HTTP/1.1\r\nHost: evil.example\r\n\r\n"),
            exchange(b"GET /boom HTTP/1.1\r\n" + host + b"\r\n"),
        ]

    bad, denied, rebound, boom = running.client(client)
    assert bad[0].startswith(b"HTTP/1.1 400 ") and json.loads(bad[1])["status"] == 400 and bad[2]
    assert denied[0].startswith(b"HTTP/1.1 401 ") and b"WWW-Authenticate: Bearer" in denied[0] and denied[2]
    assert json.loads(denied[1]) == {"error": "denied"}
    assert rebound[0].startswith(b"HTTP/1.1 421 ") and rebound[2]
    assert boom[0].startswith(b"HTTP/1.1 500 ") and boom[2]
    assert [seen[1] for seen in running.handler.seen] == ["/boom"]  # the refused never ran


def test_an_idle_kept_connection_is_closed_and_a_slow_request_gets_408():
    running = Running(idle_timeout=0.3, request_timeout=0.6)
    try:
        def client() -> Any:
            idle = running.raw()
            idle.sendall(b"GET /json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            read_response(idle, bytearray())
            idle_closed = closed_by_server(idle)  # waits out the idle timeout
            slow = running.raw()
            slow.sendall(b"GET /json HTTP/1.1\r\n")
            head, _ = read_response(slow, bytearray())
            return idle_closed, head

        idle_closed, head = running.client(client)
        assert idle_closed and head.startswith(b"HTTP/1.1 408 ")
    finally:
        running.close()


def test_connections_are_bounded_and_close_leaves_the_loop_running():
    running = Running(max_connections=2)
    try:
        def client() -> Any:
            first, second = running.raw(), running.raw()
            first.sendall(b"GET /later HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % running.port)
            time.sleep(0.2)
            third = running.raw()  # at the bound: the idle one (second) makes room
            return first, third, closed_by_server(second)

        first, second, idle_closed = running.client(client)
        assert idle_closed and len(running.server.connections) == 2
        response = running.handler.later.pop()
        fired: list[bool] = []
        running.loop.call_soon(running.server.close)  # from inside the running loop
        running.loop.call_later(0.05, lambda: fired.append(True))
        running.run_until(lambda: bool(fired))
        assert fired, "close() stopped the loop"  # the loop goes on without the server
        assert not running.server.connections and response.gone
        response.json(200, {"too": "late"})  # dropped, no error
        assert closed_by_server(first) and closed_by_server(second)
        with pytest.raises(OSError):
            running.raw()
    finally:
        running.loop.close()
