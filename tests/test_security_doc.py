"""SECURITY.md backs every check it describes with a test it names: each named test must
exist, so that a renamed, moved or deleted test cannot leave a claim standing unbacked.

A reference is a code span ``tests/PATH.py``, ``tests/PATH.py::TEST`` or
``tests/PATH.py::TEST[CASE]``: the file must exist, the test must be a module-level
``def TEST(`` in it, and the case must be one the test is parametrized with (a wire corpus
case of ``test_replay`` is a file under fixtures/wire/; any other case is a name the test's
folder spells as a string). A code span naming ``tests/`` in any other form (a class's
method, a path without ``.py``) fails the test rather than going unchecked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: One reference, the whole code span.
REFERENCE = re.compile(r"tests/([\w/]+\.py)(?:::(\w+)(?:\[([^\]`]*)\])?)?")
#: How SECURITY.md explains the form itself: not a reference.
PLACEHOLDER = "tests/FILE::TEST"


def references(text: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The references of ``text`` (path under tests/, test, case) and the code spans that
    name tests/ in a form this check cannot read."""
    found, unreadable = [], []
    for span in re.findall(r"`([^`\n]*)`", text):
        if "tests/" not in span or span == PLACEHOLDER:
            continue
        match = REFERENCE.fullmatch(span)
        if match is None:
            unreadable.append(span)
        else:
            found.append((match[1], match[2] or "", match[3] or ""))
    return found, unreadable


def missing(named: list[tuple[str, str, str]], root: Path = ROOT) -> list[str]:
    """The references that point at nothing."""
    gone = []
    for path, name, case in named:
        source = root / "tests" / path
        shown = f"tests/{path}" + (f"::{name}" if name else "") + (f"[{case}]" if case else "")
        if not source.is_file():
            gone.append(shown)
        elif name and not re.search(rf"^def {name}\(", source.read_text(encoding="utf-8"), re.M):
            gone.append(shown)
        elif case and name == "test_replay" and path.endswith("test_wire_corpus.py"):
            if not (root / "fixtures" / "wire" / f"{case}.jsonl").is_file():
                gone.append(shown)
        elif case:
            spelled = (f'"{case}"', f"'{case}'")
            if not any(s in p.read_text(encoding="utf-8") for p in source.parent.glob("*.py") for s in spelled):
                gone.append(shown)
    return gone


def test_every_test_security_md_names_exists() -> None:
    named, unreadable = references((ROOT / "SECURITY.md").read_text(encoding="utf-8"))
    assert len(named) > 50, "SECURITY.md names the tests behind its claims"
    assert not unreadable, f"SECURITY.md names tests in a form this check cannot read: {unreadable}"
    gone = missing(named)
    assert not gone, f"SECURITY.md names tests that do not exist: {gone}"


def test_the_check_sees_every_form_that_points_nowhere(tmp_path: Path) -> None:
    # The check itself, on a tree of its own: each reference form that points at nothing is
    # reported, each that points at something is not, and an unreadable form is set apart.
    (tmp_path / "tests" / "core").mkdir(parents=True)
    (tmp_path / "tests" / "core" / "test_a.py").write_text(
        'import pytest\n\n@pytest.mark.parametrize("x", ["good_case"])\ndef test_there(x):\n    pass\n\n'
        "class TestK:\n    def test_method(self):\n        pass\n",
        encoding="utf-8",
    )
    (tmp_path / "fixtures" / "wire" / "acp").mkdir(parents=True)
    (tmp_path / "fixtures" / "wire" / "acp" / "turn.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "tests" / "commands").mkdir()
    (tmp_path / "tests" / "commands" / "test_wire_corpus.py").write_text("def test_replay(path):\n    pass\n")
    text = (
        "`tests/core/test_a.py` `tests/core/test_a.py::test_there` `tests/core/test_a.py::test_there[good_case]` "
        "`tests/commands/test_wire_corpus.py::test_replay[acp/turn]` "
        "`tests/core/test_gone.py` `tests/test_a.py::test_there` `tests/core/test_a.py::test_gone` "
        "`tests/core/test_a.py::test_there[bad_case]` `tests/commands/test_wire_corpus.py::test_replay[acp/gone]` "
        "`tests/core/test_a.py::test_method` `tests/core/test_a.py::TestK::test_method` `tests/core` "
        f"`{PLACEHOLDER}`"
    )
    named, unreadable = references(text)
    assert unreadable == ["tests/core/test_a.py::TestK::test_method", "tests/core"]
    assert missing(named, tmp_path) == [
        "tests/core/test_gone.py",
        "tests/test_a.py::test_there",
        "tests/core/test_a.py::test_gone",
        "tests/core/test_a.py::test_there[bad_case]",
        "tests/commands/test_wire_corpus.py::test_replay[acp/gone]",
        "tests/core/test_a.py::test_method",
    ]
