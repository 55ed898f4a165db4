#!/usr/bin/env python3
"""Memory per closed session: open and close many mock sessions through one sidecar.

    python scripts/bench_sessions.py [--sessions 100000] [--block 500] [--root CHECKOUT]

One ``serve`` sidecar (stdio, the mock agent); sessions are opened BLOCK at a time, then
closed, and every reply and ``closed`` line is read. The sidecar's RSS (VmRSS) is read after
the first WARM sessions (the baseline, in the same run: allocator pools and caches are warm
by then) and after all SESSIONS; the figure is the growth between the two, per 100,000
sessions. A sidecar that keeps something per closed session grows linearly (issue 13 measured
9 MB per 100,000); one that keeps nothing stays flat. ``--root`` measures another checkout's
package (e.g. an older main) with this same client. Figures only: nothing here asserts.
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--warm", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose agentproto runs")
    options = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": options.root}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=options.root,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdout, stdin = proc.stdout, proc.stdin
    json.loads(stdout.readline())  # the hello
    frame = 0
    done = 0
    marks: dict[str, tuple[int, int]] = {"start": (0, rss_kb(proc.pid))}
    started = time.monotonic()
    while done < options.sessions:
        count = min(options.block, options.sessions - done)
        first = frame + 1
        lines = [{"id": first + i, "cmd": "open", "agent": "mock", "dir": "/tmp"} for i in range(count)]
        stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        stdin.flush()
        frame += count
        ids: list[str] = []
        while len(ids) < count:
            reply = json.loads(stdout.readline())
            if "id" in reply:
                if "ok" not in reply:
                    raise SystemExit(f"open failed: {reply}")
                ids.append(reply["ok"]["id"])
        closes = [{"id": frame + 1 + i, "cmd": "close", "session": sid} for i, sid in enumerate(ids)]
        stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in closes))
        stdin.flush()
        frame += count
        replies = closed = 0
        while replies < count or closed < count:
            line = json.loads(stdout.readline())
            replies += "id" in line
            closed += "closed" in line
        done += count
        if done == options.warm:
            marks["warm"] = (done, rss_kb(proc.pid))
    marks["end"] = (done, rss_kb(proc.pid))
    elapsed = time.monotonic() - started
    stdin.close()
    proc.wait(30)
    for name, (sessions, kb) in marks.items():
        print(f"{name:>5}: {sessions:>7} sessions, VmRSS {kb / 1024:7.1f} MB")
    if "warm" in marks and done > options.warm:
        (warm_n, warm_kb), (end_n, end_kb) = marks["warm"], marks["end"]
        per = (end_kb - warm_kb) / 1024 * 100_000 / (end_n - warm_n)
        print(f"growth after the warm-up: {(end_kb - warm_kb) / 1024:.1f} MB, {per:.1f} MB per 100,000 sessions")
        print(f"(ratio end/warm RSS: {end_kb / warm_kb:.2f}; {done / elapsed:.0f} sessions/s)")


if __name__ == "__main__":
    main()
