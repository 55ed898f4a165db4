"""fs/* inside the session dir, and terminal/* through the loop, without an agent.

The confinement tests play the races deterministically: every file-system call the
service makes is wrapped, and the swap (a directory for a symlink out, a file for a
symlink or a hard link) happens after call 1, then after call 2, ... of a fresh tree,
until a run makes fewer calls than that. Calls that could block or exhaust memory on a
regression (a FIFO, /dev/zero, a 3 GiB file) run in a child with a timeout and an
address-space limit, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from agentproto.drivers.acp.fs import read_text_file, write_text_file
from agentproto.drivers.acp.services import Terminals
from agentproto.core.jsonrpc import RpcError
from agentproto.loopio.loop import Loop
from sidecar import ROOT, base_env


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
    # Regression: the ACP SDKs' own wording; Gemini CLI creates a file only after a read of it
    # failed with this text (with "file not found: …" it failed the write instead).
    missing = str(root / "missing.txt")
    assert raised.value.body() == {
        "code": -32002, "message": f"Resource not found: {missing}", "data": {"uri": missing, "field": "path"}
    }
    with pytest.raises(RpcError):
        read_text_file(str(root), {"path": str(root), "line": 1})
    with pytest.raises(RpcError):
        read_text_file(str(root), {"path": str(root / "a.txt"), "line": -1})
    with pytest.raises(RpcError):
        write_text_file(str(root), {"path": str(root / "a.txt"), "content": 3})
    with pytest.raises(RpcError):
        read_text_file(str(root), {"path": ""})


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


# -- fs: symlinks resolved here, component by component ---------------------------------------


def test_symlinks_inside_are_followed_and_those_leading_out_refused(root: Path) -> None:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "sub" / "deep" / "f.txt").write_text("deep")
    (root / "rel").symlink_to("sub/deep")  # relative, inside
    (root / "sub" / "up").symlink_to("../a.txt")  # relative with .., still inside
    (root / "chain").symlink_to("rel")  # a link to a link
    (root / "sub" / "back").symlink_to("..")  # the root itself, through ..
    (root / "sub" / "escape").symlink_to("../..")  # one level above the root
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    r = str(root)
    assert read_text_file(r, {"path": "rel/f.txt"}) == {"content": "deep"}
    assert read_text_file(r, {"path": "chain/f.txt"}) == {"content": "deep"}
    assert read_text_file(r, {"path": str(root / "sub" / "up")}) == {"content": "1\n2\n3\n4\n5"}
    assert read_text_file(r, {"path": "sub/back/a.txt", "limit": 1}) == {"content": "1\n"}
    # `..` after a symlink is the physical parent (rel -> sub/deep, so rel/.. is sub).
    assert read_text_file(r, {"path": "rel/../deep/f.txt"}) == {"content": "deep"}
    write_text_file(r, {"path": "chain/g.txt", "content": "through links"})
    assert (root / "sub" / "deep" / "g.txt").read_text() == "through links"
    for path in ("sub/escape/secret.txt", "sub/escape", "sub/../../secret.txt", "rel/../../../secret.txt"):
        with pytest.raises(RpcError) as raised:
            read_text_file(r, {"path": path})
        assert raised.value.code == -32602 and "outside the session directory" in raised.value.message
    with pytest.raises(RpcError) as raised:
        read_text_file(r, {"path": "loop1"})
    assert raised.value.code == -32602 and "symbolic links" in raised.value.message
    assert (root.parent / "secret.txt").read_text() == "secret"


def test_absolute_paths_through_the_real_root_and_a_link_to_it(tmp_path: Path, root: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    # The session dir named through a symlink: paths under either name are inside.
    assert read_text_file(str(alias), {"path": str(root / "a.txt"), "limit": 1}) == {"content": "1\n"}
    assert read_text_file(str(alias), {"path": str(alias / "a.txt"), "limit": 1}) == {"content": "1\n"}
    with pytest.raises(RpcError):
        read_text_file(str(alias), {"path": str(tmp_path / "secret.txt")})


# -- fs: the races, played at every step -------------------------------------------------------

FS_CALLS = ("open", "stat", "lstat", "fstat", "readlink", "mkdir", "listdir", "scandir")


def race_tree(base: Path) -> tuple[Path, Path]:
    if base.exists():
        shutil.rmtree(base)
    work, outside = base / "work", base / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (work / "sub" / "file.txt").write_text("inside")
    (work / "f.txt").write_text("inside")
    (outside / "file.txt").write_text("secret")
    (outside / "f.txt").write_text("secret")
    return work, outside


def swap(kind: str, work: Path, outside: Path) -> None:
    if kind == "dir-to-symlink":
        os.rename(work / "sub", work / "sub.old")
        os.symlink(outside, work / "sub")
    elif kind == "file-to-symlink":
        os.rename(work / "f.txt", work / "f.old")
        os.symlink(outside / "f.txt", work / "f.txt")
    elif kind == "file-to-hardlink":
        os.rename(work / "f.txt", work / "f.old")
        os.link(outside / "f.txt", work / "f.txt")
    else:  # pragma: no cover
        raise AssertionError(kind)


def with_swap_after(monkeypatch: pytest.MonkeyPatch, n: int, do_swap: Callable[[], None]) -> list[int]:
    """Wrap the file-system calls; run ``do_swap`` right after the ``n``-th returns."""
    calls = [0]

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return real(*args, **kwargs)
            finally:
                calls[0] += 1
                if calls[0] == n:
                    do_swap()

        return wrapper

    for name in FS_CALLS:
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    monkeypatch.setattr(os.path, "realpath", wrap(os.path.realpath))
    return calls


@pytest.mark.parametrize(
    "kind, path",
    [
        ("dir-to-symlink", "sub/file.txt"),
        ("dir-to-symlink", "sub/made/file.txt"),  # writes create `made` on the way
        ("file-to-symlink", "f.txt"),
        ("file-to-hardlink", "f.txt"),
    ],
)
@pytest.mark.parametrize("op", ["read", "write"])
def test_a_swap_at_any_step_never_reaches_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, path: str, op: str
) -> None:
    n = 0
    while True:
        n += 1
        work, outside = race_tree(tmp_path / "race")
        with monkeypatch.context() as m:
            calls = with_swap_after(m, n, lambda: swap(kind, work, outside))
            try:
                if op == "read":
                    got = read_text_file(str(work), {"path": path})["content"]
                    assert got == "inside", f"swap after call {n} read {got!r}"
                else:
                    write_text_file(str(work), {"path": str(work / path), "content": "pwned"})
            except RpcError as exc:
                assert exc.code in (-32602, -32002), exc.message
            made = calls[0]
        assert sorted(p.name for p in outside.iterdir()) == ["f.txt", "file.txt"]
        assert (outside / "file.txt").read_text() == "secret" and (outside / "f.txt").read_text() == "secret"
        if made < n:  # this run never reached the swap: every step has been tried
            break
    print(f"{op} {kind}: swapped after each of {n - 1} calls")
    assert n > 3


# -- fs: hard links, FIFOs, devices, sockets ---------------------------------------------------


def test_hard_links_are_refused_both_ways(root: Path) -> None:
    secret = root.parent / "secret.txt"
    os.link(secret, root / "hl.txt")
    for call in (
        lambda: read_text_file(str(root), {"path": "hl.txt"}),
        lambda: read_text_file(str(root), {"path": "hl.txt", "line": 1, "limit": 1}),
        lambda: write_text_file(str(root), {"path": "hl.txt", "content": "pwned"}),
    ):
        with pytest.raises(RpcError) as raised:
            call()
        assert raised.value.code == -32602 and "hard links" in raised.value.message
    assert secret.read_text() == "secret"


def isolated(call: str, timeout: float = 30.0) -> dict[str, Any]:
    """``call`` in a child with 1 GiB of address space; its answer, error, and peak RSS."""
    code = f"""
