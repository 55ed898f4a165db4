"""The package type-checks (mypy, configured in pyproject.toml, Python 3.10 semantics)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_issue() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
