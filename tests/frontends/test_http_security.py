"""`serve --transport http` against web pages: Host (DNS rebinding), Origin, the browser
"simple" content types, tokens, and the order of the checks. Real servers, real clients
(http.client, urllib, raw sockets), 127.0.0.1 and ::1 only.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import stat
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ops_support import Proc, closing, done_of, result_of

from agentproto.core.http1 import (
    authorized,
    check_content_type,
    check_host,
    check_origin,
    check_request,
    check_token,
    is_loopback,
)

TOKEN = "t0ken-for-the-http-tests"  # 24 characters


class Server:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = Proc(["serve", "--transport", "http", *args], env=env)
        match = self.proc.banner(r"listening on http://(\[[0-9a-f:]+\]|[\d.]+):(\d+)/")
        self.host, self.port = match.group(1).strip("[]"), int(match.group(2))

    def exchange(self, data: bytes, timeout: float = 10) -> tuple[int, bytes, bytes]:
        """Send raw bytes, read to EOF: (status, head, body)."""
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.sendall(closing(data))
            chunks = []
            while True:
                piece = sock.recv(65536)
                if not piece:
                    break
                chunks.append(piece)
        finally:
            sock.close()
        response = b"".join(chunks)
        head, _, body = response.partition(b"\r\n\r\n")
        match = re.match(rb"HTTP/1\.1 (\d{3}) ", head)
        assert match, response[:200]
        return int(match.group(1)), head, body

    def raw(self, method: str, headers: dict[str, str], body: bytes = b"", version: str = "HTTP/1.1", path: str = "") -> tuple[int, Any]:
        """One request with exactly these headers (plus Content-Length for a body)."""
        path = path or ("/v1/agent/version" if method == "GET" else "/v1/agent")
        lines = [f"{method} {path} {version}"] + [f"{k}: {v}" for k, v in headers.items()]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        status, _head, data = self.exchange(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        if data.startswith(b"{"):
            return status, json.loads(data)
        return status, data

    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def capabilities(self, headers: dict[str, str]) -> tuple[int, Any]:
        return self.raw("POST", {"Host": self.authority(), **headers}, b'{"op": "capabilities"}')

    def children(self) -> list[str]:
        pid = self.proc.proc.pid
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def server():
    s = Server("--port", "0")
    yield s
    s.stop()


# -- the attack, end to end ---------------------------------------------------------------


def marker_agent(tmp_path: Path) -> tuple[str, Path]:
    """An "ACP agent" that leaves a file behind if it is ever started."""
    marker = tmp_path / "started"
    agent = tmp_path / "agent.sh"
    agent.write_text(f"#!/bin/sh\ntouch {marker}\nexit 3\n")
    agent.chmod(stat.S_IRWXU)
    return str(agent), marker


def attack(server: Server, path: str, **overrides: str) -> tuple[int, Any]:
    """What a web page can send without a CORS preflight: a "simple" POST, from its own
    origin, to a name that resolves (after rebinding) to 127.0.0.1."""
    headers = {"Host": f"attacker.example:{server.port}", "Origin": "http://attacker.example", "Content-Type": "text/plain;charset=UTF-8"}
    headers.update(overrides)
    body = json.dumps({"op": "open", "agent": {"acp": {"name": "x", "path": path}}, "dir": "/tmp"}).encode()
    return server.raw("POST", {k: v for k, v in headers.items() if v}, body)


def test_a_web_page_cannot_open_bin_sh(server, tmp_path):
    status, body = attack(server, "/bin/sh")
    assert status == 421 and body["kind"] == "error"
    assert server.children() == []
    # Every layer on its own stops it, and nothing is started.
    agent, marker = marker_agent(tmp_path)
    ours = server.authority()
    for overrides, expected in [
        ({}, 421),  # DNS rebinding: the attacker's name in Host
        ({"Host": ours}, 403),  # a plain cross-site POST: the page's Origin
        ({"Host": ours, "Origin": ""}, 415),  # an old browser without Origin: text/plain
        ({"Origin": "", "Content-Type": "application/json"}, 421),
        ({"Host": ours, "Content-Type": "application/json"}, 403),
        ({"Host": ours, "Content-Type": "application/x-www-form-urlencoded", "Origin": ""}, 415),
        ({"Host": ours, "Content-Type": "multipart/form-data; boundary=x", "Origin": ""}, 415),
    ]:
        status, body = attack(server, agent, **overrides)
        assert status == expected, (overrides, status, body)
    assert not marker.exists() and server.children() == []
    # The same request from a program (our Host, no Origin, JSON) does run: the agent starts.
    status, body = attack(server, agent, Host=ours, Origin="", **{"Content-Type": "application/json"})
    assert status == 200 and result_of(body_lines(body))["error"]["kind"] == "ProcessExited"
    assert marker.exists()


def body_lines(body: Any) -> list[dict[str, Any]]:
    """The NDJSON lines of a chunked 200 (raw bytes from Server.raw)."""
    decoded, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        decoded, rest = decoded + rest[:size], rest[size + 2 :]
    return [json.loads(line) for line in decoded.splitlines()]


# -- Host -----------------------------------------------------------------------------------


def test_host_must_name_this_loopback_listener(server):
    p = server.port
    for host in [f"127.0.0.1:{p}", f"localhost:{p}", f"LocalHost:{p}"]:
        status, _ = server.raw("GET", {"Host": host})
        assert status == 200, host
        status, body = server.capabilities({"Host": host})
        assert status == 200 and done_of(body_lines(body)) == 0, host
    for host in [
        f"attacker.example:{p}",
        "127.0.0.1",
        f"127.0.0.1:{p + 1}",
        f"localhost:{p}.",
        f"localhost.:{p}",
        f"[::1]:{p}",
        f"127.0.0.2:{p}",
        f"127.0.0.1:{p}@attacker.example",
        "",
    ]:
        for method in ("GET", "POST"):
            status, body = server.raw(method, {"Host": host}, b'{"op": "capabilities"}' if method == "POST" else b"")
            assert status == 421 and body["kind"] == "error" and "Host" in body["message"], (host, method)
    # Two Host fields, a missing Host on HTTP/1.1: refused. HTTP/1.0 may leave it out.
    status, _, _ = server.exchange(b"GET /v1/agent/version HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nHost: 127.0.0.1:%d\r\n\r\n" % (p, p))
    assert status == 421
    status, body = server.raw("GET", {})
    assert status == 421 and body == {"kind": "error", "message": "missing Host header"}
    status, _ = server.raw("GET", {}, version="HTTP/1.0")
    assert status == 200


def test_host_on_an_ipv6_loopback_bind():
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError as exc:  # pragma: no cover - a machine without IPv6 loopback
        pytest.fail(f"::1 is not available here: {exc}")
    s = Server("--listen", "[::1]:0")
    try:
        assert s.host == "::1"
        for host, expected in [(f"[::1]:{s.port}", 200), (f"localhost:{s.port}", 200), (f"127.0.0.1:{s.port}", 421), (f"[::1]:{s.port + 1}", 421)]:
            assert s.raw("GET", {"Host": host})[0] == expected, host
        assert s.raw("POST", {"Host": f"[::1]:{s.port}", "Origin": f"http://[::1]:{s.port}"}, b'{"op": "capabilities"}')[0] == 200
    finally:
        s.stop()


def test_http_client_and_urllib_pass_every_check(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.request("POST", "/v1/agent", body=b'{"op": "capabilities"}')  # no Content-Type at all
        response = conn.getresponse()
        assert response.status == 200 and response.read().endswith(b'"exit_code":0}\n')
    finally:
        conn.close()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://localhost:{server.port}/v1/agent"
    with opener.open(urllib.request.Request(url, data=b'{"op": "capabilities"}', headers={"Content-Type": "application/json"}), timeout=20) as response:
        assert response.status == 200
    # urllib's own default for a body is a browser "simple" type: refused, naming the fix.
    with pytest.raises(urllib.error.HTTPError) as info:
        opener.open(urllib.request.Request(url, data=b'{"op": "capabilities"}'), timeout=20)
    assert info.value.code == 415 and "application/json" in json.loads(info.value.read())["message"]


# -- Origin -----------------------------------------------------------------------------------


def test_origin_absent_or_a_loopback_origin_of_this_server(server):
    p = server.port
    for origin in [f"http://127.0.0.1:{p}", f"http://localhost:{p}", f"http://[::1]:{p}", f"HTTP://LOCALHOST:{p}"]:
        assert server.capabilities({"Origin": origin})[0] == 200, origin
    for origin in [
        "http://attacker.example",
        f"http://attacker.example:{p}",
        f"http://127.0.0.1:{p + 1}",  # another local server's page
        "http://127.0.0.1",
        f"https://127.0.0.1:{p}",
        "null",
        "",
        f"http://127.0.0.1:{p}/",
        f"http://localhost:{p}, http://attacker.example",
    ]:
        status, body = server.capabilities({"Origin": origin})
        assert status == 403 and "Origin" in body["message"], origin
        status, _ = server.raw("GET", {"Host": server.authority(), "Origin": origin})
        assert status == 403, origin


# -- Content-Type -----------------------------------------------------------------------------


def test_browser_simple_content_types_are_refused_on_post(server):
    for value in [
        "text/plain",
        "TEXT/PLAIN; charset=utf-8",
        "application/x-www-form-urlencoded",
        "Application/X-WWW-Form-Urlencoded;charset=UTF-8",
        "multipart/form-data; boundary=----x",
        "text/html",
        "application/octet-stream",
        "",
        "application/json, text/plain",
    ]:
        for path in ("/v1/agent", "/v1/agent/batch"):
            status, body = server.raw("POST", {"Host": server.authority(), "Content-Type": value}, b'{"op": "capabilities"}', path=path)
            assert status == 415, (value, path)
            assert "application/json" in body["message"] and body["kind"] == "error"
    for value in ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "application/vnd.agentproto+json", "application/x-ndjson", "application/jsonl"]:
        status, body = server.capabilities({"Content-Type": value})
        assert status == 200 and done_of(body_lines(body)) == 0, value
    status, body = server.raw("POST", {"Host": server.authority(), "Content-Type": "application/x-ndjson"}, b'{"op": "capabilities"}\n{"op": "capabilities"}\n', path="/v1/agent/batch")
    assert status == 200 and [line["exit_code"] for line in body_lines(body) if line["kind"] == "done"] == [0, 0]
    # A GET has no body to label.
    assert server.raw("GET", {"Host": server.authority(), "Content-Type": "text/plain"})[0] == 200


# -- order: nothing before the checks, not even 100 Continue ---------------------------------


def expect_continue(server: Server, headers: dict[str, str], body: bytes) -> tuple[bool, int, bytes]:
    """Send the head with Expect: 100-continue and wait. If the answer is 100 Continue, send
    the body. Returns (continued, final status, final body)."""
    head = "POST /v1/agent HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"Expect: 100-continue\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        sock.sendall(head.encode())
        received = b""
        while b"\r\n\r\n" not in received:
            piece = sock.recv(65536)
            assert piece, received
            received += piece
        continued = received.startswith(b"HTTP/1.1 100 ")
        if continued:
            sock.sendall(body)
            received = received.partition(b"\r\n\r\n")[2]
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
    finally:
        sock.close()
    final_head, _, data = received.partition(b"\r\n\r\n")
    return continued, int(final_head[9:12]), data


def test_expect_100_continue_gets_the_checks_first(tmp_path):
    s = Server("--port", "0", "--auth-token", TOKEN)
    try:
        agent, marker = marker_agent(tmp_path)
        body = json.dumps({"op": "open", "agent": {"acp": {"name": "x", "path": agent}}, "dir": "/tmp"}).encode()
        ours, bearer = s.authority(), f"Bearer {TOKEN}"
        for headers, expected in [
            ({"Host": f"attacker.example:{s.port}", "Authorization": bearer}, 421),
            ({"Host": ours, "Origin": "http://attacker.example", "Authorization": bearer}, 403),
            ({"Host": ours, "Content-Type": "text/plain", "Authorization": bearer}, 415),
            ({"Host": ours}, 401),
            ({"Host": ours, "Authorization": "Bearer "}, 401),
        ]:
            assert expect_continue(s, headers, body)[:2] == (False, expected), headers
        assert not marker.exists() and s.children() == []
        continued, status, data = expect_continue(s, {"Host": ours, "Authorization": bearer}, b'{"op": "capabilities"}')
        assert (continued, status) == (True, 200) and done_of(body_lines(data)) == 0
    finally:
        s.stop()


# -- tokens -----------------------------------------------------------------------------------


def test_token_from_the_environment_stays_out_of_the_command_line():
    s = Server("--port", "0", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    try:
        cmdline = Path(f"/proc/{s.proc.proc.pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in cmdline
        assert s.capabilities({})[0] == 401
        assert s.capabilities({"Authorization": "Bearer"})[0] == 401
        assert s.capabilities({"Authorization": "Bearer "})[0] == 401
        assert s.capabilities({"Authorization": f"Bearer {TOKEN}"})[0] == 200
    finally:
        s.stop()
    assert TOKEN not in s.proc.stderr


def test_the_flag_wins_over_the_environment():
    other = "another-token-of-20-chars"
    s = Server("--port", "0", "--auth-token", other, env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    try:
        assert s.capabilities({"Authorization": f"Bearer {TOKEN}"})[0] == 401
        assert s.capabilities({"Authorization": f"Bearer {other}"})[0] == 200
    finally:
        s.stop()


def test_agents_do_not_inherit_the_token(tmp_path):
    dump = tmp_path / "env"
    agent = tmp_path / "agent.sh"
    agent.write_text(f"#!/bin/sh\nenv > {dump}\nexit 3\n")
    agent.chmod(stat.S_IRWXU)
    s = Server("--port", "0", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    try:
        body = json.dumps({"op": "open", "agent": {"acp": {"name": "x", "path": str(agent)}}, "dir": "/tmp"}).encode()
        status, _ = s.raw("POST", {"Host": s.authority(), "Authorization": f"Bearer {TOKEN}"}, body)
        assert status == 200
    finally:
        s.stop()
    assert "PATH=" in dump.read_text() and TOKEN not in dump.read_text()


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--auth-token", ""], None, "--auth-token: the token is empty"),
        (["--auth-token", "short-token"], None, "--auth-token: the token is shorter than 16 characters"),
        (["--auth-token", "sixteen chars ok"], None, "--auth-token: the token contains whitespace"),
        ([], {"AGENTPROTO_AUTH_TOKEN": ""}, "AGENTPROTO_AUTH_TOKEN: the token is empty"),
        ([], {"AGENTPROTO_AUTH_TOKEN": "0123456789abcde"}, "AGENTPROTO_AUTH_TOKEN: the token is shorter than 16"),
        (["--listen", "0.0.0.0:0"], None, "without --auth-token"),
        (["--listen", "[::]:0"], None, "without --auth-token"),
    ],
)
def test_unusable_tokens_and_open_binds_are_refused_at_start(args, env, says):
    p = Proc(["serve", "--transport", "http", *(args if "--listen" in args else ["--port", "0", *args])], env=env)
    try:
        assert p.wait(15) == 2
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and says in lines[0], p.stderr
        assert "listening" not in p.stderr
        for secret in ("short-token", "0123456789abcde", "sixteen chars ok"):
            assert secret not in p.stderr
    finally:
        p.stop()


# -- the pure checks, for every listener ------------------------------------------------------


def test_check_host_table():
    h = lambda value: {} if value is None else {"host": value}  # noqa: E731
    assert check_host(h("127.0.0.1:8080"), ("127.0.0.1", 8080)) is None
    assert check_host(h("localhost:8080"), ("127.0.0.1", 8080)) is None
    assert check_host(h("[::1]:8080"), ("::1", 8080)) is None
    assert check_host(h("localhost:8080"), ("::1", 8080)) is None
    assert check_host(h("127.0.0.5:9"), ("127.0.0.5", 9)) is None
    assert check_host(h("localhost"), ("127.0.0.1", 80)) is None  # the default port may be left out
    assert check_host(h("127.0.0.1:80"), ("127.0.0.1", 80)) is None
    assert check_host(h(None), ("127.0.0.1", 8080), "HTTP/1.0") is None
    for value, bound in [
        ("127.0.0.1:8080", ("::1", 8080)),
        ("[::1]:8080", ("127.0.0.1", 8080)),
        ("localhost", ("127.0.0.1", 8080)),
        ("evil:8080", ("127.0.0.1", 8080)),
        (None, ("127.0.0.1", 8080)),
        ("127.0.0.1:8080, 127.0.0.1:8080", ("127.0.0.1", 8080)),
    ]:
        problem = check_host(h(value), bound)
        assert problem is not None and problem[0] == 421, value
    # A non-loopback bind is not checked here (it needs a token instead).
    assert check_host(h("anything"), ("0.0.0.0", 8080)) is None and check_host({}, ("192.0.2.1", 1)) is None


def test_check_origin_and_content_type_tables():
    o = lambda value: {"origin": value}  # noqa: E731
    assert check_origin({}, ("0.0.0.0", 9)) is None
    assert check_origin(o("http://localhost:9"), ("0.0.0.0", 9)) is None
    assert check_origin(o("http://127.0.0.7:9"), ("127.0.0.7", 9)) is None
    assert check_origin(o("http://localhost"), ("127.0.0.1", 80)) is None
    for value in ("http://localhost:10", "http://localhost", "null", "https://localhost:9", "http://192.0.2.1:9"):
        problem = check_origin(o(value), ("127.0.0.1", 9))
        assert problem is not None and problem[0] == 403, value
    c = lambda value: {"content-type": value}  # noqa: E731
    assert check_content_type("POST", {}) is None and check_content_type("GET", c("text/plain")) is None
    for ok in ("application/json", "application/json;charset=utf-8", "application/problem+json", "application/x-ndjson", "application/jsonl ; x=y"):
        assert check_content_type("POST", c(ok)) is None, ok
    for bad in ("text/plain", "Text/Plain ;charset=x", "application/x-www-form-urlencoded", "multipart/form-data", "application/+json", "", "application/jsonx"):
        problem = check_content_type("POST", c(bad))
        assert problem is not None and problem[0] == 415 and "application/json" in problem[1], bad
    # The order: Host, then Origin, then Content-Type.
    everything = {"host": "evil:1", "origin": "null", "content-type": "text/plain"}
    assert check_request("POST", "HTTP/1.1", everything, ("127.0.0.1", 1))[0] == 421
    assert check_request("POST", "HTTP/1.1", {**everything, "host": "localhost:1"}, ("127.0.0.1", 1))[0] == 403
    assert check_request("POST", "HTTP/1.1", {"host": "localhost:1", "content-type": "text/plain"}, ("127.0.0.1", 1))[0] == 415
    assert is_loopback("127.1.2.3") and is_loopback("::1") and is_loopback("[::1]")
    assert not is_loopback("localhost") and not is_loopback("0.0.0.0") and not is_loopback("::")


def test_check_token_and_empty_bearer():
    assert check_token("") == "is empty" and check_token("x" * 15) is not None and check_token("x" * 16) is None
    assert check_token("x" * 16 + "\n") is not None and check_token(" " + "x" * 16) is not None
    assert check_token("ü" * 16) is None
    for header in ("Bearer", "Bearer ", "Bearer    ", "bearer\t"):
        assert not authorized(header, "x" * 16) and not authorized(header, "")
    assert not authorized("Bearer x", "") and not authorized("", "")
    # The header arrives decoded as latin-1: a UTF-8 token compares as its bytes.
    assert authorized("Bearer " + ("ü" * 16).encode().decode("latin-1"), "ü" * 16)
    assert not authorized("Bearer " + "ü" * 16, "ü" * 16) and not authorized("Bearer \u20ac", "\u20ac" * 16)


def test_a_refusal_costs_only_that_request(server):
    # A refused request leaves the server as it was: others are served, nothing leaks into them.
    for _ in range(20):
        assert attack(server, "/bin/sh")[0] == 421
    status, body = server.capabilities({})
    assert status == 200 and done_of(body_lines(body)) == 0
    assert result_of(body_lines(server.raw("POST", {"Host": server.authority()}, b'{"op": "info", "session": "s1"}')[1]))["error"]["kind"] == "UnknownSession"
    assert server.proc.proc.poll() is None and server.children() == []
