"""A synchronous Python client for ``agentproto serve`` (or any protocol 1 sidecar).

It follows the wrapper rules of anyagent's sidecar contract:
- a session is registered inside the line reader, before the next line is read, so no
  event can arrive for a session the client does not know yet;
- ``Session.info`` and ``Session.status`` stay live from SessionUpdated/StatusChanged;
- a session error raises from ``Session.events()``, which then ends; ``closed`` ends it;
- the sidecar's death fails every pending call and iterator with ``ProcessExited``;
- ``Runtime.close()`` is graceful and idempotent: close stdin, wait up to 5 s, then kill;
- a session's queue holds at most 4096 events: past that the session fails with
  ``ConsumerLagged`` and is closed (the reader is never paused, so one slow consumer
  cannot stall the others);
- errors keep ``kind``, ``message`` and every extra field;
- a first line that is not a protocol 1 hello fails start with ``ProtocolFailed``.

One reader thread per runtime routes lines; calls block the calling thread only.

    from agentproto.client import Runtime, kind_of
    with Runtime.start() as rt:
        session = rt.open("mock", dir=".")
        session.prompt("hello")
        for event in session.events(timeout=30):
            if kind_of(event) == "TextDelta":
                print(event["kind"]["TextDelta"]["text"], end="")
            if kind_of(event) == "TurnEnded":
                break
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterator

from agentproto.core.client_protocol import AgentProtoError as AgentProtoError
from agentproto.core.client_protocol import check_options, exited_before_hello, hello_of, lagged, not_a_sidecar
from agentproto.core.client_protocol import kind_of as kind_of
from agentproto.core.errors import Kind

QUEUE_CAP = 4096
_END = object()


class _Call:
    __slots__ = ("done", "value", "error", "on_ok")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: AgentProtoError | None = None
        self.on_ok: Any = None


class Session:
    def __init__(self, runtime: "Runtime", info: dict[str, Any]) -> None:
        self.runtime = runtime
        self.id: str = info["id"]
        self.info: dict[str, Any] = info
        self._queue: deque[Any] = deque()
        self._cond = threading.Condition()
        self._ended = False
        self._gone = False  # `closed` was read, or the sidecar is gone: nothing left to close

    @property
    def status(self) -> str:
        return str(self.info.get("status", "Idle"))

    @property
    def resume_token(self) -> str | None:
        return self.info.get("resume_token")

    # -- reader side (called on the reader thread only)
    def _push(self, item: Any) -> None:
        with self._cond:
            if self._ended:
                return
            if isinstance(item, dict):
                kind = item.get("kind")
                if isinstance(kind, dict):
                    if "SessionUpdated" in kind:
                        self.info = kind["SessionUpdated"]
                    elif "StatusChanged" in kind:
                        self.info["status"] = kind["StatusChanged"]
                if len(self._queue) >= QUEUE_CAP:
                    self._queue.append(lagged(self.id, QUEUE_CAP))
                    self._queue.append(_END)
                    self._ended = True
                    self._cond.notify_all()
                    # Never write from the reader: a full stdin pipe would stall every session.
                    threading.Thread(
                        target=self.runtime._send_nowait,
                        args=({"cmd": "close", "session": self.id},),
                        name="agentproto-lagged-close",
                        daemon=True,
                    ).start()
                    return
            self._queue.append(item)
            if item is _END:
                self._ended = True
            self._cond.notify_all()

    def _end(self, error: AgentProtoError | None = None) -> None:
        """``closed`` was read, or the sidecar is gone (``error``, unless it was closed)."""
        self._gone = True
        if error is not None:
            self._push(error)
        self._push(_END)

    # -- app side
    def events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Yield events until the session closes. A session error raises, then ends it.

        ``timeout`` bounds the wait for each next event (``TimeoutError`` past it).
        """
        while True:
            with self._cond:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._queue:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no event from session {self.id} within {timeout} s")
                    self._cond.wait(remaining)
                item = self._queue.popleft()
            if item is _END:
                with self._cond:
                    self._queue.appendleft(_END)  # later iterators end at once too
                return
            if isinstance(item, AgentProtoError):
                raise item
            yield item

    def prompt(self, text: str, attachments: list[str] | None = None) -> dict[str, Any]:
        fields: dict[str, Any] = {"session": self.id, "text": text, "attachments": attachments or []}
        delivery: dict[str, Any] = self.runtime._call("prompt", **fields)
        return delivery

    def answer(self, request: str, answer: Any) -> None:
        self.runtime._call("answer", session=self.id, request=request, answer=answer)

    @property
    def tools_url(self) -> str | None:
        """The MCP endpoint of the app's tools (``open(..., tools=[...])``): it holds a secret."""
        return self.info.get("tools_url")

    def answer_tool(
        self,
        request: str,
        text: str | None = None,
        *,
        content: list[dict[str, Any]] | None = None,
        is_error: bool = False,
        structured: dict[str, Any] | None = None,
    ) -> None:
        """Answer a ``ToolCall``: ``text`` (one text item), or MCP ``content`` items
        (``{"type": "text", "text"}``, ``{"type": "image", "data", "mime_type"}``), and
        ``structured`` for a tool with an ``output_schema``."""
        items = list(content or [])
        if text is not None:
            items.insert(0, {"type": "text", "text": text})
        result: dict[str, Any] = {"content": items, "is_error": is_error}
        if structured is not None:
            result["structured"] = structured
        self.answer(request, {"ToolResult": result})

    def answer_hook(self, request: str, output: dict[str, Any] | None = None) -> None:
        """Answer a ``Hook`` with the agent's hook output (None: the neutral ``{}``)."""
        self.answer(request, {"HookResult": output or {}})

    def configure(self, option: str, value: Any) -> None:
        self.runtime._call("configure", session=self.id, option=option, value=value)

    def cancel(self, clear_queue: bool = False, turn: str | None = None) -> None:
        self.runtime._call("cancel", session=self.id, clear_queue=clear_queue, turn=turn)

    def rollback(self, turns: int, scope: str = "Conversation") -> None:
        self.runtime._call("rollback", session=self.id, turns=turns, scope=scope)

    def dequeue(self, prompt: str) -> None:
        self.runtime._call("dequeue", session=self.id, prompt=prompt)

    def compact(self) -> None:
        self.runtime._call("compact", session=self.id)

    def refresh(self) -> dict[str, Any]:
        self.info = self.runtime._call("info", session=self.id)
        return self.info

    def close(self) -> None:
        """Close the session; idempotent (closing a closed session, or one whose sidecar is
        gone, is not an error)."""
        if self._gone or self.runtime._dead is not None:
            return
        try:
            self.runtime._call("close", session=self.id)
        except AgentProtoError as error:
            if error.kind not in (Kind.SESSION_CLOSED, Kind.UNKNOWN_SESSION):
                raise


