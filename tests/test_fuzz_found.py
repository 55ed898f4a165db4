"""Regressions for what the fuzzers (tests/fuzz/) found, each through the interface a
user meets it by. The fuzz targets keep the minimal inputs as explicit examples too."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    "request_body",
    [b'{"op": ' + b"9" * 5000 + b"}", b'{"op": "capabilities"} ' + b"1" * 5000],
    ids=["the-request", "an-extra-object"],
)
def test_single_shot_answers_a_5000_digit_integer_with_done(request_body: bytes) -> None:
    # split_objects let the digit limit's ValueError out of the EOF callback: no done line,
    # and the process never exited.
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "--single-shot"],
        input=request_body,
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=60,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["kind"] == "done" and done.returncode == lines[-1]["exit_code"], lines
    assert any(line["kind"] == "error" and "Exceeds the limit" in line["message"] for line in lines), lines
    assert b"Traceback" not in done.stderr
