#!/usr/bin/env python3
"""Load: many sessions through one sidecar, and many HTTP clients at once.

    python scripts/bench_load.py [--sessions 100] [--events 1000] [--clients 200] [--http-events 500]

1. Sessions: one ``serve --mock`` sidecar, SESSIONS sessions opened at once, each a turn of
   EVENTS TextDelta events with distinct texts (e0, e1, ...), all prompted together and
   read to their ends. Every session must get every text, in order, with sequences 1, 2,
   3... and one TurnEnded: nothing lost, order kept. The baseline, in the same run: the
   same SESSIONS turns one session at a time (open, turn, close) through another sidecar.
   Total events per second, their ratio, and the sidecar's peak RSS (VmHWM).
2. HTTP: one ``serve --transport http`` sidecar, CLIENTS connections at once, each one
   ``POST /v1/agent/batch`` (open, prompt, close) streaming a turn of HTTP_EVENTS events.
   Each client must get its three requests' lines in order, every text in order, three
   ``done`` of exit code 0. The baseline: the same clients one at a time. Events per
   second, the ratio, and the sidecar's peak RSS.

Figures only: nothing here asserts a time (the check for loss and order raises). Every
socket is on 127.0.0.1. tests/engine/test_load.py runs both at a small scale in the suite.
"""

from __future__ import annotations

if __name__ == "__main__":  # tests/engine/test_load.py imports this module and keeps its own HOME
    import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class Lost(AssertionError):
    """Something was lost, doubled or out of order."""


def script(events: int, directory: str) -> str:
    """A mock script: one turn of ``events`` TextDeltas e0, e1, ... then its end."""
    path = os.path.join(directory, f"load-{events}.json")
    steps: list[Any] = [{"Emit": {"TextDelta": {"message_id": "m1", "text": f"e{i} "}}} for i in range(events)]
    steps.append({"End": {"Completed": {"source": "Protocol"}}})
    with open(path, "w") as f:
        json.dump({"turns": [steps]}, f)
    return path


def expected_texts(events: int) -> list[str]:
    return [f"e{i} " for i in range(events)]


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    return _status_kb(pid, "VmHWM")


def rss_kb(pid: int) -> int:
    return _status_kb(pid, "VmRSS")


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- protocol 1: many sessions through one sidecar ---------------------------------------------


