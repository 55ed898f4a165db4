"""The package as another revision has it, for the benchmarks' ``--before REV``: imported by
bench_acp.py, bench_core.py and bench_generate.py (scripts/ is on sys.path when they run)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(rev: str, into: str | os.PathLike[str]) -> Path:
    """``agentproto/`` as it is at ``rev`` (``git archive``), extracted under ``into``; returns
    ``into``, the root to run ``python3 -m agentproto`` from."""
    archive = ["git", "-C", str(ROOT), "archive", rev, "agentproto"]
    data = subprocess.run(archive, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    return Path(into)
