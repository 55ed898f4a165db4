"""Nothing an agent (or one of its terminals) detaches with ``setsid`` outlives its session.

The agent is tests/fakes/stubborn_agent.py, a real process driven by a real ``serve``: it starts
``setsid sleep 600`` (a session and a process group of its own, out of reach of the group
kill) and exits, or stays until its session is closed, or has the sidecar run the detached
sleep in an ACP terminal. The sidecar, a subreaper, adopts the orphans, finds each by the
mark in its environment, kills it with its tree and reaps it.
"""

from __future__ import annotations

import time
from pathlib import Path

from lifetime_support import alive, assert_all_gone, stubborn_agent, wait_for_pids
from sidecar import Sidecar


def zombie_children(pid: int) -> list[int]:
    """The children of ``pid`` that exited and were never reaped."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == b"Z" and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def open_stubborn(sc: Sidecar, tmp_path: Path, habits: str) -> str:
    return sc.open(dir=str(tmp_path), **stubborn_agent(tmp_path / "pids", habits))


def test_an_agent_that_detaches_a_process_and_exits_leaves_nothing(tmp_path: Path) -> None:
    with Sidecar() as sc:
        session = open_stubborn(sc, tmp_path, "detach-exit")
        sc.ok({"cmd": "prompt", "session": session, "text": "go"})
        error = sc.wait_for(lambda l: l.get("session") == session and "error" in l)["error"]
        assert error["kind"] == "ProcessExited" and error["status"] == "0", error  # its own status, not stolen
        sc.wait_for(lambda l: l.get("closed") == session)
        agent, sleep = wait_for_pids(tmp_path / "pids", 2)
        assert_all_gone([agent, sleep], timeout=0.5)  # by the session's end, not by the sidecar's
        assert sc.proc.poll() is None
        deadline = time.monotonic() + 5
        while zombie_children(sc.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zombie_children(sc.proc.pid) == [], "the adopted orphan was never reaped"
        assert sc.close() == 0


def test_close_kills_what_the_agent_detached(tmp_path: Path) -> None:
    with Sidecar() as sc:
        session = open_stubborn(sc, tmp_path, "detach")
        agent, sleep = wait_for_pids(tmp_path / "pids", 2)
        assert alive(sleep)
        sc.ok({"cmd": "close", "session": session}, timeout=20)
        sc.wait_for(lambda l: l.get("closed") == session)
        assert_all_gone([agent, sleep])  # killed by the close; 0.5 s for the kernel was too short under load
        assert sc.proc.poll() is None
        assert sc.close() == 0


def test_what_a_terminal_detached_is_gone_after_close(tmp_path: Path) -> None:
    with Sidecar() as sc:
        session = open_stubborn(sc, tmp_path, "terminal")
        sc.ok({"cmd": "prompt", "session": session, "text": "go"})
        agent, sleep = wait_for_pids(tmp_path / "pids", 2)
        assert alive(sleep)
        sc.ok({"cmd": "close", "session": session}, timeout=20)
        sc.wait_for(lambda l: l.get("closed") == session)
        assert_all_gone([agent, sleep], timeout=0.5)
        assert sc.close() == 0


def test_a_detached_process_that_cleared_its_environment_is_killed_when_the_sidecar_ends(tmp_path: Path) -> None:
    sc = Sidecar()
    try:
        open_stubborn(sc, tmp_path, "detach-clean")
        agent, sleep = wait_for_pids(tmp_path / "pids", 2)
        assert alive(sleep)
        assert sc.close() == 0  # EOF: the session closes, then the sidecar ends
        assert_all_gone([agent, sleep], timeout=1.0)
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()


def test_what_an_agent_detached_is_gone_after_a_piped_chat(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from lifetime_support import STUBBORN
    from sidecar import base_env

    pids = tmp_path / "pids"
    agent = json.dumps({"acp": {"name": "stubborn", "path": STUBBORN, "args": []}})
    env = base_env({"STUBBORN": "detach-exit", "STUBBORN_PIDS": str(pids)})
    done = subprocess.run([sys.executable, "-m", "agentproto", "chat", agent], input="go\n", capture_output=True,
                          text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert "ProcessExited" in done.stderr, done.stderr  # the agent detached its sleep and exited mid-turn
    agent_pid, sleep = wait_for_pids(pids, 2)
    assert_all_gone([agent_pid, sleep], timeout=3.0)
