#!/usr/bin/env python3
"""Benchmarks of the core, each measured against a baseline in the same run.

    python scripts/bench_core.py [--events N] [--sessions N] [--runs N] [--python PY] [--cold-only] [-v]
    python scripts/bench_core.py --before REV     # the cold starts, this tree against REV

1. Cold start: what a user sees, a whole cold process: ``python -m agentproto serve``
   spawned to its hello line, ``--version`` and ``--single-shot`` with ``capabilities``
   spawned to their exit, each against ``python -c pass`` spawned the same way on the same
   interpreter (target <= 1.25x): the median of ``--runs`` (21) interleaved rounds,
   with the bytecode cache on (as users have it), then with ``PYTHONDONTWRITEBYTECODE=1``
   from a fresh copy of the package (as a read-only vendored copy runs). ``python -m`` of
   an empty package is shown beside them: runpy's own cost, which no module of ours can
   take back. ``-v`` adds ``python -X importtime`` findings: what each command imports
   beyond ``python -c pass``, the slowest, and any heavy module or driver among them.
   ``--before REV`` runs the package as it is at REV (``git archive`` into a temp dir)
   beside this tree's, each command of both interleaved in every round, and then stops
   (the cold starts only).
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

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_export import export

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


#: What the cold start is measured on: each command, from exec to its first line (serve's
#: hello) or to its exit, against ``python -c pass`` on the same interpreter.
COLD = {
    "hello": (["-m", "agentproto", "serve"], b"", True),
    "--version": (["-m", "agentproto", "--version"], b"", False),
    "single-shot": (["-m", "agentproto", "--single-shot"], b'{"op":"capabilities"}', False),
}
#: A package whose ``__main__`` is empty: what ``python -m`` itself costs (runpy), which
#: no module of ours can take back.
EMPTY_MAIN = "agentproto_bench_empty"


def _timed(argv: list[str], stdin: bytes, first_line: bool, env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall seconds to the first line (or to the exit), and the child's CPU seconds to its exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stdin is not None and proc.stdout is not None
    if stdin:
        proc.stdin.write(stdin)
    if first_line:
        if not proc.stdout.readline():
            raise SystemExit(f"{argv}: no first line")
        elapsed = time.perf_counter() - t0
    proc.stdin.close()
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if not first_line:
        elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: exit {proc.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime


def _cold_env(bytecode: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _cold_tree(tmp: str, bytecode: bool, package: Path, name: str) -> str:
    """A directory to run from: with bytecode caching, one that links to ``package`` (whose
    cache the warm-up writes); without, a fresh copy of it with no ``__pycache__`` (as a
    read-only vendored copy runs). Either holds the empty package too."""
    where = os.path.join(tmp, ("cached-" if bytecode else "fresh-") + name)
    os.makedirs(os.path.join(where, EMPTY_MAIN))
    for empty in ("__init__.py", "__main__.py"):
        open(os.path.join(where, EMPTY_MAIN, empty), "w").close()
    if bytecode:
        os.symlink(package, os.path.join(where, "agentproto"))
    else:
        shutil.copytree(package, os.path.join(where, "agentproto"), ignore=shutil.ignore_patterns("__pycache__"))
    return where




def cold_start(runs: int, python: str, verbose: bool, before: str | None = None) -> None:
    """Median of ``runs`` interleaved rounds (every command once per round, baseline first);
    with ``before``, the package at that revision's commands too, in the same rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        packages = {"": ROOT / "agentproto"}
        if before:
            old = export(before, os.path.join(tmp, "before")) / "agentproto"
            packages = {f"{before}: ": old, "": ROOT / "agentproto"}
        for bytecode in (True, False):
            env = _cold_env(bytecode)
            cwds = {prefix: _cold_tree(tmp, bytecode, package, str(n)) for n, (prefix, package) in enumerate(packages.items())}
            here = cwds[""]
            commands = {
                "python -c pass": (["-c", "pass"], b"", False, here),
                "python -m <empty>": (["-m", EMPTY_MAIN], b"", False, here),
            }
            for name, (args, stdin, first) in COLD.items():
                for prefix, cwd in cwds.items():
                    commands[prefix + name] = (args, stdin, first, cwd)
            if bytecode:
                for args, stdin, first, cwd in commands.values():  # write the caches before timing
                    _timed([python, *args], stdin, first, env, cwd)
            wall: dict[str, list[float]] = {name: [] for name in commands}
            cpu: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(runs):
                for name, (args, stdin, first, cwd) in commands.items():
                    w, c = _timed([python, *args], stdin, first, env, cwd)
                    wall[name].append(w)
                    cpu[name].append(c)
            base_wall = statistics.median(wall["python -c pass"])
            base_cpu = statistics.median(cpu["python -c pass"])
            label = "bytecode cached" if bytecode else "PYTHONDONTWRITEBYTECODE=1, a fresh copy"
            print(f"cold start ({label}; median of {runs} interleaved runs; wall to the first line or the exit)")
            for name, samples in wall.items():
                w, c = statistics.median(samples), statistics.median(cpu[name])
                target = "  (target <= 1.25x)" if name in COLD else ""
                print(
                    f"  {name:24} {w * 1000:7.1f} ms  {w / base_wall:5.2f}x   cpu {c * 1000:6.1f} ms "
                    f"{c / base_cpu:5.2f}x{target}",
                    flush=True,
                )
            if verbose:
                importtime_findings(python, env, here)


