#!/usr/bin/env python3
"""Benchmarks of the core, each measured against a baseline in the same run.

    python scripts/bench_core.py [--events N] [--sessions N] [--runs N]

1. Cold start: ``python -m agentproto serve`` to its hello line, vs ``python3 -c pass``
   (target <= 2x).
2. Relay throughput: a flood of N TextDelta events through ``serve`` (the mock agent
   playing a script with no sleeps), read by this process, vs the floor: a bare
   ``json.loads`` + ``json.dumps`` relay loop reading the same N lines from a producer
   process (target >= 50% of the floor). The ACP benchmark (scripts/bench_acp.py) runs
   the same comparison with a real child-process agent.
3. RSS: an idle sidecar (target <= 25 MB), and per idle mock session (target <= 200 KB).
4. RSS while a reader stalls during a flood: the sidecar stops pulling events once 1024
   wait unwritten, so its RSS must stay flat however long the reader sleeps.

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def serve(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=ENV,
        cwd=str(ROOT),
    )


def send(proc: subprocess.Popen[bytes], cmd: dict) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(cmd) + "\n").encode())
    proc.stdin.flush()


def read_until(proc: subprocess.Popen[bytes], pred) -> dict:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("sidecar ended early")
        obj = json.loads(line)
        if pred(obj):
            return obj


def cold_start(runs: int) -> None:
    def timed(argv: list[str], wait_line: bool) -> float:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV, cwd=str(ROOT))
        if wait_line:
            assert proc.stdout is not None
            proc.stdout.readline()
            elapsed = time.perf_counter() - t0
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait()
            return elapsed
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait()
        return time.perf_counter() - t0

    base = statistics.median(timed([sys.executable, "-c", "pass"], False) for _ in range(runs))
    ours = statistics.median(timed([sys.executable, "-m", "agentproto", "serve"], True) for _ in range(runs))
    print(f"cold start to hello      {ours * 1000:7.1f} ms   python3 -c pass {base * 1000:6.1f} ms   ratio {ours / base:4.2f}x (target <= 2x)")


PRODUCER = r"""
import sys, json
n = int(sys.argv[1])
line = json.dumps({"TextDelta": {"message_id": "m1", "text": "x"}}) + "\n"
out = sys.stdout
for _ in range(n):
    out.write(line)
out.flush()
"""

RELAY = r"""
import sys, json
loads, dumps = json.loads, json.dumps
write = sys.stdout.write
seq = 0
for raw in sys.stdin:
    seq += 1
    write(dumps({"event": {"sequence": seq, "kind": loads(raw)}}) + "\n")
sys.stdout.flush()
"""


def relay_floor(n: int) -> float:
    """Events per second of the bare loop: producer | relay | this process counting."""
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(n)], stdout=subprocess.PIPE)
    t0 = time.perf_counter()
    relay = subprocess.Popen([sys.executable, "-c", RELAY], stdin=producer.stdout, stdout=subprocess.PIPE)
    assert producer.stdout is not None and relay.stdout is not None
    producer.stdout.close()
    count = sum(1 for _ in relay.stdout)
    elapsed = time.perf_counter() - t0
    relay.wait()
    producer.wait()
    assert count == n, count
    return n / elapsed


def flood_script(n: int, path: str) -> None:
    with open(path, "w") as f:
        json.dump(
            {
                "turns": [
                    [
                        {"Repeat": {"times": n, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": "x"}}}]}},
                        {"End": {"Completed": {"source": "Protocol"}}},
                    ]
                ]
            },
            f,
        )


def relay_serve(n: int, script: str) -> float:
    proc = serve("--mock", script)
    assert proc.stdout is not None
    proc.stdout.readline()
    send(proc, {"id": 1, "cmd": "open", "agent": "mock", "dir": str(ROOT)})
    read_until(proc, lambda o: o.get("id") == 1)
    t0 = time.perf_counter()
    send(proc, {"id": 2, "cmd": "prompt", "session": "s1", "text": "go"})
    deltas = 0
    for raw in proc.stdout:
        if b'"TextDelta"' in raw:
            deltas += 1
        elif b'"TurnEnded"' in raw:
            break
    elapsed = time.perf_counter() - t0
    proc.stdin.close()  # type: ignore[union-attr]
    proc.wait()
    assert deltas == n, deltas
    return n / elapsed


def memory(sessions: int) -> None:
    proc = serve()
    assert proc.stdout is not None
    proc.stdout.readline()
    send(proc, {"id": 0, "cmd": "discover"})
    read_until(proc, lambda o: o.get("id") == 0)
    time.sleep(0.3)
    idle = rss_kb(proc.pid)
    for i in range(1, sessions + 1):
        send(proc, {"id": i, "cmd": "open", "agent": "mock", "dir": str(ROOT)})
    read_until(proc, lambda o: o.get("id") == sessions)
    time.sleep(0.3)
    loaded = rss_kb(proc.pid)
    proc.stdin.close()  # type: ignore[union-attr]
    for _ in proc.stdout:
        pass
    proc.wait()
    per = (loaded - idle) / sessions
    print(f"RSS idle                 {idle / 1024:7.1f} MB   (target <= 25 MB)")
    print(f"RSS per idle session     {per:7.1f} KB   over {sessions} mock sessions (target <= 200 KB)")


def stalled_reader(n: int, script: str, stall: float) -> None:
    proc = serve("--mock", script)
    assert proc.stdout is not None
    proc.stdout.readline()
    send(proc, {"id": 1, "cmd": "open", "agent": "mock", "dir": str(ROOT)})
    read_until(proc, lambda o: o.get("id") == 1)
    before = rss_kb(proc.pid)
    send(proc, {"id": 2, "cmd": "prompt", "session": "s1", "text": "go"})
    samples = []
    t_end = time.monotonic() + stall
    while time.monotonic() < t_end:  # the reader sleeps: nothing is read
        time.sleep(0.25)
        samples.append(rss_kb(proc.pid))
    deltas = 0
    for raw in proc.stdout:
        if b'"TextDelta"' in raw:
            deltas += 1
        elif b'"TurnEnded"' in raw:
            break
    proc.stdin.close()  # type: ignore[union-attr]
    proc.wait()
    print(
        f"RSS with a stalled reader {max(samples) / 1024:6.1f} MB max over {stall:.0f} s "
        f"(before the flood {before / 1024:.1f} MB, +{(max(samples) - before) / 1024:.1f} MB); "
        f"then read all {deltas:,} of {n:,} deltas"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]} on {os.uname().machine}, {os.cpu_count()} cores")
    cold_start(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "flood.json")
        flood_script(args.events, script)
        floor = max(relay_floor(args.events) for _ in range(3))
        ours = max(relay_serve(args.events, script) for _ in range(3))
        print(
            f"relay throughput         {ours:9,.0f} events/s through serve   floor {floor:9,.0f} events/s   "
            f"ratio {ours / floor:4.0%} (target >= 50%)"
        )
        memory(args.sessions)
        stalled_reader(args.events, script, stall=3.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
