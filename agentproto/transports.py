"""Stdio ops loop, single-shot, and the Unix-socket server; the pieces every transport shares.

Rules of this file:
- Everything runs on the one selectors loop: no thread per connection, nothing blocks.
- The ops lines of a stdio loop come out in request order (``Pipeline``); only ``cancel``
  starts at once, so it can stop a turn another request is streaming. Its lines still
  come out after the earlier requests' ``done``.
- ``--record`` is best effort: a failed write is logged to stderr and the session goes on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
from collections import deque
from typing import Any, Callable

from agentproto.engine import Session, log
from agentproto.runtime import Runtime
from agentproto.loop import Loop
from agentproto.ops import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PROTOCOL,
    OpsContext,
    OpsHub,
    decode_request,
)
from agentproto.serve import INPUT_PAUSE_LINES, P1Connection
from agentproto.streams import LineReader, Output
from agentproto.wire import DEFAULT_MAX_LINE, TooLong, encode

# -- recording ------------------------------------------------------------------------------


class Recorder:
    """Appends ``{"request": RAW, "response": RAW}`` lines to a file, best effort."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.warned = False

    def record(self, request: bytes | str, response: bytes | str) -> None:
        def text(value: bytes | str) -> str:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

        line = json.dumps({"request": text(request).strip(), "response": text(response)}) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
        except OSError as exc:
            if not self.warned:
                log(f"--record {self.path}: {exc.strerror or exc}; recording skipped, the session goes on")
                self.warned = True


# -- ordered output -------------------------------------------------------------------------


class Job:
    """One request of a stdio framing: started once, finished once, its output captured."""

    __slots__ = ("run", "eager", "raw", "op", "started", "finished", "buffer", "captured", "exit_code")

    def __init__(self, run: Callable[["Job"], None], raw: bytes, eager: bool = False, op: str | None = None) -> None:
        self.run = run
        self.raw = raw
        self.eager = eager
        self.op = op  # the op (or method), when known: an eager job never overtakes an `open`
        self.started = False
        self.finished = False
        self.buffer: list[tuple[bytes, Session | None]] = []
        self.captured: list[bytes] = []
        self.exit_code: int | None = None


class Pipeline:
    """Runs jobs one after another and writes their output in submission order."""

    def __init__(
        self,
        loop: Loop,
        send: Callable[[bytes, Session | None], None],
        after: Callable[[Job], bool],
    ) -> None:
        self.loop = loop
        self.send = send
        self.after = after  # called as each job completes, in order; False stops the pipeline
        self.jobs: deque[Job] = deque()
        self.advancing = False
        self.stopped = False

    def __len__(self) -> int:
        return len(self.jobs)

    def submit(self, job: Job) -> None:
        if self.stopped:
            return
        overtakes_open = any(queued.op == "open" for queued in self.jobs)
        self.jobs.append(job)
        if len(self.jobs) == 1 or (job.eager and not overtakes_open):
            self._start(job)

    def write(self, job: Job, data: bytes, session: Session | None = None) -> None:
        job.captured.append(data)
        if self.jobs and self.jobs[0] is job and not self.stopped:
            self.send(data, session)
        elif job.finished and job not in self.jobs:
            if session is not None:
                session.delivered(1)
        else:
            job.buffer.append((data, session))

    def finish(self, job: Job) -> None:
        job.finished = True
        self._advance()

    def _start(self, job: Job) -> None:
        job.started = True
        job.run(job)

    def _start_later(self, job: Job) -> None:
        # A job usually finishes inside an engine callback (a TurnEnded being sent): the
        # next one must not run in the middle of the engine's bookkeeping.
        job.started = True
        self.loop.call_soon(lambda: None if self.stopped else job.run(job))

    def _advance(self) -> None:
        if self.advancing:
            return
        self.advancing = True
        try:
            while self.jobs and self.jobs[0].finished:
                job = self.jobs.popleft()
                if not self.after(job):
                    self.stopped = True
                    for dropped in self.jobs:
                        for _, session in dropped.buffer:
                            if session is not None:
                                session.delivered(1)
                    self.jobs.clear()
                    return
                if self.jobs:
                    head = self.jobs[0]
                    buffered, head.buffer = head.buffer, []
                    for data, session in buffered:
                        self.send(data, session)
                    if not head.started:
                        self._start_later(head)
        finally:
            self.advancing = False


