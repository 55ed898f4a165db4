#!/usr/bin/env python3
"""Record real lines: mock sessions through `serve` and the ops framing, written to fixtures/lines/.

    python scripts/record_lines.py              # rewrite fixtures/lines/*.jsonl
    python scripts/record_lines.py --out DIR    # somewhere else

Every kind of protocol 1 line (hello, replies, error replies, events, a session error,
closed) and of ops line, from the published mock scripts: permissions and questions
answered, options configured, a bad frame or two. The files are what other languages'
generated types are checked against (tests/core/test_datamodel.py): `frames.jsonl` and
`ops-requests.jsonl` hold what was sent, `lines.jsonl` and `ops-lines.jsonl` what came back.
Timestamps, ids and session ids differ from run to run; the shapes do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "mock-scripts"


def _env() -> dict[str, str]:
    # Nothing of this machine in the recording: discovery searches a home and a PATH that do
    # not exist, so every catalog agent is reported missing the same way everywhere.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTPROTO_", "PYTHON"))}
    env.update(HOME="/nonexistent/home", PATH="/nonexistent/bin", PYTHONPATH=str(ROOT))
    return env


class Serve:
    """One `serve` process; every frame sent and every line read is kept."""

    def __init__(self, args: list[str], frames: list[Any], lines: list[Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_env(),
            cwd=ROOT,
        )
        self.frames, self.lines = frames, lines
        self.next_id = 0
        self.read()  # the hello

    def read(self) -> Any:
        assert self.proc.stdout
        raw = self.proc.stdout.readline()
        if not raw:
            raise SystemExit(f"serve ended early (exit {self.proc.wait()})")
        line = json.loads(raw)
        self.lines.append(line)
        return line

    def send(self, frame: dict[str, Any], raw: bool = False) -> int:
        assert self.proc.stdin
        if "id" not in frame:
            self.next_id += 1
            frame = {"id": self.next_id, **frame}
        if not raw:
            self.frames.append(frame)
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        self.proc.stdin.flush()
        return int(frame["id"]) if isinstance(frame.get("id"), int) else -1

    def call(self, **frame: Any) -> Any:
        """Send; read up to this frame's reply and return it."""
        frame_id = self.send(frame)
        while True:
            line = self.read()
            if line.get("id") == frame_id and ("ok" in line or "error" in line):
                return line

    def turn(self, session: str, text: str) -> None:
        """Prompt, answer every request the turn opens, read up to its TurnEnded."""
        self.call(cmd="prompt", session=session, text=text)
        while True:
            line = self.read()
            kind = line.get("event", {}).get("kind") if "event" in line else None
            if isinstance(kind, dict) and "RequestOpened" in kind:
                self.send({"cmd": "answer", "session": session, **answer(kind["RequestOpened"])})
            if isinstance(kind, dict) and "TurnEnded" in kind or "closed" in line:
                return

    def finish(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        while True:
            try:
                self.read()
            except SystemExit:
                break
        self.proc.wait(timeout=30)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    if "Permission" in request:
        return {"request": request["Permission"]["id"], "answer": {"Permission": request["Permission"]["options"][0]}}
    questions = request["Question"]["questions"]
    return {
        "request": request["Question"]["id"],
        "answer": {
            "Question": [
                {"Choices": [q["choices"][0]["id"]]} if q["choices"] else {"Text": "agentproto"} for q in questions
            ]
        },
    }


def record_protocol1(frames: list[Any], lines: list[Any]) -> None:
    for name, prompts in [("turn", 1), ("question", 1), ("live-events", 1), ("subagent", 1), ("plan", 2), ("queued", 1)]:
        serve = Serve(["--mock", str(SCRIPTS / f"{name}.json")], frames, lines)
        session = serve.call(cmd="open", agent="mock", dir=str(ROOT))["ok"]["id"]
        for n in range(prompts):
            serve.turn(session, f"prompt {n + 1}")
        serve.call(cmd="info", session=session)
        serve.call(cmd="close", session=session)
        serve.finish()

    serve = Serve(["--mock", str(SCRIPTS / "configure.json")], frames, lines)
    serve.call(cmd="discover")
    session = serve.call(cmd="open", agent="mock", dir=str(ROOT))["ok"]["id"]
    serve.call(cmd="configure", session=session, option="model", value="opus")
    serve.turn(session, "hi")
    serve.call(cmd="cancel", session=session)
    serve.call(cmd="info", session="no-such-session")  # an error reply
    serve.send({"id": None, "cmd": 5}, raw=True)  # a bad frame: the error reply has id null
    serve.read()
    serve.call(cmd="generate", agent="mock", dir=str(ROOT), prompt="one shot")
    serve.finish()

    serve = Serve(["--mock", str(SCRIPTS / "die.json")], frames, lines)
    session = serve.call(cmd="open", agent="mock", dir=str(ROOT))["ok"]["id"]
    serve.turn(session, "die")  # the turn fails, a session error line, then closed
    serve.finish()


def ops_exchange(requests: list[dict[str, Any]], args: list[str]) -> Iterator[Any]:
    """The requests through one `agent` loop, each answered up to its `done`."""
    text = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "agent", *args],
        input=text.encode(),
        capture_output=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    for raw in done.stdout.splitlines():
        yield json.loads(raw)


def record_ops(requests: list[Any], lines: list[Any]) -> None:
    batch: list[dict[str, Any]] = [
        {"op": "capabilities"},
        {"op": "discover"},
        {"op": "explain", "code": "NotInstalled"},
        {"op": "open", "agent": "mock", "dir": str(ROOT)},
        {"op": "prompt", "text": "run the tests"},  # waits for the permission
        {"op": "answer", "request": "r1", "answer": {"Permission": "AllowOnce"}},
        {"op": "info"},
        {"op": "close"},
        {"op": "info", "session": "no-such-session"},  # a refused result
        {"op": "frobnicate"},  # a protocol error
    ]
    requests.extend(r for r in batch if r["op"] != "frobnicate")
    lines.extend(ops_exchange(batch, ["--mock", str(SCRIPTS / "turn.json")]))
    batch = [{"op": "open", "agent": "mock", "dir": str(ROOT)}, {"op": "prompt", "text": "die"}]
    requests.extend(batch)
    lines.extend(ops_exchange(batch, ["--mock", str(SCRIPTS / "die.json")]))


def write(path: Path, objects: list[Any]) -> None:
    path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "fixtures" / "lines")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    frames: list[Any] = []
    lines: list[Any] = []
    record_protocol1(frames, lines)
    requests: list[Any] = []
    ops_lines: list[Any] = []
    record_ops(requests, ops_lines)
    for name, objects in [("frames", frames), ("lines", lines), ("ops-requests", requests), ("ops-lines", ops_lines)]:
        write(args.out / f"{name}.jsonl", objects)
        print(f"wrote {args.out / name}.jsonl ({len(objects)} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
