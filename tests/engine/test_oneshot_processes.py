"""Nothing a one-shot started outlives the sidecar: a ``discover`` whose ``--version`` run
hangs, when the sidecar ends (EOF on stdin, SIGTERM, the HTTP transport's end of stdin), and
when ``list`` is interrupted.

The agent is a fake on the catalog's override: its ``--version`` writes its pid and the pid
of a ``sleep`` it starts (same process group) and waits. Once both are running the sidecar
is told to end; by the time it has exited, no process of that group is left, neither alive
nor a zombie (the sidecar killed and reaped them: an exit that only killed them leaves
zombies for init, which may reap them late or never). Codex's plan_usage read, the other
one-shot that starts a process: tests/drivers/codex/test_codex_plan_usage.py.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lifetime_support import assert_all_gone, group_left, kill_groups, pgid_of, pids_in, wait_for_pids
from sidecar import ROOT, Sidecar, base_env


def hanging_agent(tmp_path: Path, also: str = "") -> dict[str, str]:
    """The env of a sidecar whose first catalog agent is a fake whose --version hangs (after
    running the shell line ``also``)."""
    from agentproto.drivers import catalog

    pids = tmp_path / "pids"
    fake = tmp_path / "fake-agent"
    fake.write_text(f"#!/bin/sh\n{also}\necho $$ >> {pids}\nsleep 600 &\necho $! >> {pids}\nwait\n")
    fake.chmod(0o755)
    empty = tmp_path / "bin"
    empty.mkdir()
    return {"PATH": f"{empty}:/usr/bin:/bin", "HOME": str(tmp_path), catalog.CATALOG[0].env_override: str(fake)}


@pytest.mark.parametrize("end", ["eof", "sigterm"])
def test_a_discover_whose_version_run_hangs_leaves_nothing_when_serve_ends(tmp_path: Path, end: str) -> None:
    sc = Sidecar(env=hanging_agent(tmp_path))
    groups: set[int] = set()
    try:
        sc.send({"cmd": "discover"})
        pids = wait_for_pids(tmp_path / "pids", 2)
        groups = {pgid_of(pid) for pid in pids}
        assert groups == {pids[0]}  # the version run leads its group; its sleep is in it
        if end == "eof":
            sc.close_stdin()
        else:
            sc.proc.send_signal(signal.SIGTERM)
        assert sc.proc.wait(15) == 0
        assert group_left(groups) == [], "a process of the version run outlived the sidecar"
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
        kill_groups(groups)


def start_of(pid: int) -> bytes:
    """The start time of process ``pid``: with the pid, it names one process for good."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19]


def left_of(pid: int, start: bytes) -> str | None:
    """What is left of that process (alive or a zombie: its state and parent), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if fields[19] != start:
        return None  # the pid was reaped and taken since
    return f"{pid} (state {fields[0].decode()}, parent {int(fields[1])})"


def detaching(tmp_path: Path, how: str) -> tuple[dict[str, str], Path]:
    """The env of a sidecar whose version run (``hanging_agent``) also starts a process in a
    session of its own (``setsid``), out of reach of its group kill, and the file its pid is
    written to. ``detached``: it carries the run's mark and its parent (the run) waits on,
    so the run's tree holds it. ``escaped``: it also clears its environment and its parent
    exits at once (a double fork): no tree holds it, only the sidecar's last resort."""
    other = tmp_path / "other"
    line = f"setsid /bin/sh -c 'echo $$ >> {other}; exec sleep 600' &"
    if how == "escaped":
        line = f"(setsid /usr/bin/env -i /bin/sh -c 'echo $$ >> {other}; exec sleep 600' &)"
    return hanging_agent(tmp_path, line), other


@pytest.mark.parametrize("how", ["detached", "escaped"])
def test_what_a_version_run_detached_is_killed_and_reaped_when_serve_ends(tmp_path: Path, how: str) -> None:
    """Whichever way it went (see ``detaching``), what the version run detached is gone with
    the sidecar, not left a zombie for init: ``detached`` is killed with the run's tree and
    reaped with it (test_end_oneshots_reaps_what_a_version_run_detached), ``escaped`` is
    killed and reaped by the loop's last resort as it closes."""
    env, other = detaching(tmp_path, how)
    sc = Sidecar(env=env)
    groups: set[int] = set()
    detached = 0
    try:
        sc.send({"cmd": "discover"})
        groups = {pgid_of(pid) for pid in wait_for_pids(tmp_path / "pids", 2)}
        (detached,) = wait_for_pids(other, 1)
        assert pgid_of(detached) == detached and detached not in groups  # a group (and session) of its own
        start = start_of(detached)
        sc.close_stdin()
        assert sc.proc.wait(15) == 0
        assert group_left(groups) == [], "a process of the version run outlived the sidecar"
        assert left_of(detached, start) is None, f"what the version run detached is left: {left_of(detached, start)}"
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
        kill_groups(groups | ({detached} if detached else set()))


