"""docs/protocol.md is generated from agentproto/schema.json (scripts/gen_docs.py): it is up
to date, and it names every command, event kind, error kind, op and ops line kind. Every
relative link of README.md, SECURITY.md, CHANGELOG.md and docs/*.md leads to a file that
exists, and to a heading of it that exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
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


#: The documents whose relative links must lead somewhere: a moved file or a renamed heading
#: must not leave a link pointing nowhere.
LINKED_DOCS = ("README.md", "SECURITY.md", "CHANGELOG.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))))


def anchors_of(text: str) -> set[str]:
    """The anchors a Markdown renderer makes for the headings of ``text`` (GitHub's rule:
    lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``, repeats numbered),
    fenced code blocks skipped."""
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        anchor = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n, unique = 0, anchor
        while unique in found:
            n += 1
            unique = f"{anchor}-{n}"
        found.add(unique)
    return found


def relative_links(text: str) -> list[str]:
    """Every Markdown link target that is not a URL (``[text](target)``), code spans and
    fenced blocks skipped."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(source: Path) -> list[str]:
    doc = source.name
    text = source.read_text(encoding="utf-8")
    broken = []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        where = (source.parent / path).resolve() if path else source
        if not where.exists():
            broken.append(f"{doc}: {target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in anchors_of(where.read_text(encoding="utf-8")):
            broken.append(f"{doc}: {target} (no such heading)")
    return broken


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_every_relative_link_points_somewhere(doc: str) -> None:
    assert not broken_links(ROOT / doc), broken_links(ROOT / doc)


def test_the_link_check_sees_a_dangling_link(tmp_path: Path) -> None:
    # The check itself: a link to a file that is not there, or to a heading that is not there,
    # is reported; a URL, a link inside code and a good anchor (here or in another file) are not.
    (tmp_path / "README.md").write_text("# R\n\n## Architecture\n", encoding="utf-8")
    doc = tmp_path / "docs" / "page.md"
    doc.parent.mkdir()
    doc.write_text(
        "# Top\n\n## A heading, here\n\n[gone](nowhere.md) [bad](#no-such) [good](#a-heading-here) "
        "[up](../README.md#architecture) [upbad](../README.md#install) [web](https://example.com/x) "
        "`[code](absent.md)`\n",
        encoding="utf-8",
    )
    found = [entry.split(": ", 1)[1] for entry in broken_links(doc)]
    assert found == ["nowhere.md (no such file)", "#no-such (no such heading)", "../README.md#install (no such heading)"]


def named_paths(text: str) -> list[str]:
    """The repository paths ``text`` names in code spans (``tests/core/test_wire.py``,
    ``scripts/bench_core.py``, ``tests/fakes/fake_*.py``, a test id's file): placeholders
    (``tests/FILE``, ``<name>``) and the ops contract's name (``agentproto/1``) left out."""
    found = []
    for span in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
        for word in span.split():
            path = word.split("::")[0].rstrip(".,;:")
            if re.fullmatch(r"(?:tests|scripts|fixtures|docs|agentproto)/[\w/.*-]*\w[\w*]*(?:\.\w+)?/?", path):
                if "FILE" not in path and "<" not in word and not re.fullmatch(r"agentproto/\d+", path):
                    found.append(path)
    return found


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_every_path_a_document_names_exists(doc: str) -> None:
    # After a move, a document naming a file by its old path points a reader nowhere.
    gone = [p for p in named_paths((ROOT / doc).read_text(encoding="utf-8")) if not list(ROOT.glob(p.rstrip("/")))]
    assert not gone, f"{doc} names paths that do not exist: {gone}"


def test_the_path_check_reads_code_spans() -> None:
    text = (
        "`tests/core/test_wire.py::test_x` and `tests/fakes/fake_*.py`, `python3 scripts/bench_core.py --before R`; "
        "`tests/FILE::TEST`, the contract `agentproto/1`"
    )
    assert named_paths(text) == ["tests/core/test_wire.py", "tests/fakes/fake_*.py", "scripts/bench_core.py"]
