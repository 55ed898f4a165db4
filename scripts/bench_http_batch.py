#!/usr/bin/env python3
"""Memory of an HTTP batch whose client does not read (issue 13 measured 155 MB for 4 MiB).

    python scripts/bench_http_batch.py [--mib 4] [--wait 5] [--root CHECKOUT]

One ``serve --transport http`` sidecar on 127.0.0.1. The baseline, in the same run: its
RSS (VmRSS) after a small batch read whole. Then one POST /v1/agent/batch of MIB MiB of
``{"op": "capabilities"}`` lines from a client that reads nothing for WAIT seconds: the
sidecar's RSS then, and its peak (VmHWM). Then the client reads everything and every
request's ``done`` is counted (nothing may be lost). ``--root`` runs another checkout's
package with this same client. Figures only: nothing here asserts a size or a time.
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = b'{"op":"capabilities"}\n'


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def post(port: int, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        f"POST /v1/agent/batch HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-ndjson\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        data = sock.recv(1 << 20)
        if not data:
            break
        chunks.append(data)
    sock.close()
    return b"".join(chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=4.0)
    parser.add_argument("--wait", type=float, default=5.0)
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose agentproto runs")
    options = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": options.root}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve", "--transport", "http", "--port", "0"],
        stderr=subprocess.PIPE,
        env=env,
        cwd=options.root,
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline().decode()
        port = int(banner.rstrip().rstrip("/").rsplit(":", 1)[1])
        small = read_all(post(port, LINE * 100))
        assert small.count(b'"kind":"done"') == 100, small[-300:]
        base = status_kb(proc.pid, "VmRSS")
        count = int(options.mib * 1024 * 1024) // len(LINE)
        sock = post(port, LINE * count)
        time.sleep(options.wait)
        held = status_kb(proc.pid, "VmRSS")
        body = read_all(sock)
        peak = status_kb(proc.pid, "VmHWM")
        dones = body.count(b'"kind":"done"')
        print(f"baseline (after a 100-request batch): VmRSS {base / 1024:.1f} MB")
        print(f"{options.mib:g} MiB batch ({count} requests), client not reading for {options.wait:g} s: "
              f"VmRSS {held / 1024:.1f} MB (+{(held - base) / 1024:.1f} MB, ratio {held / base:.2f})")
        print(f"peak VmHWM {peak / 1024:.1f} MB; answers read afterwards: {dones} of {count} done lines")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
