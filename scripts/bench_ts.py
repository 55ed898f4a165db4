#!/usr/bin/env python3
"""Benchmark: the TypeScript client (clients/typescript/) against the Python client and the raw
protocol, on the same mock scripts, in the same run.

- A turn's overhead: one session plays N short turns (a TextDelta, then End), each a
  ``prompt`` and its events read up to ``StatusChanged "Idle"``, one after the other; the time
  per turn through the TypeScript client, through the Python client (agentproto/client.py),
  and through the raw protocol (a node reader writing frames and JSON-parsing lines, no client)
  is printed, and the clients' overhead over raw.
- Events per second relayed: turns of F unpaced TextDeltas (3 a round), each timed from the
  ``prompt`` to ``TurnEnded``, through the TypeScript client's ``for await``, the raw node
  reader and the Python client's ``events()``.
- The same through a replaying sidecar: a stand-in that answers `open` and, to each of 20
  prompts a round, writes a turn's 4000 event lines (the sidecar's own shape) at once, as fast as a pipe takes
  them, so the reader, not the sidecar, is the bottleneck: the clients' own ceiling.

Each sidecar is started and has said hello before the clock starts. Rounds interleave the three
readers; the median of the rounds is printed. Figures only: nothing here asserts a time.

    python3 scripts/bench_ts.py                          # 200 turns, 20000 events, 5 rounds
    python3 scripts/bench_ts.py --turns 500 --events 50000 --rounds 7
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentproto.client import AgentProtoError, Runtime, kind_of  # noqa: E402

END = {"End": {"Completed": {"source": "Protocol"}}}
DELTA = {"Emit": {"TextDelta": {"message_id": "m1", "text": "x"}}}

#: The node side: the TypeScript client, or a raw reader (the same sidecar command, no client).
NODE_BENCH = r"""
import { spawn } from "node:child_process";
import { Runtime, kindOf } from "CLIENT";

const [mode, what, script, count] = process.argv.slice(2);
const sidecar = JSON.parse(process.env.BENCH_SIDECAR);
const n = Number(count);

