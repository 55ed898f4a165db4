"""Regressions for what the fuzzers (tests/fuzz/) found, each through the interface a
user meets it by. The fuzz targets keep the minimal inputs as explicit examples too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sidecar import ROOT, base_env


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"turns": ' + "1" * 5000 + "}", "not JSON: Exceeds the limit"),
        ("[" * 3000, "not JSON: nested too deeply"),
    ],
    ids=["5000-digit-integer", "deep-nesting"],
)
def test_a_mock_script_that_is_not_json_enough_is_refused_with_its_reason(tmp_path: Path, text: str, words: str) -> None:
    # load_script let ValueError / RecursionError out: `serve --mock` died with a traceback.
    path = tmp_path / "script.json"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "serve", "--mock", str(path)],
        input=b"",
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=60,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr and words in stderr, stderr
