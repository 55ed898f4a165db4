"""``agentproto chat`` in a real pseudo-terminal (tests/fakes/terminal.py), issue 21: what is
typed during a turn (never on the spinner, never glued onto the answer, a queued prompt in
the transcript, the terminal's modes put back), ``--dir``, the banner within the terminal's
width, and a cancelled mock ``Sleep`` that does not hold the next turn."""

from __future__ import annotations

import json
import termios
from pathlib import Path
from typing import Any

from terminal import terminals  # noqa: F401  (a fixture)

END = {"End": {"Completed": {"source": "Protocol"}}}


def say(text: str, message: str = "m1") -> dict[str, Any]:
    return {"Emit": {"TextDelta": {"message_id": message, "text": text}}}


def script(tmp_path: Path, turns: list[Any]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"turns": turns}))
    return str(path)


def modes(term: Any) -> tuple[bool, bool]:
    """(line editing, echo) of the pty, as its master sees them."""
    lflag = termios.tcgetattr(term.master)[3]
    return bool(lflag & termios.ICANON), bool(lflag & termios.ECHO)


def test_typing_during_a_turn_shows_on_the_status_line_not_over_it(terminals, tmp_path: Path) -> None:  # noqa: F811
    """Regression: the terminal echoed the keys where the cursor was, on the spinner's line,
    which the next redraw erased. Now the keys are read one by one, echo off, and shown at
    the end of the status line; the line entered shows in the transcript."""
    turns = [[{"Sleep": 3000}, say("one"), END], [say("two", "m2"), END]]
    # A live terminal (the spinner), without colour: --color never.
    term = terminals("chat", "--color", "never", "--mock", script(tmp_path, turns), env={"TERM": "xterm"}, echo=True)
    term.expect("> ")
    assert modes(term) == (True, True)  # at the prompt: the terminal's own line editing and echo
    term.type("first\n")
    term.expect("working…")
    assert modes(term) == (False, False)  # during the turn: key by key, echoed by the chat
    term.type("sex\x7fc")  # a typo and a Backspace
    term.expect("working…")
    term.expect("  > sec")  # at the end of the status line, redrawn in place
    term.type("ond\n")
    assert term.expect("one\n").startswith("\r\x1b[K» second  (queued)\n")  # the spinner goes on after it
    assert term.expect("> ") == "two\n"
    term.type("/quit\n")
    assert term.wait() == 0
    assert modes(term) == (True, True)  # and put back at exit
    assert "sex" not in term.text() and "working… 0ssec" not in term.text()


def test_a_line_typed_during_the_answer_is_not_glued_onto_it(terminals, tmp_path: Path) -> None:  # noqa: F811
    """Regression: with the terminal's echo, a line typed while the answer streamed landed on
    the answer's line ("onesecond")."""
    turns = [[say("one"), {"Sleep": 2000}, END], [say("two", "m2"), END]]
    term = terminals("chat", "--mock", script(tmp_path, turns), env={"NO_COLOR": "1"}, echo=True)
    term.expect("> ")
    term.type("first\n")
    term.expect("one")
    term.type("second\n")
    assert term.expect("> ") == "\n» second  (queued)\ntwo\n"
    term.type("/quit\n")
    assert term.wait() == 0
    assert "onesecond" not in term.text()


def test_a_line_begun_during_a_turn_carries_over_to_the_prompt(terminals, tmp_path: Path) -> None:  # noqa: F811
    turns = [[say("one"), {"Sleep": 1500}, END], [say("two", "m2"), END]]
    term = terminals("chat", "--mock", script(tmp_path, turns), env={"NO_COLOR": "1"}, echo=True)
    term.expect("> ")
    term.type("first\n")
    term.expect("one")
    term.type("sec")  # not entered before the turn ends
    term.expect("\n> sec")  # shown after the prompt
    term.type("ond\n")  # the terminal's own editing again: the rest of the line
    assert term.expect("> ") == "ond\ntwo\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_dir_is_where_the_session_works(terminals, tmp_path: Path) -> None:  # noqa: F811
    work = tmp_path / "work"
    work.mkdir()
    term = terminals("chat", "--dir", str(work), "mock", env={"NO_COLOR": "1"})
    banner = term.expect("> ")
    assert f"in {work}" in banner.replace("\n", " ")
    term.type("/info\n")
    assert f"session: s1 in {work}, Idle" in term.expect("> ")
    term.type("/quit\n")
    assert term.wait() == 0
    missing = terminals("chat", "--dir", str(tmp_path / "nowhere"), "mock", env={"NO_COLOR": "1"})
    assert missing.wait() == 2 and f"--dir {tmp_path / 'nowhere'}: not a directory" in missing.text()


def test_the_banner_fits_the_terminal_and_says_what_the_mock_does(terminals, tmp_path: Path) -> None:  # noqa: F811
    term = terminals("chat", "mock", env={"NO_COLOR": "1"}, columns=40)
    banner = term.expect("> ")
    lines = banner.splitlines()
    assert lines and all(len(line) <= 39 for line in lines), lines
    assert lines[0].startswith("Mock · session s1") and "Mock mock" not in banner
    assert "the mock agent echoes each prompt back" in " ".join(lines)
    term.type("/quit\n")
    assert term.wait() == 0
    scripted = terminals("chat", "--mock", script(tmp_path, [[say("hi"), END]] * 2), env={"NO_COLOR": "1"})
    banner = scripted.expect("> ")
    assert "the mock agent, playing script.json: 2 scripted turns, then nothing" in banner
    assert all(len(line) <= 79 for line in banner.splitlines())  # the default 80 columns: nothing wrapped
    assert len(banner.splitlines()) == 3, banner
    scripted.type("/quit\n")
    assert scripted.wait() == 0


def test_a_cancelled_sleep_does_not_hold_the_next_turn(terminals, tmp_path: Path) -> None:  # noqa: F811
    """Regression: the mock's Sleep outlived its cancelled turn: the next turn waited it out
    (10 minutes here; the terminal's hang guard is 20 s)."""
    turns = [[say("one"), {"Sleep": 600_000}, END], [say("two", "m2"), END]]
    term = terminals("chat", "--mock", script(tmp_path, turns), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("first\n")
    term.expect("one")
    term.type("\x03")
    assert "turn cancelled" in term.expect("> ")
    term.type("again\n")
    assert term.expect("> ") == "two\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_the_typed_line_is_edited_as_the_terminal_would() -> None:
    import os

    from agentproto.commands.chat_input import TypeAhead

    master, slave = os.openpty()
    try:
        keys = TypeAhead(slave)
        assert keys.feed("hé".encode()[:2]) == [] and keys.line == "h"  # half a character: kept for later
        assert keys.feed("hé".encode()[2:] + b"llo wrold\x17world\r\n") == ["héllo world"]  # Ctrl-W, CR LF
        assert keys.feed(b"abc\x15x\x1b[Ay\x7f\x7fz\n") == ["z"]  # Ctrl-U, an arrow key dropped, Backspace
        assert keys.feed(b"\x04") == [None] and keys.feed(b"a\x04") == [] and keys.take() == "a"
        keys.set(True)
        lflag = termios.tcgetattr(slave)[3]
        assert not lflag & (termios.ICANON | termios.ECHO) and lflag & termios.ISIG  # Ctrl-C still a signal
        keys.set(False)
        assert termios.tcgetattr(slave) == keys.saved
    finally:
        os.close(master)
        os.close(slave)
