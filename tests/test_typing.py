"""The package type-checks under mypy --strict and lints clean under ruff (both configured in
pyproject.toml: Python 3.10 semantics, the package's 120 columns)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_finds_no_issue(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The configuration really is strict: with it, an untyped function is an error.
    untyped = tmp_path / "untyped.py"
    untyped.write_text("def f(x):\n    return x\n")
    probe = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(untyped)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert probe.returncode == 1 and "no-untyped-def" in probe.stdout, probe.stdout + probe.stderr


def test_ruff_finds_no_issue() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "agentproto"], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
