"""What an ACP client serves to its agent: ``terminal/*`` here, ``fs/*`` from ``acp_fs``.

Rules of this file:
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

from agentproto.drivers.acp_fs import (  # noqa: F401 - the driver takes fs/* from here too
    INTERNAL_ERROR,
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    RpcError,
    count_param,
    read_text_file,
    write_text_file,
)
from agentproto.drivers.base import group_alive

if TYPE_CHECKING:
    from agentproto.loop import Loop


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
        limit = count_param(params.get("outputByteLimit"), "outputByteLimit")
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
