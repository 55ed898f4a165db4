"""Every frontend as a real process, driven by a client that reads only when told to.

``FRONTENDS`` names them (serve, agent, single-shot, jsonrpc, mcp, unix, http). A
``Frontend`` opens a session of an agent, prompts it, and waits for markers in the bytes it
has read so far; it never reads unless asked, so a test can leave the server's output
queued and unread. ``stubborn_agent`` is the ACP agent that ignores SIGTERM and EOF. ``group_left`` lists what
is left of process groups, zombies included (a process killed but never reaped).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sidecar import ROOT, base_env

FRONTENDS = ("serve", "agent", "single-shot", "jsonrpc", "mcp", "unix", "http")
STUBBORN = str(ROOT / "tests" / "fakes" / "stubborn_agent.py")

#: A mock turn that streams for seconds (far more than any pipe holds), then ends.
FLOOD = {"turns": [[
    {"Repeat": {"times": 2000, "steps": [
        {"Repeat": {"times": 50, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": "x" * 40}}}]}},
        {"Sleep": 1},
    ]}},
    {"End": {"Completed": {"source": "Protocol"}}},
]]}


def stubborn_agent(pids: Path, habits: str) -> dict[str, Any]:
    """The open fields of a session of the stubborn ACP agent (``habits``: its STUBBORN)."""
    return {
        "agent": {"acp": {"name": "stubborn", "path": STUBBORN, "args": []}},
        "env": {"STUBBORN": habits, "STUBBORN_PIDS": str(pids)},
    }


def alive(pid: int) -> bool:
    """A live process (a zombie is not: it only waits for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def pids_in(path: Path) -> list[int]:
    try:
        return [int(line) for line in path.read_text().split()]
    except FileNotFoundError:
        return []


def wait_for_pids(path: Path, count: int, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(pids_in(path)) < count:
        assert time.monotonic() < deadline, f"the agent did not start {count} process(es): {pids_in(path)}"
        time.sleep(0.02)
    return pids_in(path)


def assert_all_gone(pids: list[int], timeout: float = 3.0) -> None:
    """Every pid dead soon (a SIGKILL sent just before the sidecar exited takes a moment)."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # don't leave them to the next test
    assert not left, f"processes outlived the sidecar: {left}"


def group_left(pgids: set[int]) -> list[str]:
    """Every process (alive or a zombie) whose process group is one of ``pgids``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:
            found.append(f"{entry} (state {fields[0].decode()}, parent {int(fields[1])})")
    return found


def pgid_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[2])


def kill_groups(pgids: set[int]) -> None:
    for pgid in pgids:  # after a failed test: don't leave them to the next one
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


class Stream:
    """One byte stream the client reads only when asked (a pipe or a socket)."""

    def __init__(self, fd: int, write: Any) -> None:
        self.fd = fd
        self._write = write
        self.data = bytearray()
        self.eof = False

    def write(self, obj: Any) -> None:
        self._write((json.dumps(obj) + "\n").encode() if not isinstance(obj, bytes) else obj)

    def read_until(self, marker: bytes, timeout: float = 20.0, start: int = 0) -> int:
        """Read until ``marker`` is in what was read (after ``start``); its end offset."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.data.find(marker, start)
            if at >= 0:
                return at + len(marker)
            remaining = deadline - time.monotonic()
            assert remaining > 0 and not self.eof, f"no {marker!r} in {bytes(self.data[-600:])!r}"
            if select.select([self.fd], [], [], min(remaining, 0.5))[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except ConnectionResetError:
                    chunk = b""
                self.eof = not chunk
                self.data += chunk


class Frontend:
    """A frontend's process and its client."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        self.tmp = tmp_path
        mock = tmp_path / "flood.json"
        mock.write_text(json.dumps(FLOOD))
        args = {
            "serve": ["serve"],
            "agent": ["agent"],
            "single-shot": ["--single-shot"],
            "jsonrpc": ["serve", "--transport", "jsonrpc"],
            "mcp": ["serve", "--transport", "mcp"],
            "unix": ["serve", "--transport", "unix", "--listen", str(tmp_path / "ap.sock")],
            "http": ["serve", "--transport", "http", "--port", "0"],
        }[name]
        argv = [sys.executable, "-m", "agentproto"]
        # --single-shot takes its --mock before it.
        argv += (["--mock", str(mock)] + args) if name == "single-shot" else (args + ["--mock", str(mock)])
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "stderr", "wb"),
            env=base_env(), cwd=str(ROOT),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.streams: list[Stream] = []
        self.port = 0
        if name in ("unix", "http"):
            self._wait_banner()
        self.main = self.connect()
        self.next_id = 1
        if name == "mcp":
            self.main.write({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            self.main.read_until(b'"id":0,"result"')
            self.main.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        # Answering something shows its signal handlers are in place (a signal before them
        # would end a Python that has not started serving yet: no test of ours).
        elif name == "serve":
            self.main.read_until(b'"hello"')
        elif name == "agent":
            self.request("capabilities", {}, b'"kind":"done"')
        elif name == "jsonrpc":
            self.request("capabilities", {}, b'"result"')

    @property
    def stderr(self) -> str:
        return (self.tmp / "stderr").read_text(errors="replace")

    def _wait_banner(self) -> None:
        deadline = time.monotonic() + 20
        while True:
            text = self.stderr
            found = re.search(r"listening on (?:http://[\d.]+:(\d+)/|\S+)", text)
            if found:
                self.port = int(found.group(1) or 0)
                return
            assert time.monotonic() < deadline and self.proc.poll() is None, text
            time.sleep(0.02)

    def connect(self) -> Stream:
        """The client's stream: stdio, a Unix connection, or (HTTP) one per request."""
        if self.name == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(self.tmp / "ap.sock"))
            stream = Stream(sock.fileno(), sock.sendall)
            stream.sock = sock  # type: ignore[attr-defined]
            stream.read_until(b'"hello"')
        elif self.name == "http":
            stream = Stream(-1, None)
        else:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            stdin = self.proc.stdin

            def write(data: bytes) -> None:
                stdin.write(data)
                stdin.flush()

            stream = Stream(self.proc.stdout.fileno(), write)
        self.streams.append(stream)
        return stream

    def _post(self, obj: dict[str, Any]) -> Stream:
        sock = socket.create_connection(("127.0.0.1", self.port))
        body = json.dumps(obj).encode()
        sock.sendall(
            b"POST /v1/agent HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.port, len(body), body)
        )
        stream = Stream(sock.fileno(), sock.sendall)
        stream.sock = sock  # type: ignore[attr-defined]
        self.streams.append(stream)
        return stream

    # -- what a test does ----------------------------------------------------------------
    def request(self, op: str, fields: dict[str, Any], wait: bytes | None) -> Stream:
        """Send one request (``op`` with its fields, in this frontend's framing); read until
        ``wait`` (a marker the helpers below pick) unless it is None."""
        rid = self.next_id
        self.next_id += 1
        stream = self.main
        if self.name in ("serve", "unix"):
            stream.write({"id": rid, "cmd": op, **fields})
        elif self.name in ("agent", "single-shot"):
            stream.write({"op": op, **fields})
            if self.name == "single-shot":
                assert self.proc.stdin is not None
                self.proc.stdin.close()
        elif self.name == "jsonrpc":
            stream.write({"jsonrpc": "2.0", "id": rid, "method": op, "params": fields})
        elif self.name == "mcp":
            stream.write({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
                "name": f"agentproto_{op}", "arguments": fields, "_meta": {"progressToken": rid}}})
        else:
            stream = self._post({"op": op, **fields})
        if wait is not None:
            stream.read_until(wait)
        return stream

    def open(self, fields: dict[str, Any], wait: bool = True) -> None:
        markers = {"serve": b'"ok":{"id":"s1"', "unix": b'"ok":{"id":"s1"', "jsonrpc": b'"result":{"op":"open"',
                   "mcp": b'"id":"s1"', "agent": b'"kind":"done"', "http": b'"kind":"done"',
                   "single-shot": b'"kind":"done"'}
        self.request("open", {"dir": str(self.tmp), **fields}, markers[self.name] if wait else None)

    def prompt(self, wait: bool = True) -> Stream:
        marker = b"notifications/progress" if self.name == "mcp" else b"TurnStarted"
        fields: dict[str, Any] = {"text": "go"}
        if self.name in ("serve", "unix", "http"):  # the others have a default session
            fields["session"] = "s1"
        return self.request("prompt", fields, marker if wait else None)

    def generate(self, fields: dict[str, Any], wait: bool = True) -> Stream:
        marker = b"notifications/progress" if self.name == "mcp" else b"TurnStarted"
        if self.name in ("serve", "unix"):
            marker = b'"id":%d' % self.next_id  # protocol 1's generate streams nothing
        return self.request("generate", {"dir": str(self.tmp), "prompt": "go", **fields}, marker if wait else None)

    def sigterm(self, times: int = 1, between: float = 0.3) -> float:
        """Signal the process ``times`` times, ``between`` seconds apart (two signals sent
        before the first is delivered are one signal: the kernel does not queue them); the
        seconds from the first until it was gone."""
        start = time.monotonic()
        for i in range(times):
            if i:
                time.sleep(between)
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        return time.monotonic() - start

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # A sidecar killed with SIGKILL kills nothing: after a failed test, its agents (some
        # ignore SIGTERM and EOF) must not outlive the test either.
        for pid in pids_in(self.tmp / "pids"):
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for stream in self.streams:
            sock = getattr(stream, "sock", None)
            if sock is not None:
                sock.close()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