class JobOut:
    """The ops ``Out`` of one job: ops lines as bytes, ``done`` finishes the job."""

    def __init__(self, pipeline: Pipeline, job: Job) -> None:
        self.pipeline = pipeline
        self.job = job

    def line(self, obj: dict[str, Any], session: Session | None = None) -> None:
        self.pipeline.write(self.job, encode(obj), session)

    def done(self, exit_code: int) -> None:
        self.job.exit_code = exit_code
        self.pipeline.write(self.job, encode({"kind": "done", "exit_code": exit_code}))
        self.pipeline.finish(self.job)


# -- lifetime -------------------------------------------------------------------------------


def watch_lifetime(loop: Loop, shutdown: Callable[[], None]) -> None:
    """Servers end on SIGTERM/SIGINT/SIGHUP, and on EOF of stdin when a parent holds it
    (a pipe or a socket; /dev/null or a terminal does not end a server)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, shutdown)
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError):
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            shutdown()

    loop.add_reader(fd, readable)


# -- the `agent` loop on stdio --------------------------------------------------------------


class OpsStream:
    """The interactive ops loop over one input descriptor and one ``Output``."""

    MAX_JOBS = 1024

    def __init__(
        self,
        runtime: Runtime,
        in_fd: int,
        output: Output,
        on_finished: Callable[[], None],
        recorder: Recorder | None = None,
    ) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.in_fd = in_fd
        self.output = output
        self.on_finished = on_finished
        self.recorder = recorder
        self.hub = OpsHub(runtime)
        self.ctx = OpsContext(self.hub)
        self.pipeline = Pipeline(self.loop, self._send, self._after)
        self.reader = LineReader(
            self.loop,
            in_fd,
            self._line,
            self.end_input,
            lambda: len(self.output) > INPUT_PAUSE_LINES or len(self.pipeline) > self.MAX_JOBS,
        )
        self.eof = False
        self.ending = False

    def start(self) -> None:
        self.reader.start()

    def _send(self, data: bytes, session: Session | None) -> None:
        self.output.send(data, session)

    def _line(self, line: bytes | TooLong) -> None:
        if self.ending:
            return
        if isinstance(line, TooLong):
            message = f"request too long: more than {DEFAULT_MAX_LINE} bytes; discarded"
            self.pipeline.submit(Job(lambda job: _protocol_error(self.pipeline, job, message), b""))
            return
        if not line.strip():
            return
        try:
            obj = decode_request(line)
        except Exception as exc:
            message = getattr(exc, "message", str(exc))
            self.pipeline.submit(Job(lambda job: _protocol_error(self.pipeline, job, message), line))
            return
        op = obj.get("op") if isinstance(obj, dict) else None
        op = op if isinstance(op, str) else None
        run = lambda job: self.ctx.run(obj, JobOut(self.pipeline, job))  # noqa: E731
        self.pipeline.submit(Job(run, line, eager=op == "cancel", op=op))

    def _after(self, job: Job) -> bool:
        if self.recorder is not None and job.raw:
            self.recorder.record(job.raw, b"".join(job.captured))
        if self.ctx.halted:
            self._end()
            return False
        if self.eof and not self.pipeline.jobs:
            self.loop.call_soon(self._end)
        return True

    def end_input(self) -> None:
        """EOF: answer what was asked, then close this loop's sessions and finish."""
        if self.eof:
            return
        self.eof = True
        self.reader.close()
        if not self.pipeline.jobs:
            self._end()

    def _end(self) -> None:
        if self.ending:
            return
        self.ending = True
        self.eof = True
        self.reader.close()
        self.hub.close_all(self.on_finished)


def _protocol_error(pipeline: Pipeline, job: Job, message: str) -> None:
    out = JobOut(pipeline, job)
    out.line({"kind": "error", "message": message})
    out.done(EXIT_PROTOCOL)


def _stdout_output(loop: Loop, status: list[int], on_fail: Callable[[], None]) -> Output:
    def failed(exc: OSError) -> None:
        log(f"stdout stopped accepting writes: {exc.strerror or exc}")
        status[0] = EXIT_FAILED
        on_fail()

    return Output(loop, sys.stdout.fileno(), failed)


