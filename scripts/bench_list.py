#!/usr/bin/env python3
"""Benchmark: ``agentproto list`` against reading the same agents' versions one after another,
in the same run.

- list: ``python3 -m agentproto list --json`` (it reads every installed agent's ``--version``
  in parallel through its loop), wall time to exit;
- sequential: each agent ``list`` found, ``EXECUTABLE --version`` run to its end one after
  another (what a loop over the agents would cost), plus ``python3 -c pass`` for the
  interpreter's own start;
- slowest: the slowest single ``--version`` of the same round, the floor a parallel probe
  can reach.

The three run interleaved, ``--runs`` rounds (default 5), and the medians are printed with the
ratios. The agents are whatever is on PATH; ``--agents DIR`` puts DIR first (the suite's
pinned CLIs: ``--agents .cache/agents/node_modules/.bin``).

    python3 scripts/bench_list.py --agents .cache/agents/node_modules/.bin
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, cwd=str(ROOT), timeout=120)
    return time.perf_counter() - start, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agents", metavar="DIR", help="put DIR first on PATH")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if args.agents:
        env["PATH"] = f"{Path(args.agents).resolve()}:{env.get('PATH', '')}"
    _, out = timed([sys.executable, "-m", "agentproto", "list", "--json"], env)
    found = [a for a in json.loads(out)["agents"] if a["id"] != "mock"]
    if not found:
        print("no agent installed on PATH: nothing to measure (try --agents .cache/agents/node_modules/.bin)")
        return 1
    print(f"agents: {', '.join(a['id'] for a in found)}; {args.runs} rounds, interleaved")
    lists, sequential, slowest = [], [], []
    for _ in range(args.runs):
        lists.append(timed([sys.executable, "-m", "agentproto", "list", "--json"], env)[0])
        start_cost = timed([sys.executable, "-c", "pass"], env)[0]
        each = [timed([a["executable_path"], "--version"], env)[0] for a in found]
        sequential.append(start_cost + sum(each))
        slowest.append(start_cost + max(each))
    m_list, m_seq, m_slow = (statistics.median(x) for x in (lists, sequential, slowest))
    print(f"list (parallel):        {m_list:6.2f} s")
    print(f"sequential (baseline):  {m_seq:6.2f} s   list is {m_list / m_seq:.2f}x of it")
    print(f"slowest one (floor):    {m_slow:6.2f} s   list is {m_list / m_slow:.2f}x of it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
