"""fs/* inside the session dir, and terminal/* through the loop, without an agent."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from agentproto.drivers.acp_services import RpcError, Terminals, read_text_file, resolve_inside, write_text_file
from agentproto.loop import Loop


@pytest.fixture
def root(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("1\n2\n3\n4\n5")
    (tmp_path / "secret.txt").write_text("secret")
    (work / "out").symlink_to(tmp_path)
    (work / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (work / "inner").symlink_to(work / "a.txt")
    return work


def test_read_lines_and_limits(root: Path) -> None:
    path = str(root / "a.txt")
    assert read_text_file(str(root), {"path": path}) == {"content": "1\n2\n3\n4\n5"}
    assert read_text_file(str(root), {"path": path, "line": 2, "limit": 2}) == {"content": "2\n3\n"}
    assert read_text_file(str(root), {"path": path, "line": 5}) == {"content": "5"}
    assert read_text_file(str(root), {"path": path, "limit": 1}) == {"content": "1\n"}
    assert read_text_file(str(root), {"path": path, "line": 9}) == {"content": ""}
    assert read_text_file(str(root), {"path": "a.txt", "line": 1, "limit": 0}) == {"content": ""}
    assert read_text_file(str(root), {"path": str(root / "inner")}) == {"content": "1\n2\n3\n4\n5"}


@pytest.mark.parametrize("path", ["../secret.txt", "out/secret.txt", "leak.txt", "/etc/passwd", "out"])
def test_paths_outside_are_refused_before_any_access(root: Path, path: str) -> None:
    with pytest.raises(RpcError) as raised:
        read_text_file(str(root), {"path": path})
    assert raised.value.code == -32602
    with pytest.raises(RpcError):
        write_text_file(str(root), {"path": path, "content": "pwned"})
    assert (root.parent / "secret.txt").read_text() == "secret"
    assert not (root.parent / "out").exists()


def test_write_creates_files_and_directories(root: Path) -> None:
    write_text_file(str(root), {"path": str(root / "new" / "deep" / "b.txt"), "content": "é\n"})
    assert (root / "new" / "deep" / "b.txt").read_text(encoding="utf-8") == "é\n"
    write_text_file(str(root), {"path": "a.txt", "content": "replaced"})
    assert (root / "a.txt").read_text() == "replaced"


def test_errors(root: Path) -> None:
    with pytest.raises(RpcError) as raised:
        read_text_file(str(root), {"path": str(root / "missing.txt")})
    assert raised.value.code == -32002
    with pytest.raises(RpcError):
        read_text_file(str(root), {"path": str(root), "line": 1})
    with pytest.raises(RpcError):
        read_text_file(str(root), {"path": str(root / "a.txt"), "line": -1})
    with pytest.raises(RpcError):
        write_text_file(str(root), {"path": str(root / "a.txt"), "content": 3})
    with pytest.raises(RpcError):
        resolve_inside(str(root), "")


def run_until(loop: Loop, check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout

    def tick() -> None:  # wake the loop, so `until` is looked at even when nothing happens
        if not check() and time.monotonic() < deadline:
            loop.call_later(0.05, tick)

    tick()
    loop.run(until=lambda: check() or time.monotonic() > deadline)
    assert check(), "timed out"


def test_terminal_lifecycle(tmp_path: Path) -> None:
    loop = Loop()
    streamed: list[tuple[str, str]] = []
    terminals = Terminals(loop, lambda: dict(os.environ, BASE="b"), str(tmp_path), lambda t, s: streamed.append((t, s)))
    created = terminals.create(
        {
            "command": "sh",
            "args": ["-c", 'echo "$BASE $EXTRA $(pwd)"; exit 4'],
            "env": [{"name": "EXTRA", "value": "x"}],
        }
    )
    tid = created["terminalId"]
    exits: list[dict[str, Any]] = []
    terminals.wait_for_exit({"terminalId": tid}, exits.append)
    run_until(loop, lambda: exits)
    assert exits == [{"exitCode": 4, "signal": None}]
    output = terminals.output({"terminalId": tid})
    assert output == {"output": f"b x {tmp_path}\n", "truncated": False, "exitStatus": {"exitCode": 4, "signal": None}}
    assert "".join(s for _, s in streamed) == f"b x {tmp_path}\n"
    terminals.release({"terminalId": tid})
    with pytest.raises(RpcError):
        terminals.output({"terminalId": tid})
    loop.close()


def test_terminal_kill_limit_and_no_shell(tmp_path: Path) -> None:
    loop = Loop()
    terminals = Terminals(loop, lambda: dict(os.environ), str(tmp_path), lambda t, s: None)
    # Without a shell, `;` is just an argument.
    echo = terminals.create({"command": "echo", "args": ["a;", "$HOME"], "outputByteLimit": 4})
    done: list[Any] = []
    terminals.wait_for_exit({"terminalId": echo["terminalId"]}, done.append)
    run_until(loop, lambda: done)
    out = terminals.output({"terminalId": echo["terminalId"]})
    assert out["output"] == "OME\n" and out["truncated"] is True
    # A whole command line in `command` (no args) runs as words, still without a shell.
    words = terminals.create({"command": "echo two words"})
    terminals.wait_for_exit({"terminalId": words["terminalId"]}, done.append)
    run_until(loop, lambda: len(done) == 2)
    assert terminals.output({"terminalId": words["terminalId"]})["output"] == "two words\n"
    sleeper = terminals.create({"command": "sleep", "args": ["30"]})
    assert "exitStatus" not in terminals.output({"terminalId": sleeper["terminalId"]})
    terminals.kill({"terminalId": sleeper["terminalId"]})
    terminals.wait_for_exit({"terminalId": sleeper["terminalId"]}, done.append)
    run_until(loop, lambda: len(done) == 3)
    assert done[2] == {"exitCode": None, "signal": "SIGKILL"}
    with pytest.raises(RpcError):
        terminals.create({"command": "/no/such/program"})
    terminals.close_all()
    assert not terminals.any_alive()
    loop.close()


def test_close_all_kills_running_groups(tmp_path: Path) -> None:
    loop = Loop()
    terminals = Terminals(loop, lambda: dict(os.environ), str(tmp_path), lambda t, s: None)
    # A child that leaves a grandchild in its group.
    terminals.create({"command": "sh", "args": ["-c", "sleep 30 & sleep 30"]})
    time.sleep(0.2)
    assert terminals.any_alive()
    terminals.close_all()
    run_until(loop, lambda: not terminals.any_alive())
    loop.close()
