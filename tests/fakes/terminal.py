"""A real pseudo-terminal for the interactive commands (``chat``, ``list``'s progress).

``python -m agentproto ARGS`` runs on a pty that is its controlling terminal
(``os.openpty``; ``TIOCSCTTY``), so a ``\x03`` written to it is a real Ctrl-C. Echo is off
(unless ``echo``): only what the command writes comes back. Every read has a timeout, as a hang guard only.
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from sidecar import ROOT, base_env

GUARD = 20.0  # seconds: a hang guard, never a timing assertion


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

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: str | None = None, echo: bool = False,
                 columns: int | None = None) -> None:  # fmt: skip
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        if not echo:
            attrs[3] &= ~termios.ECHO  # only what chat writes comes back (ISIG stays: ^C is SIGINT)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        if columns is not None:  # the window size a terminal of that width reports (TIOCGWINSZ)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=base_env({"TERM": "dumb", **(env or {})}),
            cwd=cwd or str(ROOT),
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.master = master
        self.output = b""
        self.mark = 0
        self.descendants: set[int] = set()

    def expect(self, needle: str, guard: float = GUARD) -> str:
        """Read until ``needle`` appears after the last match; return the text up to it."""
        want = needle.encode()
        deadline = time.monotonic() + guard
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

    def text(self) -> str:
        """Everything the command wrote so far (what ``expect`` has read)."""
        return self.output.replace(b"\r\n", b"\n").decode("utf-8", "replace")

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

    def start(*args: str, env: dict[str, str] | None = None, cwd: str | None = None, echo: bool = False,
              columns: int | None = None) -> Terminal:  # fmt: skip
        term = Terminal(*args, env=env, cwd=cwd, echo=echo, columns=columns)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()
