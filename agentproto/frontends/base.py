"""The base of the frontends on a byte stream: protocol 1's connection (serve.py) and the
ops framings on stdio (ops_stdio.py, and through it JSON-RPC and MCP).

Rules of this file:
- A frontend reads one descriptor and writes one ``streams.Output``; it stops reading while
  more than ``INPUT_PAUSE_LINES`` lines wait unwritten, so a client that writes but never
  reads cannot grow our memory without bound.
- It winds down once (``end``), whatever asked first (EOF, a signal, the output gone).
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from agentproto.engine.runtime import Engine
    from agentproto.loopio.record import RecordSink
    from agentproto.loopio.streams import LineReader, Output, Reader

#: Stop reading commands while this many lines wait unwritten (an app that writes
#: commands but never reads replies must not grow our memory without bound).
INPUT_PAUSE_LINES = 8192


class StreamFrontend:
    """What a framing on a byte stream shares (protocol 1's connection, the ops framings on
    stdio): one engine, one ``Output``, an optional recorder, and the reader its subclass
    makes, which it pauses while too much waits unwritten (``busy``). Reading starts with
    ``start``; ``end`` winds it down once: the reader closes, then ``wind_down``."""

    reader: "LineReader | Reader"

    def __init__(self, runtime: Engine, output: Output, recorder: "RecordSink | None") -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.output = output
        self.recorder = recorder
        self.ending = False

    def start(self) -> None:
        self.reader.start()

    def busy(self) -> bool:
        return len(self.output) > INPUT_PAUSE_LINES

    def end(self) -> None:
        """EOF, a signal, or the output gone: wind down, once."""
        if self.ending:
            return
        self.ending = True
        self.reader.close()
        self.wind_down()

    def wind_down(self) -> None:
        raise NotImplementedError