class Sidecar:
    """``serve --mock SCRIPT``, spoken to in raw frames; lines read in big chunks."""

    def __init__(self, mock: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve", "--mock", mock],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=ENV,
            cwd=str(ROOT),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        self.next_id = 0
        self.line()  # the hello

    def send(self, *commands: dict[str, Any]) -> list[int]:
        ids = []
        data = b""
        for command in commands:
            self.next_id += 1
            ids.append(self.next_id)
            data += json.dumps({"id": self.next_id, **command}).encode() + b"\n"
        self.stdin.write(data)
        self.stdin.flush()
        return ids

    def lines(self) -> list[Any]:
        """What has arrived (at least one line), parsed."""
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise Lost("the sidecar's output ended")
            self.buffer += chunk
        whole, _, self.buffer = self.buffer.rpartition(b"\n")
        return [json.loads(line) for line in whole.split(b"\n")]

    def line(self) -> Any:
        while True:
            for obj in self.lines():
                return obj  # only used for the hello, alone on its first read

    def close(self) -> int:
        self.stdin.close()
        while os.read(self.fd, 1 << 20):
            pass
        return self.proc.wait(30)


class Tally:
    """One session's events as they arrive: checked for order, counted."""

    def __init__(self, events: int) -> None:
        self.expected = expected_texts(events)
        self.texts = 0
        self.sequence = 0
        self.ended = False

    def event(self, event: dict[str, Any]) -> None:
        self.sequence += 1
        if event["sequence"] != self.sequence:
            raise Lost(f"{event['session_id']}: sequence {event['sequence']} where {self.sequence} was due")
        kind = event["kind"]
        if isinstance(kind, dict) and "TextDelta" in kind:
            text = kind["TextDelta"]["text"]
            if self.texts >= len(self.expected) or text != self.expected[self.texts]:
                raise Lost(f"{event['session_id']}: text {text!r} where {self.expected[self.texts:][:1]} was due")
            self.texts += 1
        elif isinstance(kind, dict) and "TurnEnded" in kind:
            if self.texts != len(self.expected) or self.ended:
                raise Lost(f"{event['session_id']}: the turn ended after {self.texts} of {len(self.expected)} texts")
            self.ended = True


def read_until(sc: Sidecar, marker: bytes, count: int) -> bytes:
    """Raw output until ``marker`` has come ``count`` times: the run is timed on cheap reads,
    and checked afterwards (a Python client parsing every line would be what is measured).
    A read may end anywhere in a line (where a partial write of the sidecar's ended), so each
    marker is counted in the read where it ends, with the last bytes before that read in front."""
    chunks = [sc.buffer]
    seen = sc.buffer.count(marker)
    keep = len(marker) - 1  # too short to hold a whole marker: none is counted twice
    tail = sc.buffer[-keep:] if keep else b""
    while seen < count:
        chunk = os.read(sc.fd, 1 << 20)
        if not chunk:
            raise Lost("the sidecar's output ended")
        chunks.append(chunk)
        window = tail + chunk
        seen += window.count(marker)
        tail = window[-keep:] if keep else b""
    raw = b"".join(chunks)
    cut = raw.rfind(b"\n") + 1
    sc.buffer = raw[cut:]
    return raw[:cut]


def check_sessions(raw: bytes, ids: list[str], events: int) -> int:
    """Every session's events, in order, nothing lost; the number of events."""
    tallies = {sid: Tally(events) for sid in ids}
    count = 0
    for line in raw.split(b"\n"):
        if not line:
            continue
        obj = json.loads(line)
        if "event" in obj:
            tallies[obj["event"]["session_id"]].event(obj["event"])
            count += 1
        elif "error" in obj:
            raise Lost(f"a command or a session failed: {obj}")
    unfinished = [sid for sid, tally in tallies.items() if not tally.ended]
    if unfinished:
        raise Lost(f"turns that never ended: {unfinished[:5]}")
    return count


def concurrent_sessions(mock: str, sessions: int, events: int, directory: str) -> dict[str, Any]:
    """SESSIONS sessions at once; returns events, seconds, RSS (peak, and with the sessions
    open before their turns)."""
    sc = Sidecar(mock)
    try:
        opens = sc.send(*({"cmd": "open", "agent": "mock", "dir": directory} for _ in range(sessions)))
        ids: list[str] = []
        while len(ids) < sessions:
            for obj in sc.lines():
                if obj.get("id") in opens:
                    ids.append(obj["ok"]["id"])
        opened_kb = rss_kb(sc.proc.pid)
        cpu = cpu_seconds(sc.proc.pid)
        start = time.perf_counter()
        sc.send(*({"cmd": "prompt", "session": sid, "text": "go"} for sid in ids))
        raw = read_until(sc, b'"TurnEnded"', sessions)
        seconds = time.perf_counter() - start
        cpu = cpu_seconds(sc.proc.pid) - cpu
        peak = peak_rss_kb(sc.proc.pid)
        count = check_sessions(raw, ids, events)
        sc.send(*({"cmd": "close", "session": sid} for sid in ids))
        closed: set[str] = set()
        while len(closed) < sessions:
            closed.update(obj["closed"] for obj in sc.lines() if "closed" in obj)
    finally:
        status = sc.close()
    if status != 0:
        raise Lost(f"the sidecar exited {status}")
    return {"events": count, "seconds": seconds, "rss_kb": peak, "opened_kb": opened_kb, "cpu": cpu}


def one_at_a_time(mock: str, sessions: int, events: int, directory: str) -> dict[str, Any]:
    """The same turns, one session at a time, through one sidecar."""
    sc = Sidecar(mock)
    count = 0
    seconds = 0.0
    cpu = cpu_seconds(sc.proc.pid)  # over the whole run (the clock ticks too coarsely per turn)
    try:
        for _ in range(sessions):
            (open_id,) = sc.send({"cmd": "open", "agent": "mock", "dir": directory})
            sid = None
            while sid is None:
                for obj in sc.lines():
                    if obj.get("id") == open_id:
                        sid = obj["ok"]["id"]
            start = time.perf_counter()
            sc.send({"cmd": "prompt", "session": sid, "text": "go"})
            raw = read_until(sc, b'"TurnEnded"', 1)
            seconds += time.perf_counter() - start
            count += check_sessions(raw, [sid], events)
            sc.send({"cmd": "close", "session": sid})
            done = False
            while not done:
                done = any(obj.get("closed") == sid for obj in sc.lines())
        cpu = cpu_seconds(sc.proc.pid) - cpu
        rss = peak_rss_kb(sc.proc.pid)
    finally:
        status = sc.close()
    if status != 0:
        raise Lost(f"the sidecar exited {status}")
    return {"events": count, "seconds": seconds, "rss_kb": rss, "cpu": cpu}


# -- HTTP: many clients at once ----------------------------------------------------------------


class HttpSidecar:
    def __init__(self, mock: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve", "--transport", "http", "--port", "0", "--mock", mock],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
            cwd=str(ROOT),
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline().decode()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not found:
            raise RuntimeError(f"no listening line: {line!r}")
        self.port = int(found.group(1))

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # its parent's EOF ends it
        return self.proc.wait(30)


def batch_request(port: int, directory: str) -> bytes:
    body = b"".join(
        json.dumps(request).encode() + b"\n"
        for request in ({"op": "open", "agent": "mock", "dir": directory}, {"op": "prompt", "text": "go"}, {"op": "close"})
    )
    head = (
        f"POST /v1/agent/batch HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-ndjson\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def dechunk(raw: bytes) -> bytes:
    head, _, rest = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise Lost(f"not a 200: {head[:200]!r}")
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(body)
        body += rest[:size]
        rest = rest[size + 2 :]


def check_batch(body: bytes, events: int) -> int:
    """One client's answer: open, the turn, close, in order, nothing lost. Its events."""
    lines = [json.loads(line) for line in body.split(b"\n") if line.strip()]
    dones = [i for i, line in enumerate(lines) if line.get("kind") == "done"]
    if len(dones) != 3 or dones[-1] != len(lines) - 1 or any(lines[i]["exit_code"] != 0 for i in dones):
        raise Lost(f"expected three done of exit code 0, got {[lines[i] for i in dones]}")
    tally = Tally(events)
    count = 0
    for index, line in enumerate(lines):
        if line["kind"] == "event":
            tally.event(line["event"])  # the session's events in order, across the requests
            count += 1
        if index == dones[1] and not tally.ended:
            raise Lost("the turn did not end in the prompt's answer")
    return count


def http_clients(port: int, clients: int, events: int, directory: str) -> tuple[int, float]:
    """CLIENTS connections at once, each one batch; returns events and seconds."""
    selector = selectors.DefaultSelector()
    request = batch_request(port, directory)
    answers: dict[socket.socket, bytearray] = {}
    pending: dict[socket.socket, memoryview] = {}
    start = time.perf_counter()
    for _ in range(clients):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        answers[sock] = bytearray()
        pending[sock] = memoryview(request)
        selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    open_socks = clients
    bodies: list[bytes] = []
    while open_socks:
        for key, mask in selector.select(60):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if mask & selectors.EVENT_WRITE and sock in pending:
                sent = sock.send(pending[sock])
                pending[sock] = pending[sock][sent:]
                if not pending[sock]:
                    del pending[sock]
                    selector.modify(sock, selectors.EVENT_READ)
            if mask & selectors.EVENT_READ:
                data = sock.recv(1 << 20)
                if data:
                    answers[sock] += data
                    continue
                selector.unregister(sock)
                sock.close()
                open_socks -= 1
                bodies.append(bytes(answers.pop(sock)))
    seconds = time.perf_counter() - start
    selector.close()
    # Checked once the clock has stopped (the client's parsing is not the server's speed).
    count = sum(check_batch(dechunk(raw), events) for raw in bodies)
    return count, seconds


def http_load(mock: str, clients: int, events: int, directory: str, one_by_one: bool = False) -> dict[str, Any]:
    sc = HttpSidecar(mock)
    try:
        if one_by_one:
            count, seconds = 0, 0.0
            for _ in range(clients):
                n, s = http_clients(sc.port, 1, events, directory)
                count, seconds = count + n, seconds + s
        else:
            count, seconds = http_clients(sc.port, clients, events, directory)
        rss = peak_rss_kb(sc.proc.pid)
    finally:
        status = sc.close()
    if status != 0:
        raise Lost(f"the HTTP sidecar exited {status}")
    return {"events": count, "seconds": seconds, "rss_kb": rss}


# -- the report --------------------------------------------------------------------------------


def rate(result: dict[str, Any]) -> float:
    return float(result["events"]) / result["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--http-events", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-load-") as directory:
        mock = script(args.events, directory)
        single = one_at_a_time(mock, args.sessions, args.events, directory)
        many = concurrent_sessions(mock, args.sessions, args.events, directory)
        http_mock = script(args.http_events, directory)
        http_single = http_load(http_mock, args.clients, args.http_events, directory, one_by_one=True)
        http_many = http_load(http_mock, args.clients, args.http_events, directory)
    print(f"load, {os.cpu_count()} cores, Python {sys.version.split()[0]}; nothing lost, order kept in every run")
    print(
        f"{args.sessions} concurrent sessions x {args.events} events, one sidecar: {many['events']:,} events "
        f"in {many['seconds']:.2f} s = {rate(many) / 1000:.1f}k events/s; peak RSS {many['rss_kb'] / 1024:.1f} MB "
        f"({many['opened_kb'] / 1024:.1f} MB with the sessions open before their turns, each holding its copy of the "
        f"{args.events}-step mock script)"
    )
    print(
        f"  baseline, the same turns one session at a time: {rate(single) / 1000:.1f}k events/s "
        f"(peak RSS {single['rss_kb'] / 1024:.1f} MB); ratio {rate(many) / rate(single):.2f}x"
    )
    print(
        f"  the sidecar's CPU per event: {many['cpu'] / many['events'] * 1e6:.1f} us concurrent, "
        f"{single['cpu'] / single['events'] * 1e6:.1f} us one at a time (its opens and closes included)"
    )
    print(
        f"{args.clients} concurrent HTTP clients x {args.http_events} events (one batch each): {http_many['events']:,} events "
        f"in {http_many['seconds']:.2f} s = {rate(http_many) / 1000:.1f}k events/s; peak RSS {http_many['rss_kb'] / 1024:.1f} MB"
    )
    print(
        f"  baseline, the same clients one at a time: {rate(http_single) / 1000:.1f}k events/s "
        f"(peak RSS {http_single['rss_kb'] / 1024:.1f} MB); ratio {rate(http_many) / rate(http_single):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
