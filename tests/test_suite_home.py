"""The suite's own rule: a run leaves nothing under the user's home (tests/conftest.py).
Every test process runs with HOME and the XDG dirs in the run's temp dir, and the check
that fails a run listing what it wrote under ~ finds what it must and skips what it may."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FOLLOW_HOME, PACKAGE_CACHES, USER_HOMES, XDG_HOMES, written_under_home


def test_every_test_runs_with_a_home_of_the_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    home = Path(os.environ["HOME"])
    assert home == tmp_path_factory.getbasetemp() / "home" and str(home) not in USER_HOMES
    assert os.path.expanduser("~") == str(home)
    for name, under in XDG_HOMES.items():
        assert os.environ[name] == str(home / under) and (home / under).is_dir()
    assert not [name for name in FOLLOW_HOME if name in os.environ]


def test_a_child_with_the_inherited_environment_writes_under_the_run_home(tmp_path: Path) -> None:
    code = "import os, pathlib; print(pathlib.Path.home()); print(os.environ['XDG_CACHE_HOME'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [os.environ["HOME"], os.environ["XDG_CACHE_HOME"]]


def test_the_check_lists_what_was_written_after_the_marker_but_not_the_package_caches(tmp_path: Path) -> None:
    home = tmp_path / "user"
    (home / ".config" / "old").mkdir(parents=True)
    for cache in PACKAGE_CACHES:
        (home / cache).mkdir(parents=True)
    before = time.time() - 60
    for path in home.rglob("*"):
        os.utime(path, (before, before))
    os.utime(home, (before, before))
    marker = tmp_path / "marker"
    marker.touch()
    os.utime(marker, (before + 30, before + 30))
    assert written_under_home(marker, [str(home)]) == []
    (home / ".cache" / "claude-cli-nodejs").mkdir()
    (home / ".config" / "old" / "settings.json").write_text("{}")
    for cache in PACKAGE_CACHES:
        (home / cache / "left.log").write_text("install step")
    assert sorted(written_under_home(marker, [str(home)])) == [
        str(home / ".cache"), str(home / ".cache" / "claude-cli-nodejs"),
        str(home / ".config" / "old"), str(home / ".config" / "old" / "settings.json"),
    ]  # fmt: skip
