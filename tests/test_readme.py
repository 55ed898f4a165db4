"""The README and the docs/ pages, as a newcomer meets them: the README stays a landing page
(at most ~15 KB, every docs/ page linked from it), the Python client's examples
(docs/python-client.md) run as written from another directory, the session transcript
(docs/protocol-guide.md) is what ``serve`` really writes, the command line block
(docs/cli.md) lists every command and flag, and every page spells the interpreter one way."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sidecar import ROOT, Sidecar, base_env

from agentproto.cli import build_parser
from tests.test_cookbook import recipe

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")




def test_the_readme_is_a_landing_page_that_links_every_docs_page() -> None:
    assert len(README.encode()) <= 15_500, "the README is a landing page: the manual goes in docs/"
    first_screen = README.split("\n## ", 1)[0]
    for command in ("python3 -m agentproto chat mock", "bash scripts/test", "agentproto list",
                    "agentproto chat claude", "observations.db"):
        assert command in first_screen, command
    for doc in sorted(DOCS.glob("*.md")):
        assert f"](docs/{doc.name})" in README, f"the README's contents do not link docs/{doc.name}"


@pytest.mark.parametrize(
    "name,printed",
    [("client.py", "Let me check. Done.\n"), ("client-tools.py", "the agent got: agent: one who acts\n")],
)
def test_the_client_examples_run_as_written_from_any_directory(tmp_path: Path, name: str, printed: str) -> None:
    script = tmp_path / "app.py"
    script.write_text(recipe(name))
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    (elsewhere / "inspect.py").write_text("raise SystemExit('a stray module of the current directory ran')\n")
    # As docs/python-client.md says: agentproto on PYTHONPATH (base_env puts this checkout there).
    done = subprocess.run(
        [sys.executable, str(script)], cwd=str(elsewhere), env=base_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed


def _transcript() -> list[tuple[str, str]]:
    block = recipe("transcript")
    return [(line[0], line[2:]) for line in block.splitlines()]


def _shown(line: dict[str, object]) -> str:
    text = json.dumps(line, separators=(",", ":"), ensure_ascii=False)
    return re.sub(r'"occurred_at":\{[^}]*\}', '"occurred_at":{…}', text)


def test_the_session_transcript_is_what_serve_writes() -> None:
    lines = _transcript()
    assert lines[0][0] == "<" and sum(1 for way, _ in lines if way == ">") == 4
    with Sidecar(["--mock", str(ROOT / "fixtures" / "mock-scripts" / "turn.json")]) as sc:
        assert _shown(sc.hello) == lines[0][1]
        for way, text in lines[1:]:
            if way == ">":
                sc.send(json.loads(text))
            else:
                got = sc.next_line()  # validated against both schemas
                assert _shown(got) == text


def _command_line_block() -> str:
    return recipe("command-line")


def test_the_command_line_block_lists_every_command_and_flag() -> None:
    block = _command_line_block()
    parser = build_parser()
    flags = {o for action in parser._actions for o in action.option_strings} - {"-h", "--help"}
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        assert f"python3 -m agentproto {name}" in block, name
        line = next(line for line in block.splitlines() if f"agentproto {name}" in line)
        index = block.index(line)
        rest = block[index:].split("\npython3 -m agentproto ", 1)[0]  # the command's line(s)
        for action in command._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in rest, (name, option)
    for flag in flags:
        assert flag in block, flag


@pytest.mark.parametrize("doc", ["README.md", *(f"docs/{p.name}" for p in sorted(DOCS.glob("*.md")))])
def test_one_spelling_of_the_interpreter(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    # What a generator copies from the modules' docstrings is theirs (architecture.md's layers).
    text = re.sub(r"<!-- layers: generated.*?<!-- end of the generated layers -->", "", text, flags=re.S)
    assert not re.search(r"(^|[\s`(])python (-m |scripts/)", text, re.M), "python3, everywhere"


def test_question_choices_are_answered_by_id_as_the_readme_says() -> None:
    """docs/protocol-guide.md's own example: a label is refused with the words it quotes, the id is taken."""
    said = "the `InvalidRequest` error `invalid request: q1: color: unknown choice Red`"
    assert said in " ".join(page("protocol-guide.md").split()), "the example moved: update this test"
    with Sidecar(["--mock", str(ROOT / "fixtures" / "mock-scripts" / "question.json")]) as sc:
        session = sc.open()
        sc.ok({"cmd": "prompt", "session": session, "text": "go"})
        sc.events(session, until="RequestOpened")
        by_label = {"Question": [{"Choices": ["Red"]}, {"Text": "Rosso"}]}
        error = sc.error({"cmd": "answer", "session": session, "request": "q1", "answer": by_label})
        assert f"the `{error['kind']}` error `{error['message']}`" == said
        by_id = {"Question": [{"Choices": ["c-red"]}, {"Text": "Rosso"}]}
        sc.ok({"cmd": "answer", "session": session, "request": "q1", "answer": by_id})
        assert sc.events(session)[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}


def test_the_test_command_without_npm_says_what_to_do(tmp_path: Path) -> None:
    """The README's second command on a machine without node and npm: a message naming them and
    the core tests' command (was `npm: command not found` from the middle of the script)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "tests").mkdir()
    shutil.copy(ROOT / "scripts" / "install-test-deps", checkout / "scripts")
    shutil.copy(ROOT / "tests" / "requirements.txt", checkout / "tests")
    pin = next(line for line in (ROOT / "tests" / "requirements.txt").read_text().splitlines()
               if line.startswith("setuptools=="))
    wheelhouse = checkout / ".cache" / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    (wheelhouse / f"setuptools-{pin.split('==')[1]}-py3-none-any.whl").write_bytes(b"")  # no download
    no_npm = tmp_path / "bin"
    no_npm.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if tool.name not in ("npm", "npx", "node", "nodejs", "corepack"):
            (no_npm / tool.name).symlink_to(tool)
    env = {**base_env(), "PATH": str(no_npm), "AGENTPROTO_VENV": str(ROOT / ".venv")}  # the suite's own venv
    done = subprocess.run(["bash", str(checkout / "scripts" / "install-test-deps")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "node and npm are needed" in done.stderr and "command not found" not in done.stderr
    assert "AGENTPROTO_TEST_DEPS=core bash scripts/test -m core" in " ".join(done.stderr.split())
