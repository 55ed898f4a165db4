#!/usr/bin/env python3
"""A tiny ACP agent (standard library only, quick to start) that is hard to get rid of.

``STUBBORN`` lists its habits, comma-separated:

  ignore-term   SIGTERM is ignored (by it and by what it starts)
  ignore-eof    the end of its input does not end it
  hang-open     never answers ``initialize``: its session stays opening
  detach        starts ``setsid sleep 600`` (a process of its own session and group)
                as soon as it runs
  detach-exit   on a prompt: starts ``setsid sleep 600``, then exits (status 0)
  detach-clean  as ``detach``, with an empty environment (no trace of where it came from)
  terminal      on a prompt: asks the client for a terminal running ``setsid sleep 600``
                in the background, waits for the terminal's exit and notes the sleep's
                pid (from the terminal's output)

A prompt otherwise runs until cancelled (a turn that keeps running). Every pid it starts,
and its own, is appended to the file ``STUBBORN_PIDS`` names, one per line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

HABITS = set(filter(None, os.environ.get("STUBBORN", "").split(",")))
PIDS = os.environ.get("STUBBORN_PIDS")


def note(pid: int) -> None:
    if PIDS:
        with open(PIDS, "a") as f:
            f.write(f"{pid}\n")


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def detach(env: dict | None = None) -> None:
    # setsid: its own session and process group, out of reach of a group kill.
    child = subprocess.Popen(["/bin/sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    note(child.pid)


def main() -> None:
    note(os.getpid())
    if "ignore-term" in HABITS:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "detach" in HABITS:
        detach()
    if "detach-clean" in HABITS:
        detach({})
    prompts: list = []
    for raw in sys.stdin:
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            if "hang-open" not in HABITS:
                send({"jsonrpc": "2.0", "id": rid, "result": {
                    "protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "stubborn-1"}})
        elif method == "session/prompt":
            if "detach-exit" in HABITS:
                detach()
                os._exit(0)
            prompts.append(rid)
            if "terminal" in HABITS:
                send({"jsonrpc": "2.0", "id": "create", "method": "terminal/create", "params": {
                    "sessionId": "stubborn-1", "command": "sh", "args": ["-c", "setsid sleep 600 & echo $!"]}})
        elif rid == "create":
            terminal = {"sessionId": "stubborn-1", "terminalId": msg["result"]["terminalId"]}
            send({"jsonrpc": "2.0", "id": "exited", "method": "terminal/wait_for_exit", "params": terminal})
        elif rid == "exited":
            send({"jsonrpc": "2.0", "id": "output", "method": "terminal/output", "params": terminal})
        elif rid == "output":
            note(int(msg["result"]["output"].split()[0]))
        elif method == "session/cancel":
            for pending in prompts:
                send({"jsonrpc": "2.0", "id": pending, "result": {"stopReason": "cancelled"}})
            prompts.clear()
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not here"}})
    while "ignore-eof" in HABITS:
        time.sleep(60)


if __name__ == "__main__":
    main()
