"""``python -m agentproto replay PATH`` (and ``--replay PATH``): a recording, run again.

Each run of the file (one per header: record.py) is replayed against a fresh runtime
rebuilt from its header (the same mock script, the same frontend), in-process, through
the frontend's own code: protocol 1 connections (serve, unix), the ops loop, single-shot,
JSON-RPC, MCP, HTTP's handler. The app's recorded inputs are fed to it in their recorded
order (core/recording.py's timeline); what it records live goes to the checker here instead
of a file and is compared, normalized, with what was recorded. Sessions whose agent wire
was recorded get the replay transport (replay_transport.py): no agent runs. Mock sessions
replay live (the mock is deterministic), playing the script the header embeds.

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

import errno
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
from typing import Any

from agentproto import __version__
from agentproto.core.errors import AgentError, Kind, log
from agentproto.core.recording import (
    EXPECTED_DIRS,
    Expected,
    Input,
    Invalid,
    Normalizer,
    Run,
    Timeline,
    build,
    describe_agent,
    first_difference,
    read_runs,
    unwired_agents,
)
from agentproto.drivers import catalog
from agentproto.drivers.catalog import AgentSpec
from agentproto.engine.observations import Observer
from agentproto.engine.runtime import Runtime
from agentproto.loopio import private
from agentproto.loopio import process_transport as process
from agentproto.loopio.loop import Loop
from agentproto.loopio.record import Recorder, Wire
from agentproto.loopio.replay_transport import ReplayTransport
from agentproto.loopio.streams import Output
from agentproto.loopio.transport import LineTransport, Spawn

EXIT_OK, EXIT_DRIFT, EXIT_INVALID = 0, 1, 2
#: Seconds of a loop with nothing to do before replay stops waiting for a record.
STALL = 3.0
SLICE = 0.02
#: What start_tree says while a replay runs.
NO_PROCESS = "replay starts no process (a recording may come from anyone)"


class ReplayRuntime(Runtime):
    """A runtime whose agents are the recording's: sessions with a recorded wire resolve to
    the recorded installation (nothing needs to be installed) and get the recorded ids;
    any other session may only be the built-in mock's (see the module's rules)."""

    def __init__(self, loop: Loop, timeline: Timeline, checker: "Checker", **kwargs: Any) -> None:
        self.timeline = timeline
        self.transports: dict[str, ReplayTransport] = {}
        #: Why a session was refused (no recorded wire, not the mock): exit 2.
        self.refused: list[str] = []
        observer = Observer(loop, None)  # a replay adds no rows to anyone's database
        super().__init__(loop, transport_factory=self._transport, recorder=checker, observer=observer, **kwargs)

    def resolve(self, agent: Any, session_id: str | None) -> tuple[AgentSpec, dict[str, Any]]:
        recorded = self.timeline.installations.get(session_id or "")
        if recorded is None or session_id not in self.timeline.wired:
            if not _is_mock_ref(agent):
                who = f"session {session_id}" if session_id else "a request"
                why = (f"{who} has no recorded agent wire and its agent is {describe_agent(agent)}, "
                       "not the built-in mock: replay starts no agent")  # fmt: skip
                self.refused.append(why)
                raise AgentError.detail(Kind.SPAWN_FAILED, why)
            return super().resolve(agent, session_id)
        # The spec from the reference, at a path that surely exists; the installation as
        # it was recorded (the executable need not exist here: it never runs).
        if isinstance(agent, dict) and "acp" in agent:
            here: Any = {"acp": {**agent["acp"], "path": sys.executable}}
        else:
            here = {"id": agent["id"] if isinstance(agent, dict) else agent, "path": sys.executable}
        spec, _ = catalog.resolve_ref(here)
        return spec, dict(recorded)

    def _launch(
        self, args: dict[str, Any], throwaway: bool = False, tools_disabled: bool = False, session_id: str | None = None
    ) -> tuple[AgentSpec, Any]:
        spec, launch = super()._launch(args, throwaway, tools_disabled, session_id)
        launch.record_wire = None  # a replay writes nothing the recording names
        # What the driver serves its agent (ACP fs/*, terminal/*) is the recording's answer.
        session = session_id or ""
        launch.recorded_answer = lambda rpc_id: self.timeline.recorded_answer(session, rpc_id)
        return spec, launch

    def made_up(self, session_id: str, purpose: str) -> str:
        recorded = self.timeline.ids.get((session_id, purpose))
        return recorded.pop(0) if recorded else super().made_up(session_id, purpose)

    def _transport(self, loop: Loop, spawn: Spawn, wire: Wire | None) -> LineTransport:
        if wire is not None and wire.session in self.timeline.wired:
            transport = ReplayTransport(loop, spawn, wire)
            self.transports[wire.session] = transport
            return transport
        # No recorded wire (a version probe, a session resolved past the checks): nothing
        # runs in its place either.
        raise PermissionError(errno.EPERM, NO_PROCESS)


def _is_mock_ref(agent: Any) -> bool:
    """Whether an AgentRef names the built-in mock (by its id, never an ACP agent)."""
    if isinstance(agent, dict):
        return "acp" not in agent and agent.get("id") == "mock"
    return bool(agent == "mock")


class Checker:
    """The recorder of the live run (record.Sink): each record is compared with the next
    expectation of its stream; with ``update``, every record also goes to the new file."""

    def __init__(self, timeline: Timeline, normalizer: Normalizer, drifts: list[str], label: str,
                 update: Recorder | None) -> None:  # fmt: skip
        self.timeline = timeline
        self.normalizer = normalizer
        self.drifts = drifts
        self.label = label
        self.update = update
        self.cursor: dict[tuple[Any, ...], int] = dict.fromkeys(timeline.streams, 0)
        self.drifted: set[tuple[Any, ...]] = set()
        self.progress = 0

    # record.Sink
    def pair(self, request: bytes | str, response: bytes | str, dropped: int = 0) -> None:
        if self.update is not None:
            self.update.pair(request, response, dropped)
        self._live(("pairs",), _text(response), _text(request))

    def line(self, direction: str, line: bytes | str, **tags: Any) -> None:
        if self.update is not None:
            self.update.line(direction, line, **tags)
        if direction == "out":
            self._live(("conn", tags.get("conn")), _text(line), None)
        elif direction == "to_agent":
            self._live(("wire", tags["session"]), _text(line), None)
        else:
            self.progress += 1

    def note(self, direction: str, **fields: Any) -> None:
        if self.update is not None:
            self.update.note(direction, **fields)
        if direction in EXPECTED_DIRS:
            body = {k: v for k, v in fields.items() if k != "session"}
            if direction == "spawn":
                text = json.dumps({"argv": body["argv"], "cwd": body.get("cwd")})
            else:
                text = json.dumps(body, sort_keys=True)
            self._live(("wire", fields["session"]), text, None)
        else:
            self.progress += 1

    # comparing
    def _live(self, stream: tuple[Any, ...], text: str, request: str | None) -> None:
        self.progress += 1
        expected = self.timeline.streams.get(stream, [])
        index = self.cursor.get(stream, 0)
        self.cursor[stream] = index + 1
        if stream in self.drifted:
            return
        live = self.normalizer.live_side(text)
        if index >= len(expected):
            self.drifted.add(stream)
            where = f"request {request}" if request is not None else _name(stream)
            self._drift(f"{where}: a record the recording does not have\n  live:     {_cut(live)}")
            return
        want = expected[index]
        if want.text != live:
            # A pair answers one request: the next pair is compared all the same (each
            # drifted request is reported). A transcript's lines are not tied to one
            # request: once one differs, the rest of its stream would all seem to.
            if stream != ("pairs",):
                self.drifted.add(stream)
            number, recorded_line, live_line = first_difference(want.text, live)
            what = f"line {number} of its response differs" if stream == ("pairs",) else f"{_name(stream)} differs"
            at = next((i for i, (a, b) in enumerate(zip(recorded_line, live_line)) if a != b), None)
            if at is None:
                at = min(len(recorded_line), len(live_line))
            where = f", at character {at + 1}" if len(recorded_line) > CUT or len(live_line) > CUT else ""
            self._drift(f"request {_cut(want.request)}: {what} (recorded at line {want.lineno}{where})\n"
                        f"  recorded: {_around(recorded_line, at)}\n  live:     {_around(live_line, at)}")  # fmt: skip

    def _drift(self, text: str) -> None:
        self.drifts.append(f"{self.label}: {text}")

    def met_before(self, position: float) -> bool:
        """Whether every expectation recorded before ``position`` has its live record."""
        for stream, expected in self.timeline.streams.items():
            index = self.cursor.get(stream, 0)
            if index < len(expected) and expected[index].position < position:
                return False
        return True

    def missing(self) -> list[Expected]:
        left = []
        for stream, expected in self.timeline.streams.items():
            index = self.cursor.get(stream, 0)
            if index < len(expected) and stream not in self.drifted:
                left.append(expected[index])
        return left


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


CUT = 400


def _cut(text: str, limit: int = CUT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _around(text: str, at: int) -> str:
    """A long line shown around character ``at`` (where it first differs)."""
    if len(text) <= CUT:
        return text
    start = max(0, at - CUT // 3)
    return ("…" if start else "") + text[start : start + CUT] + ("…" if start + CUT < len(text) else "")


def _name(stream: tuple[Any, ...]) -> str:
    if stream[0] == "conn":
        return "a line out" if stream[1] is None else f"a line out on connection {stream[1]}"
    if stream[0] == "wire":
        return f"what the driver of {stream[1]} wrote to its agent"
    return "a response"


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


class Frontend:
    """The run's frontend, in-process: its own class over socket pairs (or HTTP's handler)."""

    def __init__(self, name: str, runtime: Runtime, checker: Checker) -> None:
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
        runtime = ReplayRuntime(loop, timeline, checker, mock_script=_mock_script(run.header),
                                stall_timeout=float(header.get("stall_timeout") or 60.0))  # fmt: skip
        frontend = Frontend(run.frontend, runtime, checker)
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


def _drive(loop: Loop, timeline: Timeline, checker: Checker, frontend: Frontend, runtime: ReplayRuntime) -> None:
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
            checker._drift(f"request {want.request}: {_stream_name(want)} never came (recorded at line {want.lineno})\n"
                           f"  recorded: {_cut(want.text.split(chr(10))[0])}")  # fmt: skip
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


def _stream_name(want: Expected) -> str:
    return "its response" if want.stream == ("pairs",) else _name(want.stream)


def _give(item: Input, frontend: Frontend, runtime: ReplayRuntime) -> None:
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


def main(path: str, update: bool = False) -> int:
    code, messages = replay_file(path, update)
    for message in messages:
        log(("drift: " if code == EXIT_DRIFT else "") + message)
    if code == EXIT_OK:
        log(f"{path}: updated from a live run" if update else f"{path}: every response matched")
    elif code == EXIT_DRIFT:
        log(f"{path}: {len(messages)} drift(s)")
    return code
