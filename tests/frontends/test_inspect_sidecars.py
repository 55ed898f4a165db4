"""``inspect`` without ``--sock``: every serve opens its control socket in the user's control
directory (loopio/control_dir.py) and one ``inspect`` lists them all; the directory's rules
(0700, ours, no symbolic link), stale sockets, ``--no-control`` and ``--session``."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, Sidecar, base_env

#: A hang guard, never a timing assertion.
GUARD = 30.0


def inspect_cli(control_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentproto", "inspect", *args], capture_output=True, text=True,
        env=base_env({"AGENTPROTO_CONTROL_DIR": str(control_dir)}), cwd=str(ROOT), timeout=60,
    )  # fmt: skip


def serve(control_dir: Path, *args: str) -> Sidecar:
    return Sidecar(["--db", "off", *args], env={"AGENTPROTO_CONTROL_DIR": str(control_dir)})


def wait_for_socket(control_dir: Path, pid: int) -> Path:
    """The sidecar's socket: opened just after its hello, so waited for (a hang guard)."""
    path = control_dir / f"{pid}.sock"
    deadline = time.monotonic() + GUARD
    while not path.exists():
        assert time.monotonic() < deadline, f"no control socket {path}"
        time.sleep(0.02)
    return path


def test_one_inspect_finds_every_sidecar_of_the_user(tmp_path: Path) -> None:
    control = tmp_path / "ctl"
    with serve(control) as one, serve(control, "--transport", "stdio") as two:
        sockets = [wait_for_socket(control, sc.proc.pid) for sc in (one, two)]
        assert stat.S_IMODE(os.lstat(control).st_mode) == 0o700  # made by the first serve
        assert all(stat.S_IMODE(os.lstat(path).st_mode) == 0o600 for path in sockets)
        session = one.open(dir=str(tmp_path))
        done = inspect_cli(control, "--format", "json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["view"] == "sidecars" and found["dir"] == str(control) and found["stale"] == []
        by_pid = {view["pid"]: view for view in found["sidecars"]}
        assert set(by_pid) == {one.proc.pid, two.proc.pid}
        assert [row["id"] for row in by_pid[one.proc.pid]["agents"]] == [session]
        assert by_pid[two.proc.pid]["agents"] == [] and by_pid[two.proc.pid]["command"] == "serve"
        assert by_pid[one.proc.pid]["sock"] == str(sockets[0])
        table = inspect_cli(control, "--format", "table")
        assert table.returncode == 0, table.stderr
        headers = [line for line in table.stdout.splitlines() if line.startswith("sidecar pid ")]
        assert [int(h.split()[2]) for h in headers] == sorted([one.proc.pid, two.proc.pid])
        # --session names a session, whichever sidecar has it; --agent is the seed's alias.
        for flag in ("--session", "--agent"):
            view = json.loads(inspect_cli(control, flag, session, "--format", "json").stdout)
            assert view["pid"] == one.proc.pid and view["agent"]["info"]["id"] == session
        missing = inspect_cli(control, "--session", "s99")
        assert missing.returncode == 1 and "no sidecar of yours has a session s99 (2 sidecar(s) asked" in missing.stderr
    assert list(control.iterdir()) == []  # each removed its own socket at exit


def test_no_control_opens_no_socket_and_inspect_says_none_runs(tmp_path: Path) -> None:
    control = tmp_path / "ctl"
    with serve(control, "--no-control") as sc:
        sc.ok({"cmd": "discover"})  # the loop has run well past the moment the socket would open
        assert not control.exists()
        done = inspect_cli(control, "--format", "table")
        assert done.returncode == 0 and done.stdout.startswith("no sidecar of yours is running"), done
    done = subprocess.run([sys.executable, "-m", "agentproto", "serve", "--no-control", "--control", "x"],
                          capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60)  # fmt: skip
    assert done.returncode == 2 and "contradict" in done.stderr


def _listening(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen(1)
    return sock


def test_a_stale_socket_is_removed_only_after_a_failed_connect(tmp_path: Path) -> None:
    """A socket whose sidecar died (SIGKILL) is removed by the next inspect; a live one that
    does not answer, a file that is not a socket, and a name that is not a pid stay."""
    control = tmp_path / "ctl"
    control.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(control / "999999.sock"))
    dead.close()  # nobody listens on it any more; its file stays
    (control / "999998.sock").write_text("not a socket")
    other = _listening(control / "other.sock")
    with serve(control) as sc:
        wait_for_socket(control, sc.proc.pid)
        done = inspect_cli(control, "--format", "json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["stale"] == [str(control / "999999.sock")]
        assert [view["pid"] for view in found["sidecars"]] == [sc.proc.pid]
        names = sorted(p.name for p in control.iterdir())
        assert names == sorted(["999998.sock", "other.sock", f"{sc.proc.pid}.sock"])
    other.close()


def test_a_killed_sidecar_leaves_a_socket_the_next_inspect_removes(tmp_path: Path) -> None:
    control = tmp_path / "ctl"
    sc = serve(control)
    try:
        path = wait_for_socket(control, sc.proc.pid)
        sc.proc.kill()
        sc.proc.wait()
        assert path.exists()
        done = inspect_cli(control, "--format", "table")
        assert done.returncode == 0, done.stderr
        assert "removed 1 stale control socket(s)" in done.stdout and not path.exists()
    finally:
        sc.close()


def _refused(control: Path, why: str) -> None:
    """serve runs on without a control socket, saying why once; inspect refuses the directory."""
    with serve(control) as sc:
        sc.ok({"cmd": "discover"})
        assert sc.ok({"cmd": "probe", "agent": "mock"})["version"] == "mock"  # serve works regardless
        sc.close()
    assert f"no control socket: the control directory {control} {why}" in sc.stderr.decode(), sc.stderr
    done = inspect_cli(control)
    assert done.returncode == 1 and f"the control directory {control} {why}" in done.stderr, done.stderr


def test_a_control_directory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    control = tmp_path / "ctl"
    control.symlink_to(target)
    _refused(control, "is a symbolic link")
    assert list(target.iterdir()) == []  # nothing was bound through the link


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701, 0o1777])
def test_a_control_directory_of_another_mode_is_refused(tmp_path: Path, mode: int) -> None:
    control = tmp_path / "ctl"
    control.mkdir()
    os.chmod(control, mode)
    _refused(control, f"has mode {mode:04o}, not 0700")
    assert list(control.iterdir()) == [] and stat.S_IMODE(os.lstat(control).st_mode) == mode  # never chmod-ed


