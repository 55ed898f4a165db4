#!/usr/bin/env python3
"""Benchmark: how long ``generate`` takes to collect a long answer, this tree against another.

The mock agent (``serve --mock``) answers with N KiB of text in 1 KiB ``TextDelta`` chunks
(a ``Repeat`` step) and ends its turn; the client sends one protocol 1 ``generate`` and
times it from the request to its reply, which must be the whole answer. The sidecar is
started (and has said hello) before the clock starts, so start-up is not counted. With
``--before REV`` the same runs are made, interleaved, against the package as it is at REV
(``git archive`` into a temp dir): both sides are measured in the same run, on the same
machine, under the same load.

    python scripts/bench_generate.py                  # 1, 3 and 6 MB, best of 3
    python scripts/bench_generate.py --before main    # and the same against main
    python scripts/bench_generate.py --sizes 1 2 4 8 --runs 5

Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_export import export

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 1024


def write_script(directory: Path, size_mb: int) -> Path:
    chunk = "x" * (CHUNK - 1) + "\n"
    times = size_mb * 1024 * 1024 // CHUNK
    script = {
        "turns": [
            [
                {"Repeat": {"times": times, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": chunk}}}]}},
                {"End": {"Completed": {"source": "Protocol"}}},
            ]
        ]
    }
    path = directory / f"answer-{size_mb}mb.json"
    path.write_text(json.dumps(script))
    return path


def one_run(root: Path, script: Path, expected: int) -> float:
    """Seconds from the generate request to its reply, on a sidecar run from ``root``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env["AGENTPROTO_DB"] = "off"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve", "--mock", str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=str(root),  # ``-m`` puts the current directory first on sys.path
    )
    assert proc.stdin and proc.stdout
    try:
        json.loads(proc.stdout.readline())  # hello
        request = {"id": 1, "cmd": "generate", "agent": "mock", "dir": str(script.parent), "prompt": "go"}
        started = time.perf_counter()
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"{root}: the sidecar ended before answering")
            reply = json.loads(line)
            if reply.get("id") == 1:
                break
        elapsed = time.perf_counter() - started
        if "ok" not in reply or len(reply["ok"]) != expected:
            raise SystemExit(f"{root}: wrong answer: {str(reply)[:200]}")
        return elapsed
    finally:
        proc.stdin.close()
        proc.wait(30)




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 3, 6], metavar="MB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="also run the package at this git revision (e.g. main)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-generate-"))
    try:
        trees = {"after": ROOT}
        if args.before:
            trees = {"before": export(args.before, work / "before"), "after": ROOT}
            print(f"before: {args.before} ({trees['before']})")
        print(f"after:  {ROOT}")
        print(f"answers in {CHUNK}-byte TextDelta chunks through serve --mock's generate; best of {args.runs}")
        print(f"{'MB':>4} " + " ".join(f"{name + ' s':>10}" for name in trees) + ("   ratio" if len(trees) > 1 else ""))
        for size in args.sizes:
            script = write_script(work, size)
            best = {name: float("inf") for name in trees}
            for _ in range(args.runs):
                for name, root in trees.items():  # interleaved: both sides see the same load
                    best[name] = min(best[name], one_run(root, script, size * 1024 * 1024))
            ratio = f"  {best['before'] / best['after']:6.1f}x" if "before" in best else ""
            print(f"{size:>4} " + " ".join(f"{best[name]:>10.3f}" for name in trees) + ratio, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
