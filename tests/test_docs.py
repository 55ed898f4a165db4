"""docs/protocol.md is generated from agentproto/schema.json (scripts/gen_docs.py): it is up
to date, and it names every command, event kind, error kind, op and ops line kind."""

from __future__ import annotations

import re
import subprocess
import sys

from sidecar import ROOT

from agentproto.frontends.ops_framing import OPERATIONS
from agentproto.core.wire import COMMANDS, ERROR_KINDS

DOC = ROOT / "docs" / "protocol.md"


def test_protocol_doc_is_what_the_generator_writes():
    done = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_protocol_doc_covers_the_whole_contract():
    text = DOC.read_text(encoding="utf-8")
    for cmd in COMMANDS:
        assert f"\n### `{cmd}`\n" in text, cmd
    for op in OPERATIONS:
        assert f"\n#### `{op}`\n" in text, op
    for kind in ERROR_KINDS:
        assert f"\n| `{kind}` | " in text, kind
    for kind in ("TurnStarted", "TextDelta", "ToolUpdated", "RequestOpened", "ContextCompacted", "TurnDiff", "TurnEnded"):
        assert f"\n#### `{kind}`\n" in text, kind
    for line in ("event", "log", "progress", "result", "error", "done"):
        assert f"\n#### `{line}` (Ops" in text, line
    # Every link points at a heading, with the anchors a Markdown renderer makes (GitHub's rule).
    anchors: set[str] = set()
    for heading in (line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")):
        anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n, unique = 0, anchor
        while unique in anchors:
            n += 1
            unique = f"{anchor}-{n}"
        anchors.add(unique)
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert targets and targets <= anchors, targets - anchors
