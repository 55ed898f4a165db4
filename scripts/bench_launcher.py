#!/usr/bin/env python3
"""The installed launcher's start against `python3 -m agentproto` in the checkout.

    python scripts/bench_launcher.py [--runs N] [--python PY]

Installs into a temp prefix with scripts/install.py (run by PY, default this interpreter),
then times, in interleaved rounds, each command spawned to its first line (`serve`'s hello)
or its exit (`--version`, `--single-shot` capabilities): the launcher from another
directory, `python3 -m agentproto` in the checkout (bytecode cached: warmed first), and
`python3 -c pass` and `python3 -IS -c pass` (the launcher's own flags: no site) as floors. Medians of wall and CPU time. Figures only: nothing here
asserts a time.
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' observations database in a temp dir)

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_core import _timed

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = {
    "--version": (["--version"], b"", False),
    "serve (to hello)": (["serve"], b"", True),
    "--single-shot": (["--single-shot"], b'{"op": "capabilities"}\n', False),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AGENTPROTO_"))}
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "prefix"
        env_db = {**env, "HOME": tmp}
        done = subprocess.run([args.python, "-I", str(ROOT / "scripts" / "install.py"), "--prefix", str(prefix)],
                              capture_output=True, text=True, env=env_db)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        launcher = str(prefix / "bin" / "agentproto")
        ways = {
            "python -c pass": ([args.python, "-c", "pass"], tmp),
            "python -IS -c pass": ([args.python, "-IS", "-c", "pass"], tmp),
            "launcher": ([launcher], tmp),
            "python3 -m agentproto": ([args.python, "-m", "agentproto"], str(ROOT)),
        }
        rows: dict[str, tuple[list[float], list[float]]] = {}
        plan = [("python -c pass", "", ([], b"", False)), ("python -IS -c pass", "", ([], b"", False))]
        plan += [(way, name, command) for name, command in COMMANDS.items() for way in ("launcher", "python3 -m agentproto")]
        for way, name, (extra, stdin, first) in plan:  # warm-up: the checkout's bytecode is written
            argv, cwd = ways[way]
            _timed([*argv, *extra], stdin, first, env_db, cwd)
        for _ in range(args.runs):
            for way, name, (extra, stdin, first) in plan:
                argv, cwd = ways[way]
                wall, cpu = _timed([*argv, *extra], stdin, first, env_db, cwd)
                walls, cpus = rows.setdefault(f"{way} {name}".strip(), ([], []))
                walls.append(wall)
                cpus.append(cpu)
        floor = statistics.median(rows["python -c pass"][0])
        print(f"start-up, median of {args.runs} interleaved runs ({args.python}; wall to the first line or the exit)")
        for label, (walls, cpus) in rows.items():
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            print(f"  {label:40} {wall * 1000:7.1f} ms  {wall / floor:5.2f}x   cpu {cpu * 1000:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
