"""errors.log, the package's one writer of stderr: a stderr nobody reads never blocks the
loop; what did not fit is counted, and said once stderr takes lines again."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time

from sidecar import ROOT, base_env

#: agentproto's own entry point with a bug in discover: each discover logs a traceback.
BUGGY = """
import sys
from agentproto.engine.runtime import Engine

def discover(self, done):
    raise RuntimeError("injected bug " + "x" * 2000)

Engine.discover = discover
from agentproto.cli import main
sys.exit(main(sys.argv[1:]))
"""


def read_lines(proc: subprocess.Popen[bytes], count: int, timeout: float) -> list[dict]:
    assert proc.stdout is not None
    out: list[dict] = []
    buffered = b""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while len(out) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"only {len(out)} of {count} replies came: the loop is blocked"
        if select.select([fd], [], [], remaining)[0]:
            data = os.read(fd, 65536)
            assert data, "stdout ended"
            buffered += data
            *lines, buffered = buffered.split(b"\n")
            out.extend(json.loads(line) for line in lines if line)
    return out


def drain(fd: int) -> bytes:
    got = b""
    while select.select([fd], [], [], 0.2)[0]:
        data = os.read(fd, 1 << 20)
        if not data:
            break
        got += data
    return got


def test_a_stderr_nobody_reads_never_blocks_the_loop_and_the_dropped_lines_are_counted() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", BUGGY, "serve"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(), cwd=str(ROOT),
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        sent = 300  # ~2.5 KiB of traceback each: far more than a pipe holds
        proc.stdin.write(b"".join(b'{"id": %d, "cmd": "discover"}\n' % i for i in range(sent)))
        proc.stdin.flush()
        replies = read_lines(proc, sent + 1, 30)  # the hello, then every reply
        assert all(r["error"]["kind"] == "Internal" for r in replies[1:])
        first = drain(proc.stderr.fileno()).decode()
        logged = first.count("internal error on discover")
        assert 0 < logged < sent, "the pipe could not have taken every traceback"
        # Now that stderr is read again, the next line says how many were lost.
        proc.stdin.write(b'{"id": 9999, "cmd": "discover"}\n')
        proc.stdin.flush()
        read_lines(proc, 1, 30)
        time.sleep(0.2)
        second = drain(proc.stderr.fileno()).decode()
        found = re.search(r"agentproto: (\d+) log line\(s\) dropped or cut short: stderr was not being read", second)
        assert found, second[:500]
        dropped = int(found.group(1))
        # Every traceback is either on stderr whole, or one of the counted (a cut one counts).
        assert logged + dropped in (sent, sent + 1), (logged, dropped)
        assert second.index(found.group(0)) < second.index("internal error on discover")
    finally:
        proc.kill()
        proc.wait(30)
