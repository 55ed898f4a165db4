"""``agentproto chat claude`` with the real, pinned Claude Code CLI against the fake Anthropic
API (tests/fakes/fake_anthropic.py): what a newcomer types first, with a real agent behind it.

From a pipe, the answer alone on stdout; on stderr the command line a permission would run
(as the real CLI reports it, through the Claude driver), its denial, and the turn's tokens
and cost. In a terminal, ``y`` lets the command run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sidecar import base_env
from terminal import GUARD, terminals  # noqa: F401  (a fixture)

from fake_anthropic import FakeAnthropic, claude_bin, text, tool_use

STARTS = 60.0  # a hang guard for the real CLI's start and its model call, on a loaded machine


def _env(api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    return {**api.cli_env(str(config)), "AGENTPROTO_CLAUDE_BIN": claude_bin(), "NO_COLOR": "1"}


def test_a_piped_chat_with_claude_denies_the_command_and_prints_only_the_answer(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with FakeAnthropic() as api:
        api.push(tool_use("Bash", {"command": "touch made-by-claude", "description": "Make a file"}),
                 text("I was not allowed to."))
        done = subprocess.run(
            [sys.executable, "-m", "agentproto", "chat", "claude"], input=b"make a file",
            capture_output=True, env=base_env(_env(api, tmp_path)), cwd=str(work), timeout=GUARD * 4,
        )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout == b"I was not allowed to.\n"
    assert "Allow Execute: " in err and "\n  $ touch made-by-claude\n" in err, err  # what would run
    assert ": n (no terminal to ask)\n" in err
    assert not (work / "made-by-claude").exists()
    # The fake API's usage (12 in, 7 out per call) and the CLI's own cost figure, at the end.
    assert err.rstrip("\n").splitlines()[-1].startswith("(24 tokens in, 14 out · $"), err


def test_yes_in_a_terminal_lets_claude_run_the_command(terminals, tmp_path: Path) -> None:  # noqa: F811
    work = tmp_path / "work"
    work.mkdir()
    with FakeAnthropic() as api:
        api.push(tool_use("Bash", {"command": "touch made-by-claude", "description": "Make a file"}), text("Made."))
        term = terminals("chat", "claude", env=_env(api, tmp_path), cwd=str(work))
        term.expect("> ", guard=STARTS)
        term.type("make a file\n")
        assert "  $ touch made-by-claude\n" in term.expect("(n REASON says why): ", guard=STARTS)
        term.type("y\n")
        term.expect("Made.", guard=STARTS)
        term.expect("> ")
        assert os.path.exists(work / "made-by-claude")
        term.type("/quit\n")
        assert term.wait() == 0


def test_a_reason_typed_after_n_reaches_the_model(terminals, tmp_path: Path) -> None:  # noqa: F811
    """``n REASON``: the Claude driver denies with the reason, and the CLI hands it to the model."""
    work = tmp_path / "work"
    work.mkdir()
    with FakeAnthropic() as api:
        api.push(tool_use("Bash", {"command": "touch made-by-claude", "description": "Make a file"}), text("Fine."))
        term = terminals("chat", "claude", env=_env(api, tmp_path), cwd=str(work))
        term.expect("> ", guard=STARTS)
        term.type("make a file\n")
        term.expect("(n REASON says why): ", guard=STARTS)
        term.type("n not on a friday\n")
        term.expect("Fine.", guard=STARTS)
        term.expect("> ")
        term.type("/quit\n")
        assert term.wait() == 0
        assert "not on a friday" in api.main_requests()[-1].last_user_text()
    assert not (work / "made-by-claude").exists()
