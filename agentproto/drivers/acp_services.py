"""What an ACP client serves to its agent: ``fs/*`` inside the session's dir, ``terminal/*``.

Rules of this file:
- File access never leaves the session's ``dir``: a path is resolved (symlinks included)
  before anything is read or written, and one that lands outside is refused with an
  ``RpcError``; nothing is touched.
- Terminals are real child processes run without a shell, each in its own process group,
  read through the loop (no thread per terminal). Output is kept up to the agent's byte
  limit, truncated from the front at a character boundary, and streamed as text to
  ``on_output`` as it arrives.
"""

from __future__ import annotations

import codecs
import itertools
import os
import shlex
import signal
import subprocess
from typing import TYPE_CHECKING, Any, Callable

from agentproto.drivers.base import group_alive

if TYPE_CHECKING:
    from agentproto.loop import Loop

# JSON-RPC error codes the ACP schema defines.
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002


class RpcError(Exception):
    """An error answer to one of the agent's requests."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


# -- fs/* ---------------------------------------------------------------------------------


def resolve_inside(root: str, path: Any) -> str:
    """The real path of ``path`` if it lies inside ``root``, else ``RpcError``.

    Relative paths are taken from ``root``. Symlinks anywhere in the path are followed
    before the check, so a link that points out of the directory is refused.
    """
    if not isinstance(path, str) or not path:
        raise RpcError(INVALID_PARAMS, "`path` must be a non-empty string")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))
    prefix = real_root if real_root.endswith(os.sep) else real_root + os.sep
    if real != real_root and not real.startswith(prefix):
        raise RpcError(INVALID_PARAMS, f"refused: {path} is outside the session directory {real_root}")
    return real


def _positive(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RpcError(INVALID_PARAMS, f"`{name}` must be a non-negative integer")
    return value


def read_text_file(root: str, params: dict[str, Any]) -> dict[str, Any]:
    """``fs/read_text_file``: ``line`` is 1-based, ``limit`` a count of lines."""
    real = resolve_inside(root, params.get("path"))
    line = _positive(params.get("line"), "line")
    limit = _positive(params.get("limit"), "limit")
    start = max(line - 1, 0) if line else 0
    try:
        # newline="" keeps each line's own ending, so a slice is the file's exact text.
        with open(real, encoding="utf-8", errors="replace", newline="") as f:
            if start == 0 and limit is None:
                content = f.read()
            else:
                stop = None if limit is None else start + limit
                content = "".join(itertools.islice(f, start, stop))
    except FileNotFoundError:
        raise RpcError(RESOURCE_NOT_FOUND, f"file not found: {params.get('path')}") from None
    except IsADirectoryError:
        raise RpcError(INVALID_PARAMS, f"is a directory: {params.get('path')}") from None
    except OSError as exc:
        raise RpcError(INTERNAL_ERROR, f"cannot read {params.get('path')}: {exc.strerror}") from None
    return {"content": content}


def write_text_file(root: str, params: dict[str, Any]) -> None:
    """``fs/write_text_file``: creates the file (and its directories inside ``root``)."""
    content = params.get("content")
    if not isinstance(content, str):
        raise RpcError(INVALID_PARAMS, "`content` must be a string")
    real = resolve_inside(root, params.get("path"))
    try:
        os.makedirs(os.path.dirname(real), exist_ok=True)
        # The checked real path is written; O_NOFOLLOW refuses a link planted since.
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
    except IsADirectoryError:
        raise RpcError(INVALID_PARAMS, f"is a directory: {params.get('path')}") from None
    except OSError as exc:
        raise RpcError(INTERNAL_ERROR, f"cannot write {params.get('path')}: {exc.strerror}") from None
    return None


# -- terminal/* ---------------------------------------------------------------------------

def exit_status(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return {"exitCode": None, "signal": name}
    return {"exitCode": returncode, "signal": None}


class Terminal:
    __slots__ = (
        "id",
        "proc",
        "limit",
        "out",
        "truncated",
        "returncode",
        "waiters",
        "decoder",
        "reading",
        "released",
    )

    def __init__(self, terminal_id: str, proc: subprocess.Popen[bytes], limit: int | None) -> None:
        self.id = terminal_id
        self.proc = proc
        self.limit = limit
        self.out = bytearray()
        self.truncated = False
        self.returncode: int | None = None
        self.waiters: list[Callable[[dict[str, Any]], None]] = []
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.reading = True
        self.released = False

    def keep(self, data: bytes) -> None:
        self.out += data
        if self.limit is not None and len(self.out) > self.limit:
            del self.out[: len(self.out) - self.limit]
            # Never start on a UTF-8 continuation byte: the kept text stays whole characters.
            cut = 0
            while cut < len(self.out) and self.out[cut] & 0xC0 == 0x80:
                cut += 1
            del self.out[:cut]
            self.truncated = True


class Terminals:
    """The terminals of one ACP session, driven by the loop."""

    READ_SIZE = 65536

    def __init__(
        self,
        loop: "Loop",
        base_env: Callable[[], dict[str, str]],
        default_cwd: str,
        on_output: Callable[[str, str], None],
    ) -> None:
        self.loop = loop
        self._base_env = base_env
        self._default_cwd = default_cwd
        self._on_output = on_output
        self._terminals: dict[str, Terminal] = {}
        self._all: list[Terminal] = []  # released ones too, until their group is gone
        self._ids = itertools.count(1)

    def _get(self, params: dict[str, Any]) -> Terminal:
        terminal = self._terminals.get(params.get("terminalId"))  # type: ignore[arg-type]
        if terminal is None:
            raise RpcError(INVALID_PARAMS, f"unknown terminal: {params.get('terminalId')}")
        return terminal

    def create(self, params: dict[str, Any]) -> dict[str, Any]:
        command = params.get("command")
        args = params.get("args") or []
        if not isinstance(command, str) or not command:
            raise RpcError(INVALID_PARAMS, "`command` must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise RpcError(INVALID_PARAMS, "`args` must be an array of strings")
        env = self._base_env()
        for entry in params.get("env") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                env[entry["name"]] = str(entry.get("value", ""))
        cwd = params.get("cwd") or self._default_cwd
        limit = _positive(params.get("outputByteLimit"), "outputByteLimit")
        argv = [command, *args]
        try:
            proc = self._spawn(argv, cwd, env)
        except FileNotFoundError as exc:
            # Some agents put a whole command line in `command`; split it as words (still
            # no shell: no expansion, no pipes) rather than fail on a missing "ls -la".
            if args or not any(c.isspace() for c in command):
                raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {exc.strerror}") from None
            try:
                words = shlex.split(command)
                proc = self._spawn(words, cwd, env)
            except (ValueError, OSError) as exc2:
                raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {exc2}") from None
        except OSError as exc:
            raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {exc.strerror or exc}") from None
        terminal = Terminal(f"term-{next(self._ids)}", proc, limit)
        self._terminals[terminal.id] = terminal
        self._all.append(terminal)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        self.loop.add_reader(proc.stdout, lambda: self._read(terminal))
        self.loop.watch_child(proc, lambda rc: self._reaped(terminal, rc))
        return {"terminalId": terminal.id}

    @staticmethod
    def _spawn(argv: list[str], cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )

    def _read(self, terminal: Terminal) -> bool:
        """Read what is ready; False once the output has ended."""
        stdout = terminal.proc.stdout
        if not terminal.reading or stdout is None:
            return False
        try:
            data = os.read(stdout.fileno(), self.READ_SIZE)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self._stop_reading(terminal)
            tail = terminal.decoder.decode(b"", final=True)
            if tail:
                self._on_output(terminal.id, tail)
            return False
        terminal.keep(data)
        text = terminal.decoder.decode(data)
        if text:
            self._on_output(terminal.id, text)
        return True

    def _stop_reading(self, terminal: Terminal) -> None:
        if terminal.reading and terminal.proc.stdout is not None:
            terminal.reading = False
            self.loop.forget(terminal.proc.stdout)
            try:
                terminal.proc.stdout.close()
            except OSError:
                pass

    def _reaped(self, terminal: Terminal, returncode: int) -> None:
        # Take what the command wrote before it exited, so wait_for_exit sees it all.
        for _ in range(64):
            if not self._read(terminal):
                break
        terminal.returncode = returncode
        status = exit_status(returncode)
        waiters, terminal.waiters = terminal.waiters, []
        for reply in waiters:
            reply(status)
        if terminal.released:
            self._discard(terminal)

    def output(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self._get(params)
        result: dict[str, Any] = {
            "output": terminal.out.decode("utf-8", "replace"),
            "truncated": terminal.truncated,
        }
        if terminal.returncode is not None:
            result["exitStatus"] = exit_status(terminal.returncode)
        return result

    def wait_for_exit(self, params: dict[str, Any], reply: Callable[[dict[str, Any]], None]) -> None:
        terminal = self._get(params)
        if terminal.returncode is not None:
            reply(exit_status(terminal.returncode))
        else:
            terminal.waiters.append(reply)

    def kill(self, params: dict[str, Any]) -> None:
        self._kill(self._get(params))

    def _kill(self, terminal: Terminal) -> None:
        if terminal.returncode is None or self._group_alive(terminal):
            try:
                os.killpg(terminal.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def release(self, params: dict[str, Any]) -> None:
        terminal = self._get(params)
        del self._terminals[terminal.id]
        terminal.released = True
        self._kill(terminal)
        if terminal.returncode is not None:
            self._discard(terminal)

    def _discard(self, terminal: Terminal) -> None:
        self._stop_reading(terminal)
        if terminal in self._all and not self._group_alive(terminal):
            self._all.remove(terminal)

    @staticmethod
    def _group_alive(terminal: Terminal) -> bool:
        return group_alive(terminal.proc.pid)

    def close_all(self) -> None:
        """Kill every terminal's process group (the session is ending)."""
        for terminal in list(self._all):
            self._kill(terminal)
            terminal.released = True
            if terminal.returncode is not None:
                self._discard(terminal)
        self._terminals.clear()

    def any_alive(self) -> bool:
        return any(t.returncode is None or self._group_alive(t) for t in self._all)
