"""The ops framing on stdio: the ``agent`` loop, and ``--single-shot``.

Rules of this file:
- The ``agent`` loop answers its requests in request order (``stdio.Pipeline``); only
  ``cancel`` starts at once, so it can stop a turn another request is streaming. Its
  lines still come out after the earlier requests' ``done``. EOF or ``halt`` ends it
  once what was asked has been answered.
- ``--single-shot``: all of stdin is one request (read through the loop, bounded like a
  line of the loop); further objects are reported as errors just before its ``done``.
- ``--record`` pairs each request with every byte written for it, best effort.
"""

from __future__ import annotations

import json

from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import DEFAULT_MAX_LINE, TooLong, decode_json_line, encode
from agentproto.engine.runtime import Engine
from agentproto.frontends.base import StreamFrontend
from agentproto.frontends.ops_framing import EXIT_PROTOCOL, OpsContext, OpsHub
from agentproto.loopio.lifetime import Capture, Job, Pipeline, capture
from agentproto.loopio.streams import LineReader, Output, Reader

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.engine.session import EngineSession
    from agentproto.loopio.record import RecordSink


class JobOut:
    """The ops ``Out`` of one job: ops lines as bytes, ``done`` finishes the job."""

    def __init__(self, pipeline: Pipeline, job: Job) -> None:
        self.pipeline = pipeline
        self.job = job

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None:
        self.pipeline.write(self.job, encode(obj), None if session is None else session.delivered)

    def done(self, exit_code: int) -> None:
        self.job.exit_code = exit_code
        self.pipeline.write(self.job, encode({"kind": "done", "exit_code": exit_code}))
        self.pipeline.finish(self.job)


class ResultOut:
    """Base of an ops ``Out`` that answers in its own framing once the request is done:
    it keeps the request's result object (without ``kind``) or its protocol error."""

    result: dict[str, Any] | None = None
    error: str | None = None

    def keep(self, obj: dict[str, Any]) -> bool:
        """Keep a ``result`` or ``error`` line (True), or say it is neither."""
        kind = obj.get("kind")
        if kind == "result":
            self.result = {k: v for k, v in obj.items() if k != "kind"}
        elif kind == "error":
            self.error = obj["message"]
        else:
            return False
        return True


def _too_long() -> str:
    return f"request too long: more than {DEFAULT_MAX_LINE} bytes; discarded"


class LineServer(StreamFrontend):
    """An ops frontend reading JSON lines from one descriptor and writing to one ``Output``:
    the agent loop, JSON-RPC and MCP. It owns the hub of the sessions it opens, and reads
    while its requests and output keep up."""

    #: Stop reading while this many requests are unanswered.
    MAX_JOBS = 1024

    def __init__(
        self,
        runtime: Engine,
        in_fd: int,
        output: Output,
        on_finished: Callable[[], None],
        recorder: RecordSink | None = None,
    ) -> None:
        super().__init__(runtime, output, recorder)
        self.on_finished = on_finished
        self.hub = OpsHub(runtime)
        self.ctx = OpsContext(self.hub)
        self.reader = self.make_reader(in_fd)
        #: Answers in request order, for the framings that keep it.
        self.pipeline = Pipeline(
            self.loop, output.send, lambda job: self.answered(job.raw, job.captured), recorder is not None
        )

    # What a framing decides.
    def open_requests(self) -> int:
        """Requests read but not answered yet."""
        return len(self.pipeline)

    def request(self, raw: bytes, msg: Any) -> None:
        """One decoded line."""
        raise NotImplementedError

    def refuse(self, raw: bytes, problem: str, too_long: bool) -> None:
        """A line that is not JSON (``raw`` is empty when it was too long to keep)."""
        raise NotImplementedError

    def make_reader(self, fd: int) -> LineReader | Reader:
        return LineReader(self.loop, fd, self._line, self._eof, self.busy)

    # What they share.
    def busy(self) -> bool:
        return super().busy() or self.open_requests() > self.MAX_JOBS

    def _line(self, raw: bytes | TooLong) -> None:
        if self.ending:
            return
        if isinstance(raw, TooLong):
            self.refuse(b"", f"line over {DEFAULT_MAX_LINE} bytes", True)
            return
        try:
            msg = decode_json_line(raw)
        except ValueError as exc:
            self.refuse(raw, str(exc), False)
            return
        self.request(raw, msg)

    def submit_lines(self, raw: bytes, *lines: bytes) -> None:
        """A request answered by fixed lines, in its turn."""

        def run(job: Job) -> None:
            for data in lines:
                self.pipeline.write(job, data)
            self.pipeline.finish(job)

        self.pipeline.submit(Job(run, raw))

    def answered(self, raw: bytes, written: Capture) -> bool:
        """One request's last line is out (``written``: every line of it): record it; halt,
        or end after the last answer once input has ended. False when the server stops
        taking requests (``halt``)."""
        if self.recorder is not None and raw:
            self.recorder.pair(raw, written.value(), written.dropped)
        if self.ctx.halted:
            self.end()
            return False
        if self.reader.eof and self.open_requests() == 0:
            self.loop.call_soon(self.end)
        return True

    def _eof(self) -> None:
        if self.open_requests() == 0:
            self.end()

    def wind_down(self) -> None:
        """EOF, halt, a signal, or stdout gone: close this server's sessions and finish."""
        self.hub.close_all(self.on_finished)


