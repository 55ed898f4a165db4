"""The driver seam: what the engine asks of an agent adapter, and what it offers back.

A driver adapts one agent to protocol 1's normalized events. It never writes protocol
lines, keeps no turn or queue state of the engine's, and never emits the engine-owned
kinds (TurnStarted, TurnEnded, RequestClosed, SessionUpdated, StatusChanged): it reports
facts to its ``Host`` and the engine turns them into ordered events.

Engine -> driver (``Driver``): open, start_turn, steer, answer, cancel, configure,
rollback, compact, close, kill, pause_output, resume_output; the facts deterministic()
and tools_disabled; and, with no session, the class's plan_usage(). A driver's launch
facts (``Launch``) carry everything it is given, the mock's script included.

Driver -> engine (``Host``): opened / open_failed, turn_acknowledged, emit, end_turn,
update, diagnostic, request_withdrawn, fail, closed; and the app's tools and hooks below.

The app's own tools and hooks (apptools.py; the engine does all their bookkeeping):
- A driver that can give its agent the app's tools sets ``Driver.app_tools``; one with a
  hook channel lists the hook events it can deliver in ``Driver.hook_events``. The engine
  refuses an ``open`` with tools or hooks the driver cannot take (UnsupportedFeature naming
  the agent) before ``open()`` is called.
- Tools: by ``open()``, ``host.tools_url`` is the session's Streamable HTTP MCP endpoint on
  the loopback listener (None when the app declared no tools). Configure the agent with it
  as one MCP server named ``APP_SERVER`` (``"agentproto"``); ``launch.tools`` holds the
  declarations. The URL carries the session's secret token: never log it, never put it on
  a command line (write it to a 0600 file or pass it through the agent's environment).
  The agent's calls reach the engine through the listener, never through the driver.
- A call of one of the app's tools is the app's decision: when the agent asks permission
  for a tool, ``host.is_app_tool(server, tool)`` says whether it is one of these (allow it
  yourself: never raise a Permission request for it).
- Hooks: every invocation, whatever channel it came through (Claude's ``hook_callback``
  over the control protocol, the listener's ``POST /<token>/hook/<event>``), goes to
  ``host.hook(event, input, reply)``; ``reply(output)`` is called exactly once with the
  agent's hook output (the app's ``HookResult``, or ``{}``: neutral). ``launch.hooks``
  lists the events the app answers; ``host.hook_url(event)`` is the listener's URL for an
  agent whose hooks are commands that post their input (the same secret rules apply).

``AgentProcess`` is the shared plumbing for drivers whose agent is a child process: its
own process group, non-blocking pipes watched by the loop, line framing with a bound,
a stderr tail, and the shutdown order (close stdin, wait, SIGTERM the group, wait,
SIGKILL the group).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from agentproto import private
from agentproto.apptools import APP_SERVER as APP_SERVER
from agentproto.apptools import HOOK_TIMEOUT, TOOL_TIMEOUT
from agentproto.errors import AgentError, Kind
from agentproto.wire import LineFramer, TooLong

if TYPE_CHECKING:
    from agentproto.loop import Loop, Timer


@dataclass
class Launch:
    """One session's launch facts: the wire's SessionOptions, resolved against the catalog."""

    agent_id: str
    installation: dict[str, Any]
    executable: str
    dir: str
    resume: str | None = None
    fork: str | None = None
    fork_at: str | None = None
    permission_mode: str = "Ask"
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    configure: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None
    output_schema: Any = None
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    config_home: str | None = None
    record_wire: str | None = None
    #: A session that only exists to serve probe or generate.
    throwaway: bool = False
    #: generate: the agent must answer in text, without tools.
    tools_disabled: bool = False
    #: For ACP agents: the arguments that make the executable speak ACP.
    acp_args: list[str] = field(default_factory=list)
    #: For the mock: the script it plays (``serve --mock``); None plays the echo agent.
    mock_script: dict[str, Any] | None = None
    #: The app's own tools, checked (apptools.check_tools): name, description,
    #: input_schema and output_schema (when declared), as the app declared them.
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: The hook events the app answers (``Host.hook``).
    hooks: list[str] = field(default_factory=list)
    #: Seconds a tool call (a hook) waits for the app's answer.
    tool_timeout: float = TOOL_TIMEOUT
    hook_timeout: float = HOOK_TIMEOUT

    def child_env(self) -> dict[str, str]:
        """The sidecar's environment with the session's ``env`` over it (its values win)."""
        env = dict(os.environ)
        env.update(self.env)
        return env


class Host(Protocol):
    """What the engine offers a driver for one session."""

    loop: "Loop"
    session_id: str

    def opened(self, details: dict[str, Any], **info: Any) -> None:
        """The session is ready: AgentDetails and SessionInfo members (resume_token, title…)."""

    def open_failed(self, error: AgentError) -> None: ...

    def turn_acknowledged(self) -> None:
        """The agent accepted the turn the engine started; earlier content was stale."""

    def emit(self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None) -> None:
        """One normalized event (any kind but the engine-owned ones)."""

    def end_turn(self, stop: Any, usage: dict[str, int] | None = None) -> None:
        """The agent ended its turn with this StopReason."""

    def update(self, **info: Any) -> None:
        """SessionInfo members changed (details, resume_token, title, configuration)."""

    def diagnostic(self, level: str, message: str) -> None: ...

    def request_withdrawn(self, request_id: str) -> None:
        """The agent withdrew an open request itself (it no longer waits for the answer)."""

    def fail(self, error: AgentError) -> None:
        """A terminal session error (the agent died, lost auth…); the engine closes it."""

    def closed(self) -> None:
        """The agent is gone: every process of the session has exited."""

    # -- the app's tools and hooks (see the module's docstring)
    @property
    def tools_url(self) -> str | None:
        """The session's MCP endpoint of the app's tools (secret: it holds the token), or None."""

    def hook_url(self, event: str) -> str | None:
        """The listener's URL a hook command posts its input to (secret too), or None."""

    def hook(self, event: str, input: Any, reply: Callable[[dict[str, Any]], None]) -> None:
        """The agent invoked a hook: the app is asked; ``reply(output)`` runs once, maybe later."""

    def is_app_tool(self, server: str, tool: str) -> bool:
        """Whether the agent's tool ``tool`` of MCP server ``server`` is one of the app's."""


