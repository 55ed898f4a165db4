#!/usr/bin/env python3
"""Two checkouts of agentproto, measured in the same run, interleaved: this one and another.

    python scripts/bench_versus.py /path/to/other/checkout [--rounds N] [-n CHUNKS]

For a before/after figure (a restructuring that must be no slower): check the older commit
out into a temporary worktree (``git worktree add --detach /tmp/base REV``) and name it.
Each round runs, alternating which checkout goes first:

1. cold start: ``python3 -m agentproto serve`` to its hello line (each checkout's own code,
   started the way a user starts it), beside ``python3 -c pass``;
2. the ACP relay: scripts/bench_acp.py's agent (this checkout's copy, for both) streaming
   N chunks through each checkout's ``serve``; every chunk must arrive.

The figures are medians over the rounds (cold start) and bests (relay, wall and the serve
process's CPU seconds), and the ratio other/this: on a shared machine the absolute figures
wander, the ratio of two runs taken side by side much less. Nothing here asserts a time.
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _bench_acp():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_acp", HERE / "bench_acp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cold_start(tree: Path | None) -> float:
    """Seconds from exec to the hello line (``tree`` None: ``python3 -c pass`` to its exit)."""
    env = {**os.environ, "PYTHONPATH": str(tree or ROOT)}
    argv = [sys.executable, "-m", "agentproto", "serve"] if tree else [sys.executable, "-c", "pass"]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(tree or ROOT))
    assert proc.stdin is not None and proc.stdout is not None
    if tree is None:
        proc.communicate()
        return time.perf_counter() - started
    if not proc.stdout.readline().startswith(b"{"):
        raise SystemExit(f"{tree}: serve wrote no hello")
    elapsed = time.perf_counter() - started
    proc.communicate()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (its root: the folder holding agentproto/)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of cold starts (default 15)")
    parser.add_argument("--relay-rounds", type=int, default=5, help="rounds of the ACP relay (default 5)")
    parser.add_argument("-n", type=int, default=50_000, help="chunks per relay turn (default 50,000)")
    args = parser.parse_args()
    other = args.other.resolve()
    if not (other / "agentproto" / "__main__.py").is_file():
        parser.error(f"{other} holds no agentproto/__main__.py")
    trees = {"this": ROOT, "other": other}

    starts: dict[str, list[float]] = {"pass": [], "this": [], "other": []}
    for i in range(args.rounds):
        order = ["this", "other"] if i % 2 == 0 else ["other", "this"]
        starts["pass"].append(cold_start(None))
        for name in order:
            starts[name].append(cold_start(trees[name]))
    acp = _bench_acp()
    relay: dict[str, list[tuple[float, float]]] = {"this": [], "other": []}
    for i in range(args.relay_rounds):
        for name in ["this", "other"] if i % 2 == 0 else ["other", "this"]:
            acp.ROOT = trees[name]  # serve_run puts ROOT on PYTHONPATH and opens the session there
            elapsed, delivered, cpu = acp.serve_run(args.n)
            if delivered != args.n:
                raise SystemExit(f"{name}: {delivered} of {args.n} chunks arrived")
            relay[name].append((elapsed, cpu if cpu is not None else float("nan")))

    print(f"this:  {ROOT}\nother: {other}")
    med = {name: statistics.median(values) * 1000 for name, values in starts.items()}
    print(
        f"cold start to hello (median of {args.rounds}): this {med['this']:.1f} ms, other {med['other']:.1f} ms,"
        f" python3 -c pass {med['pass']:.1f} ms; this/other {med['this'] / med['other']:.2f}"
    )
    best = {name: min(e for e, _ in runs) for name, runs in relay.items()}
    cpu = {name: min(c for _, c in runs) for name, runs in relay.items()}
    print(
        f"ACP relay, {args.n:,} chunks (best of {args.relay_rounds}): this {args.n / best['this']:,.0f} chunks/s,"
        f" other {args.n / best['other']:,.0f} chunks/s; this/other {best['other'] / best['this']:.2f}"
        f" (rate); serve CPU this {cpu['this']:.2f} s, other {cpu['other']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