import json, resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from agentproto.drivers.acp.fs import read_text_file, write_text_file
from agentproto.core.jsonrpc import RpcError
try:
    out = {{"ok": {call}}}
except RpcError as exc:
    out = {{"error": exc.body()}}
# VmHWM, this process's own peak: ru_maxrss would carry the parent's peak over exec (Linux
# keeps the larger of the old and new address spaces'), so a big pytest made it fail.
with open("/proc/self/status") as status:
    (out["maxrss_kb"],) = [int(line.split()[1]) for line in status if line.startswith("VmHWM:")]
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=base_env(), cwd=str(ROOT)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("op", ["read", "write"])
def test_a_fifo_is_refused_at_once_without_blocking(root: Path, op: str) -> None:
    os.mkfifo(root / "fifo")
    if op == "read":
        out = isolated(f"read_text_file({str(root)!r}, {{'path': 'fifo'}})")
    else:
        out = isolated(f"write_text_file({str(root)!r}, {{'path': 'fifo', 'content': 'x'}})")
    assert out["error"]["code"] == -32602 and "not a regular file" in out["error"]["message"]


def test_devices_and_sockets_are_refused(root: Path) -> None:
    out = isolated("read_text_file('/dev', {'path': 'zero'})")  # never ends if read
    assert out["error"]["code"] == -32602 and "not a regular file" in out["error"]["message"]
    out = isolated("write_text_file('/dev', {'path': 'null', 'content': 'x'})")
    assert out["error"]["code"] == -32602 and "not a regular file" in out["error"]["message"]
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(root / "sock"))
        with pytest.raises(RpcError) as raised:
            read_text_file(str(root), {"path": "sock"})
        assert raised.value.code == -32602 and "not a regular file" in raised.value.message
    finally:
        server.close()


