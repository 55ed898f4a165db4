#!/usr/bin/env python3
"""Benchmark: one Codex turn through agentproto vs the same turn by a raw app-server client.

Both drive the same pinned ``codex app-server`` against the same fake OpenAI Responses API
on 127.0.0.1 (tests/fakes/fake_openai.py), streaming the same answer. The raw client is the
minimum a program needs: initialize, thread/start, then per turn turn/start and read
until turn/completed. The agentproto side is ``serve`` driven by the Python client:
prompt, then read events until TurnEnded. Turns alternate between the two (A B A B …) so
drift on the machine hits both alike; the figures are medians.

    python3 scripts/bench_codex.py [--turns 30] [--chunks 200]
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentproto.client import Runtime, kind_of
from tests.fakes import fake_openai as fo


class RawClient:
    """A minimal raw ``codex app-server`` client: JSON-RPC lines over pipes."""

    def __init__(self, codex: str, cwd: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=cwd, env=env, start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.buf = b""
        self.next_id = 0

    def send(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def read(self) -> dict:
        while b"\n" not in self.buf:
            self.selector.select(30)
            data = os.read(self.fd, 256 * 1024)
            if not data:
                raise EOFError("codex exited")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def until(self, match) -> dict:
        while True:
            message = self.read()
            if match(message):
                return message

    def open(self, cwd: str) -> str:
        i = self.request("initialize", {"clientInfo": {"name": "raw", "title": None, "version": "0"},
                                        "capabilities": {"experimentalApi": True, "requestAttestation": False}})
        self.until(lambda m: m.get("id") == i)
        self.send({"method": "initialized"})
        i = self.request("thread/start", {"cwd": cwd, "approvalPolicy": "on-request"})
        return self.until(lambda m: m.get("id") == i)["result"]["thread"]["id"]

    def turn(self, thread: str, text: str) -> str:
        self.request("turn/start", {"threadId": thread, "input": [{"type": "text", "text": text, "text_elements": []}]})
        out = []
        while True:
            message = self.read()
            method = message.get("method")
            if method == "item/agentMessage/delta":
                out.append(message["params"]["delta"])
            elif method == "turn/completed":
                return "".join(out)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


EVENTS = {"count": 0}


def agentproto_turn(session, text: str) -> str:
    session.prompt(text)
    out = []
    for event in session.events(timeout=60):
        EVENTS["count"] += 1
        kind = kind_of(event)
        if kind == "TextDelta":
            out.append(event["kind"]["TextDelta"]["text"])
        elif kind == "TurnEnded":
            return "".join(out)
    raise RuntimeError("session ended")


class FramesClient:
    """``agentproto serve`` spoken to in raw protocol 1 frames, on this thread: what the
    sidecar itself costs, without the Python client library's reader thread."""

    def __init__(self, bin: str | None, env: dict[str, str]) -> None:
        argv = [bin] if bin else [sys.executable, "-m", "agentproto"]
        child_env = dict(env, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(argv + ["serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # hello
        self.next_id = 0

    def call(self, cmd: dict) -> dict:
        self.next_id += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps({"id": self.next_id, **cmd}) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            line = json.loads(self.proc.stdout.readline())
            if line.get("id") == self.next_id:
                if "error" in line:
                    raise RuntimeError(line["error"])
                return line["ok"]

    def turn(self, session: str, text: str) -> str:
        self.call({"cmd": "prompt", "session": session, "text": text})
        assert self.proc.stdout is not None
        out = []
        for raw in self.proc.stdout:
            line = json.loads(raw)
            kind = line.get("event", {}).get("kind")
            if isinstance(kind, dict):
                if "TextDelta" in kind:
                    out.append(kind["TextDelta"]["text"])
                elif "TurnEnded" in kind:
                    return "".join(out)
        raise RuntimeError("sidecar ended")

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        for _ in self.proc.stdout:
            pass
        self.proc.wait(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30, help="measured turns per side (default 30)")
    parser.add_argument("--chunks", type=int, default=200, help="text deltas per answer (default 200)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bin", default=None, help="the sidecar to run as BIN serve (default: this checkout)")
    args = parser.parse_args()

    answer = " ".join(f"word{i}" for i in range(args.chunks))
    with tempfile.TemporaryDirectory() as root:
        world = fo.CodexWorld(root)
        world.api.default = lambda request: fo.text(answer, chunks=args.chunks)
        codex = fo.pinned_codex()
        env = dict(os.environ, **world.env)
        try:
            t0 = time.perf_counter()
            raw = RawClient(codex, world.work, env)
            thread = raw.open(world.work)
            raw_open = time.perf_counter() - t0

            rt = Runtime.start(bin=args.bin, env=env)
            t0 = time.perf_counter()
            session = rt.open("codex", dir=world.work)
            ap_open = time.perf_counter() - t0

            frames = FramesClient(args.bin, env)
            frames_session = frames.call({"cmd": "open", "agent": "codex", "dir": world.work})["id"]

            raw_times: list[float] = []
            ap_times: list[float] = []
            frames_times: list[float] = []
            sides = [
                (lambda i: raw.turn(thread, f"turn {i}"), raw_times),
                (lambda i: agentproto_turn(session, f"turn {i}"), ap_times),
                (lambda i: frames.turn(frames_session, f"turn {i}"), frames_times),
            ]
            for i in range(args.warmup + args.turns):
                # Rotate who goes first each round: going first in a round costs.
                for run, times in sides[i % 3 :] + sides[: i % 3]:
                    start = time.perf_counter()
                    text = run(i)
                    elapsed = time.perf_counter() - start
                    if i >= args.warmup:
                        times.append(elapsed)
                    assert text == answer, f"unexpected answer: {text[:80]!r}"
            # Where the time goes: with record_wire, the sidecar stamps each line it sends to
            # and reads from Codex, so its own latency per turn (before turn/start leaves,
            # after turn/completed arrives) separates from Codex's turn time.
            wire = os.path.join(root, "wire.ndjson")
            probe = frames.call({"cmd": "open", "agent": "codex", "dir": world.work, "record_wire": wire})["id"]
            spans: list[tuple[int, int]] = []
            for i in range(args.warmup + 15):
                t0 = time.time_ns()
                frames.turn(probe, f"probe {i}")
                spans.append((t0, time.time_ns()))
            frames.call({"cmd": "close", "session": probe})
            with open(wire, encoding="utf-8") as f:
                records = [json.loads(line) for line in f]
            starts = [r["t"] for r in records if r["dir"] == "to_agent" and '"turn/start"' in r["line"]]
            ends = [r["t"] for r in records if r["dir"] == "from_agent" and '"turn/completed"' in r["line"]]
            own = [((s - t0) + (t1 - e)) / 1e9 for (t0, t1), s, e in zip(spans, starts, ends)][args.warmup :]
            inner = [(e - s) / 1e9 for s, e in zip(starts, ends)][args.warmup :]
            session.close()
            rt.close()
            frames.close()
            raw.close()
        finally:
            world.close()

    raw_med = statistics.median(raw_times)
    ap_med = statistics.median(ap_times)
    print(f"codex app-server, fake Responses API, {args.chunks} text deltas per turn, {args.turns} turns per side (alternating)")
    print(f"{'':24}{'median':>10}{'mean':>10}{'p90':>10}")
    frames_med = statistics.median(frames_times)
    for name, times in (("raw app-server client", raw_times), ("agentproto serve+client", ap_times),
                        ("agentproto serve, frames", frames_times)):
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"{name:24}{statistics.median(times) * 1000:9.1f}ms{statistics.mean(times) * 1000:9.1f}ms{p90 * 1000:9.1f}ms")
    print(f"turn overhead (median), raw frames to serve: {(frames_med / raw_med - 1) * 100:+.1f}%   (target <= 3%)")
    print(f"turn overhead (median), through the Python client: {(ap_med / raw_med - 1) * 100:+.1f}%")
    own_med, inner_med = statistics.median(own), statistics.median(inner)
    print(f"the sidecar's own latency per turn (app -> turn/start, turn/completed -> app): {own_med * 1000:.2f} ms "
          f"= {own_med / raw_med * 100:.1f}% of a raw turn; Codex's own turn inside it: {inner_med * 1000:.1f} ms "
          f"(the end-to-end medians above also carry Codex's variance between two processes)")
    print(f"events per agentproto turn: {EVENTS['count'] / (args.warmup + args.turns):.1f} "
          f"(Codex wrote {args.chunks} deltas; deltas read together are merged)")
    print(f"session open: raw {raw_open * 1000:.0f} ms, agentproto {ap_open * 1000:.0f} ms "
          f"(agentproto also reads account/read and model/list)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
