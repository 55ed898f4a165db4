#!/usr/bin/env python3
"""Benchmark: turns of the ``agy`` test double (tests/fakes/fake_agy.py) through ``agentproto
serve``, against a raw client of the same double in the same run.

- raw: a bare client that starts the double on seed 003's launch line, waits for ``init``,
  writes one ``user`` line per turn and reads until the turn's ``result`` (``json.loads``
  per line, the least any client must do);
- serve: ``python -m agentproto serve`` with an ``agy`` session, a client writing protocol
  1 ``prompt`` frames and reading until ``TurnEnded``.

Two kinds of turn: a short answer (the turn's latency, median of the runs) and one long
answer streamed in N deltas (deltas per second). Every serve turn checks the text the app
saw is exactly the double's, so nothing lost counts too. The two run alternately, 3 times
each, and the best run of each counts: on a shared machine single figures wander a lot.

    python scripts/bench_agy.py               # 30 short turns, one turn of 5,000 deltas
    python scripts/bench_agy.py --turns 50 -n 20000
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

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fakes" / "fake_agy.py"


def turn_text(words: int, deltas: int) -> tuple[str, str]:
    """A prompt carrying its own model turn, and the text the model answers with."""
    answer = " ".join(f"w{i}" for i in range(words))
    return "FAKE_AGY_TURN: " + json.dumps([{"text": answer, "deltas": deltas}]), answer + "\n"


class Lines:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def send(self, value: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(value).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError("the process ended")
        return json.loads(line)


def raw_client(home: str, work: str, session_dir: str, prompts: list[str]) -> list[tuple[float, str]]:
    argv = [sys.executable, str(FAKE), "--input-format", "stream-json", "--output-format", "stream-json",
            "--dangerously-skip-permissions", "--disable-slash-commands", "--add-dir", session_dir, "--print", ""]
    proc = subprocess.Popen(argv, cwd=work, env={**os.environ, "HOME": home}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines = Lines(proc)
    assert lines.read()["event"] == "init"
    out = []
    for prompt in prompts:
        start = time.perf_counter()
        lines.send({"event": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}})
        text = []
        while True:
            msg = lines.read()
            if msg["event"] == "step_update" and msg["step_update"].get("step_type") == "agent_response":
                text.append(msg["step_update"].get("text_delta", ""))
            elif msg["event"] == "result":
                break
        out.append((time.perf_counter() - start, "".join(text)))
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(10)
    return out


def serve_client(home: str, work: str, prompts: list[str]) -> list[tuple[float, str]]:
    env = {**os.environ, "HOME": home, "AGENTPROTO_AGY_BIN": str(FAKE), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "agentproto", "serve"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines = Lines(proc)
    assert "hello" in lines.read()
    lines.send({"id": 1, "cmd": "open", "agent": "agy", "dir": work})
    while True:
        reply = lines.read()
        if reply.get("id") == 1:
            session = reply["ok"]["id"]
            break
    out = []
    for n, prompt in enumerate(prompts, 2):
        start = time.perf_counter()
        lines.send({"id": n, "cmd": "prompt", "session": session, "text": prompt})
        text = []
        while True:
            line = lines.read()
            kind = line.get("event", {}).get("kind")
            if isinstance(kind, dict) and "TextDelta" in kind:
                text.append(kind["TextDelta"]["text"])
            elif isinstance(kind, dict) and "TurnEnded" in kind:
                break
        out.append((time.perf_counter() - start, "".join(text)))
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(15)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("-n", type=int, default=5000, help="deltas of the long turn")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    short, short_answer = turn_text(8, 3)
    long, long_answer = turn_text(args.n, args.n)
    prompts = [short] * args.turns + [long]
    wanted = [short_answer] * args.turns + [long_answer]
    best: dict[str, tuple[float, float]] = {}  # name -> (short turn median, long turn seconds)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-agy-") as root:
            home, work, session_dir = (os.path.join(root, name) for name in ("home", "work", "session"))
            for path in (home, work, session_dir):
                os.makedirs(path)
            runs = {"raw": raw_client(home, work, session_dir, prompts), "serve": serve_client(home, work, prompts)}
        for name, results in runs.items():
            for (_, text), want in zip(results, wanted):
                assert text == want, f"{name}: the text differs from the double's"
            figures = (statistics.median(t for t, _ in results[:-1]), results[-1][0])
            old = best.get(name, figures)
            best[name] = (min(old[0], figures[0]), min(old[1], figures[1]))
    raw_ms, serve_ms = best["raw"][0] * 1000, best["serve"][0] * 1000
    raw_rate, serve_rate = args.n / best["raw"][1], args.n / best["serve"][1]
    print(f"short turn (median of {args.turns}, best of {args.runs} runs): serve {serve_ms:.2f} ms, raw client "
          f"{raw_ms:.2f} ms, ratio {serve_ms / raw_ms:.3f} (+{serve_ms - raw_ms:.2f} ms)")
    print(f"long turn, {args.n:,} deltas: serve {serve_rate:,.0f} deltas/s, raw client {raw_rate:,.0f} deltas/s, "
          f"ratio {serve_rate / raw_rate:.0%}; 0 lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
