"""`serve --transport unix`: protocol 1 frames per connection, through raw sockets."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from typing import Any

import pytest
from ops_support import Proc, script
from sidecar import check_line


class Conn:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(15)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")
        self.hello = self.line()
        self.backlog: list[Any] = []

    def line(self) -> Any:
        raw = self.file.readline()
        if not raw:
            raise EOFError
        obj = json.loads(raw)
        check_line(obj)
        return obj

    def send(self, obj: Any) -> None:
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def reply(self, frame_id: int) -> Any:
        while True:
            line = self.line()
            if line.get("id") == frame_id:
                return line
            self.backlog.append(line)

    def until(self, match: Any) -> Any:
        while True:
            line = self.line()
            self.backlog.append(line)
            if match(line):
                return line

    def rest(self) -> list[Any]:
        out = []
        while True:
            try:
                out.append(self.line())
            except EOFError:
                return out

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def start(path: str, *args: str, stdin: Any = subprocess.DEVNULL) -> Proc:
    proc = Proc(["serve", "--transport", "unix", *args], stdin=stdin)
    proc.banner(f"listening on {path}")
    return proc


@pytest.fixture
def sock_path(tmp_path):
    return str(tmp_path / "agent.sock")


def test_socket_is_owner_only_and_each_connection_gets_its_hello(sock_path):
    server = start(sock_path, "--listen", sock_path)
    try:
        mode = os.stat(sock_path).st_mode
        assert stat.S_ISSOCK(mode) and mode & 0o077 == 0
        a, b = Conn(sock_path), Conn(sock_path)
        assert a.hello["hello"]["protocol"] == 1 and b.hello == a.hello
        a.close()
        b.close()
    finally:
        server.stop()
    assert not os.path.exists(sock_path)  # removed on SIGTERM


def test_connections_are_independent_and_half_close_closes_their_sessions(sock_path):
    server = start(sock_path, "--socket", sock_path, "--mock", script("turn"))
    try:
        a, b = Conn(sock_path), Conn(sock_path)
        a.send({"id": 1, "cmd": "open", "agent": "mock", "dir": "/tmp"})
        sid = a.reply(1)["ok"]["id"]
        b.send({"id": 1, "cmd": "info", "session": sid})
        assert b.reply(1)["error"]["kind"] == "UnknownSession"
        b.send({"id": 2, "cmd": "close", "session": sid})
        assert b.reply(2)["error"]["kind"] == "UnknownSession"

        a.send({"id": 2, "cmd": "prompt", "session": sid, "text": "go"})
        assert "Started" in a.reply(2)["ok"]["kind"]
        a.until(lambda line: "event" in line and "RequestOpened" in json.dumps(line["event"]["kind"]))
        a.send({"id": 3, "cmd": "answer", "session": sid, "request": "r1", "answer": {"Permission": "AllowOnce"}})
        assert a.reply(3) == {"id": 3, "ok": None}
        a.until(lambda line: "event" in line and "TurnEnded" in json.dumps(line["event"]["kind"]))

        a.send({"id": 4, "cmd": "open", "agent": "mock", "dir": "/tmp"})
        sid2 = a.reply(4)["ok"]["id"]
        a.sock.shutdown(socket.SHUT_WR)
        rest = a.rest()  # ends: the server hung up
        closed = [line["closed"] for line in rest if "closed" in line]
        assert sorted(closed) == sorted([sid, sid2])
        a.close()

        b.send({"id": 3, "cmd": "discover"})  # the other connection lives on
        assert "ok" in b.reply(3)
        b.close()
    finally:
        server.stop()


def test_a_stale_socket_is_replaced(sock_path):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock_path)
    stale.close()  # a crashed server's leftover: a socket nobody listens on
    server = start(sock_path, "--listen", sock_path)
    try:
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
        Conn(sock_path).close()
    finally:
        server.stop()


def test_anything_but_a_stale_socket_at_the_path_is_refused_and_left_alone(sock_path, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    with open(sock_path, "w") as f:
        f.write("someone's file")
    link = str(tmp_path / "link.sock")
    os.symlink(outside, link)
    for path in (sock_path, link, str(tmp_path)):
        refused = Proc(["serve", "--transport", "unix", "--listen", path], stdin=subprocess.DEVNULL)
        try:
            refused.banner(f"cannot listen on {path}: {path} exists and is not a socket; refusing to replace it")
            assert refused.wait(15) == 1  # a failure, not a usage error
        finally:
            refused.stop()  # even when it (wrongly) listens
    assert open(sock_path).read() == "someone's file"
    assert os.path.islink(link) and outside.read_text() == "keep me"


def test_at_exit_only_its_own_socket_is_unlinked(sock_path):
    server = start(sock_path, "--listen", sock_path)
    try:
        Conn(sock_path).close()
        os.unlink(sock_path)
        with open(sock_path, "w") as f:  # what now sits at the path is not the server's
            f.write("new owner")
    finally:
        server.stop()
    assert open(sock_path).read() == "new owner"
    # A socket someone else bound there after ours was removed is not ours either.
    os.unlink(sock_path)
    server = start(sock_path, "--listen", sock_path)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(sock_path)
        other.bind(sock_path)
    finally:
        server.stop()
        other.close()
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)


def test_a_live_socket_is_not_stolen(sock_path):
    server = start(sock_path, "--listen", sock_path)
    try:
        second = Proc(["serve", "--transport", "unix", "--listen", sock_path], stdin=subprocess.DEVNULL)
        assert second.wait(15) == 1  # in use: a failure (1), not a usage error (2)
        second.stop()
        Conn(sock_path).close()  # the first one still serves
    finally:
        server.stop()


def test_eof_on_the_servers_stdin_is_a_clean_exit(sock_path):
    server = start(sock_path, "--listen", sock_path, stdin=subprocess.PIPE)
    try:
        conn = Conn(sock_path)
        conn.send({"id": 1, "cmd": "open", "agent": "mock", "dir": "/tmp"})
        sid = conn.reply(1)["ok"]["id"]
        server.close_stdin()
        rest = conn.rest()
        assert {"closed": sid} in rest
        assert server.wait(15) == 0
        assert not os.path.exists(sock_path)
    finally:
        server.stop()


def test_record_keeps_each_connections_transcript(sock_path, tmp_path):
    record = tmp_path / "unix.ndjson"
    server = start(sock_path, "--listen", sock_path, "--record", str(record))
    try:
        first = Conn(sock_path)
        second = Conn(sock_path)
        first.send({"id": 7, "cmd": "discover"})
        first.reply(7)
        second.sock.sendall(b"{broken\n")
        assert second.line()["error"]["kind"] == "BadFrame"
        first.close()
        second.close()
    finally:
        server.stop()
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert entries[0]["frontend"] == "unix"  # the header; each connection's input ends with its eof
    assert sorted(e["conn"] for e in entries if e.get("dir") == "eof") == [1, 2]
    entries = [e for e in entries if "line" in e]
    by_conn: dict[int, list[Any]] = {}
    for entry in entries:
        by_conn.setdefault(entry["conn"], []).append((entry["dir"], entry["line"]))
    assert sorted(by_conn) == [1, 2]
    one, two = by_conn[1], by_conn[2]
    assert one[0][0] == "out" and "hello" in json.loads(one[0][1])
    assert one[1] == ("in", '{"id": 7, "cmd": "discover"}')
    assert one[2][0] == "out" and json.loads(one[2][1])["id"] == 7
    assert two[1] == ("in", "{broken") and json.loads(two[2][1])["error"]["kind"] == "BadFrame"
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600


def test_usage_error_without_a_path():
    p = Proc(["serve", "--transport", "unix"], stdin=subprocess.DEVNULL)
    assert p.wait(15) == 2
    p.stop()
