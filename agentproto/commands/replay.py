"""``python -m agentproto replay PATH`` (and ``--replay PATH``): a recording, run again.

Each run of the file (one per header: record.py) is replayed against a fresh runtime
rebuilt from its header (the same mock script, the same frontend), in-process, through
the frontend's own code: protocol 1 connections (serve, unix), the ops loop, single-shot,
JSON-RPC, MCP, HTTP's handler. The app's recorded inputs are fed to it in their recorded
order (core/recording.py's timeline); what it records live goes to the checker
(replay_checker.py) instead of a file and is compared, normalized, with what was recorded.
The runtime is replay_runtime.py's: sessions whose agent wire was recorded get the replay
transport (replay_transport.py), and no agent runs. Mock sessions replay live (the mock is
deterministic), playing the script the header embeds.

Several files (``replay a.ndjson b.ndjson``, or a shell glob in CI) are replayed one after
another, each as if alone, then one line per file and the worst exit code (2 > 1 > 0).

Exit: 0 every response matched; 1 at least one drifted (stderr names, for each request
that drifted, its first differing line, recorded vs live); 2 the file cannot be read,
holds a line that is not a valid record (its number and why), or asks for what replay
never does (below).

``replay --update PATH`` rewrites the file from the live run (the recorded agent wire,
that is every line the agents sent, is kept; what agentproto wrote is the live run's).

Rules of this file (SECURITY.md, "Replaying a recording"): a recording may come from
anyone (a pull request), so replay runs nothing and touches nothing of the machine's.
- It never starts a process. The whole file is checked before any run of it: a session
  launched with an agent other than the built-in mock and without a recorded agent wire
  is exit 2, naming the session and its agent. While it runs, ``start_tree`` refuses
  every start (process.refuse_children), the runtime resolves no agent but the mock for
  a session without a recorded wire, and its transport factory never makes a child
  process (``discover``'s ``--version`` probes then report no version). A session
  refused at run time is exit 2 too.
- The mock plays the script the header embeds (``mock.script``), whose ``mock.text``
  must have the header's ``mock.sha256``; ``mock.path`` is never opened. A header
  naming a mock without its embedded text, or whose sha256 does not match, is exit 2.
- It touches nothing outside a fresh temp directory of its own (the *root*): the
  recording's temp paths are moved into it, the private area is made in it, temp files
  go there (``tempfile.tempdir``), and every path agentproto would open, make or connect
  to on a request's behalf elsewhere is refused (private.confine: attachments,
  ``config_home``, ``inspect``'s ``db`` and ``sock``). ``record_wire`` paths in replayed
  requests are ignored. What a driver serves on its agent's behalf is answered from the
  recording (``Launch.recorded_answer``: ACP's ``fs/*`` and ``terminal/*`` get the
  answers agentproto wrote then; one the recording lacks gets an error), so the recorded
  agent's writes and commands never run, and a replay answers exactly what was answered.
- Waiting is bounded: an input whose expectations never come is given after
  ``STALL`` seconds of a quiet loop (the drift is reported, the replay goes on).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
from typing import Any

from agentproto import __version__
from agentproto.commands.replay_checker import Checker
from agentproto.commands.replay_runtime import NO_PROCESS, ReplayEngine
from agentproto.core.errors import log
from agentproto.core.recording import (
    Input,
    Invalid,
    Normalizer,
    Run,
    Timeline,
    build,
    read_runs,
    unwired_agents,
)
from agentproto.engine.runtime import Engine
from agentproto.loopio import private
from agentproto.loopio import process_transport as process
from agentproto.loopio.loop import Loop
from agentproto.loopio.record import Recorder
from agentproto.loopio.streams import Output

EXIT_OK, EXIT_DRIFT, EXIT_INVALID = 0, 1, 2
#: Seconds of a loop with nothing to do before replay stops waiting for a record.
STALL = 3.0
SLICE = 0.02


class _Writer:
    """Bytes to our end of a socket pair, written at once as far as it takes them (the
    Output keeps the rest until it does), then (optionally) its write side shut."""

    def __init__(self, loop: Loop, sock: socket.socket) -> None:
        self.sock = sock
        self.output = Output(loop, sock.fileno(), lambda _exc: None)

    def send(self, data: bytes) -> None:
        self.output.send(data)
        self.output.flush()

    def end(self) -> None:
        self.output.on_drained = self._shut
        self.output.flush()  # drained already: shut now

    def _shut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _NoConnection:
    """The fake response's connection: an output that never backs up (a batch never waits)."""

    output: tuple[bytes, ...] = ()


