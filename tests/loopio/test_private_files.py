"""Files agentproto creates (issue 13): owner-only, never through a planted symlink, never
into a FIFO or someone else's file — the private area (agentproto/loopio/private.py), ``--record``
and ``record_wire``, through the real file system and real sidecar processes."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from agentproto.loopio import private
from ops_support import Proc, result_of
from sidecar import ROOT, Sidecar, base_env

ACP_AGENT = Path(__file__).resolve().parents[1] / "fakes" / "acp_test_agent.py"


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """The umask for what this process (and the children it starts meanwhile) creates."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file a planted symlink points at: it must never change."""
    target = tmp_path / "outside.txt"
    target.write_text("untouched\n")
    return target


# -- the private area ------------------------------------------------------------------------


def run_python(code: str, tmpdir: Path, mask: int = 0o022) -> subprocess.CompletedProcess[str]:
    with umask(mask):
        return subprocess.run(
            [sys.executable, "-c", code], env=base_env({"TMPDIR": str(tmpdir)}), cwd=str(ROOT),
            capture_output=True, text=True, timeout=30,
        )


def test_the_area_is_made_on_first_use_owner_only_and_removed_at_exit(tmp_path: Path) -> None:
    done = run_python("import agentproto.loopio.private, agentproto.cli", tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # importing makes nothing
    code = (
        "import json, os\n"
        "from agentproto.loopio import private\n"
        "d = private.session_dir('claude')\n"
        "private.write_private(os.path.join(d, 'mcp.json'), '{}')\n"
        "e = private.session_dir('claude')\n"
        "private.remove_tree(e)\n"
        "print(json.dumps([d, e, os.path.exists(e)]))\n"
    )
    done = run_python(code, tmp_path, mask=0)  # umask 0: the modes are ours, not the umask's
    assert done.returncode == 0, done.stderr
    session, removed, removed_exists = json.loads(done.stdout)
    area = Path(session).parent
    assert area.parent == tmp_path and area.name.startswith("agentproto-")
    assert Path(removed).parent == area and not removed_exists
    assert not area.exists()  # atexit took the whole area with it


def test_session_dirs_and_private_files_are_owner_only_even_with_umask_0(tmp_path: Path) -> None:
    with umask(0):
        d = Path(private.session_dir("test"))
        try:
            private.write_private(str(d / "secret.json"), '{"k": "sk-test-SECRET-1234"}')
            assert mode(d) == 0o700 and mode(d.parent) == 0o700
            assert mode(d / "secret.json") == 0o600
            assert (d / "secret.json").read_text() == '{"k": "sk-test-SECRET-1234"}'
        finally:
            private.remove_tree(str(d))
    assert not d.exists()


def test_write_private_never_reuses_a_path_nor_follows_a_symlink(tmp_path: Path, outside: Path) -> None:
    planted = tmp_path / "planted"
    planted.symlink_to(outside)
    with pytest.raises(FileExistsError):
        private.write_private(str(planted), "sk-test-SECRET-1234")
    existing = tmp_path / "existing"
    existing.write_text("theirs")
    with pytest.raises(FileExistsError):
        private.write_private(str(existing), "sk-test-SECRET-1234")
    assert outside.read_text() == "untouched\n" and existing.read_text() == "theirs"


def test_open_append_creates_0600_and_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "record.jsonl"
    with umask(0):
        with private.open_append(str(path)) as f:
            f.write("one\n")
    assert mode(path) == 0o600
    with private.open_append(str(path)) as f:
        f.write("two\n")
    assert path.read_text() == "one\ntwo\n"


def test_open_append_refuses_symlinks_directories_and_fifos_without_blocking(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(outside)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "would-be-created")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, reason in ((link, "symbolic link"), (dangling, "symbolic link"), (tmp_path, "not a regular file"),
                         (fifo, "not a regular file")):
        with pytest.raises(private.UnsafePath, match=reason):
            private.open_append(str(path))
    assert outside.read_text() == "untouched\n"
    assert not (tmp_path / "would-be-created").exists()
    # A FIFO with a reader waiting is refused too (and nothing is written into it).
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    time.sleep(0.2)
    with pytest.raises(private.UnsafePath, match="not a regular file"):
        private.open_append(str(fifo))
    with open(fifo, "wb"):
        pass  # let the reader finish
    reader.join(5)
    assert got == [b""]


@pytest.mark.not_core("root (it chowns a file to another uid)")
def test_open_append_refuses_a_file_another_user_planted(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("making a file another user owns needs root (the suite runs as root in CI, .ci/run; this test is not core)")
    planted = tmp_path / "record.jsonl"
    planted.write_text("")
    os.chown(planted, 4242, 4242)
    with pytest.raises(private.UnsafePath, match="another user"):
        private.open_append(str(planted))
    assert planted.read_text() == ""


# -- --record ------------------------------------------------------------------------------


def test_record_never_writes_through_a_planted_symlink(tmp_path: Path, outside: Path) -> None:
    record = tmp_path / "trace.ndjson"
    record.symlink_to(outside)
    p = Proc(["agent", "--record", str(record)])
    try:
        assert result_of(p.request({"op": "capabilities"}))["ok"]
        assert result_of(p.request({"op": "explain", "code": "BadFrame"}))["ok"]  # the session goes on
        p.close_stdin()
        assert p.wait() == 0
    finally:
        p.stop()
    assert outside.read_text() == "untouched\n"
    assert "symbolic link" in p.stderr and "recording skipped" in p.stderr
    assert p.stderr.count("recording skipped") == 1


def test_record_file_is_owner_only_even_with_umask_0(tmp_path: Path) -> None:
    record = tmp_path / "trace.ndjson"
    with umask(0):
        sc = Sidecar(["--record", str(record)])
    try:
        sc.ok({"cmd": "discover"})
    finally:
        assert sc.close() == 0
    assert mode(record) == 0o600
    # Protocol 1 records its transcript: the hello out, then each command in (record.py).
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert entries[0]["recording"] == 1  # the run's header first
    assert entries[2]["dir"] == "in" and entries[2]["line"].startswith('{"id"')


# -- record_wire ---------------------------------------------------------------------------


def acp_open(sc: Sidecar, tmp_path: Path, **options: Any) -> dict[str, Any]:
    agent = {"acp": {"name": "acp-test", "path": str(ACP_AGENT), "args": []}}
    return sc.reply(sc.send({"cmd": "open", "agent": agent, "dir": str(tmp_path), **options}), 30)


def test_record_wire_through_a_planted_symlink_is_invalid_configuration(tmp_path: Path, outside: Path) -> None:
    record = tmp_path / "wire.jsonl"
    record.symlink_to(outside)
    fifo = tmp_path / "wire.fifo"
    os.mkfifo(fifo)
    with Sidecar() as sc:
        for path, reason in ((record, "symbolic link"), (fifo, "not a regular file")):
            error = acp_open(sc, tmp_path, record_wire=str(path))["error"]
            assert error["kind"] == "InvalidConfiguration"
            assert error["detail"].startswith(f"record_wire: {path}: ") and reason in error["detail"]
        assert "ok" in sc.reply(sc.send({"cmd": "discover"}), 30)  # nothing else was harmed
    assert outside.read_text() == "untouched\n"


def test_record_wire_file_is_owner_only_even_with_umask_0(tmp_path: Path) -> None:
    record = tmp_path / "wire.jsonl"
    with umask(0):
        sc = Sidecar()
    try:
        session = acp_open(sc, tmp_path, record_wire=str(record))["ok"]["id"]
        sc.ok({"cmd": "close", "session": session}, 20)
        sc.wait_for(lambda line: line.get("closed") == session, 20)
    finally:
        sc.close()
    assert mode(record) == 0o600
    records = [json.loads(line) for line in record.read_text().splitlines()]
    sent = [json.loads(r["line"]).get("method") for r in records if r.get("dir") == "to_agent"]
    assert sent[0] == "initialize"
