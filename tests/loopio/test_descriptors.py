"""One session must not take the descriptors the others need (agentproto/loopio/descriptors.py):
an ACP session's live terminals are bounded, the sidecar raises its soft RLIMIT_NOFILE to
the hard limit at start, and what an agent asks for never takes the last 64 descriptors.

The limit is lowered for the sidecar alone by a wrapper that sets it and execs
``python -m agentproto`` (as ``prlimit`` would): the test process keeps its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sidecar import ROOT, Sidecar, base_env
from tests.drivers.acp.test_acp import agent_ref, close, open_session, texts, turn


def limited(soft: int, hard: int) -> list[str]:
    """A command that runs agentproto with RLIMIT_NOFILE (soft, hard)."""
    code = (
        "import os, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'agentproto', *sys.argv[1:]])\n"
    )
    return [sys.executable, "-c", code]


def open_files_limit(pid: int) -> tuple[int, int]:
    """The (soft, hard) RLIMIT_NOFILE of a live process, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no Max open files line")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.mark.parametrize(("flags", "allowed"), [([], 16), (["--max-terminals", "3"], 3)])
def test_an_acp_session_gets_its_limit_of_live_terminals(workdir: Path, flags: list[str], allowed: int) -> None:
    """An agent asking for 20 terminals gets 16 (or what --max-terminals says), and a clear
    JSON-RPC error for each one more; a released one makes room again; another session
    opens and runs a turn meanwhile, its own terminals unaffected."""
    with Sidecar(flags) as sc:
        flooding = open_session(sc, workdir)["id"]
        report = texts(turn(sc, flooding, "terminals 20", timeout=60)).splitlines()
        assert report[:allowed] == ["ok"] * allowed, report
        refusals = report[allowed:20]
        assert len(refusals) == 20 - allowed
        for line in refusals:
            assert line.startswith("refused=-32603: ") and f"{allowed} live terminals, its limit" in line, line
            assert "release one first" in line
        assert report[20] == "after-release=ok"
        other = open_session(sc, workdir)["id"]
        assert texts(turn(sc, other, "terminal")).startswith("exit=7 ")
        close(sc, other)
        close(sc, flooding)


def test_the_sidecar_raises_its_soft_descriptor_limit_to_the_hard_one() -> None:
    with Sidecar(command=limited(64, 4096)) as sc:
        assert open_files_limit(sc.proc.pid) == (4096, 4096)


def test_a_terminal_flood_leaves_descriptors_for_another_sessions_open(workdir: Path) -> None:
    """Under a limit of 110 descriptors (soft and hard) and no terminal limit to speak of,
    one agent asks for 300 terminals: it gets those that leave 64 descriptors free, then a
    JSON-RPC error saying so, and another session still opens and runs a turn (without the
    reserve the flood took every descriptor, and that open failed Too many open files)."""
    with Sidecar(["--max-terminals", "1000"], command=limited(110, 110)) as sc:
        flooding = open_session(sc, workdir)["id"]
        report = texts(turn(sc, flooding, "terminals 300", timeout=120)).splitlines()
        # The flood's terminals still run: another session opens (its agent's pipes) and works.
        other = open_session(sc, workdir)["id"]
        assert texts(turn(sc, other, "chunks"))
        close(sc, other)
        created = report.count("ok")
        refused = [line for line in report if line.startswith("refused=")]
        assert 0 < created < 110 - 64, report[:3]
        assert len(refused) == 300 - created, refused[:3]
        assert all("the last 64 are kept for opens and accepts" in line for line in refused), refused[:3]
        assert not any("Too many open files" in line for line in report)
        close(sc, flooding)


ACCEPTOR = textwrap.dedent(
    """
    import os, resource, socket, subprocess, sys, time
    from agentproto.loopio.sockets import Acceptor
    from agentproto.loopio.loop import Loop

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(512)
    # 200 connections from another process (its own descriptors), waiting in the backlog.
    client = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys\\n"
        f"held = [socket.create_connection(('127.0.0.1', {server.getsockname()[1]})) for _ in range(200)]\\n"
        "print('connected', flush=True)\\n"
        "sys.stdin.read()\\n"
    )], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert client.stdout.readline() == b"connected\\n"
    resource.setrlimit(resource.RLIMIT_NOFILE, (120, 120))
    loop = Loop()
    served = []
    acceptor = Acceptor(loop, server, served.append)
    acceptor.start()
    deadline = time.monotonic() + 1.5
    loop.call_later(1.5, lambda: None)
    loop.run(until=lambda: time.monotonic() > deadline)
    left = 120 - (len(os.listdir("/proc/self/fd")) - 1)
    print(len(served), left, flush=True)
    client.stdin.close()
    client.wait()
    """
)


def test_an_accept_never_takes_the_last_descriptors(tmp_path: Path) -> None:
    """A listener flooded with connections under a limit of 120: it accepts until 16
    descriptors are left, then backs off (saying so), the rest waiting in the backlog: 16
    descriptors stay free for the sidecar's own files."""
    done = subprocess.run(
        [sys.executable, "-c", ACCEPTOR], capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    served, left = map(int, done.stdout.split())
    assert served > 0
    assert left >= 16, f"{served} connections served, {left} descriptors left"
    assert "the last 16 are kept for its own files: not accepting connections" in done.stderr, done.stderr


def test_an_agent_is_not_started_into_the_last_descriptors(workdir: Path) -> None:
    """Under a limit of 24, an agent's three pipes would leave fewer than 16 descriptors for
    the sidecar's own files: the open fails SpawnFailed saying so, nothing is started, and
    the sidecar goes on (a mock session, which starts no process, still opens)."""
    with Sidecar(command=limited(24, 24)) as sc:
        error = sc.error({"cmd": "open", "agent": agent_ref(), "dir": str(workdir)}, timeout=30)
        assert error["kind"] == "SpawnFailed", error
        assert "not started" in error["message"] and "the last 16 are kept for its own files" in error["message"]
        assert sc.open("mock", str(workdir))