class Driver:
    """Base class of every agent adapter. Defaults refuse what most agents lack.

    The engine and the runtime call only the members defined here; a driver overrides
    them, it adds no hooks of its own for them to look for.
    """

    #: True when this driver runs its agent with every tool off because the launch asked
    #: (``Launch.tools_disabled``, set by generate). A driver that cannot switch tools off
    #: leaves it False: generate then needs the agent's permission requests instead.
    tools_disabled: bool = False

    #: True when this driver gives its agent the app's tools (``Host.tools_url``).
    app_tools: bool = False
    #: The hook events this driver can deliver to ``Host.hook`` (empty: no hook channel).
    #: A driver may set it per instance in ``__init__`` (the mock's comes from its script).
    hook_events: frozenset[str] = frozenset()

    def __init__(self, host: Host, launch: Launch) -> None:
        self.host = host
        self.launch = launch

    @classmethod
    def plan_usage(cls, loop: "Loop", launch: Launch, done: Callable[[Any, "AgentError | None"], None]) -> None:
        """Read the agent's plan usage (``PlanUsage``) without opening a session."""
        raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, "plan usage")

    def deterministic(self, origin: Any) -> bool:
        """Whether the agent reports the end of every turn of this origin (``"Agent"`` or a
        prompt's). When it may not, the engine ends a turn that has been quiet too long."""
        return True

    # -- lifecycle
    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Graceful shutdown; call ``host.closed()`` once everything is gone."""
        raise NotImplementedError

    def kill(self) -> None:
        """Immediate shutdown (grace expired, EOF deadline); still ends in ``host.closed()``."""
        self.close()

    # -- turns
    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        raise NotImplementedError

    def steer(self, text: str, attachments: list[str], done: Callable[[bool], None]) -> None:
        done(False)

    def answer(self, request: dict[str, Any], answer: Any) -> None:
        """Answer an open request. ``request`` is the RequestOpened payload the app saw."""
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError

    # -- settings and history
    def validate_config(self, option: dict[str, Any], value: Any) -> str | None:
        """Return a problem with ``value`` for ``option``, or None. Strict by default."""
        kind = option.get("kind")
        if kind == "Boolean":
            return None if isinstance(value, bool) else "expects a boolean"
        if isinstance(kind, dict) and "Select" in kind:
            choices = [c.get("value") for c in kind["Select"].get("choices", [])]
            if value in choices:
                return None
            return f"expects one of {', '.join(map(str, choices))}"
        return None

    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        done(None)

    def rollback(self, turns: int, scope: str, done: Callable[[AgentError | None, str | None], None]) -> None:
        done(AgentError.detail(Kind.UNSUPPORTED_FEATURE, "rollback"), None)

    def compact(self) -> None:
        raise NotImplementedError

    # -- flow control: the engine calls these as the app falls behind and catches up
    def pause_output(self) -> None:
        pass

    def resume_output(self) -> None:
        pass


class ProcessDriver(Driver):
    """A driver whose agent is one ``AgentProcess`` (``self.proc`` once started)."""

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        self.proc: AgentProcess | None = None

    # Flow control is the pipe's: stop reading the agent and it blocks on a full pipe.
    def pause_output(self) -> None:
        if self.proc is not None:
            self.proc.pause()

    def resume_output(self) -> None:
        if self.proc is not None:
            self.proc.resume()


# -- child processes ---------------------------------------------------------------------


def describe_status(returncode: int | None) -> str | None:
    if returncode is None:
        return None
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return str(returncode)


class WireRecorder:
    """Appends each raw line exchanged with an agent to a file (``record_wire``)."""

    def __init__(self, path: str) -> None:
        try:
            self._file = private.open_append(path)  # 0600, never through a planted symlink
        except OSError as exc:
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"record_wire: {path}: {exc.strerror or exc}") from None

    def record(self, direction: str, line: bytes) -> None:
        entry = {"t": time.time_ns(), "dir": direction, "line": line.decode("utf-8", "replace")}
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class AgentProcess:
    """A child process in its own process group, read line by line through the loop.

    ``on_line(bytes)`` gets each stdout line; ``on_exit(status, stderr_tail)`` runs once,
    after stdout has ended and the child has been reaped. ``shutdown()`` runs the
    graceful order and ``kill()`` the immediate one; either way the whole group is
    signalled, since agents leave children behind.
    """

    STDERR_TAIL = 8192
    READ_SIZE = 256 * 1024

    def __init__(
        self,
        loop: "Loop",
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        on_line: Callable[[bytes], None],
        on_exit: Callable[[str | None, str], None],
        on_too_long: Callable[[int], None] | None = None,
        max_line: int = 64 * 1024 * 1024,
        record_wire: str | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
    ) -> None:
        self.loop = loop
        self.argv = argv
        self._on_line = on_line
        self._on_exit = on_exit
        self._on_too_long = on_too_long
        self._on_stderr = on_stderr
        self._framer = LineFramer(max_line)
        self._stderr_tail = bytearray()
        self._out_queue: list[bytes] = []
        self._out_offset = 0
        self._stdout_open = True
        self._stderr_open = True
        self._returncode: int | None = None
        self._exited_reported = False
        self._paused = False
        self._timers: list["Timer"] = []
        self._recorder = WireRecorder(record_wire) if record_wire else None
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            if self._recorder:
                self._recorder.close()
            raise
        self.pid = self.proc.pid
        self.pgid = self.pid  # start_new_session: the child leads its own group
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            os.set_blocking(stream.fileno(), False)
        self._stdin_fd: int | None = self.proc.stdin.fileno()
        loop.add_reader(self.proc.stdout, self._read_stdout)
        loop.add_reader(self.proc.stderr, self._read_stderr)
        loop.watch_child(self.proc, self._reaped)

    # -- output to the agent
    def write(self, data: bytes) -> None:
        if self._stdin_fd is None:
            return
        if self._recorder:
            self._recorder.record("to_agent", data.rstrip(b"\n"))
        if not self._out_queue:
            try:
                n = os.write(self._stdin_fd, data)
            except BlockingIOError:
                n = 0
            except (BrokenPipeError, OSError):
                self._drop_stdin()
                return
            if n == len(data):
                return
            data = data[n:]
            self.loop.add_writer(self._stdin_fd, self._flush_stdin)
        self._out_queue.append(data)

    def write_json(self, obj: Any) -> None:
        self.write((json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass"))

    def _flush_stdin(self) -> None:
        while self._out_queue and self._stdin_fd is not None:
            chunk = self._out_queue[0]
            try:
                n = os.write(self._stdin_fd, chunk)
            except BlockingIOError:
                return
            except (BrokenPipeError, OSError):
                self._drop_stdin()
                return
            if n < len(chunk):
                self._out_queue[0] = chunk[n:]
                return
            self._out_queue.pop(0)
        if self._stdin_fd is not None:
            self.loop.remove_writer(self._stdin_fd)
            if self._close_stdin_when_flushed:
                self._drop_stdin()

    _close_stdin_when_flushed = False

    def _drop_stdin(self) -> None:
        if self._stdin_fd is None:
            return
        self.loop.forget(self._stdin_fd)
        self._out_queue.clear()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._stdin_fd = None

    def close_stdin(self) -> None:
        """End the agent's input once what is queued has been written."""
        if self._out_queue:
            self._close_stdin_when_flushed = True
        else:
            self._drop_stdin()

    # -- input from the agent
    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            data = os.read(self.proc.stdout.fileno(), self.READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.forget(self.proc.stdout)
            self._stdout_open = False
            for line in self._framer.close():
                self._deliver(line)
            self._maybe_exited()
            return
        for line in self._framer.feed(data):
            self._deliver(line)
            if not self._stdout_open:
                break

    def _deliver(self, line: bytes | TooLong) -> None:
        if isinstance(line, TooLong):
            if self._on_too_long:
                self._on_too_long(line.size)
            return
        if self._recorder:
            self._recorder.record("from_agent", line)
        self._on_line(line)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            data = os.read(self.proc.stderr.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.forget(self.proc.stderr)
            self._stderr_open = False
            self._maybe_exited()
            return
        self._stderr_tail += data
        if len(self._stderr_tail) > self.STDERR_TAIL:
            del self._stderr_tail[: len(self._stderr_tail) - self.STDERR_TAIL]
        if self._on_stderr:
            self._on_stderr(data)

    def pause(self) -> None:
        if not self._paused and self._stdout_open:
            self._paused = True
            assert self.proc.stdout is not None
            self.loop.remove_reader(self.proc.stdout)

    def resume(self) -> None:
        if self._paused and self._stdout_open:
            self._paused = False
            assert self.proc.stdout is not None
            self.loop.add_reader(self.proc.stdout, self._read_stdout)

    # -- exit
    @property
    def running(self) -> bool:
        return self._returncode is None

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace")

    def _reaped(self, returncode: int) -> None:
        self._returncode = returncode
        # The leader is gone; anything else in its group is an orphan to clean up.
        self._signal_group(signal.SIGTERM)
        if self._group_alive():
            self._timers.append(self.loop.call_later(1.0, lambda: self._signal_group(signal.SIGKILL)))
        if self._paused:
            # Drain what the agent wrote before it died, even while the app is behind.
            self._paused = False
            assert self.proc.stdout is not None
            if self._stdout_open:
                self.loop.add_reader(self.proc.stdout, self._read_stdout)
        # A grandchild may keep the pipes open; don't wait for it forever.
        self._timers.append(self.loop.call_later(2.0, self._force_eof))
        self._maybe_exited()

    def _force_eof(self) -> None:
        if self._exited_reported:
            return
        self._signal_group(signal.SIGKILL)
        for stream, attr in ((self.proc.stdout, "_stdout_open"), (self.proc.stderr, "_stderr_open")):
            if getattr(self, attr) and stream is not None:
                self.loop.forget(stream)
                setattr(self, attr, False)
        self._maybe_exited()

    def _maybe_exited(self) -> None:
        if self._exited_reported or self._returncode is None:
            return
        if self._stdout_open or self._stderr_open:
            return
        self._exited_reported = True
        for timer in self._timers:
            timer.cancel()
        self._drop_stdin()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        if self._recorder:
            self._recorder.close()
        self._on_exit(describe_status(self._returncode), self.stderr_tail)

    def _group_alive(self) -> bool:
        return group_alive(self.pgid)

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def shutdown(self, grace: float = 3.0) -> None:
        """Close stdin, wait ``grace``, SIGTERM the group, wait, SIGKILL the group."""
        self.close_stdin()
        if self._returncode is not None:
            return
        self._timers.append(self.loop.call_later(grace, self._terminate))

    def _terminate(self) -> None:
        if self._returncode is None:
            self._signal_group(signal.SIGTERM)
            self._timers.append(self.loop.call_later(2.0, self.kill))

    def kill(self) -> None:
        self._drop_stdin()
        self._signal_group(signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether a live process is left in group ``pgid`` (zombies do not count).

    ``killpg(pgid, 0)`` alone also succeeds for zombies, and an orphaned zombie waits for
    init to reap it, which some container inits do late or never: /proc tells them apart.
    """
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc: trust the signal
    wanted = str(pgid).encode()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != b"Z" and fields[2] == wanted:
            return True
    return False


def run_capture(
    loop: "Loop",
    argv: list[str],
    done: Callable[[int | None, str, str], None],
    *,
    timeout: float = 10.0,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> None:
    """Run a short command through the loop; ``done(returncode, stdout, stderr)``.

    On a start failure returncode is None and stderr says why; on timeout the group is
    killed and returncode is None.
    """
    out = bytearray()
    finished = False

    def on_line(line: bytes) -> None:
        out.extend(line + b"\n")

    def on_exit(status: str | None, stderr: str) -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        timer.cancel()
        code = proc._returncode
        done(code if not timed_out else None, out.decode("utf-8", "replace"), stderr)

    timed_out = False

    def on_timeout() -> None:
        nonlocal timed_out
        timed_out = True
        proc.kill()

    try:
        proc = AgentProcess(loop, argv, cwd=cwd, env=env or dict(os.environ), on_line=on_line, on_exit=on_exit)
    except OSError as exc:
        reason = str(exc)  # ``exc`` is unbound once the except block ends
        loop.call_soon(lambda: done(None, "", reason))
        return
    proc.close_stdin()
    timer = loop.call_later(timeout, on_timeout)
