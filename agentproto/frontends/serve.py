"""Protocol 1 frames over a byte stream: the ``serve`` frontend.

A ``P1Connection`` reads command lines from one descriptor and writes hello, replies,
events, session errors and ``closed`` to an ``Output``. Stdio is one connection; the
Unix-socket transport runs one per accepted socket. Each connection owns the sessions
it opened and cannot touch another connection's.

With a recorder (``--record``), the connection records its ordered transcript: every
line in and every line out, in the order they were read and queued, each with its
direction and a monotonic time (record.py); nothing is re-parsed to do it.
"""

from __future__ import annotations

from agentproto import PROTOCOL, __version__
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import DEFAULT_MAX_LINE, AgentError, FrameError, TooLong, encode, encode_event, parse_command
from agentproto.engine.runtime import Engine, Scope
from agentproto.frontends.base import StreamFrontend
from agentproto.loopio.streams import LineReader, Output

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.engine.session import EngineSession
    from agentproto.loopio.record import RecordSink
    from agentproto.loopio.streams import Delivered

#: anyagent's clients check the hello's ``anyagent`` member; this is the anyagent release
#: whose protocol 1 agentproto speaks.
ANYAGENT_COMPAT = "0.0.5"


def hello_line() -> bytes:
    return encode({"hello": {"protocol": PROTOCOL, "agentproto": __version__, "anyagent": ANYAGENT_COMPAT}})


class P1Connection(StreamFrontend):
    """One protocol 1 conversation: commands in, frames out."""

    def __init__(
        self,
        runtime: Engine,
        in_fd: int,
        output: Output,
        on_finished: Callable[["P1Connection"], None],
        *,
        max_line: int = DEFAULT_MAX_LINE,
        recorder: "RecordSink | None" = None,
        record_tags: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(runtime, output, recorder)
        self.in_fd = in_fd
        self.on_finished = on_finished
        self.max_line = max_line
        self.record_tags = record_tags or {}
        #: Every line out goes through here: the output, or the recorder then the output.
        self.send: Callable[[bytes, "Delivered | None"], None] = self._record_send if recorder else output.send
        self.reader = LineReader(self.loop, in_fd, self._line, self.end, self.busy, max_line)
        self.scope = Scope(runtime)
        self.scope.on_empty = self._maybe_finished
        self.finished = False

    # -- input --------------------------------------------------------------------------
    def start(self) -> None:
        self.send(hello_line(), None)
        super().start()

    def _record_send(self, data: bytes, delivered: "Delivered | None" = None) -> None:
        assert self.recorder is not None
        self.recorder.line("out", data[:-1], **self.record_tags)
        self.output.send(data, delivered)

    def _line(self, line: bytes | TooLong) -> None:
        if self.recorder is not None:
            if isinstance(line, TooLong):
                self.recorder.line("in", line.head, too_long=line.size, **self.record_tags)
            else:
                self.recorder.line("in", line, **self.record_tags)
        try:
            command = parse_command(line, self.max_line)
        except FrameError as error:
            self.send(encode({"id": error.frame_id, "error": error.body()}), None)
            return
        frame_id = command.id

        def done(value: Any, error: AgentError | None) -> None:
            if error is not None:
                self.send(encode({"id": frame_id, "error": error.body()}), None)
            else:
                self.send(encode({"id": frame_id, "ok": value}), None)

        try:
            self.runtime.execute(command.name, command.args, self, self.scope, done)
        except Exception:  # a bug must cost one command, never the sidecar
            done(None, AgentError.internal(command.name))

    def wind_down(self) -> None:
        """EOF (or shutdown): close every session of this connection, then finish."""
        if self.recorder is not None:
            self.recorder.note("eof", **self.record_tags)  # replay ends the app's input here too
        if self.in_fd != self.output.fd:  # a socket is its own output: keep its writer
            self.loop.forget(self.in_fd)
        self.runtime.close_all(self.scope.sessions())
        self._maybe_finished()

    def _maybe_finished(self) -> None:
        if self.ending and not self.scope.live and not self.scope.hidden and not self.finished:
            self.finished = True
            self.on_finished(self)

    # -- EventSink ---------------------------------------------------------------------
    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        self.send(encode_event(event), session.delivered)

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        self.send(encode({"session": session.id, "error": error.body()}), None)

    def session_closed(self, session: EngineSession) -> None:
        self.send(encode({"closed": session.id}), None)
