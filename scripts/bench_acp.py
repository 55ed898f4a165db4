#!/usr/bin/env python3
"""Benchmark: an ACP agent's message chunks through ``agentproto serve``, against a floor.

The agent (this file with ``--agent``, stdlib only) answers ``session/prompt`` with N
``agent_message_chunk`` notifications written as fast as it can, then the prompt's
answer. Two readers of the same agent run side by side, in one process each:

- floor: a bare loop that reads the agent's stdout and does ``json.loads`` then
  ``json.dumps`` per line (the least any relay must do);
- serve: ``python -m agentproto serve`` driving the agent with the ACP driver, read by
  a client that ``json.loads`` every line and counts TextDelta events.

Every run checks that not one chunk (and not the session) was lost: the text the app
saw must be exactly the text the agent sent. Figures are chunks per second of wall time
(best of the runs), and the CPU seconds the relay itself spent (the floor loop's, or the
serve process's): on a shared machine the wall figures wander, the CPU ones much less.

The whole relay path is timed, as an app sees it: from the prompt written to serve's stdin
to the TurnEnded line read from its stdout (the agent's writes, serve's read, decode,
mapping, session events, encode and write, the app's read and ``json.loads``).

    python scripts/bench_acp.py            # N = 1,000 and 20,000, 5 runs each
    python scripts/bench_acp.py -n 5000 --runs 5
    python scripts/bench_acp.py --record   # also serve --record (app lines and agent wire
                                           # into a file), against serve without it
    python scripts/bench_acp.py --before REV   # also serve from the package at REV (a git
                                               # revision, exported with git archive; or a
                                               # checkout's directory), in the same runs
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_export import export

ROOT = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve()


# -- the agent ---------------------------------------------------------------------------


def chunk_text(i: int) -> str:
    return f"{i} "


def run_agent() -> int:
    """A minimal ACP agent: initialize, session/new, session/prompt "N" -> N chunks."""
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        method, rpc_id = msg.get("method"), msg.get("id")
        if rpc_id is None or method is None:
            continue  # notifications (session/cancel) and answers need nothing here
        if method == "initialize":
            result: Any = {
                "protocolVersion": 1,
                "agentCapabilities": {},
                "authMethods": [],
                "agentInfo": {"name": "bench-agent", "version": "1"},
            }
        elif method == "session/new":
            result = {"sessionId": "bench"}
        elif method == "session/prompt":
            n = int(msg["params"]["prompt"][0]["text"])
            head = (
                b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"bench","update":'
                b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'
            )
            tail = b'"}}}}\n'
            batch: list[bytes] = []
            for i in range(n):
                batch.append(head + chunk_text(i).encode() + tail)
                if len(batch) == 512:
                    out.write(b"".join(batch))
                    batch.clear()
            out.write(b"".join(batch))
            result = {"stopReason": "end_turn"}
        else:
            out.write(
                json.dumps(
                    {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": "method not found"}}
                ).encode()
                + b"\n"
            )
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}).encode() + b"\n")
        out.flush()
    return 0


def agent_argv() -> list[str]:
    return [sys.executable, str(SELF), "--agent"]


# -- readers -----------------------------------------------------------------------------


def lines(fd: int):
    """Lines of a pipe, read in large blocks."""
    buf = b""
    while True:
        data = os.read(fd, 1 << 20)
        if not data:
            if buf:
                yield buf
            return
        buf += data
        *complete, buf = buf.split(b"\n")
        yield from complete


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a live process (Linux), or None: its CPU-time clock (the
    scheduler's nanoseconds, ``clock_gettime`` on the pid's clock id), else /proc/PID/stat's
    clock ticks (10 ms: too coarse for a short relay)."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except (OSError, OverflowError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def floor_run(n: int) -> tuple[float, int, float | None]:
    """The bare relay: read the agent, json.loads + json.dumps every line."""
    proc = subprocess.Popen(agent_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin and proc.stdout
    send = proc.stdin
    send.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n')
    send.write(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}\n')
    send.flush()
    reader = lines(proc.stdout.fileno())
    for _ in range(2):
        next(reader)
    sink = open(os.devnull, "w")
    started = time.perf_counter()
    cpu = time.process_time()
    send.write(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/prompt",
                "params": {"sessionId": "bench", "prompt": [{"type": "text", "text": str(n)}]},
            }
        ).encode()
        + b"\n"
    )
    send.flush()
    chunks = 0
    for line in reader:
        obj = json.loads(line)
        sink.write(json.dumps(obj))
        if obj.get("id") == 2:
            break
        chunks += 1
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    send.close()
    proc.wait()
    sink.close()
    return elapsed, chunks, cpu


def serve_run(n: int, record: str | None = None, root: Path = ROOT) -> tuple[float, int, float | None]:
    """The same agent behind ``agentproto serve`` (the package under ``root``); every chunk
    must arrive as a TextDelta."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["AGENTPROTO_DB"] = "off"
    extra = ["--record", record] if record else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        cwd=str(root),  # ``-m`` puts the current directory first on sys.path, before PYTHONPATH
    )
    assert proc.stdin and proc.stdout
    reader = lines(proc.stdout.fileno())
    json.loads(next(reader))  # hello
    agent = {"acp": {"name": "bench", "path": sys.executable, "args": [str(SELF), "--agent"]}}
    proc.stdin.write(json.dumps({"id": 1, "cmd": "open", "agent": agent, "dir": str(ROOT)}).encode() + b"\n")
    proc.stdin.flush()
    session = None
    for line in reader:
        obj = json.loads(line)
        if obj.get("id") == 1:
            if "ok" not in obj:
                raise SystemExit(f"open failed: {obj}")
            session = obj["ok"]["id"]
            break
    cpu_before = cpu_seconds(proc.pid)
    started = time.perf_counter()
    proc.stdin.write(json.dumps({"id": 2, "cmd": "prompt", "session": session, "text": str(n)}).encode() + b"\n")
    proc.stdin.flush()
    parts: list[str] = []
    stop: Any = None
    for line in reader:
        obj = json.loads(line)
        event = obj.get("event")
        if event is None:
            if "error" in obj or "closed" in obj:
                raise SystemExit(f"the session was lost: {obj}")
            continue
        kind = event["kind"]
        if isinstance(kind, dict):
            if "TextDelta" in kind:
                parts.append(kind["TextDelta"]["text"])
            elif "TurnEnded" in kind:
                stop = kind["TurnEnded"]["stop"]
                break
    elapsed = time.perf_counter() - started
    cpu_after = cpu_seconds(proc.pid)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    proc.stdin.close()
    for _ in reader:
        pass
    proc.wait()
    expected = "".join(chunk_text(i) for i in range(n))
    text = "".join(parts)
    if stop != {"Completed": {"source": "Protocol"}} or text != expected:
        raise SystemExit(f"LOST: stop={stop} text {len(text)} of {len(expected)} characters")
    return elapsed, len(parts), cpu




