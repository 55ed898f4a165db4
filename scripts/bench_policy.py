#!/usr/bin/env python3
"""The guard rails' cost, in one run of one ``serve`` process (issue 24):

1. A permission request answered by the policy (``policy`` on ``open``: the app sees it opened
   and closed) against the same request answered by the app over protocol 1 (the app reads
   the RequestOpened and writes an ``answer``): a mock turn of N requests each way,
   interleaved, per request.
2. A runaway turn (the mock reports 100 more output tokens every millisecond) under a
   ``budget``: where it was stopped, in usage reports past its bound.

    python scripts/bench_policy.py [--requests N] [--runs R]
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


def request_step(index: int) -> list[Any]:
    tool = {"id": f"tool-{index}", "kind": "Execute", "title": "git status", "status": "Pending",
            "input": {"Command": {"command": "git status --short", "cwd": None}}, "output": None,
            "diffs": [], "locations": [], "raw": None}  # fmt: skip
    body = {"id": f"r{index}", "tool": tool, "options": ["AllowOnce", "DenyOnce"], "detail": None}
    return [{"Emit": {"RequestOpened": {"Permission": body}}}, "AwaitAnswer"]


class Serve:
    def __init__(self, script: dict[str, Any], workdir: str) -> None:
        path = Path(workdir) / "script.json"
        path.write_text(json.dumps(script))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve", "--mock", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=workdir,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.out, self.inp = self.proc.stdout, self.proc.stdin
        self.next_id = 0
        self.line()  # hello

    def line(self) -> Any:
        return json.loads(self.out.readline())

    def send(self, frame: dict[str, Any]) -> int:
        self.next_id += 1
        self.inp.write((json.dumps({"id": self.next_id, **frame}) + "\n").encode())
        self.inp.flush()
        return self.next_id

    def call(self, frame: dict[str, Any]) -> Any:
        frame_id = self.send(frame)
        while True:
            line = self.line()
            if line.get("id") == frame_id:
                return line.get("ok", line.get("error"))

    def turn(self, session: str, answer: bool) -> tuple[float, list[dict[str, Any]]]:
        """One prompt's turn: its wall time and its events (the app answers when ``answer``)."""
        events = []
        start = time.perf_counter()
        self.send({"cmd": "prompt", "session": session, "text": "go"})
        while True:
            line = self.line()
            event = line.get("event")
            if event is None or event["session_id"] != session:
                continue
            events.append(event)
            kind = event["kind"]
            if isinstance(kind, dict) and "RequestOpened" in kind and answer:
                request = kind["RequestOpened"]["Permission"]["id"]
                self.send({"cmd": "answer", "session": session, "request": request,
                           "answer": {"Permission": "AllowOnce"}})  # fmt: skip
            if isinstance(kind, dict) and "TurnEnded" in kind:
                return time.perf_counter() - start, events

    def close(self) -> None:
        self.inp.close()
        self.proc.wait(30)


def bench_policy(requests: int, runs: int) -> None:
    steps = [step for i in range(requests) for step in request_step(i)]
    turn = [*steps, {"End": {"Completed": {"source": "Protocol"}}}]
    script = {"turns": [turn] * (2 * runs + 2)}
    policy = [{"action": "allow", "command": ["git status **"]}]
    with tempfile.TemporaryDirectory() as work:
        serve = Serve(script, work)
        by_policy = serve.call({"cmd": "open", "agent": "mock", "dir": work, "policy": policy})["id"]
        by_app = serve.call({"cmd": "open", "agent": "mock", "dir": work})["id"]
        serve.turn(by_policy, False)  # warm-up: imports, first allocations
        serve.turn(by_app, True)
        policy_times, app_times = [], []
        for _ in range(runs):  # interleaved: both see the same machine
            elapsed, events = serve.turn(by_policy, False)
            closed = [e for e in events if isinstance(e["kind"], dict) and "RequestClosed" in e["kind"]]
            assert len(closed) == requests and all(e["extensions"]["agentproto"]["answered_by"] for e in closed)
            policy_times.append(elapsed / requests)
            elapsed, events = serve.turn(by_app, True)
            assert sum(isinstance(e["kind"], dict) and "RequestClosed" in e["kind"] for e in events) == requests
            app_times.append(elapsed / requests)
        serve.close()
    p, a = statistics.median(policy_times), statistics.median(app_times)
    print(f"permission request answered by the policy: {p * 1e6:.0f} µs (median of {runs} turns of {requests})")
    print(f"the same request answered by the app over protocol 1: {a * 1e6:.0f} µs")
    print(f"policy / app: {p / a:.2f}×")


def bench_runaway() -> None:
    report = {"UsageReport": {"input_tokens": 10, "output_tokens": 100}}
    runaway = [{"Repeat": {"times": 100000, "steps": [report, {"Sleep": 1}]}}, {"End": {"Completed": {"source": "Protocol"}}}]
    with tempfile.TemporaryDirectory() as work:
        serve = Serve({"turns": [runaway]}, work)
        session = serve.call({"cmd": "open", "agent": "mock", "dir": work, "budget": {"output_tokens": 10000}})["id"]
        elapsed, events = serve.turn(session, False)
        serve.close()
    error = [e for e in events if isinstance(e["kind"], dict) and "Diagnostic" in e["kind"]][-1]
    budget = error["extensions"]["agentproto"]["budget"]
    print(f"runaway turn under output_tokens 10,000: stopped at {budget['spent']:,} (over by {budget['over']}: "
          f"{budget['over'] / 100:.0f} report(s) of 100 past the bound) after {elapsed:.2f} s; "
          f"{events[-1]['kind']['TurnEnded']['stop']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    bench_policy(args.requests, args.runs)
    bench_runaway()


if __name__ == "__main__":
    main()
