"""Another local user against a sidecar's Unix sockets and its observations database.

The attacker is a real process of another uid (65534, ``nobody``): a child of the test
that drops its groups, gid and uid as ``setpriv --reuid=65534 --regid=65534
--clear-groups`` would (an interpreter under a private home cannot be exec'd by nobody,
so it forks instead of exec'ing one). It needs root, so the file is not core
(conftest.py); run without root it fails saying so, it never skips.

What it tries: connecting to the ``--transport unix`` socket and the ``--control`` socket,
removing or replacing them in a shared sticky directory (as /tmp is), planting the path
first (its stale socket, its live socket), a socket directory it can write, serving a fake
control socket to ``inspect --sock``, and handing the sidecar its own database file (0600
or world-writable, or a symlink to it) for ``--db`` and ``inspect --db``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from ops_support import Proc
from sidecar import ROOT, Sidecar, base_env
from tests.frontends.test_inspect import costly_script

NOBODY = 65534


@pytest.fixture(autouse=True)
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.fail("these tests run an attacker as uid 65534: they need root (they are not core)")


def as_nobody(act: Callable[[], Any]) -> Any:
    """``act()`` run in a child process as uid/gid 65534 with no groups; what it returned
    (JSON), or the OSError it raised as ``{"errno": N}``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attacker
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                result = act()
            except OSError as exc:
                result = {"errno": exc.errno}
            except BaseException as exc:  # said, not swallowed: the test shows it
                result = {"attacker failed": repr(exc)}
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A fresh directory in the system's temp dir that uid 65534 can reach (pytest's own
    temp dirs are 0700), removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="ap-users-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def shared_dir(reachable: Path) -> Path:
    """A directory like /tmp: everyone can write to it, sticky (only an owner removes a file)."""
    shared = reachable / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def connect(path: str) -> Any:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.settimeout(5)
        return {"read": sock.recv(100).decode(errors="replace")}


def test_another_user_can_neither_reach_nor_replace_the_sockets(reachable: Path) -> None:
    """The unix transport's and the control socket: 0600 even under umask 0, so connecting
    is refused; in a sticky shared directory they cannot remove, rename over or replace
    them; the sidecar serves on and removes both at exit."""
    shared = shared_dir(reachable)
    sock, control = str(shared / "ap.sock"), str(shared / "ap.ctl")
    old = os.umask(0)  # the sidecar starts under umask 0
    try:
        server = Proc(["serve", "--transport", "unix", "--listen", sock, "--control", control, "--db", "off"],
                      stdin=subprocess.DEVNULL)  # fmt: skip
    finally:
        os.umask(old)
    try:
        server.banner(f"listening on {sock}")
        for path in (sock, control):
            assert (os.stat(path).st_mode & 0o777) == 0o600
            assert as_nobody(lambda p=path: connect(p)) == {"errno": 13}  # EACCES

            def replace(p: str = path) -> Any:
                tried = []
                for attempt in (lambda: os.unlink(p), lambda: os.rename(str(shared / "x"), p)):
                    try:
                        attempt()
                        tried.append("done")
                    except OSError as exc:
                        tried.append(exc.errno)
                return tried

            as_nobody(lambda: Path(shared / "x").write_text("mine"))
            assert as_nobody(replace) == [1, 1]  # EPERM: the sticky bit
        # Still the sidecar's own sockets, still serving.
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(sock)
            assert b"hello" in client.recv(4096)
        asked = subprocess.run([sys.executable, "-m", "agentproto", "inspect", "--sock", control, "--format", "json"],
                               capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60)  # fmt: skip
        assert asked.returncode == 0 and json.loads(asked.stdout)["view"] == "agents", asked.stderr
    finally:
        server.stop()
    assert not os.path.exists(sock) and not os.path.exists(control)