def before_main(sizes: list[int], runs: int, before: str) -> int:
    """Floor, serve from ``before`` (a revision or a directory) and serve from this checkout,
    interleaved in each run: chunks per second of wall time, best and median of the runs, and
    the least CPU seconds of the relay (the floor loop's, or the serve process's), each as a
    ratio to the floor's (CPU: floor / serve, the share of the floor's speed on CPU alone)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(before).resolve() if os.path.isdir(before) else export(before, tmp)
        print(f"before: {before} ({root})\nafter:  {ROOT}\n{runs} runs each, interleaved; chunks/s best (median)")
        print(f"{'N':>9} {'floor':>17} {'before':>17} {'ratio':>10} {'after':>17} {'ratio':>10}"
              f" {'cpu s floor':>12} {'before':>7} {'ratio':>6} {'after':>7} {'ratio':>6}  lost")
        for n in sizes:
            times: dict[str, list[float]] = {"floor": [], "before": [], "after": []}
            cpu = {name: float("inf") for name in times}
            lost = 0
            for _ in range(runs):
                for name in times:
                    if name == "floor":
                        elapsed, got, used = floor_run(n)
                    else:
                        elapsed, got, used = serve_run(n, root=root if name == "before" else ROOT)
                    lost = max(lost, n - got)
                    times[name].append(elapsed)
                    cpu[name] = min(cpu[name], used if used is not None else float("inf"))
            best = {name: n / min(t) for name, t in times.items()}
            med = {name: n / statistics.median(t) for name, t in times.items()}

            def cell(name: str) -> str:
                return f"{best[name]:>8,.0f} ({med[name]:>6,.0f})"

            def ratio(name: str) -> str:
                return f"{best[name] / best['floor']:>4.0%} ({med[name] / med['floor']:>3.0%})"

            print(f"{n:>9,} {cell('floor'):>17} {cell('before'):>17} {ratio('before'):>10} {cell('after'):>17}"
                  f" {ratio('after'):>10} {cpu['floor']:>12.4f} {cpu['before']:>7.4f} {cpu['floor'] / cpu['before']:>6.0%}"
                  f" {cpu['after']:>7.4f} {cpu['floor'] / cpu['after']:>6.0%}  {lost}",
                  flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", action="store_true", help="run as the benchmark's ACP agent")
    parser.add_argument("-n", type=int, action="append", help="chunks per turn (repeatable)")
    parser.add_argument("--runs", type=int, default=5, help="runs per size; the best is reported")
    parser.add_argument("--record", action="store_true", help="also run serve --record, against serve without it")
    parser.add_argument("--before", metavar="REV", help="also run serve from the package at REV (or a checkout DIR)")
    args = parser.parse_args()
    if args.agent:
        return run_agent()
    sizes = args.n or [1_000, 20_000]
    if args.record:
        return record_main(sizes, args.runs)
    if args.before:
        return before_main(sizes, args.runs, args.before)
    print(
        f"{'N':>9} {'floor chunks/s':>15} {'serve chunks/s':>15} {'ratio':>6}"
        f" {'floor cpu s':>12} {'serve cpu s':>12} {'cpu ratio':>9}  lost"
    )
    for n in sizes:
        floor_best = serve_best = float("inf")
        floor_cpu = serve_cpu = float("inf")
        lost = 0
        for _ in range(args.runs):
            elapsed, chunks, cpu = floor_run(n)
            assert chunks == n, f"floor saw {chunks} of {n}"
            floor_best = min(floor_best, elapsed)
            floor_cpu = min(floor_cpu, cpu if cpu is not None else float("inf"))
            elapsed, delivered, cpu = serve_run(n)
            lost = max(lost, n - delivered)
            serve_best = min(serve_best, elapsed)
            serve_cpu = min(serve_cpu, cpu if cpu is not None else float("inf"))
        floor_rate, serve_rate = n / floor_best, n / serve_best
        cpu_ratio = f"{floor_cpu / serve_cpu:>9.0%}" if 0 < serve_cpu < float("inf") else f"{'n/a':>9}"
        print(
            f"{n:>9,} {floor_rate:>15,.0f} {serve_rate:>15,.0f} {serve_rate / floor_rate:>6.0%}"
            f" {floor_cpu:>12.3f} {serve_cpu:>12.3f} {cpu_ratio}  {lost}"
        )
    return 0


def record_main(sizes: list[int], runs: int) -> int:
    """serve with and without --record, interleaved run by run (same machine, same moment)."""
    print(f"{'N':>9} {'serve chunks/s':>15} {'+record chunks/s':>17} {'ratio':>6} {'serve cpu s':>12}"
          f" {'+record cpu s':>14} {'record MB':>10}")  # fmt: skip
    for n in sizes:
        plain = recorded = plain_cpu = recorded_cpu = float("inf")
        size = 0
        for _ in range(runs):
            elapsed, _, cpu = serve_run(n)
            plain, plain_cpu = min(plain, elapsed), min(plain_cpu, cpu or float("inf"))
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "bench.ndjson")
                elapsed, _, cpu = serve_run(n, path)
                size = os.path.getsize(path)
            recorded, recorded_cpu = min(recorded, elapsed), min(recorded_cpu, cpu or float("inf"))
        print(f"{n:>9,} {n / plain:>15,.0f} {n / recorded:>17,.0f} {plain / recorded:>6.0%} {plain_cpu:>12.3f}"
              f" {recorded_cpu:>14.3f} {size / 1e6:>10.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
