"""Shared plumbing for tests/test_anyagent_compat.py: anyagent-py against `agentproto serve`.

anyagent-py (PyPI, 0.0.4) is the reference client of anyagent's "protocol 1". It finds its
binary through ``ANYAGENT_BIN`` and runs ``<bin> serve`` or ``<bin> serve --mock <script>``.
Here that binary is a shim that execs ``python -m agentproto "$@"``, so the published client
drives agentproto unchanged. ``exec`` matters: the client kills and reaps the pid it spawned,
and that pid must be agentproto itself, not a shell in front of it.

Two ways in:
- the client (``anyagent.Runtime``), for what an app sees;
- ``Wire``, a raw line-level peer, for guarantees the client cannot observe (the hello line
  itself, ``id: null`` on a BadFrame, the order of a session error against ``closed``).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "fixtures" / "mock-scripts"
# Where .ci/run installs the client's pure-Python part (see the module docstring of the tests).
CLIENT_DIR = ROOT / ".cache" / "anyagent-py"
INSTALL_HINT = (
    "anyagent-py 0.0.4 is not importable from {dir}. Run .ci/run, or install it by hand:\n"
    "  pip install --no-deps --platform manylinux_2_39_x86_64 --only-binary=:all: "
    "--python-version 3.11 --target .cache/anyagent-py anyagent-py==0.0.4\n"
    "(it needs Python >= 3.11: it imports typing.Unpack). Import error: {error}"
)

if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))
try:
    import anyagent  # noqa: E402
    from anyagent import AnyagentError, Runtime, Session, kind_of  # noqa: E402

    IMPORT_ERROR: str | None = None
except Exception as e:  # ImportError, or a SyntaxError on a Python that is too old
    anyagent = None  # type: ignore[assignment]
    AnyagentError = Runtime = Session = None  # type: ignore[assignment,misc]
    kind_of = None  # type: ignore[assignment]
    IMPORT_ERROR = INSTALL_HINT.format(dir=CLIENT_DIR, error=f"{type(e).__name__}: {e}")

PIDS_VAR = "ANYAGENT_COMPAT_PIDS"


def script(name: str) -> str:
    """Absolute path of one shared mock script."""
    path = SCRIPTS / f"{name}.json"
    assert path.is_file(), f"missing mock script {path}"
    return str(path)


def write_shim(directory: Path) -> Path:
    """An executable `anyagent` that is really `python -m agentproto`, this checkout's."""
    shim = directory / "anyagent"
    shim.write_text(
        "#!/bin/sh\n"
        f'if [ -n "${PIDS_VAR}" ]; then echo $$ >> "${PIDS_VAR}"; fi\n'
        f"PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "export PYTHONPATH\n"
        f'exec {shlex.quote(sys.executable)} -m agentproto "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim


def write_fake(directory: Path, name: str, line: str) -> Path:
    """A binary that prints one stdout line and exits: not a protocol-1 peer."""
    fake = directory / name
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(line)}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