def _finish_when_drained(loop: Loop, output: Output) -> None:
    if not output.queue or output.failed:
        loop.stop()
    else:
        output.on_drained = loop.stop


def run_agent(runtime: Runtime, recorder: Recorder | None = None) -> int:
    """``agentproto agent``: the interactive ops loop on stdin/stdout; exit 0 at EOF or halt."""
    loop = runtime.loop
    status = [EXIT_OK]
    output = _stdout_output(loop, status, lambda: stream._end())
    stream = OpsStream(runtime, sys.stdin.fileno(), output, lambda: _finish_when_drained(loop, output), recorder)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stream._end)
    stream.start()
    try:
        loop.run()
    finally:
        output.close()
    return status[0]


def split_objects(text: str) -> tuple[list[Any], list[str]]:
    """The JSON values in ``text`` (whitespace-separated), and why the rest did not parse."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    problems: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            return values, problems
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            problems.append(f"malformed JSON: {exc.msg} (at column {exc.colno})")
            return values, problems
        values.append(value)


class _SingleShotOut:
    """The one request's lines; the extra objects' errors go just before its ``done``."""

    def __init__(self, send: Callable[[dict[str, Any], Session | None], None], extras: list[str], then: Callable[[int], None]) -> None:
        self.send = send
        self.extras = extras
        self.then = then

    def line(self, obj: dict[str, Any], session: Session | None = None) -> None:
        self.send(obj, session)

    def done(self, exit_code: int) -> None:
        for message in self.extras:
            self.send({"kind": "error", "message": message}, None)
        self.send({"kind": "done", "exit_code": exit_code}, None)
        self.then(exit_code)


def run_single_shot(runtime: Runtime, recorder: Recorder | None = None) -> int:
    """``agentproto --single-shot < req.json``: all of stdin is one request."""
    loop = runtime.loop
    raw = sys.stdin.buffer.read()
    status = [EXIT_OK]
    output = _stdout_output(loop, status, lambda: None)
    hub = OpsHub(runtime)
    captured: list[bytes] = []
    code = [EXIT_PROTOCOL]

    def send(obj: dict[str, Any], session: Session | None) -> None:
        data = encode(obj)
        captured.append(data)
        output.send(data, session)

    def finished(exit_code: int) -> None:
        code[0] = exit_code
        if recorder is not None:
            recorder.record(raw, b"".join(captured))
        hub.close_all(lambda: _finish_when_drained(loop, output))

    try:
        values, problems = split_objects(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        values, problems = [], [f"malformed JSON: invalid UTF-8 at byte {exc.start}"]
    if values:
        extras = [f"single-shot takes one request; ignored extra request #{i}" for i in range(2, len(values) + 1)]
        extras += [f"{problem}; ignored" for problem in problems]
        OpsContext(hub).run(values[0], _SingleShotOut(send, extras, finished))
    else:
        out = _SingleShotOut(send, [], finished)
        out.line({"kind": "error", "message": problems[0] if problems else "malformed JSON: empty request"})
        out.done(EXIT_PROTOCOL)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, lambda: hub.close_all(lambda: _finish_when_drained(loop, output)))
    try:
        loop.run()
    finally:
        output.close()
    return code[0] if status[0] == EXIT_OK else status[0]


# -- Unix socket: protocol 1 per connection -------------------------------------------------


def bind_unix(path: str) -> socket.socket:
    """A listening socket at ``path``, owner-only; a stale file there is replaced."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OSError(f"{path} is a directory")
        if stat.S_ISSOCK(st.st_mode):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(1.0)
            try:
                probe.connect(path)
            except OSError:
                pass  # nobody listens: stale
            else:
                raise OSError(f"another server is listening on {path}")
            finally:
                probe.close()
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    sock.setblocking(False)
    return sock