class OpsStream(LineServer):
    """The interactive ops loop: requests answered in order."""

    def request(self, raw: bytes, obj: Any) -> None:
        op = obj.get("op") if isinstance(obj, dict) else None
        op = op if isinstance(op, str) else None
        run = lambda job: self.ctx.run(obj, JobOut(self.pipeline, job))  # noqa: E731
        self.pipeline.submit(Job(run, raw, eager=op == "cancel", op=op))

    def refuse(self, raw: bytes, problem: str, too_long: bool) -> None:
        message = _too_long() if too_long else f"malformed JSON: {problem.removeprefix('not JSON: ')}"
        error = encode({"kind": "error", "message": message})
        self.submit_lines(raw, error, encode({"kind": "done", "exit_code": EXIT_PROTOCOL}))


# -- --single-shot --------------------------------------------------------------------------


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
        except RecursionError:
            problems.append("malformed JSON: nested too deeply")
            return values, problems
        except ValueError as exc:  # an integer past the interpreter's digit limit
            problems.append(f"malformed JSON: {exc}")
            return values, problems
        values.append(value)


class _SingleShotOut:
    """The one request's lines; the extra objects' errors go just before its ``done``."""

    def __init__(self, shot: "SingleShot", extras: list[str]) -> None:
        self.shot = shot
        self.extras = extras

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None:
        self.shot.send(obj, session)

    def done(self, exit_code: int) -> None:
        for message in self.extras:
            self.shot.send({"kind": "error", "message": message}, None)
        self.shot.send({"kind": "done", "exit_code": exit_code}, None)
        self.shot.done(exit_code)


class SingleShot(LineServer):
    """``agentproto --single-shot < req.json``: all of stdin is one request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.raw = bytearray()
        self.too_long = False
        self.exit_code = EXIT_PROTOCOL
        super().__init__(*args, **kwargs)
        self.captured = capture(self.recorder is not None)

    def make_reader(self, fd: int) -> LineReader | Reader:
        return Reader(self.loop, fd, self._data, self._eof)

    def _data(self, data: bytes) -> None:
        if not self.too_long:
            self.raw += data
            if len(self.raw) > DEFAULT_MAX_LINE:
                self.too_long = True  # read on to the end, keeping nothing
                self.raw = bytearray()

    def send(self, obj: dict[str, Any], session: EngineSession | None) -> None:
        data = encode(obj)
        self.captured.add(data)
        self.output.send(data, None if session is None else session.delivered)

    def _eof(self) -> None:
        if self.ending:
            return
        raw = bytes(self.raw)
        try:
            values, problems = ([], [_too_long()]) if self.too_long else split_objects(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            values, problems = [], [f"malformed JSON: invalid UTF-8 at byte {exc.start}"]
        if values:
            extras = [f"single-shot takes one request; ignored extra request #{i}" for i in range(2, len(values) + 1)]
            extras += [f"{problem}; ignored" for problem in problems]
            self.ctx.run(values[0], _SingleShotOut(self, extras))
        else:
            out = _SingleShotOut(self, [])
            out.line({"kind": "error", "message": problems[0] if problems else "malformed JSON: empty request"})
            out.done(EXIT_PROTOCOL)

    def done(self, exit_code: int) -> None:
        self.exit_code = exit_code
        self.answered(bytes(self.raw), self.captured)