class _FakeResponse:
    """What OpsHttp's handler writes to, without HTTP: the lines are recorded by it."""

    gone = False
    conn = _NoConnection()

    def stream(self, status: int, content_type: str, headers: Any = None, close: bool = False) -> None:
        pass

    def json(self, status: int, body: Any, headers: Any = None, close: bool = False) -> None:
        pass

    def write(self, data: bytes, delivered: Any = None) -> None:
        if delivered is not None:
            delivered(1)

    def end(self) -> None:
        pass


class _Request:
    def __init__(self, path: str, body: bytes) -> None:
        self.method, self.path, self.target, self.version = "POST", path, path, "HTTP/1.1"
        self.headers: dict[str, str] = {}
        self.body = body


class ReplayFrontend:
    """The run's frontend, in-process: its own class over socket pairs (or HTTP's handler)."""

    def __init__(self, name: str, runtime: Engine, checker: Checker) -> None:
        self.name = name
        self.runtime = runtime
        self.loop = runtime.loop
        self.checker = checker
        self.sockets: list[socket.socket] = []
        self.writers: dict[Any, _Writer] = {}
        self.http: Any = None

    def _pair(self) -> tuple[int, _Writer]:
        ours, theirs = socket.socketpair()
        for sock in (ours, theirs):
            sock.setblocking(False)
            self.sockets.append(sock)
        # Drain what the frontend writes (the checker has it already, from its recorder).
        self.loop.add_reader(ours, lambda: _discard(ours))
        return theirs.fileno(), _Writer(self.loop, ours)

    def connect(self, conn: Any) -> None:
        fd, writer = self._pair()
        self.writers[conn] = writer
        output = Output(self.loop, fd, lambda _exc: None)
        if self.name in ("serve", "unix"):
            from agentproto.frontends.serve import P1Connection

            tags = {"conn": conn} if conn is not None else None
            P1Connection(self.runtime, fd, output, lambda _c: None, recorder=self.checker, record_tags=tags).start()
            return
        server_class = _ops_server(self.name)
        server_class(self.runtime, fd, output, lambda: None, self.checker).start()

    def give(self, item: Input) -> None:
        body = item.body
        if item.kind == "connect":
            if self.name != "http":
                self.connect(body["conn"])
        elif item.kind == "in":
            self._writer(body["conn"]).send(_line(body["line"], body.get("too_long")))
        elif item.kind == "eof":
            if self.name != "http":
                self._writer(body["conn"]).end()
        elif item.kind == "request":
            writer = self._writer(None)
            writer.send(body["raw"].encode("utf-8", "surrogatepass") + (b"" if self.name == "single-shot" else b"\n"))
            if self.name == "single-shot":
                writer.end()
        elif item.kind == "post":
            if self.http is None:
                from agentproto.frontends.ops_http import OpsHttp

                self.http = OpsHttp(self.runtime, None, self.checker)
            payload = "\n".join(body["raws"]).encode("utf-8", "surrogatepass")
            self.http.handle(_Request(body["path"], payload), _FakeResponse())

    def _writer(self, conn: Any) -> _Writer:
        if conn not in self.writers:
            self.connect(conn)
        return self.writers[conn]

    def close(self) -> None:
        for sock in self.sockets:
            self.loop.forget(sock)
            sock.close()


def _line(text: str, too_long: int | None) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    if too_long:  # the recording kept the head: a line past the limit all the same
        raw += b" " * (too_long - len(raw) + 1)
    return raw + b"\n"


def _discard(sock: socket.socket) -> None:
    try:
        while sock.recv(1 << 16):
            pass
    except (BlockingIOError, OSError):
        pass


def _ops_server(name: str) -> Any:
    if name == "jsonrpc":
        from agentproto.frontends.jsonrpc_server import JsonRpcServer

        return JsonRpcServer
    if name == "mcp":
        from agentproto.frontends.mcp_stdio import McpStdio

        return McpStdio
    from agentproto.frontends.ops_stdio import OpsStream, SingleShot

    return SingleShot if name == "single-shot" else OpsStream


# -- one run ------------------------------------------------------------------------------------


