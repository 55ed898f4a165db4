"""core/policy.py, sans-IO (issue 24): how commands, paths and tools match a rule."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from agentproto.core import policy


def request(command: str | None = None, paths: tuple[str, ...] = (), kind: Any = "Execute") -> dict[str, Any]:
    tool_input: Any = {"Command": {"command": command, "cwd": None}} if command is not None else "None"
    diffs = [{"path": p, "old_text": None, "new_text": ""} for p in paths]
    return {"id": "r", "tool": {"kind": kind, "input": tool_input, "diffs": diffs, "locations": []}, "options": []}


@pytest.mark.parametrize(
    ("line", "commands", "simple"),
    [
        ("git status", [["git", "status"]], True),
        ("git commit -m 'a; b'", [], False),  # a quoted separator: no command known, no rule matches (the app)
        ("/bin/bash -lc 'git status'", [["git", "status"]], True),
        ("bash -c \"sh -c 'ls -la'\"", [["ls", "-la"]], True),
        ("git status && rm -rf /", [["git", "status"], ["rm", "-rf", "/"]], False),
        ("ls | sh", [["ls"], ["sh"]], False),
        ("echo `rm x`", [["echo"], ["rm", "x"]], False),
        ("cat < /etc/passwd", [["cat"], ["/etc/passwd"]], False),
        ("ls\nrm x", [["ls"], ["rm", "x"]], False),
        ("git 'unbalanced", [], False),
    ],
)
def test_command_lines_split_into_simple_commands(line: str, commands: list[list[str]], simple: bool) -> None:
    assert policy.command_words(line) == (commands, simple)


def test_the_plain_split_is_shlex_where_it_is_used() -> None:
    for line in ("a b", " a\tb  c ", "git log --oneline -5", "x=1 y"):
        assert policy._words(line) == shlex.split(line)


def test_only_a_simple_command_matches_an_allow_but_any_command_a_deny() -> None:
    rules = policy.check([{"action": "allow", "command": ["git status **"]}, {"action": "deny", "command": ["rm **"]}])
    assert policy.decide(rules, request("git status"), "/") == 0  # type: ignore[arg-type]
    assert policy.decide(rules, request("git status -s"), "/") == 0  # type: ignore[arg-type]
    assert policy.decide(rules, request("git status > out"), "/") is None  # type: ignore[arg-type]
    assert policy.decide(rules, request("ls; rm -rf x"), "/") == 1  # type: ignore[arg-type]
    assert policy.decide(rules, request(paths=("a",), kind="Edit"), "/") is None  # type: ignore[arg-type]


def test_globs_keep_star_within_a_segment() -> None:
    assert policy.glob_matches("src/*.py", "src/a.py") and not policy.glob_matches("src/*.py", "src/x/a.py")
    assert policy.glob_matches("src/**", "src/x/a.py") and policy.glob_matches("**/*.py", "a.py")
    assert policy.glob_matches("github/get_*", "github/get_issue") and not policy.glob_matches("github/*", "gitlab/x")


def test_paths_are_real_and_relative_to_the_real_dir(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "out").symlink_to(tmp_path)
    rules = policy.check([{"action": "allow", "path": ["src/**"]}, {"action": "deny", "path": ["**"]}])
    assert policy.decide(rules, request(paths=("src/new/dir/f.py",), kind="Edit"), str(work)) == 0  # type: ignore[arg-type]
    assert policy.decide(rules, request(paths=("src/out/f.py",), kind="Edit"), str(work)) == 1  # type: ignore[arg-type]
    assert policy.decide(rules, request(paths=("src/../../x",), kind="Edit"), str(work)) == 1  # type: ignore[arg-type]
    both = request(paths=("src/a.py", "README"), kind="Edit")
    assert policy.decide(rules, both, str(work)) == 1  # type: ignore[arg-type]


def test_answers_follow_the_offered_options() -> None:
    allow, deny = {"action": "allow"}, {"action": "deny", "reason": "no"}
    assert policy.answer(allow, 0, {"options": ["AllowAlways", "DenyOnce"]}) == {"Permission": "AllowAlways"}  # type: ignore[typeddict-item]
    assert policy.answer(allow, 0, {"options": ["DenyOnce"]}) is None  # type: ignore[typeddict-item]
    assert policy.answer(deny, 3, {"options": ["AllowOnce", "DenyOnce"]}) == {"Deny": {"message": "no"}}  # type: ignore[typeddict-item]
    assert policy.answer({"action": "deny"}, 3, {"options": ["AllowOnce"]}) == "Cancel"  # type: ignore[typeddict-item]