def started_pids(pid_file: Path) -> list[int]:
    """Pids of every agentproto the shim started in this test, oldest first."""
    if not pid_file.exists():
        return []
    return [int(p) for p in pid_file.read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def reap_leftovers(pid_file: Path) -> None:
    """Kills what this test started and left running; only our own agentproto pids."""
    for pid in started_pids(pid_file):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"agentproto" in cmdline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- the client side --------------------------------------------------------------------


def run(coro: Awaitable[Any], timeout: float = 30) -> Any:
    """Runs one scenario with a hard ceiling, so a missing frame fails instead of hanging."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


@asynccontextmanager
async def runtime(name: str, **kwargs: Any) -> AsyncIterator[Any]:
    """`Runtime.start(mock=<script>)`, closed however the scenario ends."""
    rt = await Runtime.start(mock=script(name), **kwargs)
    try:
        yield rt
    finally:
        await rt.close()


async def drain(session: Any) -> list[dict[str, Any]]:
    """The rest of a session's stream, to `closed`."""
    return [ev async for ev in session.events()]


async def until(session: Any, kind: str) -> list[dict[str, Any]]:
    """Events up to and including the first of `kind`."""
    seen: list[dict[str, Any]] = []
    async for ev in session.events():
        seen.append(ev)
        if kind_of(ev) == kind:
            return seen
    raise AssertionError(f"stream ended before {kind}; saw {kinds(seen)}")


async def rejects(aw: Awaitable[Any], kind: str) -> Any:
    """The AnyagentError `aw` raises, which must be of `kind`."""
    try:
        value = await aw
    except AnyagentError as e:
        assert e.kind == kind, f"expected {kind}, got {e.kind}: {e.message} {e.data}"
        return e
    raise AssertionError(f"expected {kind}, got a result: {value!r}")


def kinds(events: Iterable[dict[str, Any]]) -> list[str]:
    return [kind_of(ev) for ev in events]


def body(ev: dict[str, Any]) -> Any:
    """The payload of an event's kind (None for a unit variant)."""
    kind = ev["kind"]
    return None if isinstance(kind, str) else kind[kind_of(ev)]


def texts(events: Iterable[dict[str, Any]]) -> list[str]:
    return [body(ev)["text"] for ev in events if kind_of(ev) == "TextDelta"]


def statuses(events: Iterable[dict[str, Any]]) -> list[str]:
    return [body(ev) for ev in events if kind_of(ev) == "StatusChanged"]


def of(events: Iterable[dict[str, Any]], kind: str) -> list[Any]:
    return [body(ev) for ev in events if kind_of(ev) == kind]


# -- the raw wire -----------------------------------------------------------------------


class Wire:
    """A line-level peer of `agentproto serve`: write command lines, read frames."""

    def __init__(self, shim: Path, mock: str | None) -> None:
        argv = [str(shim), "serve"] + (["--mock", mock] if mock else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.raw: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def send(self, frame: dict[str, Any]) -> None:
        self.send_raw(json.dumps(frame))

    def next(self, step: str, timeout: float = 10) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"timed out waiting for {step}") from None
        if line is None:
            self.lines.put(None)  # stays at EOF
            raise AssertionError(f"stdout ended before {step}")
        self.raw.append(line)
        assert line.endswith(b"\n"), f"{step}: unterminated line {line!r}"
        try:
            frame = json.loads(line)
        except ValueError:
            raise AssertionError(f"{step}: stdout line is not JSON: {line!r}") from None
        assert isinstance(frame, dict), f"{step}: stdout line is not an object: {line!r}"
        return frame

    def until(
        self, step: str, pred: Callable[[dict[str, Any]], bool], timeout: float = 10
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Frames read before the first match, and the match."""
        deadline = time.monotonic() + timeout
        before: list[dict[str, Any]] = []
        while True:
            frame = self.next(step, max(0.01, deadline - time.monotonic()))
            if pred(frame):
                return before, frame
            before.append(frame)

    def reply(self, id: int) -> dict[str, Any]:
        return self.until(f"reply {id}", lambda f: f.get("id") == id and "event" not in f)[1]

    def open(self, id: int, dir: str) -> str:
        self.send({"id": id, "cmd": "open", "agent": "mock", "dir": dir})
        reply = self.reply(id)
        assert "ok" in reply, f"open failed: {reply}"
        return reply["ok"]["id"]

    def rest(self, timeout: float = 10) -> list[dict[str, Any]]:
        """Every frame up to stdout's EOF."""
        frames: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"stdout did not end; read {frames}") from None
            if line is None:
                self.lines.put(None)
                return frames
            self.raw.append(line)
            frames.append(json.loads(line))

    def hang_up(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout: float = 10) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f:
                    f.close()
            except OSError:
                pass


def frame_kind(frame: dict[str, Any]) -> str | None:
    """The event kind name of an event frame, else None."""
    ev = frame.get("event")
    if not isinstance(ev, dict):
        return None
    kind = ev.get("kind")
    return kind if isinstance(kind, str) else next(iter(kind))


def require_client() -> None:
    if IMPORT_ERROR is not None:
        pytest.fail(IMPORT_ERROR, pytrace=False)
