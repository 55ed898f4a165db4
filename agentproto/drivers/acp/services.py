"""What an ACP client serves to its agent: ``terminal/*`` here, ``fs/*`` from ``acp_fs``.

The agent is not confined (see ``acp_fs``): neither are the commands it runs here, which
have the user's rights. Only their ``cwd`` is: it must be a directory inside ``dir``.

Rules of this file:
- Terminals are real child processes run without a shell, each in its own process group
  (with what it detaches: proctree.py), read through the loop (no thread per terminal).
  Output is kept up to the agent's byte limit (``DEFAULT_OUTPUT_LIMIT`` without one,
  never more than ``MAX_OUTPUT_LIMIT``), truncated from the front at a character
  boundary, and streamed as text to ``on_output`` as it arrives.
- ``pause()`` stops reading every terminal (the engine's flow control, as for the agent's
  own pipe), so a ``yes`` whose output nobody consumes blocks on its full pipe. An exit
  seen while paused is reported after ``resume()``, with the output written before it.
- A session has at most ``Launch.max_terminals`` live terminals (16 unless ``serve
  --max-terminals`` says otherwise): unreleased ones, and released ones still running. One
  more is a JSON-RPC error saying so (INTERNAL_ERROR), as is a terminal that would leave
  fewer than ``descriptors.RESERVE`` descriptors free: one agent's terminals must not make
  another session's open fail with ``Too many open files``.
- Malformed params never raise anything but ``RpcError`` (INVALID_PARAMS, naming the field).
"""

from __future__ import annotations

import codecs
import itertools
import os
import shlex
import signal
import subprocess
from typing import TYPE_CHECKING, Any, Callable

from agentproto.core.jsonrpc import INTERNAL_ERROR, RpcError
from agentproto.drivers.acp.fs import count_param, invalid, os_text, params_object, resolve
from agentproto.loopio import descriptors, proctree
from agentproto.loopio.process_transport import start_tree

if TYPE_CHECKING:
    from agentproto.drivers.acp.types import CreatedTerminal, ExitStatus, TerminalOutput
    from agentproto.loopio.loop import Loop

#: A terminal's kept output without ``outputByteLimit``, and the most any limit keeps.
DEFAULT_OUTPUT_LIMIT = 1 << 20
MAX_OUTPUT_LIMIT = 16 << 20


# -- terminal/* ---------------------------------------------------------------------------