def _mock_script(header: dict[str, Any] | None, lineno: int = 0) -> dict[str, Any] | None:
    """The mock script the header embeds, checked (``mock.path`` is never opened)."""
    mock = (header or {}).get("mock")
    if not mock:
        return None
    from agentproto.drivers.mock import ScriptError, load_script

    named = f" (recorded from {mock['path']}, which replay never opens)" if isinstance(mock.get("path"), str) else ""
    text = mock.get("text")
    if not isinstance(text, str):
        why = "the header names a mock script without embedding its text (`mock.text`)"
        raise Invalid(lineno, why + named + "; record it again with this version")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    if digest != mock.get("sha256"):
        raise Invalid(lineno, f"the embedded mock script{named} does not have the header's sha256 "
                              f"{mock.get('sha256')!r} (its text has {digest})")  # fmt: skip
    try:
        script = load_script(text)
    except ScriptError as exc:
        raise Invalid(lineno, f"the recorded mock script does not load: {exc}") from None
    if "script" in mock and mock["script"] != json.loads(text):
        raise Invalid(lineno, "the header's `mock.script` is not its `mock.text`")
    return script


def replay_run(run: Run, label: str, drifts: list[str], update: Recorder | None) -> list[str]:
    """Replay one run; what it refused (sessions without a wire, not the mock's)."""
    header = run.header or {}
    root = tempfile.mkdtemp(prefix="replay-")
    saved_tempdir = tempfile.tempdir
    try:
        normalizer = Normalizer(header.get("tmpdir"), tempfile.gettempdir(), root, header.get("agentproto"))
        timeline = build(run, normalizer)
        _make_dirs(timeline, root)
        # Everything the live run makes goes into the root (see the module's rules).
        tempfile.tempdir = root
        private.confine(root)
        loop = Loop()
        checker = Checker(timeline, normalizer, drifts, label, update)
        runtime = ReplayEngine(loop, timeline, checker, mock_script=_mock_script(run.header),
                                stall_timeout=float(header.get("stall_timeout") or 60.0))  # fmt: skip
        frontend = ReplayFrontend(run.frontend, runtime, checker)
        try:
            _drive(loop, timeline, checker, frontend, runtime)
        finally:
            for transport in runtime.transports.values():
                transport.abandon()
            runtime.close_all()
            deadline = loop.time() + 2.0
            loop.call_later(2.0, lambda: None)
            loop.run(until=lambda: not runtime.sessions or loop.time() > deadline)
            frontend.close()
            loop.close()
        return [f"{label}: {why}" for why in runtime.refused]
    finally:
        private.confine(None)
        tempfile.tempdir = saved_tempdir
        shutil.rmtree(root, ignore_errors=True)


def _make_dirs(timeline: Timeline, root: str) -> None:
    """The recording's directories (``dir`` of its requests), made inside the replay's root."""
    for item in timeline.inputs:
        for raw in [item.body.get("line"), item.body.get("raw"), *item.body.get("raws", [])]:
            if not isinstance(raw, str) or root not in raw:
                continue
            try:
                request = json.loads(raw)
            except ValueError:
                continue
            for value in _dirs(request):
                # Inside the root once resolved: root/../../x is not (it is ~/x, say).
                real = os.path.realpath(value)
                if real.startswith(os.path.realpath(root) + os.sep):
                    os.makedirs(real, exist_ok=True)


def _dirs(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k in ("dir", "config_home") and isinstance(v, str)]
        for inner in value.values():
            found += _dirs(inner)
        return found
    if isinstance(value, list):
        return [d for inner in value for d in _dirs(inner)]
    return []


def _drive(loop: Loop, timeline: Timeline, checker: Checker, frontend: ReplayFrontend, runtime: ReplayEngine) -> None:
    pending = list(timeline.inputs)
    quiet_since = loop.time()
    seen = -1
    while True:
        while pending and checker.met_before(pending[0].position):
            _give(pending.pop(0), frontend, runtime)
        if not pending and not checker.missing():
            break
        _run_slice(loop, checker, seen)
        if checker.progress != seen:
            seen, quiet_since = checker.progress, loop.time()
            continue
        if loop.time() - quiet_since < STALL:
            continue
        # Nothing happens: the live run will not give what comes next in the recording.
        if pending:
            _give(pending.pop(0), frontend, runtime)
            quiet_since = loop.time()
            continue
        for want in checker.missing():
            checker.never_came(want)
        break
    # What the live run still writes now, unasked, is drift too.
    end = loop.time() + 0.2
    loop.call_later(0.2, lambda: None)
    loop.run(until=lambda: loop.time() >= end)


