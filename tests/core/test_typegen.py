"""The contract from TypeScript: json-schema-to-typescript (pinned, tests/typegen/) turns
agentproto/schema.json into types, and tests/ts/check.ts — frames built, lines and events
narrowed by kind — compiles against them under `tsc --noEmit --strict` (pinned). The npm
tools live in .cache/typegen (scripts/install-test-deps); a missing one fails, never skips."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sidecar import ROOT

BIN = ROOT / ".cache" / "typegen" / "node_modules" / ".bin"


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/install-test-deps (it needs node and npm)")
    return str(path)


def generate(out: Path) -> str:
    done = subprocess.run(
        [tool("json2ts"), "-i", str(ROOT / "agentproto" / "schema.json"), "-o", str(out / "agentproto.d.ts")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return (out / "agentproto.d.ts").read_text()


def tsc(source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("tsc"), "--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", str(source)],
        cwd=source.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_generated_types_compile_with_an_app_that_builds_frames_and_narrows_lines(tmp_path):
    types = generate(tmp_path)
    # The names an app imports, one per line variant (titles in the schema).
    for name in ("HelloLine", "ReplyLine", "ErrorReplyLine", "EventLine", "SessionErrorLine", "ClosedLine"):
        assert f"export interface {name} {{" in types, name
    shutil.copy(ROOT / "tests" / "ts" / "check.ts", tmp_path / "check.ts")
    done = tsc(tmp_path / "check.ts")
    assert done.returncode == 0, done.stdout + done.stderr


def test_tsc_really_checks_against_the_generated_types(tmp_path):
    """A program that misuses a line is refused: the compile above proves something."""
    generate(tmp_path)
    (tmp_path / "wrong.ts").write_text(
        'import type { Line, Event } from "./agentproto";\n'
        'export function f(line: Line): Event | undefined {\n'
        '  if ("closed" in line) return line.closed;\n'
        "  return undefined;\n"
        "}\n"
    )
    done = tsc(tmp_path / "wrong.ts")
    assert done.returncode != 0 and "wrong.ts(3," in done.stdout, done.stdout + done.stderr