class UnixServer:
    """``serve --transport unix``: one independent protocol 1 loop per accepted connection."""

    def __init__(self, runtime: Runtime, path: str, recorder: Recorder | None = None) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.path = path
        self.recorder = recorder
        self.listener: socket.socket | None = None
        self.conns: dict[int, tuple[socket.socket, P1Connection, Output]] = {}
        self.stopping = False

    def start(self) -> None:
        self.listener = bind_unix(self.path)
        self.loop.add_reader(self.listener, self._accept)
        log(f"listening on {self.path}")

    def _accept(self) -> None:
        assert self.listener is not None
        accept_ready(self.listener, self._serve)

    def _serve(self, sock: socket.socket) -> None:
        fd = sock.fileno()

        def failed(_exc: OSError) -> None:
            conn.end_input()

        output = Output(self.loop, fd, failed)
        if self.recorder is not None:
            conn: P1Connection = RecordingP1Connection(self.runtime, fd, output, self._finished, self.recorder)
        else:
            conn = P1Connection(self.runtime, fd, output, self._finished)
        self.conns[fd] = (sock, conn, output)
        conn.start()

    def _finished(self, conn: P1Connection) -> None:
        entry = self.conns.get(conn.in_fd)
        if entry is None:
            return
        sock, _conn, output = entry

        def hang_up() -> None:
            output.on_drained = None
            self.loop.forget(sock)
            output.close()
            del self.conns[conn.in_fd]
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            if self.stopping and not self.conns:
                self.loop.stop()

        if not output.queue or output.failed:
            hang_up()
        else:
            output.on_drained = hang_up

    def shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.close_listener()
        for _sock, conn, _output in list(self.conns.values()):
            conn.end_input()
        if not self.conns:
            self.loop.stop()

    def close_listener(self) -> None:
        if self.listener is not None:
            self.loop.forget(self.listener)
            self.listener.close()
            self.listener = None
            try:
                os.unlink(self.path)
            except OSError:
                pass


def accept_ready(listener: socket.socket, serve: Callable[[socket.socket], None], batch: int = 64) -> None:
    """Accept what is waiting on a ready listener (at most ``batch``, so one flood of
    connections cannot hold the loop), each as a non-blocking socket handed to ``serve``."""
    for _ in range(batch):
        try:
            sock, _addr = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log(f"accept failed: {exc}")
            return
        sock.setblocking(False)
        serve(sock)


class RecordingP1Connection(P1Connection):
    """Protocol 1 with ``--record``: one pair per command, its raw line and its reply line."""

    def __init__(self, runtime: Runtime, in_fd: int, output: Output, on_finished: Any, recorder: Recorder) -> None:
        super().__init__(runtime, in_fd, output, on_finished)
        self.recorder = recorder
        self.pending: dict[int, list[bytes]] = {}
        send = output.send

        def recording_send(data: bytes, session: Session | None = None) -> None:
            if data.startswith(b'{"id":'):
                try:
                    frame_id = json.loads(data).get("id")
                except ValueError:
                    frame_id = None
                raws = self.pending.get(frame_id) if isinstance(frame_id, int) else None
                if raws:
                    self.recorder.record(raws.pop(0), data)
                    if not raws:
                        del self.pending[frame_id]
                elif frame_id is None:
                    self.recorder.record(self._current, data)
            send(data, session)

        output.send = recording_send  # type: ignore[method-assign]
        self._current = b""

    def _line(self, line: Any) -> None:
        if isinstance(line, bytes):
            self._current = line
            try:
                obj = json.loads(line)
                frame_id = obj.get("id") if isinstance(obj, dict) else None
            except ValueError:
                frame_id = None
            if isinstance(frame_id, int) and not isinstance(frame_id, bool):
                self.pending.setdefault(frame_id, []).append(line)
        super()._line(line)


def run_unix(runtime: Runtime, path: str, recorder: Recorder | None = None) -> int:
    if not hasattr(socket, "AF_UNIX"):
        sys.stdout.write(json.dumps({"kind": "error", "message": "Unix sockets are not supported on this platform"}) + "\n")
        return EXIT_PROTOCOL
    server = UnixServer(runtime, path, recorder)
    watch_lifetime(runtime.loop, server.shutdown)  # before the banner: a client may act on it
    try:
        server.start()
    except OSError as exc:
        log(f"cannot listen on {path}: {exc.strerror or exc}")
        return EXIT_PROTOCOL
    try:
        runtime.loop.run()
    finally:
        server.close_listener()
    return EXIT_OK