def _run_slice(loop: Loop, checker: Checker, seen: int) -> None:
    """Run the loop until the live run records something, or for ``SLICE`` seconds."""
    end = loop.time() + SLICE
    loop.call_later(SLICE, lambda: None)  # wake up: progress may be nothing but time
    loop.run(until=lambda: checker.progress != seen or loop.time() >= end)


def _give(item: Input, frontend: ReplayFrontend, runtime: ReplayEngine) -> None:
    if item.kind in ("read", "exit"):
        transport = runtime.transports.get(item.body["session"])
        if transport is None:
            return  # the driver never spawned it: its expectations report the drift
        if item.kind == "read":
            transport.feed([line.encode("utf-8", "surrogatepass") for line in item.body["lines"]])
        else:
            transport.exit(item.body["status"], item.body["stderr"])
        return
    frontend.give(item)


# -- the command --------------------------------------------------------------------------------


def replay_file(path: str, update: bool = False) -> tuple[int, list[str]]:
    """Replay ``path``: (exit code, the drift reports or the reason it is invalid)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as exc:
        return EXIT_INVALID, [f"{path}: cannot read it: {exc.strerror or exc}"]
    except UnicodeDecodeError as exc:
        return EXIT_INVALID, [f"{path}: not UTF-8 text (at byte {exc.start})"]
    try:
        runs = read_runs(text)
    except Invalid as exc:
        return EXIT_INVALID, [f"{path}: {exc}"]
    # The whole file, checked before any run of it: a bad header, or a session replay would
    # have to start an agent for, is exit 2 before anything runs.
    refused: list[str] = []
    for number, run in enumerate(runs, 1):
        label = f"{path} (run {number})" if len(runs) > 1 else path
        try:
            _mock_script(run.header, run.header_line)
        except Invalid as exc:
            refused.append(f"{label}: {exc}")
        refused += [f"{label}: {why}" for why in unwired_agents(run)]
    if refused:
        return EXIT_INVALID, refused
    drifts: list[str] = []
    writer = None
    temp = f"{path}.replay-{os.getpid()}"
    if update:
        writer = Recorder(temp)
    process.refuse_children(NO_PROCESS)
    try:
        for number, run in enumerate(runs, 1):
            if writer is not None and run.header is not None:
                writer.header = {**run.header, "agentproto": __version__}  # written before the run's first record
            refused += replay_run(run, f"{path} (run {number})" if len(runs) > 1 else path, drifts, writer)
    finally:
        process.refuse_children(None)
        private.cleanup()
        if writer is not None:
            writer.close()
    if refused:
        if writer is not None and os.path.exists(temp):
            os.unlink(temp)
        return EXIT_INVALID, refused
    if writer is not None:
        os.replace(temp, path)
        return EXIT_OK, []
    return (EXIT_DRIFT if drifts else EXIT_OK), drifts


def main(paths: str | list[str], update: bool = False) -> int:
    """Replay each file in turn. One file: its reports as before. Several: the same, then
    one line per file (``ok``, ``drift`` or ``invalid``) and the worst exit code of them
    (2 a file that is not a valid recording > 1 drift > 0), every file replayed whatever
    an earlier one gave."""
    files = [paths] if isinstance(paths, str) else list(paths)
    codes = [_main_one(path, update) for path in files]
    if len(files) > 1:
        word = {EXIT_OK: "updated" if update else "ok", EXIT_DRIFT: "drift", EXIT_INVALID: "invalid"}
        for path, code in zip(files, codes):
            log(f"{word.get(code, code)}  {path}")
        named = ((EXIT_OK, "ok"), (EXIT_DRIFT, "drift"), (EXIT_INVALID, "invalid"))
        summary = ", ".join(f"{codes.count(value)} {name}" for value, name in named if value in codes)
        log(f"{len(files)} recordings: {summary}")
    return max(codes, key=_severity)


def _severity(code: int) -> int:
    """The order of exit codes across files: invalid (2) over drift (1) over the same (0)."""
    return {EXIT_OK: 0, EXIT_DRIFT: 1, EXIT_INVALID: 2}.get(code, 3)


def _main_one(path: str, update: bool) -> int:
    code, messages = replay_file(path, update)
    for message in messages:
        log(("drift: " if code == EXIT_DRIFT else "") + message)
    if code == EXIT_OK:
        log(f"{path}: updated from a live run" if update else f"{path}: every response matched")
    elif code == EXIT_DRIFT:
        log(f"{path}: {len(messages)} drift(s)")
    return code