# -- fs: bounded reads -------------------------------------------------------------------------


def test_a_3_gib_file_is_read_in_bounded_memory(root: Path) -> None:
    big = root / "big.txt"
    big.write_text("a\nb\r\nc\rd\n")
    os.truncate(big, 3 << 30)  # sparse: four lines, then 3 GiB of NUL without a newline
    r = str(root)
    whole = isolated(f"read_text_file({r!r}, {{'path': 'big.txt'}})")
    assert whole["error"]["code"] == -32602 and "16777216 characters" in whole["error"]["message"]
    part = isolated(f"read_text_file({r!r}, {{'path': 'big.txt', 'line': 2, 'limit': 3}})")
    assert part["ok"] == {"content": "b\r\nc\rd\n"}
    first = isolated(f"read_text_file({r!r}, {{'path': 'big.txt', 'limit': 1}})")
    assert first["ok"] == {"content": "a\n"}
    # Line 6 lies past the 3 GiB fifth line: the read stops at the scan cap and says so.
    past = isolated(f"read_text_file({r!r}, {{'path': 'big.txt', 'line': 6}})")
    assert past["error"]["code"] == -32602 and "67108864 bytes" in past["error"]["message"]
    for out in (whole, part, first, past):
        assert out["maxrss_kb"] < 256 * 1024, out


def test_line_and_limit_match_universal_newlines_across_chunks(root: Path) -> None:
    # Line ends of every kind, with a \r\n straddling the 64 Ki-character read boundary.
    text = "x" * 65535 + "\r\n" + "one\rtwo\r\nthree\n" * 3000 + "tail"
    (root / "mixed.txt").write_text(text, newline="")
    lines = text.splitlines(keepends=True)
    r = str(root)
    assert read_text_file(r, {"path": "mixed.txt"}) == {"content": text}
    for line, limit in [(1, 1), (2, 3), (2, None), (4000, 7), (9001, 5), (9002, 10), (9003, 1)]:
        stop = None if limit is None else line - 1 + limit
        expected = "".join(lines[line - 1 : stop])
        assert read_text_file(r, {"path": "mixed.txt", "line": line, "limit": limit}) == {"content": expected}


# -- malformed params: always an RpcError naming the field ---------------------------------------

BIG = sys.maxsize + 1


@pytest.mark.parametrize(
    "params, field",
    [
        ({"path": "a\0b"}, "path"),
        ({"path": "a\udc80b"}, "path"),
        ({"path": "\ud800"}, "path"),
        ({"path": 5}, "path"),
        ({"path": ["a.txt"]}, "path"),
        ({"path": None}, "path"),
        ({"path": "a/" * 5000 + "b"}, "path"),
        ({"path": "a.txt", "line": BIG}, "line"),
        ({"path": "a.txt", "limit": BIG}, "limit"),
        ({"path": "a.txt", "line": 2**200}, "line"),
        ({"path": "a.txt", "limit": -1}, "limit"),
        ({"path": "a.txt", "line": "2"}, "line"),
        ({"path": "a.txt", "line": True}, "line"),
        ({"path": "a.txt", "limit": 1.5}, "limit"),
        ([], "params"),
        (None, "params"),
    ],
)
def test_malformed_read_params_are_invalid_params(root: Path, params: Any, field: str) -> None:
    with pytest.raises(RpcError) as raised:
        read_text_file(str(root), params)
    assert raised.value.code == -32602 and f"`{field}`" in raised.value.message