@pytest.mark.not_core("root (it chowns a directory to another uid)")
def test_a_control_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("chown to another uid needs root (the suite runs as root in CI, .ci/run; this test is not core)")
    control = tmp_path / "ctl"
    control.mkdir(mode=0o700)
    os.chown(control, 65534, 65534)
    _refused(control, "belongs to uid 65534, not to you")
    assert list(control.iterdir()) == []


def test_a_control_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    control = tmp_path / "ctl"
    control.write_text("")
    _refused(control, "is not a directory")


def test_a_stale_socket_swapped_while_it_was_checked_is_left_alone(tmp_path: Path, monkeypatch: Any) -> None:
    """Between the failed connect and the unlink, the path now holds another file: neither
    serve's bind (sockets.bind_unix) nor inspect's cleanup (control_dir.remove_stale)
    removes it (same device and inode, or nothing)."""
    from agentproto.loopio import control_dir, sockets

    path = tmp_path / "1.sock"

    def stale_socket() -> None:
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(str(path))
        dead.close()

    stale_socket()
    listed = os.lstat(path)
    os.rename(path, tmp_path / "kept.sock")  # kept: its inode cannot be reused
    stale_socket()  # another file at the same path now
    assert control_dir.remove_stale(str(path), listed) is False and path.exists()
    assert control_dir.remove_stale(str(path), os.lstat(path)) is True and not path.exists()

    stale_socket()
    real = socket.socket

    class Swapping(real):  # type: ignore[misc,valid-type]
        def connect(self, address: Any) -> None:
            os.rename(address, tmp_path / "kept-too.sock")
            stale_socket()  # swapped for another stale socket during the check
            raise ConnectionRefusedError

    monkeypatch.setattr(sockets.socket, "socket", Swapping)
    before = os.lstat(path).st_ino
    with pytest.raises(OSError, match="was replaced while it was checked"):
        sockets.bind_unix(str(path))
    assert os.lstat(path).st_ino != before and stat.S_ISSOCK(os.lstat(path).st_mode)  # the new one, left alone


@pytest.mark.parametrize("command", [["serve", "--transport", "unix"], ["serve", "--transport", "http", "--port", "0"],
                                     ["serve", "--transport", "jsonrpc"], ["serve", "--transport", "mcp"], ["agent"]])
def test_every_transport_and_the_ops_loop_open_a_socket_inspect_finds(command: list[str], tmp_path: Path) -> None:
    from ops_support import Proc

    control = tmp_path / "ctl"
    args = [*command, "--db", "off"] + (["--listen", str(tmp_path / "ap.sock")] if "unix" in command else [])
    p = Proc(args, env={"AGENTPROTO_CONTROL_DIR": str(control)})
    try:
        wait_for_socket(control, p.proc.pid)
        done = inspect_cli(control, "--format", "json")
        assert done.returncode == 0, done.stderr
        [view] = json.loads(done.stdout)["sidecars"]
        name = "agent" if command == ["agent"] else f"serve --transport {command[2]}"
        assert (view["pid"], view["command"], view["agents"]) == (p.proc.pid, name, [])
    finally:
        p.stop()
    assert list(control.iterdir()) == []
