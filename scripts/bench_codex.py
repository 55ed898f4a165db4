#!/usr/bin/env python3
"""Benchmark: one Codex turn through agentproto vs the same turn by a raw app-server client.

Both drive the same pinned ``codex app-server`` against the same fake OpenAI Responses API
on 127.0.0.1 (tests/fake_openai.py), streaming the same answer. The raw client is the
minimum a program needs: initialize, thread/start, then per turn turn/start and read
until turn/completed. The agentproto side is ``serve`` driven by the Python client:
prompt, then read events until TurnEnded. Turns alternate between the two (A B A B …) so
drift on the machine hits both alike; the figures are medians.

    python3 scripts/bench_codex.py [--turns 30] [--chunks 200]
"""

from __future__ import annotations

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
from tests import fake_openai as fo


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

            raw_times: list[float] = []
            ap_times: list[float] = []
            for i in range(args.warmup + args.turns):
                for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                    start = time.perf_counter()
                    if side == 0:
                        text = raw.turn(thread, f"turn {i}")
                        elapsed = time.perf_counter() - start
                        if i >= args.warmup:
                            raw_times.append(elapsed)
                    else:
                        text = agentproto_turn(session, f"turn {i}")
                        elapsed = time.perf_counter() - start
                        if i >= args.warmup:
                            ap_times.append(elapsed)
                    assert text == answer, f"unexpected answer: {text[:80]!r}"
            session.close()
            rt.close()
            raw.close()
        finally:
            world.close()

    raw_med = statistics.median(raw_times)
    ap_med = statistics.median(ap_times)
    print(f"codex app-server, fake Responses API, {args.chunks} text deltas per turn, {args.turns} turns per side (alternating)")
    print(f"{'':24}{'median':>10}{'mean':>10}{'p90':>10}")
    for name, times in (("raw app-server client", raw_times), ("agentproto serve+client", ap_times)):
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"{name:24}{statistics.median(times) * 1000:9.1f}ms{statistics.mean(times) * 1000:9.1f}ms{p90 * 1000:9.1f}ms")
    print(f"turn overhead (median): {(ap_med / raw_med - 1) * 100:+.1f}%   (target <= 3%)")
    print(f"events per agentproto turn: {EVENTS['count'] / (args.warmup + args.turns):.1f} "
          f"(Codex wrote {args.chunks} deltas; deltas read together are merged)")
    print(f"session open: raw {raw_open * 1000:.0f} ms, agentproto {ap_open * 1000:.0f} ms "
          f"(agentproto also reads account/read and model/list)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