def _importtime(python: str, args: list[str], stdin: bytes, env: dict[str, str], cwd: str) -> dict[str, int]:
    """The modules a run imports, each with its own (self) import time in microseconds."""
    proc = subprocess.run([python, "-X", "importtime", *args], input=stdin, capture_output=True, env=env, cwd=cwd)
    found: dict[str, int] = {}
    for line in proc.stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            own, _cumulative, name = line[len("import time:"):].split("|", 2)
            found[name.strip()] = int(own)
    return found


#: Modules a start should not pay for (tests/test_startup.py holds serve, --version and
#: --single-shot to it): the standard library's slow ones, and any agent driver.
SLOW = ("dataclasses", "inspect", "ast", "dis", "tokenize", "typing", "subprocess", "threading", "tempfile",
        "shutil", "random", "bz2", "lzma", "pathlib", "zipfile", "importlib.resources", "textwrap", "copy")
SEAM = ("agentproto.drivers", "agentproto.drivers.base", "agentproto.drivers.catalog",
        "agentproto.loopio.transport", "agentproto.loopio.process_transport")


def importtime_findings(python: str, env: dict[str, str], cwd: str, samples: int = 5) -> None:
    """``python -X importtime``: what each command imports beyond ``python -c pass`` (the
    least self time of ``samples`` runs, which loaded machines inflate the least)."""
    base = _importtime(python, ["-c", "pass"], b"", env, cwd)
    print(f"  python -X importtime: python -c pass imports {len(base)} modules at start")
    for name, (args, stdin, _first) in COLD.items():
        best: dict[str, int] = {}
        for _ in range(samples):
            for module, own in _importtime(python, args, stdin, env, cwd).items():
                best[module] = min(own, best.get(module, own))
        extra = {m: t for m, t in best.items() if m not in base}
        ours = sum(t for m, t in extra.items() if m.startswith("agentproto"))
        heavy = [m for m in extra if m in SLOW or (m.startswith("agentproto.drivers.") and m not in SEAM)]
        top = sorted(extra.items(), key=lambda item: -item[1])[:8]
        print(
            f"  {name}: {len(extra)} more modules, {sum(extra.values()) / 1000:.1f} ms of imports "
            f"({ours / 1000:.1f} ms in agentproto's own); heavy: {', '.join(heavy) or 'none'}"
        )
        print("    slowest: " + ", ".join(f"{m} {t / 1000:.2f}" for m, t in top))


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
    parser.add_argument("--runs", type=int, default=21, help="interleaved cold-start runs (the median is reported)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the cold starts run (default: this one)")
    parser.add_argument("--cold-only", action="store_true", help="measure the cold start only")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print python -X importtime findings")
    parser.add_argument("--before", metavar="REV", help="the cold starts only, this tree against the package at REV")
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]} on {os.uname().machine}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the start"
    )
    cold_start(args.runs, args.python, args.verbose, args.before)
    if args.cold_only or args.before:
        return 0
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