def test_a_path_another_user_planted_is_left_alone(reachable: Path) -> None:
    """Their stale socket, their live socket: the sidecar refuses to start (exit 1, saying
    whose it is), takes nothing over and deletes nothing."""
    shared = shared_dir(reachable)

    def plant(path: str, listen: bool) -> Any:
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        if not listen:
            s.close()  # a crashed server's leftover
            return "stale"
        s.listen(1)
        os.write(ready_w, b"x")
        os.read(stop_r, 1)  # listens until the test is done
        return "live"

    stale = str(shared / "stale.sock")
    as_nobody(lambda: plant(stale, False))
    for args, why in (
        (["--transport", "unix", "--listen", stale], f"{stale} is the socket of uid {NOBODY}; refusing to replace it"),
        (["--control", stale], f"{stale} is the socket of uid {NOBODY}; refusing to replace it"),
    ):
        done = subprocess.run([sys.executable, "-m", "agentproto", "serve", *args, "--db", "off"], capture_output=True,
                              text=True, env=base_env(), cwd=str(ROOT), timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode != 0 and why in done.stderr, done.stderr
        assert os.lstat(stale).st_uid == NOBODY
    # A live one of theirs is not stolen either.
    live = str(shared / "live.sock")
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            plant(live, True)
        finally:
            os._exit(0)
    try:
        os.read(ready_r, 1)
        done = subprocess.run([sys.executable, "-m", "agentproto", "serve", "--transport", "unix", "--listen", live],
                              capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60,
                              stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode != 0 and f"{live} is the socket of uid {NOBODY}" in done.stderr, done.stderr
    finally:
        os.write(stop_w, b"x")
        os.waitpid(pid, 0)
    assert os.lstat(live).st_uid == NOBODY


def test_no_socket_in_a_directory_another_user_can_write(reachable: Path) -> None:
    """A socket in a directory others can write (and not sticky), or another user owns, could
    be swapped for theirs at any time: the sidecar refuses to listen there."""
    open_dir = reachable / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    theirs = reachable / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    cases = (
        (open_dir, f"others can write to its directory {open_dir} (no sticky bit)"),
        (theirs, f"its directory {theirs} belongs to uid {NOBODY}"),
    )
    for directory, why in cases:
        for args in (["--transport", "unix", "--listen", str(directory / "ap.sock")], ["--control", str(directory / "c")]):
            done = subprocess.run([sys.executable, "-m", "agentproto", "serve", *args, "--db", "off"],
                                  capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
            assert done.returncode != 0 and why in done.stderr, (args, done.stderr)
        assert list(directory.iterdir()) == []


def test_inspect_asks_no_control_socket_another_user_serves(reachable: Path) -> None:
    """Another user's socket planted where ``inspect --sock`` looks gets no request, and its
    answer is never shown: an error naming its uid."""
    shared = shared_dir(reachable)
    path = str(shared / "ap.ctl")
    ready_r, ready_w = os.pipe()
    seen_r, seen_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fake control socket, as nobody
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            server = socket.socket(socket.AF_UNIX)
            server.bind(path)
            os.chmod(path, 0o777)
            server.listen(1)
            os.write(ready_w, b"x")
            conn, _ = server.accept()
            conn.settimeout(5)
            try:
                got = conn.recv(65536)
            except OSError:
                got = b""
            os.write(seen_w, got or b"-")
            fake = {"kind": "result", "op": "inspect", "ok": True, "view": "agents", "pid": 1,
                    "agents": [{"id": "FAKE"}]}  # fmt: skip
            conn.sendall(json.dumps(fake).encode() + b'\n{"kind": "done", "exit_code": 0}\n')
            conn.close()
        finally:
            os._exit(0)
    try:
        os.read(ready_r, 1)
        asked = subprocess.run([sys.executable, "-m", "agentproto", "inspect", "--sock", path, "--format", "json"],
                               capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60)  # fmt: skip
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    os.close(seen_w)
    seen = os.read(seen_r, 65536)
    assert asked.returncode == 1 and "FAKE" not in asked.stdout, (asked.stdout, asked.stderr)
    assert f"control socket {path}: served by uid {NOBODY}, not by you; not asked" in asked.stderr, asked.stderr
    assert seen in (b"", b"-"), seen  # the request never reached it


def test_another_users_database_is_neither_read_nor_written(tmp_path: Path) -> None:
    """Their file (0600 or world-writable) or a symlink to it as ``--db``: inspect refuses
    it, and the sidecar writes no row into it (one line; its sessions go on)."""
    from agentproto.engine.observations import SCHEMA

    theirs = tmp_path / "theirs.db"
    with sqlite3.connect(theirs) as db:
        db.executescript(SCHEMA)
        db.execute("INSERT INTO turns (ended_at, agent, run, session, turn, input_tokens, output_tokens, "
                   "cached_input_tokens, duration_ms, stop) VALUES (9e9, 'theirs', 'r', 's', 't', 1, 1, 0, 1, 'x')")  # fmt: skip
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "link.db"
    link.symlink_to(theirs)
    for mode in (0o600, 0o666):
        theirs.chmod(mode)
        for path, why in ((theirs, f"owned by uid {NOBODY}, not by you"), (link, "a symbolic link")):
            done = subprocess.run([sys.executable, "-m", "agentproto", "inspect", "--view", "cost", "--db", str(path),
                                   "--since", "2000-01-01"], capture_output=True, text=True, env=base_env(),
                                  cwd=str(ROOT), timeout=60)  # fmt: skip
            assert done.returncode == 1 and "theirs" not in done.stdout and why in done.stderr, done
            with Sidecar(["--mock", costly_script(tmp_path), "--db", str(path)]) as sc:
                session = sc.open(dir=str(tmp_path))
                sc.ok({"cmd": "prompt", "session": session, "text": "x"})
                sc.events(session, until="TurnEnded")
                sc.close_stdin()
                sc.drain()
                assert sc.close() == 0
            err = sc.stderr.decode()
            assert err.count("\n") == 1 and why in err, err
    assert sqlite3.connect(theirs).execute("SELECT count(*) FROM turns").fetchone() == (1,)
    assert os.stat(theirs).st_uid == NOBODY and sorted(p.name for p in tmp_path.iterdir()) == [
        "costly.json", "link.db", "theirs.db"]  # fmt: skip