def _remove(directory: str | None) -> None:
    if directory is not None:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)


#: This interpreter running this agentproto, whatever the current directory holds: ``-I``
#: keeps the directory (and PYTHON* variables, user site-packages) off ``sys.path``, so a
#: stray ``agentproto/`` or ``frontends/inspect_op.py`` there cannot stand in for ours.
_BOOT = "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('agentproto', run_name='__main__')"


def _default_command() -> list[str]:
    return [sys.executable, "-I", "-c", _BOOT, str(Path(__file__).resolve().parent.parent)]


class Runtime:
    """One sidecar process and its sessions."""

    def __init__(self, proc: subprocess.Popen[bytes], call_timeout: float | None) -> None:
        self.proc = proc
        self.call_timeout = call_timeout
        self.hello: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._calls: dict[int, _Call] = {}
        self._sessions: dict[str, Session] = {}
        self._dead: AgentProtoError | None = None
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="agentproto-reader", daemon=True)
        self._stderr_tail = bytearray()
        self._stderr_reader = threading.Thread(target=self._read_stderr, name="agentproto-stderr", daemon=True)
        self._script_dir: str | None = None

    @classmethod
    def start(
        cls,
        bin: str | None = None,
        mock: str | dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        call_timeout: float | None = 120.0,
        start_timeout: float = 15.0,
    ) -> "Runtime":
        """Spawn ``BIN serve [--mock SCRIPT]`` (default: this interpreter running this
        agentproto, from any directory). ``mock`` is a mock script's path, or the script
        itself (a dict), handed to the sidecar in a private file removed at ``close``."""
        argv = [bin] if bin else _default_command()
        script_dir = None
        if isinstance(mock, dict):
            script_dir = tempfile.mkdtemp(prefix="agentproto-mock-")  # 0700: only we read it
            with open(os.path.join(script_dir, "script.json"), "w", encoding="utf-8") as handle:
                json.dump(mock, handle)
            mock = os.path.join(script_dir, "script.json")
        argv += ["serve", *(["--mock", str(mock)] if mock else []), *(args or [])]
        child_env = dict(os.environ if env is None else env)
        try:
            # Its own process group: a terminal's Ctrl-C is the app's to handle (close()
            # ends the sidecar gracefully), and a failed start kills the whole group.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=child_env,
                start_new_session=True,
            )
        except OSError as exc:
            _remove(script_dir)
            why = f"cannot start {argv[0]}: {exc.strerror}"
            raise AgentProtoError(Kind.SPAWN_FAILED, why, detail=str(exc)) from None
        runtime = cls(proc, call_timeout)
        runtime._script_dir = script_dir
        runtime._stderr_reader.start()
        try:
            runtime._check_hello(start_timeout)
        except AgentProtoError:
            _remove(script_dir)
            raise
        runtime._reader.start()
        return runtime

    def _check_hello(self, timeout: float) -> None:
        assert self.proc.stdout is not None
        box: list[bytes] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        line = box[0] if box else b""
        hello = hello_of(line)
        if hello is None:
            if not line:
                self._exited_before_hello()
            self._kill()
            raise not_a_sidecar(line)
        self.hello = hello

    def _exited_before_hello(self) -> None:
        """Nothing on stdout: if the sidecar exited, its own last words on stderr say why
        (``cannot read mock script …``), and they are the error's message."""
        try:
            status = self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            return  # still running, silent: not a sidecar (ProtocolFailed)
        self._stderr_reader.join(2.0)
        raise exited_before_hello(status, self._stderr_tail.decode("utf-8", "replace"))

    # -- reader thread
    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                self._route(line)
        self.proc.wait()
        self._stderr_reader.join(2)  # its last words (a traceback) belong in ProcessExited.stderr
        self._die()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr,attr-defined]
            self._stderr_tail += chunk
            del self._stderr_tail[:-8192]

    def _route(self, line: dict[str, Any]) -> None:
        if "event" in line:
            event = line["event"]
            session = self._sessions.get(event.get("session_id"))
            if session is not None:
                session._push(event)
            return
        if "closed" in line:
            session = self._sessions.pop(line["closed"], None)
            if session is not None:
                session._end()
            return
        if "session" in line and "error" in line:
            session = self._sessions.get(line["session"])
            if session is not None:
                session._push(AgentProtoError.from_body(line["error"]))
            return
        if "id" in line and ("ok" in line or "error" in line):
            with self._lock:
                call = self._calls.pop(line["id"], None) if line["id"] is not None else None
            if call is None:
                return
            if "error" in line:
                call.error = AgentProtoError.from_body(line["error"])
            else:
                call.value = line["ok"]
                if call.on_ok is not None:
                    # Registration inside the reader: before the next line is read.
                    call.value = call.on_ok(call.value)
            call.done.set()

    def _die(self) -> None:
        status = self.proc.returncode
        stderr = self._stderr_tail.decode("utf-8", "replace")
        error = AgentProtoError(
            Kind.PROCESS_EXITED, f"the sidecar exited (status {status})", status=str(status), stderr=stderr
        )
        with self._lock:
            self._dead = error
            calls, self._calls = self._calls, {}
            sessions, self._sessions = self._sessions, {}
        for call in calls.values():
            call.error = error
            call.done.set()
        for session in sessions.values():
            session._end(None if self._closed else error)

    # -- calls
    def _send(self, cmd: dict[str, Any], on_ok: Any = None) -> _Call:
        call = _Call()
        call.on_ok = on_ok
        with self._lock:
            if self._dead is not None:
                raise self._dead
            self._next_id += 1
            frame_id = self._next_id
            self._calls[frame_id] = call
        data = (json.dumps({"id": frame_id, **cmd}) + "\n").encode()
        try:
            with self._write_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            with self._lock:
                self._calls.pop(frame_id, None)
            closed = AgentProtoError(Kind.PROCESS_EXITED, "the sidecar's stdin is closed", status=None, stderr="")
            raise (self._dead or closed) from None
        return call

    def _send_nowait(self, cmd: dict[str, Any]) -> None:
        try:
            self._send(cmd)
        except AgentProtoError:
            pass

    def _call(self, name: str, on_ok: Any = None, timeout: float | None = -1.0, **fields: Any) -> Any:
        call = self._send({"cmd": name, **{k: v for k, v in fields.items() if v is not None}}, on_ok)
        wait = self.call_timeout if timeout == -1.0 else timeout
        if not call.done.wait(wait):
            raise TimeoutError(f"{name}: no reply within {wait} s")
        if call.error is not None:
            raise call.error
        return call.value

    # -- the runtime's commands
    def discover(self) -> dict[str, Any]:
        return dict(self._call("discover"))

    def probe(self, agent: Any, **options: Any) -> dict[str, Any]:
        return dict(self._about_agent("probe", agent, options))

    def plan_usage(self, agent: Any, **options: Any) -> dict[str, Any]:
        return dict(self._about_agent("plan_usage", agent, options))

    def plan_usage_all(self, **options: Any) -> list[dict[str, Any]]:
        """Each discovered agent's row: ``agent`` and ``plan_usage``, or ``error`` (why it has none)."""
        return list(self._about_agent("plan_usage_all", None, options))

    def _about_agent(self, name: str, agent: Any, options: dict[str, Any]) -> Any:
        """A command that opens no session (probe, plan_usage, plan_usage_all)."""
        check_options(name, options)
        return self._call(name, agent=agent, **options)

    def generate(
        self,
        agent: Any,
        prompt: str,
        dir: str | None = None,
        *,
        tools: list[dict[str, Any]] | None = None,
        **options: Any,
    ) -> str:
        check_options("generate", options, tools)
        return str(self._call("generate", agent=agent, prompt=prompt, dir=dir or os.getcwd(), **options))

    def open(
        self, agent: Any, dir: str | None = None, *, tools: list[dict[str, Any]] | None = None, **options: Any
    ) -> Session:
        """Open a session; ``tools`` are the app's own (each call a ``ToolCall`` request,
        answered with ``Session.answer_tool``)."""
        check_options("open", options, tools)

        def register(info: dict[str, Any]) -> Session:
            session = Session(self, info)
            self._sessions[session.id] = session
            return session

        session: Session = self._call("open", on_ok=register, agent=agent, dir=dir or os.getcwd(), **options)
        return session

    def close(self, timeout: float = 5.0) -> int | None:
        """Close stdin, wait up to ``timeout`` seconds, then kill. Idempotent."""
        if not self._closed:
            self._closed = True
            try:
                with self._write_lock:
                    if self.proc.stdin is not None:
                        self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
            if self._reader.is_alive():
                self._reader.join(5)
            _remove(self._script_dir)
        return self.proc.returncode

    def _kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
