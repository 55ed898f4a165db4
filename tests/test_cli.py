"""The terminal commands: ``--version``, ``--help``, ``schema``, ``list`` and ``chat``.

``chat`` runs both from a pipe (one turn, then exit) and interactively inside a real
pseudo-terminal (``os.openpty``; the child takes it as its controlling terminal, so a
``\\x03`` written to it is a real Ctrl-C). Every read has a timeout, as a hang guard only.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, base_env, script

from agentproto import __version__
from agentproto.drivers import catalog

GUARD = 20.0  # seconds: a hang guard, never a timing assertion
ACP_AGENT = ROOT / "tests" / "acp_test_agent.py"
ESC = b"\x1b["


def run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentproto", *args],
        input=stdin,
        capture_output=True,
        env=base_env(env),
        cwd=str(ROOT),
        timeout=GUARD * 2,
    )


def write_script(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(body))
    return str(path)


# -- the simple commands -------------------------------------------------------------------


def test_version_and_help() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout.decode().strip() == f"agentproto {__version__}"
    helped = run("--help")
    assert helped.returncode == 0
    for command in ("serve", "list", "chat", "schema"):
        assert command in helped.stdout.decode()
    chat_help = run("chat", "--help")
    assert chat_help.returncode == 0 and "--mock SCRIPT" in chat_help.stdout.decode()


def test_no_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2
    assert result.stdout == b"" and b"usage: agentproto" in result.stderr


def test_schema_prints_the_schema() -> None:
    result = run("schema")
    assert result.returncode == 0
    assert json.loads(result.stdout) == json.loads((ROOT / "agentproto" / "schema.json").read_text())


def test_list_shows_mock_installed_and_missing_agents(tmp_path: Path) -> None:
    fake = tmp_path / "fake-codex"
    fake.write_text("#!/bin/sh\necho 'fake-codex 1.2.3'\n")
    fake.chmod(0o755)
    empty = tmp_path / "bin"
    empty.mkdir()
    codex = next(spec for spec in catalog.CATALOG if spec.id == "codex")
    result = run("list", env={"PATH": str(empty), "HOME": str(tmp_path), codex.env_override: str(fake)})
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.decode().splitlines()]
    assert rows[0] == ["AGENT", "STATUS", "VERSION", "WHERE"]
    assert rows[1] == ["mock", "installed", "mock", "mock"]
    by_id = {row[0]: row for row in rows[1:]}
    assert by_id["codex"] == ["codex", "installed", "fake-codex", "1.2.3", str(fake)]
    assert set(by_id) == {"mock"} | {spec.id for spec in catalog.CATALOG}
    lines = {line.split()[0]: line for line in result.stdout.decode().splitlines()[1:]}
    for spec in catalog.CATALOG:
        if spec.id != "codex":
            assert by_id[spec.id][1:3] == ["missing", "-"]
            assert lines[spec.id].endswith(f"install: {spec.install_hint}")


# -- chat from a pipe ----------------------------------------------------------------------


def test_chat_from_a_pipe_runs_one_turn() -> None:
    result = run("chat", "mock", stdin=b"title for this diff\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"title for this diff\n"


def test_chat_from_a_pipe_with_empty_stdin_fails() -> None:
    result = run("chat", "mock", stdin=b"")
    assert result.returncode != 0
    assert b"stdin was empty" in result.stderr and result.stdout == b""


def test_chat_from_a_pipe_denies_permission_requests_and_finishes() -> None:
    result = run("chat", "--mock", script("turn"), stdin=b"run the tests")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == "Let me check. \nAllow Execute: cargo test? [y/N] n (no terminal to ask)\nDone.\n"


def test_chat_from_a_pipe_reports_failures() -> None:
    died = run("chat", "--mock", script("die"), stdin=b"x")
    assert died.returncode == 1 and b"ProcessExited" in died.stderr and died.stdout == b"hi\n"
    unknown = run("chat", "no-such-agent", stdin=b"x")
    assert unknown.returncode == 1 and b"NotInstalled" in unknown.stderr
    bad_reference = run("chat", "{not json", stdin=b"x")
    assert bad_reference.returncode == 2 and b"JSON agent reference" in bad_reference.stderr
    unreadable = run("chat", "--mock", "/no/such/script.json", stdin=b"x")
    assert unreadable.returncode == 1 and b"cannot read mock script" in unreadable.stderr


def _tools_file(tmp_path: Path) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"name": "lookup", "description": "Look a word up", "input_schema": {"type": "object"}}]))
    return str(path)


def test_chat_from_a_pipe_answers_a_tool_call_with_an_error_result(tmp_path: Path) -> None:
    result = run("chat", "--mock", script("tools"), "--tools", _tools_file(tmp_path), stdin=b"look it up")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == (
        "Looking it up.\n[mcp agentproto/lookup] lookup (Running)\n"
        'Tool lookup({"word": "agent"}): its result? (no terminal to ask: an error result)\n'
        "[mcp agentproto/lookup] lookup (Failed)\n Done.\n"
    )
    bad = run("chat", "--mock", script("tools"), "--tools", str(tmp_path / "missing.json"), stdin=b"x")
    assert bad.returncode == 1 and b"cannot read tools" in bad.stderr


@pytest.mark.parametrize("no_color", ["1", None])
def test_chat_from_a_pipe_writes_no_escape_codes(no_color: str | None) -> None:
    env = {"NO_COLOR": no_color} if no_color else {}
    result = run("chat", "--mock", script("turn"), stdin=b"x", env=env)
    assert result.returncode == 0 and b"Allow" in result.stdout
    assert ESC not in result.stdout and ESC not in result.stderr


# -- chat in a terminal --------------------------------------------------------------------


def _session_members(sid: int) -> list[int]:
    """Processes (not zombies) whose session id is ``sid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(entry))
    return out


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class Terminal:
    """``python -m agentproto ARGS`` on a pseudo-terminal that is its controlling tty."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # only what chat writes comes back (ISIG stays: ^C is SIGINT)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=base_env({"TERM": "dumb", **(env or {})}),
            cwd=str(ROOT),
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.master = master
        self.output = b""
        self.mark = 0
        self.descendants: set[int] = set()

    def expect(self, needle: str) -> str:
        """Read until ``needle`` appears after the last match; return the text up to it."""
        want = needle.encode()
        deadline = time.monotonic() + GUARD
        while True:
            text = self.output.replace(b"\r\n", b"\n")
            found = text.find(want, self.mark)
            if found >= 0:
                seen, self.mark = text[self.mark : found], found + len(want)
                return seen.decode("utf-8", "replace")
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"hang guard: no {needle!r} in {text[self.mark:]!r}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the terminal's other side is closed
                    chunk = b""
                assert chunk, f"the terminal closed before {needle!r}: {text[self.mark:]!r}"
                self.output += chunk

    def type(self, text: str) -> None:
        self.note_descendants()
        os.write(self.master, text.encode())

    def note_descendants(self) -> None:
        todo = [self.proc.pid]
        while todo:
            for child in _children(todo.pop()):
                if child not in self.descendants:
                    self.descendants.add(child)
                    todo.append(child)

    def wait(self) -> int:
        """The exit status; then nothing chat started is left running."""
        deadline = time.monotonic() + GUARD
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, "hang guard: chat did not exit"
            select.select([self.master], [], [], 0.05)
            try:
                self.output += os.read(self.master, 65536)
            except OSError:
                pass
        while any(_alive(pid) for pid in self.descendants) or _session_members(self.proc.pid):
            assert time.monotonic() < deadline, f"hang guard: left running: {self.descendants}"
            time.sleep(0.02)
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def terminals():
    opened: list[Terminal] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Terminal:
        term = Terminal(*args, env=env)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def test_chat_streams_a_turn_and_quits(terminals) -> None:
    term = terminals("chat", "mock", env={"NO_COLOR": "1"})
    banner = term.expect("> ")
    assert "Mock mock" in banner and "session s1" in banner and "/set OPTION VALUE" in banner
    term.type("stream this line back\n")
    assert term.expect("> ") == "stream this line back\n"
    term.type("/quit\n")
    assert term.wait() == 0
    assert ESC not in term.output


def test_chat_colours_only_without_no_color(terminals) -> None:
    term = terminals("chat", "mock")
    term.expect("\x1b[1m> \x1b[0m")
    term.type("\x04")  # Ctrl-D: end of input closes the session
    assert term.wait() == 0


def test_chat_set_configures_an_option(terminals, tmp_path: Path) -> None:
    term = terminals("chat", "--mock", script("configure"), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("/set model opus\n")
    assert term.expect("> ") == 'model = "opus"\n'
    term.type("/set model gpt\n")
    assert "InvalidConfiguration" in term.expect("> ")
    term.type("/set model\n")
    assert "usage: /set OPTION VALUE" in term.expect("> ")
    term.type("go\n")
    assert term.expect("> ") == "hi\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_chat_permission_yes_lets_the_turn_finish(terminals) -> None:
    term = terminals("chat", "--mock", script("turn"), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("run the tests\n")
    assert term.expect("[y/N] ") == "Let me check. \nAllow Execute: cargo test? "
    term.type("y\n")
    assert term.expect("> ") == "Done.\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_chat_lets_the_user_type_a_tool_calls_result(terminals, tmp_path: Path) -> None:
    term = terminals("chat", "--mock", script("tools"), "--tools", _tools_file(tmp_path), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("look it up\n")
    assert term.expect("its result? ").endswith('Tool lookup({"word": "agent"}): ')
    term.type("one who acts\n")
    assert "[mcp agentproto/lookup] lookup (Completed)\n Done.\n" in term.expect("> ")
    term.type("/quit\n")
    assert term.wait() == 0


@pytest.mark.parametrize("reply,outcome", [("y", "zz-yes-1"), ("n", "zz-no"), ("", "zz-no")])
def test_chat_permission_answers_reach_the_agent(terminals, reply: str, outcome: str) -> None:
    """A real ACP agent (a child process) reports the option it got."""
    agent = json.dumps({"acp": {"name": "acp-test", "path": str(ACP_AGENT), "args": []}})
    term = terminals("chat", agent, env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("tool\n")
    term.expect("[y/N] ")
    term.type(reply + "\n")
    assert f"outcome: {outcome}" in term.expect("> ")
    term.type("/quit\n")
    assert term.wait() == 0
    assert term.descendants, "the ACP agent ran as a child process"


def test_ctrl_c_cancels_a_turn_and_the_prompt_comes_back(terminals, tmp_path: Path) -> None:
    # Turns without an End: each runs until it is cancelled.
    path = write_script(tmp_path, {"turns": [[{"Emit": {"TextDelta": {"message_id": f"m{n}", "text": f"thinking {n}"}}}]
                                             for n in (1, 2)]})
    term = terminals("chat", "--mock", path, env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("never ends\n")
    term.expect("thinking 1")
    term.type("\x03")
    assert "turn cancelled" in term.expect("> ")
    term.type("again\n")
    term.expect("thinking 2")
    term.type("\x03")
    assert "turn cancelled" in term.expect("> ")
    term.type("\x03")  # at the prompt, Ctrl-C ends the chat
    assert term.wait() == 0


def test_ctrl_c_at_a_question_cancels_and_the_next_line_is_a_prompt(terminals, tmp_path: Path) -> None:
    turn = json.loads(Path(script("turn")).read_text())["turns"][0]
    second = [{"Emit": {"TextDelta": {"message_id": "m2", "text": "second turn"}}},
              {"End": {"Completed": {"source": "Protocol"}}}]
    term = terminals("chat", "--mock", write_script(tmp_path, {"turns": [turn, second]}), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("run the tests\n")
    term.expect("[y/N] ")
    term.type("\x03")
    assert "turn cancelled" in term.expect("> ")
    term.type("next\n")
    assert term.expect("> ") == "second turn\n"
    term.type("/quit\n")
    assert term.wait() == 0