@pytest.mark.parametrize(
    "params, field",
    [
        ({"path": "a\0b", "content": "x"}, "path"),
        ({"path": "\udcff", "content": "x"}, "path"),
        ({"path": "n.txt", "content": "bad \ud800 text"}, "content"),
        ({"path": "n.txt", "content": None}, "content"),
        ({"path": {}, "content": "x"}, "path"),
        ("a.txt", "params"),
    ],
)
def test_malformed_write_params_are_invalid_params(root: Path, params: Any, field: str) -> None:
    with pytest.raises(RpcError) as raised:
        write_text_file(str(root), params)
    assert raised.value.code == -32602 and f"`{field}`" in raised.value.message
    assert not (root / "n.txt").exists()


def test_writes_replace_in_place_and_never_cut_before_the_checks(root: Path) -> None:
    (root / "a.txt").chmod(0o600)
    inode = (root / "a.txt").stat().st_ino
    write_text_file(str(root), {"path": "a.txt", "content": "short"})
    after = (root / "a.txt").stat()
    assert (root / "a.txt").read_text() == "short" and after.st_ino == inode and after.st_mode & 0o777 == 0o600
    write_text_file(str(root), {"path": "a.txt", "content": "nul \0 kept"})
    assert (root / "a.txt").read_text() == "nul \0 kept"
    os.link(root / "a.txt", root / "twin.txt")  # refused: the text must survive the refusal
    with pytest.raises(RpcError):
        write_text_file(str(root), {"path": "twin.txt", "content": ""})
    assert (root / "a.txt").read_text() == "nul \0 kept"
    with pytest.raises(RpcError) as raised:
        write_text_file(str(root), {"path": "a.txt/x", "content": ""})
    assert "not a directory" in raised.value.message


# -- terminals: malformed params, a confined cwd, bounded output, flow control -------------------


@pytest.mark.parametrize(
    "params, field",
    [
        ({"command": "ec\0ho"}, "command"),
        ({"command": "\ud800"}, "command"),
        ({"command": 5}, "command"),
        ({"command": "echo", "args": ["a\0b"]}, "args[]"),
        ({"command": "echo", "args": ["\udcff"]}, "args[]"),
        ({"command": "echo", "args": [1]}, "args[]"),
        ({"command": "echo", "args": "a b"}, "args"),
        ({"command": "echo", "env": [{"name": "A=B", "value": "x"}]}, "env[].name"),
        ({"command": "echo", "env": [{"name": "A\0B", "value": "x"}]}, "env[].name"),
        ({"command": "echo", "env": [{"name": "", "value": "x"}]}, "env[].name"),
        ({"command": "echo", "env": [{"name": "A", "value": "x\0y"}]}, "env[A].value"),
        ({"command": "echo", "env": [{"name": "A", "value": 5}]}, "env[A].value"),
        ({"command": "echo", "env": [{"name": "A", "value": "\ud800"}]}, "env[A].value"),
        ({"command": "echo", "env": ["A=1"]}, "env"),
        ({"command": "echo", "env": {"A": "1"}}, "env"),
        ({"command": "echo", "cwd": 5}, "cwd"),
        ({"command": "echo", "cwd": "/"}, "cwd"),
        ({"command": "echo", "cwd": ".."}, "cwd"),
        ({"command": "echo", "cwd": "a\0"}, "cwd"),
        ({"command": "echo", "cwd": "out"}, "cwd"),  # a symlink leading out
        ({"command": "echo", "cwd": "a.txt"}, "cwd"),
        ({"command": "echo", "cwd": "missing"}, "cwd"),
        ({"command": "echo", "outputByteLimit": BIG}, "outputByteLimit"),
        ({"command": "echo", "outputByteLimit": -1}, "outputByteLimit"),
        (["echo"], "params"),
    ],
)
def test_malformed_terminal_params_are_invalid_params(root: Path, params: Any, field: str) -> None:
    loop = Loop()
    terminals = Terminals(loop, lambda: dict(os.environ), str(root), lambda t, s: None)
    try:
        with pytest.raises(RpcError) as raised:
            terminals.create(params)
        error = raised.value
        assert error.code in (-32602, -32002)
        assert f"`{field}`" in error.message or (error.data or {}).get("field") == field
        assert not terminals.any_alive()
    finally:
        loop.close()


@pytest.mark.parametrize("params", [{"terminalId": ["t"]}, {"terminalId": {"a": 1}}, {"terminalId": 1}, [], None])
def test_malformed_terminal_ids_are_invalid_params(tmp_path: Path, params: Any) -> None:
    loop = Loop()
    terminals = Terminals(loop, lambda: dict(os.environ), str(tmp_path), lambda t, s: None)
    for call in (terminals.output, terminals.kill, terminals.release, lambda p: terminals.wait_for_exit(p, print)):
        with pytest.raises(RpcError) as raised:
            call(params)
        assert raised.value.code == -32602
    loop.close()


