"""`serve --transport http`: the ops framing over HTTP/1.1, through http.client, urllib and raw sockets.

Everything binds and connects to 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from ops_support import (
    Proc,
    check_ops_line,
    done_of,
    events_of,
    result_of,
    script,
    text_of,
)

from agentproto.core.http1 import RequestParser, authorized
from agentproto.frontends.ops_http import parse_listen

TOKEN = "s3cret-token-0123456789"


class Server:
    def __init__(self, *args: str) -> None:
        self.proc = Proc(["serve", "--transport", "http", *args])
        match = self.proc.banner(r"listening on http://([\d.]+):(\d+)/")
        self.host, self.port = match.group(1), int(match.group(2))

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def post(self, obj: Any, path: str = "/v1/agent", headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        status, head, data = self.request("POST", path, body, headers)
        assert status == 200, (status, data)
        assert head["Content-Type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in data.splitlines()]
        for line in lines:
            check_ops_line(line)
        return lines

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def server():
    s = Server("--port", "0", "--mock", script("turn"))
    yield s
    s.stop()


def split_requests(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out, current = [], []
    for line in lines:
        current.append(line)
        if line["kind"] == "done":
            out.append(current)
            current = []
    assert not current
    return out


def test_version_endpoint(server):
    status, head, body = server.request("GET", "/v1/agent/version")
    assert status == 200 and head["Content-Type"] == "application/json"
    version = json.loads(body)
    assert version == {"agentproto": version["agentproto"], "protocol": 1, "contract": "agentproto/1"}


def test_one_request_per_post_streams_ndjson_ending_with_done(server):
    lines = server.post({"op": "capabilities"})
    assert result_of(lines)["contract"] == "agentproto/1" and done_of(lines) == 0


def test_protocol_errors_and_an_empty_body_are_http_200_with_done_2(server):
    for body in (b"", b"   \n", b"{oops", b'{"op": "nope"}', b'{"op": "explain"}', b"[]"):
        lines = server.post(body)
        assert lines[0]["kind"] == "error" and done_of(lines) == 2, body
    assert server.post(b'{"op": "nope"}')[0]["message"].startswith("unknown op: nope (valid ops: discover, probe, ")
    assert server.post(b"{oops")[0]["message"].startswith("malformed JSON")


def test_other_paths_and_methods_are_404_not_405(server):
    for method, path in [
        ("GET", "/v1/agent"),
        ("POST", "/v1/agent/version"),
        ("DELETE", "/v1/agent"),
        ("PUT", "/v1/agent/batch"),
        ("GET", "/index.htm"),  # (GET / is the console page: test_console.py)
        ("GET", "/v2/agent/version"),
    ]:
        status, _head, body = server.request(method, path, b"{}" if method != "GET" else None)
        assert status == 404, (method, path, status)
        assert json.loads(body)["kind"] == "error"


def test_sessions_outlive_the_post_that_opened_them(server):
    opened = result_of(server.post({"op": "open", "agent": "mock", "dir": "/tmp"}))
    sid = opened["session"]["id"]
    # A fresh POST has no default session.
    lines = server.post({"op": "prompt", "text": "hi"})
    assert done_of(lines) != 0
    lines = server.post({"op": "prompt", "session": sid, "text": "run it"})
    assert result_of(lines)["waiting"]["Permission"]["id"] == "r1"
    lines = server.post({"op": "answer", "session": sid, "request": "r1", "answer": {"Permission": "AllowOnce"}})
    result = result_of(lines)
    assert result["stop"] == {"Completed": {"source": "Protocol"}} and text_of(lines) == "Done."
    assert result_of(server.post({"op": "close", "session": sid}))["ok"]
    lines = server.post({"op": "info", "session": sid})
    assert done_of(lines) == 1 and result_of(lines)["error"]["kind"] == "SessionClosed"


def test_batch_runs_in_order_sharing_the_default_session(server):
    body = b"\n".join(
        [
            b'{"op": "open", "agent": "mock", "dir": "/tmp"}',
            b"",
            b'{"op": "prompt", "text": "go"}',
            b"   ",
            b'{"op": "answer", "request": "r1", "answer": {"Permission": "DenyOnce"}}',
            b'{"op": "nope"}',
            b'{"op": "info"}',
            b'{"op": "close"}',
        ]
    )
    groups = split_requests(server.post(body, "/v1/agent/batch"))
    assert [result_of(g)["op"] if done_of(g) != 2 else "error" for g in groups] == [
        "open",
        "prompt",
        "answer",
        "error",
        "info",
        "close",
    ]
    assert [done_of(g) for g in groups] == [0, 0, 0, 2, 0, 0]
    sid = result_of(groups[0])["session"]["id"]
    assert result_of(groups[1])["session_id"] == sid and "waiting" in result_of(groups[1])
    assert "stop" in result_of(groups[2])
    assert result_of(groups[4])["session"]["id"] == sid


def test_an_empty_batch_is_an_empty_stream(server):
    assert server.post(b"", "/v1/agent/batch") == []


def test_generate_streams_through_http(server):
    lines = server.post({"op": "generate", "agent": "mock", "dir": "/tmp", "prompt": "x"})
    # turn.json asks for permission: generate declines it and the script goes on.
    assert result_of(lines) == {"kind": "result", "op": "generate", "ok": True, "text": "Let me check. Done."}
    assert "TurnStarted" in events_of(lines) and "RequestOpened" in events_of(lines)


def test_urllib_client_without_proxies(server):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://127.0.0.1:{server.port}/v1/agent"
    # urllib labels a body application/x-www-form-urlencoded unless told: a browser's
    # "simple" type, refused (tests/frontends/test_http_security.py).
    body = b'{"op": "explain", "code": "NotInstalled"}'
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=20) as response:
        assert response.headers["Content-Type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in response.read().splitlines()]
    assert result_of(lines)["code"] == "NotInstalled"
    with pytest.raises(urllib.error.HTTPError) as info:
        opener.open(f"http://127.0.0.1:{server.port}/nope", timeout=20)
    assert info.value.code == 404


# -- auth -----------------------------------------------------------------------------------


@pytest.fixture
def authed():
    s = Server("--listen", "127.0.0.1:0", "--auth-token", TOKEN)
    yield s
    s.stop()


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong", TOKEN, f"Basic {TOKEN}", f"Token {TOKEN}", "Bearer", f"Bearer {TOKEN}x", ""],
)
def test_auth_refuses_everything_but_the_bearer_token(authed, header):
    headers = {} if header is None else {"Authorization": header}
    for method, path, body in [
        ("GET", "/v1/agent/version", None),
        ("POST", "/v1/agent", b'{"op": "capabilities"}'),
        ("POST", "/v1/agent/batch", b'{"op": "capabilities"}\n'),
        ("GET", "/elsewhere", None),
    ]:
        status, head, data = authed.request(method, path, body, headers)
        assert status == 401, (header, path)
        assert head["WWW-Authenticate"] == "Bearer"
        assert json.loads(data) == {"kind": "error", "message": "unauthorized"}


@pytest.mark.parametrize("scheme", ["Bearer", "BEARER", "bearer", "bEaReR"])
def test_auth_scheme_is_case_insensitive(authed, scheme):
    headers = {"Authorization": f"{scheme} {TOKEN}"}
    status, _head, _data = authed.request("GET", "/v1/agent/version", None, headers)
    assert status == 200
    assert result_of(authed.post({"op": "capabilities"}, headers=headers))["ok"]
    assert result_of(authed.post(b'{"op": "capabilities"}\n', "/v1/agent/batch", headers=headers))["ok"]


def test_authorized_helper():
    assert authorized("Bearer abc", "abc") and authorized("bearer   abc ", "abc")
    assert not authorized("Bearer abd", "abc") and not authorized("abc", "abc") and not authorized(None, "abc")


# -- listen, limits, slow clients -----------------------------------------------------------


def test_listen_wins_over_port_and_port_0_shows_the_bound_port():
    s = Server("--port", "1", "--listen", "127.0.0.1:0")
    try:
        assert s.port not in (0, 1)
        status, _head, _data = s.request("GET", "/v1/agent/version")
        assert status == 200
    finally:
        s.stop()


def test_parse_listen():
    assert parse_listen("127.0.0.1:80") == ("127.0.0.1", 80)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("127.0.0.1", ":80", "host:x", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_a_slow_client_does_not_stall_others(server):
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        slow.sendall(b"POST /v1/agent HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 100\r\n\r\n{\"op\":" % server.port)
        start = time.monotonic()
        for _ in range(3):
            assert result_of(server.post({"op": "capabilities"}))["ok"]
        assert time.monotonic() - start < 10
    finally:
        slow.close()


def raw_exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        sock.close()


def test_raw_socket_chunked_request_and_chunked_response(server):
    body = b'{"op": "explain", "code": "SessionClosed"}'
    request = (
        b"POST /v1/agent HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" % server.port
        + b"%x\r\n%s\r\n" % (10, body[:10])
        + b"%x\r\n%s\r\n" % (len(body) - 10, body[10:])
        + b"0\r\n\r\n"
    )
    response = raw_exchange(server.port, request)
    head, _, rest = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"Transfer-Encoding: chunked" in head and b"Connection: close" in head
    decoded = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        decoded, rest = decoded + rest[:size], rest[size + 2 :]
    lines = [json.loads(line) for line in decoded.splitlines()]
    assert result_of(lines)["code"] == "SessionClosed" and done_of(lines) == 0


def test_bad_requests_get_4xx(server):
    assert raw_exchange(server.port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    too_big = b"POST /v1/agent HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (64 * 1024 * 1024)
    assert raw_exchange(server.port, too_big).startswith(b"HTTP/1.1 413 ")
    huge_head = b"GET /v1/agent/version HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 70000 + b"\r\n\r\n"
    assert raw_exchange(server.port, huge_head).startswith(b"HTTP/1.1 431 ")


def test_request_parser_byte_by_byte():
    raw = b"POST /v1/agent?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello"
    parser = RequestParser()
    results = [parser.feed(raw[i : i + 1]) for i in range(len(raw))]
    request = results[-1]
    assert all(r is None for r in results[:-1]) and request is not None
    assert (request.method, request.path, request.body) == ("POST", "/v1/agent", b"hello")
    assert request.headers["x-a"] == "1, 2"


def test_record_pairs_for_post_and_each_batch_line(tmp_path):
    record = tmp_path / "http.ndjson"
    s = Server("--port", "0", "--record", str(record))
    try:
        s.post(b'{"op": "capabilities"}')
        s.post(b'{"op": "explain", "code": "BadFrame"}\n\n{"op": "nope"}\n', "/v1/agent/batch")
    finally:
        s.stop()
    records = [json.loads(line) for line in record.read_text().splitlines()]
    assert records[0]["frontend"] == "http"  # the run's header, then each POST's marker and its pairs
    assert [r["path"] for r in records if r.get("dir") == "post"] == ["/v1/agent", "/v1/agent/batch"]
    pairs = [r for r in records if "request" in r]
    assert [p["request"] for p in pairs] == ['{"op": "capabilities"}', '{"op": "explain", "code": "BadFrame"}', '{"op": "nope"}']
    assert all(p["response"].endswith('"exit_code":0}\n') for p in pairs[:2])
    assert pairs[2]["response"].endswith('{"kind":"done","exit_code":2}\n')


def test_sigterm_and_stdin_eof_end_the_server_cleanly():
    s = Server("--port", "0")
    s.proc.proc.send_signal(15)
    assert s.proc.wait(15) == 0
    s.stop()
    s = Server("--port", "0")
    result_of(s.post({"op": "open", "agent": "mock", "dir": "/tmp"}))
    s.proc.close_stdin()
    assert s.proc.wait(15) == 0
    s.stop()


def test_usage_errors():
    p = Proc(["serve", "--transport", "http"])
    assert p.wait(15) == 2
    p.banner("--listen")
    p.stop()
    p = Proc(["serve", "--transport", "http", "--listen", "nonsense"])
    assert p.wait(15) == 2
    p.stop()
    p = Proc(["serve", "--transport", "jsonrpc", "--auth-token", "x"])
    assert p.wait(15) == 2
    p.stop()


def test_one_post_cancels_the_turn_another_post_is_streaming(tmp_path):
    import threading

    from ops_support import SLOW_TURN, write_script

    s = Server("--port", "0", "--mock", write_script(tmp_path, "slow", [SLOW_TURN]))
    try:
        sid = result_of(s.post({"op": "open", "agent": "mock", "dir": "/tmp"}))["session"]["id"]
        streamed: list[Any] = []
        worker = threading.Thread(target=lambda: streamed.extend(s.post({"op": "prompt", "session": sid, "text": "slow"})))
        worker.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            info = result_of(s.post({"op": "info", "session": sid}))["session"]
            if info["status"] == "Working":
                break
            time.sleep(0.05)
        started = time.monotonic()
        assert result_of(s.post({"op": "cancel", "session": sid}))["ok"]
        worker.join(15)
        assert not worker.is_alive() and time.monotonic() - started < 10
        assert result_of(streamed)["stop"] == "Cancelled" and text_of(streamed) == "thinking"
    finally:
        s.stop()


def test_keep_alive_two_posts_on_one_connection_share_the_servers_sessions(server):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=20)
    try:
        conn.request("POST", "/v1/agent", body=json.dumps({"op": "open", "agent": "mock", "dir": "/tmp"}))
        first = conn.getresponse()
        opened = [json.loads(line) for line in first.read().splitlines()]
        sock = conn.sock
        assert first.getheader("Connection") is None and sock is not None
        sid = result_of(opened)["session"]["id"]
        conn.request("POST", "/v1/agent", body=json.dumps({"op": "info", "session": sid}))
        second = conn.getresponse()
        info = [json.loads(line) for line in second.read().splitlines()]
        assert conn.sock is sock  # the same connection: http.client did not reconnect
        assert result_of(info)["session"]["id"] == sid
        conn.request("GET", "/v1/agent/version", headers={"Connection": "close"})
        last = conn.getresponse()
        assert last.getheader("Connection") == "close" and json.loads(last.read())["contract"] == "agentproto/1"
    finally:
        conn.close()


def test_request_parser_leaves_a_pipelined_request_for_the_next():
    first = b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    second = b"GET /b HTTP/1.1\r\n\r\n"
    parser = RequestParser()
    for i in range(len(first) - 1):
        assert parser.feed(first[i : i + 1]) is None
    assert parser.leftover() == b""  # not done yet
    request = parser.feed(first[-1:] + second[:5])
    assert request is not None and request.body == b"abc"
    assert parser.leftover() == second[:5]
    following = RequestParser()
    assert following.feed(parser.leftover()) is None
    assert following.feed(second[5:]).path == "/b"



@pytest.mark.parametrize("op", ["prompt", "generate"])
def test_sigterm_drains_a_streaming_turn_to_its_done(tmp_path, op):
    """SIGTERM (a pod stopped) ends a turn an HTTP client is streaming as a close does: the
    turn's TurnEnded and StatusChanged Idle, then the request's result and done, as a whole
    chunked answer, and the server exits 0 (docs/many-machines.md). It used to cut the
    connection mid-stream: no TurnEnded, no done, the answer's last chunk never sent."""
    from ops_support import SLOW_TURN, write_script

    s = Server("--port", "0", "--mock", write_script(tmp_path, "slow", [SLOW_TURN]))
    try:
        if op == "prompt":
            sid = result_of(s.post({"op": "open", "agent": "mock", "dir": "/tmp"}))["session"]["id"]
            request: dict[str, Any] = {"op": "prompt", "session": sid, "text": "slow"}
        else:
            request = {"op": "generate", "agent": "mock", "dir": "/tmp", "prompt": "slow"}
        conn = http.client.HTTPConnection(s.host, s.port, timeout=20)
        conn.request("POST", "/v1/agent", body=json.dumps(request).encode(), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        streamed = []
        while text_of(streamed) != "thinking":
            streamed.append(json.loads(response.readline()))  # until the turn runs (it then sleeps 20 s)
        s.proc.proc.send_signal(15)
        streamed += [json.loads(line) for line in response.read().splitlines()]  # IncompleteRead if cut short
        conn.close()
        for line in streamed:
            check_ops_line(line)
        assert [line["kind"] for line in streamed][-2:] == ["result", "done"], streamed[-2:]
        assert events_of(streamed)[-2:] == ["TurnEnded", "StatusChanged"], events_of(streamed)
        assert result_of(streamed)["stop" if op == "prompt" else "ok"] in ("Cancelled", False), result_of(streamed)
        assert s.proc.wait(15) == 0
    finally:
        s.stop()