async function viaClient() {
  const rt = await Runtime.start({ bin: sidecar, mock: script });
  const session = await rt.open("mock", { dir: "." });
  const times = [];
  const turns = n;
  let events = 0;
  for (let i = 0; i < turns; i++) {
    const t0 = process.hrtime.bigint();
    await session.prompt("go");
    for await (const ev of session.events()) {
      events++;
      const kind = kindOf(ev);
      if (what === "flood" && kind === "TurnEnded") break;
      if (what === "turns" && kind === "StatusChanged" && ev.kind.StatusChanged === "Idle") break;
    }
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  await rt.close();
  return { times, events };
}

function viaRaw() {
  return new Promise((resolve) => {
    const [cmd, ...args] = sidecar;
    const child = spawn(cmd, [...args, "serve", "--mock", script], { stdio: ["pipe", "pipe", "inherit"] });
    child.stdout.setEncoding("utf8");
    let buffer = "";
    let id = 0;
    let session = null;
    let turn = 0;
    let t0 = 0n;
    let events = 0;
    const times = [];
    const turns = n;
    const send = (frame) => child.stdin.write(JSON.stringify({ id: ++id, ...frame }) + "\n");
    const prompt = () => { t0 = process.hrtime.bigint(); send({ cmd: "prompt", session, text: "go" }); };
    child.stdout.on("data", (chunk) => {
      buffer += chunk;
      let start = 0;
      for (;;) {
        const end = buffer.indexOf("\n", start);
        if (end < 0) break;
        const line = JSON.parse(buffer.slice(start, end));
        start = end + 1;
        if (line.hello) { send({ cmd: "open", agent: "mock", dir: "." }); continue; }
        if (line.ok && line.ok.id && session === null) { session = line.ok.id; prompt(); continue; }
        if (!line.event) continue;
        events++;
        const kind = line.event.kind;
        const done = what === "flood" ? typeof kind === "object" && "TurnEnded" in kind
          : typeof kind === "object" && kind.StatusChanged === "Idle";
        if (!done) continue;
        times.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (++turn < turns) prompt();
        else { child.stdin.end(); child.on("close", () => resolve({ times, events })); }
      }
      buffer = buffer.slice(start);
    });
  });
}

let result;
try {
  result = mode === "client" ? await viaClient() : await viaRaw();
} catch (error) {
  if (error.kind !== "ConsumerLagged") throw error;
  result = { times: [NaN], lagged: true };
}
process.stdout.write(JSON.stringify(result) + "\n");
"""


#: The replayed burst's size: under the clients' 4096-event queue cap, which a burst written at
#: once can overrun (the Python client's reader thread outruns its consumer: ConsumerLagged).
BURST = 4000

#: A stand-in sidecar that replays a turn's pre-rendered event lines (BENCH_LINES) at once.
REPLAYER = r"""
import json, os, sys
out = sys.stdout.buffer
lines = open(os.environ["BENCH_LINES"], "rb").read()
info = {"id": "s1", "agent": {"id": "mock"}, "details": {}, "configuration": {"options": {}}, "status": "Idle"}
out.write(b'{"hello":{"protocol":1,"anyagent":"0.0.5"}}\n'); out.flush()
for raw in sys.stdin.buffer:
    frame = json.loads(raw)
    if frame["cmd"] == "open":
        out.write(json.dumps({"id": frame["id"], "ok": info}).encode() + b"\n")
    elif frame["cmd"] == "prompt":
        started = {"prompt_id": "p1", "kind": {"Started": {"turn_id": "t1"}}}
        out.write(json.dumps({"id": frame["id"], "ok": started}).encode() + b"\n")
        out.write(lines)
    elif frame["cmd"] == "close":
        out.write(b'{"closed":"s1"}\n' + json.dumps({"id": frame["id"], "ok": None}).encode() + b"\n")
    out.flush()
"""


def event_lines(count: int) -> bytes:
    """A flood turn's lines as the sidecar writes them (compact JSON, one event a line)."""

    def line(sequence: int, kind: object) -> bytes:
        event = {
            "sequence": sequence,
            "occurred_at": {"secs_since_epoch": 1796467775, "nanos_since_epoch": 709093460},
            "session_id": "s1",
            "turn_info": {"id": "t1", "parent_tool_id": None},
            "kind": kind,
            "extensions": {},
        }
        return json.dumps({"event": event}, separators=(",", ":")).encode() + b"\n"

    delta = {"TextDelta": {"message_id": "m1", "text": "x"}}
    body = [line(i + 1, delta) for i in range(count)]
    body.append(
        line(count + 1, {"TurnEnded": {"stop": {"Completed": {"source": "Protocol"}}, "background": [], "usage": None}})
    )
    return b"".join(body)


def via_python(script: Path, what: str, count: int, sidecar: list[str], bin: str | None = None) -> list[float]:
    rt = Runtime.start(bin=bin, mock=str(script))
    try:
        return python_turns(rt, what, count)
    except AgentProtoError as error:
        if error.kind != "ConsumerLagged":
            raise
        return [float("nan")]  # its reader outran the consumer: the session was lost
    finally:
        rt.close()


def python_turns(rt: Runtime, what: str, count: int) -> list[float]:
    """Each turn's time (ms) from the prompt to the turn's last event, through the Python client."""
    session = rt.open("mock", dir=".")
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        session.prompt("go")
        for event in session.events(timeout=120):
            kind = kind_of(event)
            if what == "flood" and kind == "TurnEnded":
                break
            if what == "turns" and kind == "StatusChanged" and event["kind"]["StatusChanged"] == "Idle":
                break
        times.append((time.perf_counter() - t0) * 1000)
    return times


def via_node(bench: Path, mode: str, what: str, script: Path, count: int, env: dict[str, str]) -> list[float]:
    done = subprocess.run(
        ["node", str(bench), mode, what, str(script), str(count)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"node {mode} {what} failed:\n{done.stderr}")
    times: list[float] = [float("nan") if t is None else t for t in json.loads(done.stdout)["times"]]
    return times


def events_per_second(count: int, times_ms: list[float]) -> tuple[float, str]:
    """The median rate over the rounds that kept their session, and a note of those that did not."""
    kept = [t for t in times_ms if t == t]
    lost = len(times_ms) - len(kept)
    note = f"  [ConsumerLagged in {lost} of {len(times_ms)} rounds]" if lost else ""
    return (count / (statistics.median(kept) / 1000) if kept else float("nan")), note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--floods", type=int, default=3, help="flood turns a round (of --events each)")
    parser.add_argument("--bursts", type=int, default=20, help="replayed bursts a round (of 4000 events each)")
    args = parser.parse_args()
    if shutil.which("node") is None:
        sys.exit("node is needed (>= 20)")
    with tempfile.TemporaryDirectory(prefix="agentproto-bench-ts-") as tmp:
        work = Path(tmp)
        turns = work / "turns.json"
        turns.write_text(json.dumps({"turns": [[DELTA, END]] * (args.turns + 1)}))
        flood = work / "flood.json"
        flood.write_text(
            json.dumps({"turns": [[{"Repeat": {"times": args.events, "steps": [DELTA]}}, END]] * args.floods})
        )
        bench = work / "bench.mjs"
        client = (ROOT / "clients" / "typescript" / "dist" / "index.js").as_uri()
        bench.write_text(NODE_BENCH.replace("CLIENT", client))
        sidecar = [sys.executable, "-m", "agentproto"]
        home = work / "home"
        home.mkdir()
        env = dict(
            os.environ,
            BENCH_SIDECAR=json.dumps(sidecar),
            PYTHONPATH=str(ROOT),
            HOME=str(home),
            XDG_STATE_HOME=str(home / ".local" / "state"),
            XDG_DATA_HOME=str(home / ".local" / "share"),
        )
        os.environ.update({k: env[k] for k in ("PYTHONPATH", "HOME", "XDG_STATE_HOME", "XDG_DATA_HOME")})
        per_turn: dict[str, list[float]] = {"raw": [], "ts": [], "python": []}
        flood_ms: dict[str, list[float]] = {"raw": [], "ts": [], "python": []}
        replayed_ms: dict[str, list[float]] = {"raw": [], "ts": [], "python": []}
        replayer = work / "replayer"
        replayer.write_text(f"#!{sys.executable}\n{REPLAYER}")
        replayer.chmod(0o755)
        burst = min(args.events, BURST)
        (work / "lines").write_bytes(event_lines(burst))
        renv = dict(env, BENCH_SIDECAR=json.dumps([str(replayer)]), BENCH_LINES=str(work / "lines"))
        os.environ["BENCH_LINES"] = str(work / "lines")
        for _ in range(args.rounds):
            per_turn["raw"].append(statistics.median(via_node(bench, "raw", "turns", turns, args.turns, env)))
            per_turn["ts"].append(statistics.median(via_node(bench, "client", "turns", turns, args.turns, env)))
            per_turn["python"].append(statistics.median(via_python(turns, "turns", args.turns, sidecar)))
            flood_ms["raw"].append(sum(via_node(bench, "raw", "flood", flood, args.floods, env)))
            flood_ms["ts"].append(sum(via_node(bench, "client", "flood", flood, args.floods, env)))
            flood_ms["python"].append(sum(via_python(flood, "flood", args.floods, sidecar)))
            replayed_ms["raw"].append(sum(via_node(bench, "raw", "flood", flood, args.bursts, renv)))
            replayed_ms["ts"].append(sum(via_node(bench, "client", "flood", flood, args.bursts, renv)))
            replayed_ms["python"].append(sum(via_python(flood, "flood", args.bursts, sidecar, bin=str(replayer))))
    turn = {name: statistics.median(values) for name, values in per_turn.items()}
    rate = {name: events_per_second(args.events * args.floods, values) for name, values in flood_ms.items()}
    ceiling = {name: events_per_second(burst * args.bursts, values) for name, values in replayed_ms.items()}
    print(f"one turn (a TextDelta, End; prompt to Idle), median of {args.rounds} rounds of {args.turns} turns:")
    for name, label in (
        ("raw", "raw protocol (node reader)"),
        ("ts", "TypeScript client"),
        ("python", "Python client"),
    ):
        extra = "" if name == "raw" else f"  (+{turn[name] - turn['raw']:.3f} ms over raw)"
        print(f"  {label:28} {turn[name]:7.3f} ms{extra}")
    print(f"  TypeScript client vs Python client: {turn['ts'] - turn['python']:+.3f} ms a turn")
    print(f"events relayed ({args.floods} turns of {args.events} unpaced TextDeltas), median of {args.rounds}:")
    for name, label in (
        ("raw", "raw protocol (node reader)"),
        ("ts", "TypeScript client"),
        ("python", "Python client"),
    ):
        extra = "" if name == "raw" else f"  ({rate[name][0] / rate['raw'][0] * 100:.0f} % of raw)"
        print(f"  {label:28} {rate[name][0]:9.0f} events/s{extra}{rate[name][1]}")
    print(f"{args.bursts} bursts of {burst} such lines, each written at once by a stand-in (the readers' ceiling):")
    for name, label in (
        ("raw", "raw protocol (node reader)"),
        ("ts", "TypeScript client"),
        ("python", "Python client"),
    ):
        extra = "" if name == "raw" else f"  ({ceiling[name][0] / ceiling['raw'][0] * 100:.0f} % of raw)"
        print(f"  {label:28} {ceiling[name][0]:9.0f} events/s{extra}{ceiling[name][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