def test_terminal_cwd_is_a_directory_inside_dir(root: Path) -> None:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "link").symlink_to("sub/deep")
    loop = Loop()
    terminals = Terminals(loop, lambda: dict(os.environ), str(root), lambda t, s: None)
    done: list[Any] = []
    ids = []
    for cwd in ("sub", str(root / "link"), ""):
        tid = terminals.create({"command": "pwd", "args": ["-P"], "cwd": cwd})["terminalId"]
        terminals.wait_for_exit({"terminalId": tid}, done.append)
        ids.append(tid)
    run_until(loop, lambda: len(done) == 3)
    outputs = [terminals.output({"terminalId": tid})["output"] for tid in ids]
    assert outputs == [f"{root / 'sub'}\n", f"{root / 'sub' / 'deep'}\n", f"{root}\n"]
    loop.close()


def test_output_without_a_limit_keeps_a_bounded_tail(tmp_path: Path) -> None:
    """Each terminal streams more than it may keep, then keeps its tail: 1 MiB without a
    limit, 16 MiB (the ceiling) for a limit above it. Each is waited for on its own: how two
    `yes` share the CPU is the scheduler's (one stalled a moment under load got under 16 MiB
    of 40 MiB streamed in all)."""
    loop = Loop()
    streamed: dict[str, int] = {}

    def count(terminal_id: str, text: str) -> None:
        streamed[terminal_id] = streamed.get(terminal_id, 0) + len(text.encode())

    terminals = Terminals(loop, lambda: dict(os.environ), str(tmp_path), count)
    tid = terminals.create({"command": "yes", "args": ["abcdé"]})["terminalId"]
    huge = terminals.create({"command": "yes", "args": ["abcdé"], "outputByteLimit": 1 << 40})["terminalId"]
    bounds = {tid: 1 << 20, huge: 16 << 20}  # the default, the ceiling
    run_until(loop, lambda: all(streamed.get(t, 0) > bound + (1 << 20) for t, bound in bounds.items()), timeout=60)
    for terminal_id, bound in bounds.items():
        out = terminals.output({"terminalId": terminal_id})
        assert out["truncated"] is True
        assert bound - 8 < len(out["output"].encode()) <= bound  # a tail, whole characters
        assert out["output"].endswith("abcdé\n") and "\ufffd" not in out["output"]
    terminals.close_all()
    run_until(loop, lambda: not terminals.any_alive())
    loop.close()


def test_pause_stops_reading_terminals_and_resume_delivers_everything(tmp_path: Path) -> None:
    loop = Loop()
    streamed: dict[str, list[str]] = {}

    def keep(terminal_id: str, text: str) -> None:
        streamed.setdefault(terminal_id, []).append(text)

    fds = len(os.listdir("/proc/self/fd"))
    terminals = Terminals(loop, lambda: dict(os.environ), str(tmp_path), keep)
    yes = terminals.create({"command": "yes"})["terminalId"]
    run_until(loop, lambda: sum(map(len, streamed.get(yes, []))) > 1 << 20)
    terminals.pause()
    before = len(streamed[yes])
    # A command that starts and exits while paused: its exit waits for its output.
    quick = terminals.create({"command": "sh", "args": ["-c", "echo before-exit; exit 3"]})["terminalId"]
    exits: list[Any] = []
    terminals.wait_for_exit({"terminalId": quick}, exits.append)
    settle = time.monotonic() + 1.0
    run_until(loop, lambda: time.monotonic() > settle)
    assert len(streamed[yes]) == before, "a paused terminal was read"
    assert quick not in streamed and exits == []
    assert "exitStatus" not in terminals.output({"terminalId": quick})
    terminals.resume()
    run_until(loop, lambda: exits and len(streamed[yes]) > before + 10)
    assert exits == [{"exitCode": 3, "signal": None}]
    assert "".join(streamed[quick]) == "before-exit\n"
    assert terminals.output({"terminalId": quick})["output"] == "before-exit\n"
    # Paused again, then the session ends: nothing is left behind, not even a pipe.
    terminals.pause()
    terminals.close_all()
    run_until(loop, lambda: not terminals.any_alive() and len(os.listdir("/proc/self/fd")) <= fds)
    loop.close()