def exit_status(returncode: int) -> ExitStatus:
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
        "reaped",
        "waiters",
        "decoder",
        "reading",
        "released",
        "tree",
    )

    def __init__(self, terminal_id: str, proc: subprocess.Popen[bytes], tree: proctree.Tree, limit: int) -> None:
        self.id = terminal_id
        self.proc = proc
        self.tree = tree
        self.limit = limit
        self.out = bytearray()
        self.truncated = False
        self.returncode: int | None = None  # reported: the output before the exit is read
        self.reaped: int | None = None  # the child's status, maybe not reported yet
        self.waiters: list[Callable[[ExitStatus], None]] = []
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.reading = True
        self.released = False

    def keep(self, data: bytes) -> None:
        self.out += data
        if len(self.out) > self.limit:
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
        max_terminals: int = 16,
    ) -> None:
        self.loop = loop
        self.max_terminals = max_terminals
        self._base_env = base_env
        self._default_cwd = default_cwd
        self._on_output = on_output
        self._terminals: dict[str, Terminal] = {}
        self._all: list[Terminal] = []  # released ones too, until their group is gone
        self._ids = itertools.count(1)
        self._paused = False

    def _get(self, params: Any) -> Terminal:
        terminal_id = params_object(params).get("terminalId")
        terminal = self._terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            raise invalid(f"unknown terminal: `terminalId` {terminal_id!r}")
        return terminal

    def _env(self, entries: Any) -> dict[str, str]:
        if entries is None:
            entries = []
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise invalid("`env` must be an array of {name, value} objects")
        env = self._base_env()
        for entry in entries:
            name = os_text(entry.get("name"), "env[].name")
            if "=" in name:
                raise invalid(f"`env[].name` {name!r} contains '='")
            env[name] = os_text(entry.get("value"), f"env[{name}].value", empty=True)
        return env

    def create(self, params: Any) -> CreatedTerminal:
        params = params_object(params)
        command = os_text(params.get("command"), "command")
        args = params.get("args")
        if args is None:
            args = []
        if not isinstance(args, list):
            raise invalid("`args` must be an array of strings")
        for arg in args:
            os_text(arg, "args[]", empty=True)
        env = self._env(params.get("env"))
        limit = count_param(params.get("outputByteLimit"), "outputByteLimit")
        limit = DEFAULT_OUTPUT_LIMIT if limit is None else min(limit, MAX_OUTPUT_LIMIT)
        self._room(command)
        cwd_param = params.get("cwd")
        cwd_fd: int | None = None
        if cwd_param is None or cwd_param == "":
            cwd = self._default_cwd
        else:
            # Inside the session dir, opened like an fs path; the child enters that very
            # directory through its descriptor where /proc has it (no name to swap).
            cwd_fd = resolve(self._default_cwd, os_text(cwd_param, "cwd"), "cwd", "dir")
            if os.path.isdir("/proc/self/fd"):
                cwd = f"/proc/self/fd/{cwd_fd}"
            else:
                cwd = os.path.join(self._default_cwd, cwd_param)
        argv = [command, *args]
        try:
            proc, tree = start_tree(argv, cwd, env, subprocess.DEVNULL, subprocess.STDOUT)
        except FileNotFoundError as exc:
            # Some agents put a whole command line in `command`; split it as words (still
            # no shell: no expansion, no pipes) rather than fail on a missing "ls -la".
            if args or not any(c.isspace() for c in command):
                raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {exc.strerror}") from None
            try:
                words = shlex.split(command)
                proc, tree = start_tree(words, cwd, env, subprocess.DEVNULL, subprocess.STDOUT)
            except (ValueError, OSError, subprocess.SubprocessError) as exc2:
                raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {exc2}") from None
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {getattr(exc, 'strerror', None) or exc}") from None
        finally:
            if cwd_fd is not None:
                os.close(cwd_fd)
        terminal = Terminal(f"term-{next(self._ids)}", proc, tree, limit)
        self._terminals[terminal.id] = terminal
        self._all.append(terminal)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        if not self._paused:
            self._watch(terminal)
        self.loop.watch_child(proc, lambda rc: self._reaped(terminal, rc))
        return {"terminalId": terminal.id}

    def live(self) -> int:
        """Terminals that count against the limit: unreleased, or released and still running."""
        return len(self._terminals) + sum(1 for t in self._all if t.released and t.reaped is None)

    def _room(self, command: str) -> None:
        """RpcError unless one more terminal fits: the session's limit, the descriptors' reserve."""
        if self.live() >= self.max_terminals:
            why = (
                f"cannot run {command}: this session has {self.max_terminals} live terminals, its limit: "
                "release one first (terminal/release; serve --max-terminals raises the limit)"
            )
            raise RpcError(INTERNAL_ERROR, why)
        short = descriptors.short(1, descriptors.RESERVE)
        if short is not None:
            raise RpcError(INTERNAL_ERROR, f"cannot run {command}: {short}")

    def _watch(self, terminal: Terminal) -> None:
        self.loop.add_reader(terminal.proc.stdout, lambda: self._read(terminal))

    # -- flow control: the engine's, through the driver's pause_output/resume_output

    def pause(self) -> None:
        """Stop reading every terminal: a full pipe then blocks the command itself."""
        if not self._paused:
            self._paused = True
            for terminal in self._all:
                if terminal.reading and terminal.proc.stdout is not None:
                    self.loop.remove_reader(terminal.proc.stdout)

    def resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        for terminal in list(self._all):
            if terminal.reading and terminal.proc.stdout is not None:
                self._watch(terminal)
        for terminal in list(self._all):
            if terminal.reaped is not None and terminal.returncode is None and not self._paused:
                self._finish(terminal)

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
        terminal.reaped = returncode
        if terminal.released:  # nobody asks for it any more: report it and let it go
            self._finish(terminal, drain=not self._paused)
        elif not self._paused:
            self._finish(terminal)
        # Paused: resume() reports it, once the output before the exit can be read.

    def _finish(self, terminal: Terminal, drain: bool = True) -> None:
        assert terminal.reaped is not None
        # Take what the command wrote before it exited, so wait_for_exit sees it all.
        for _ in range(64 if drain else 0):
            if self._paused or not self._read(terminal):
                break
        terminal.returncode = terminal.reaped
        status = exit_status(terminal.returncode)
        waiters, terminal.waiters = terminal.waiters, []
        for reply in waiters:
            reply(status)
        if terminal.released:
            self._discard(terminal)

    def output(self, params: Any) -> TerminalOutput:
        terminal = self._get(params)
        result: TerminalOutput = {
            "output": terminal.out.decode("utf-8", "replace"),
            "truncated": terminal.truncated,
        }
        if terminal.returncode is not None:
            result["exitStatus"] = exit_status(terminal.returncode)
        return result

    def wait_for_exit(self, params: Any, reply: Callable[[ExitStatus], None]) -> None:
        terminal = self._get(params)
        if terminal.returncode is not None:
            reply(exit_status(terminal.returncode))
        else:
            terminal.waiters.append(reply)

    def kill(self, params: Any) -> None:
        self._kill(self._get(params))

    def _kill(self, terminal: Terminal) -> None:
        if terminal.reaped is None or self._group_alive(terminal):
            terminal.tree.signal(signal.SIGKILL)

    def release(self, params: Any) -> None:
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
        return terminal.tree.alive()

    def close_all(self) -> None:
        """Kill every terminal's process group (the session is ending)."""
        for terminal in list(self._all):
            self._kill(terminal)
            terminal.released = True
            if terminal.reaped is not None and terminal.returncode is None:
                self._finish(terminal, drain=False)  # nobody reads it any more
            elif terminal.returncode is not None:
                self._discard(terminal)
        self._terminals.clear()

    def any_alive(self) -> bool:
        return any(t.reaped is None or self._group_alive(t) for t in self._all)