#: A sidecar's runtime in a process of its own (it becomes a subreaper): a discover runs
#: until its version run has detached its process, then ``end_oneshots`` (as the sidecar's
#: exit does), and what is left of that process is printed before the loop closes (whose
#: last resort would reap it anyway).
END_ONESHOTS = """
import json, os, sys, time
from pathlib import Path
from agentproto.engine.runtime import Engine
from agentproto.loopio.loop import Loop

other = Path(sys.argv[1])
loop = Loop(adopt_orphans=True)
runtime = Engine(loop)
runtime.discover(lambda value, error: None)
deadline = time.monotonic() + 20
loop.run(until=lambda: bool(other.exists() and other.read_text().strip()) or time.monotonic() > deadline)
pid = int(other.read_text())
runtime.end_oneshots()
try:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    left = f"{pid} (state {fields[0].decode()}, parent {int(fields[1])})"
except OSError:
    left = None
print(json.dumps(left), flush=True)
loop.close()
"""


def test_end_oneshots_reaps_what_a_version_run_detached(tmp_path: Path) -> None:
    """The kill of a version run's tree reaches the process it detached (by its mark, or as a
    child of the run); ``end_oneshots`` reaps it too, where it waited for the run's process
    group alone and left it a zombie of the sidecar (then of init, once the sidecar exits)."""
    env, other = detaching(tmp_path, "detached")
    done = subprocess.run(
        [sys.executable, "-c", END_ONESHOTS, str(other)], env=base_env(env), cwd=str(tmp_path),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    pids = pids_in(other) + pids_in(tmp_path / "pids")
    kill_groups(set(pids))  # after a failed test: don't leave them to the next one
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is None, f"end_oneshots left what the version run detached: {done.stdout}"


def test_a_discover_whose_version_run_hangs_leaves_nothing_when_http_ends(tmp_path: Path) -> None:
    """The HTTP transport ends when its stdin (a pipe) does; a discover is in flight."""
    import socket

    env = base_env({**hanging_agent(tmp_path), "AGENTPROTO_AUTH_TOKEN": "t" * 32})
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "serve", "--transport", "http", "--port", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=str(ROOT),
    )  # fmt: skip
    groups: set[int] = set()
    assert proc.stdin is not None and proc.stderr is not None
    try:
        banner = b""
        while not re.search(rb"http://[\d.]+:(\d+)/", banner):
            line = proc.stderr.readline()
            assert line, banner
            banner += line
        found = re.search(rb"http://[\d.]+:(\d+)/", banner)
        assert found is not None
        body, port = b'{"op":"discover"}', int(found.group(1))
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            b"POST /v1/agent HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (port, b"t" * 32, len(body), body)
        )
        pids = wait_for_pids(tmp_path / "pids", 2)
        groups = {pgid_of(pid) for pid in pids}
        proc.stdin.close()
        proc.wait(15)
        assert group_left(groups) == [], "a process of the version run outlived the sidecar"
        sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_groups(groups)


def test_a_list_interrupted_while_a_version_run_hangs_leaves_nothing(tmp_path: Path) -> None:
    """``list`` (its own loop, not a server) told to stop while an agent's --version hangs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "list", "--no-probe"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=base_env(hanging_agent(tmp_path)), cwd=str(tmp_path),
    )  # fmt: skip
    groups: set[int] = set()
    try:
        pids = wait_for_pids(tmp_path / "pids", 2)
        groups = {pgid_of(pid) for pid in pids}
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        assert group_left(groups) == [], "a process of the version run outlived list"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_groups(groups)


def test_kill_all_kills_a_discovers_version_run_with_the_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server whose signal grace ran out kills every agent (``kill_all``): a one-shot's
    process too, at once, and the discover answers without the version it could not read."""
    from agentproto.engine.runtime import Engine
    from agentproto.loopio.loop import Loop

    for name, value in hanging_agent(tmp_path).items():
        monkeypatch.setenv(name, value)
    loop = Loop()
    runtime = Engine(loop)
    answers: list[tuple[Any, Any]] = []
    groups: set[int] = set()
    try:
        runtime.discover(lambda value, error: answers.append((value, error)))
        deadline = time.monotonic() + 20
        loop.run(until=lambda: len(pids_in(tmp_path / "pids")) >= 2 or time.monotonic() > deadline)
        pids = wait_for_pids(tmp_path / "pids", 2, timeout=0)
        groups = {pgid_of(pid) for pid in pids}
        runtime.kill_all()
        assert_all_gone(pids)  # killed by kill_all itself: the loop has not run since
        loop.run(until=lambda: bool(answers) or time.monotonic() > deadline)
        report, error = answers[0]
        assert error is None
        from agentproto.drivers import catalog

        agent = {a["id"]: a for a in report["agents"]}[catalog.CATALOG[0].id]
        assert agent["version"] is None
        assert any("did not finish" in d["message"] for d in report["diagnostics"]), report["diagnostics"]
        assert not runtime.oneshots.live  # its exit was reported: no longer tracked
    finally:
        kill_groups(groups)
        loop.close()
