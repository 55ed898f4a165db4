"""``serve --transport unix``: protocol 1 on a Unix socket, one connection per client.

Rules of this file:
- Each accepted connection is its own ``P1Connection`` (its hello, its sessions); a
  client that hangs up closes its sessions, and nothing it does costs another.
- The server ends on SIGTERM/SIGINT/SIGHUP or its parent's EOF: every connection's
  sessions close, their ``closed`` lines are written, and the socket file is removed.
- With ``--record``, each connection records its transcript into the one file, tagged
  with the connection's number (``conn``).
- Bounded: at ``MAX_CONNECTIONS``, a new connection closes the oldest idle one (no
  session, nothing unwritten) to make room, and is itself closed only when none is idle.
  There is no idle timeout: a protocol 1 client may keep its connection between sessions.
- A client that never reads, or is gone without a word, costs its own connection only;
  at the end, the ``Lifetime`` bound (loopio/lifetime.py) stops waiting for what it never read.
"""

from __future__ import annotations

import json
import socket
import sys

from agentproto.core.errors import log
from agentproto.engine.runtime import Engine
from agentproto.frontends.serve import P1Connection
from agentproto.loopio import record
from agentproto.loopio.lifetime import watch_lifetime, when_drained
from agentproto.loopio.sockets import UnixListener, hang_up
from agentproto.loopio.streams import Output

EXIT_OK, EXIT_FAILED = 0, 1  # a socket that cannot be served is a failure, never a usage error
MAX_CONNECTIONS = 1024


class UnixServer:
    """``serve --transport unix``: one independent protocol 1 loop per accepted connection."""

    def __init__(
        self,
        runtime: Engine,
        path: str,
        recorder: "record.RecordSink | None" = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.runtime = runtime
        self.max_connections = max_connections
        self.accepted = 0
        self.loop = runtime.loop
        self.path = path
        self.recorder = recorder
        self.listener: UnixListener | None = None
        self.conns: dict[int, tuple[socket.socket, P1Connection, Output]] = {}
        self.stopping = False

    def start(self) -> None:
        self.listener = UnixListener(self.loop, self.path, self._serve)
        log(f"listening on {self.path}")

    def _make_room(self) -> bool:
        if len(self.conns) < self.max_connections:
            return True
        for _sock, conn, output in self.conns.values():  # the oldest first
            if not conn.scope.live and not conn.scope.hidden and not output.queue:
                conn.end()  # nothing to close, nothing unwritten: it hangs up now
                return len(self.conns) < self.max_connections
        return False

    def _serve(self, sock: socket.socket) -> None:
        if self.stopping or not self._make_room():
            sock.close()
            return
        fd = sock.fileno()

        def failed(_exc: OSError) -> None:
            conn.end()

        output = Output(self.loop, fd, failed)
        self.accepted += 1
        # One transcript per connection, told apart in the shared file by their number.
        tags = {"conn": self.accepted} if self.recorder is not None else None
        conn = P1Connection(self.runtime, fd, output, self._finished, recorder=self.recorder, record_tags=tags)
        self.conns[fd] = (sock, conn, output)
        conn.start()

    def _finished(self, conn: P1Connection) -> None:
        entry = self.conns.get(conn.in_fd)
        if entry is None:
            return
        sock, _conn, output = entry

        def finished() -> None:
            hang_up(self.loop, sock, output)
            del self.conns[conn.in_fd]
            if self.listener is not None:
                self.listener.freed()
            if self.stopping and not self.conns:
                self.loop.stop()

        when_drained(output, finished)

    def shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.close_listener()
        for _sock, conn, _output in list(self.conns.values()):
            conn.end()
        if not self.conns:
            self.loop.stop()

    def close_listener(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def run_unix(runtime: Engine, path: str, recorder: "record.RecordSink | None" = None) -> int:
    if not hasattr(socket, "AF_UNIX"):
        refusal = {"kind": "error", "message": "Unix sockets are not supported on this platform"}
        sys.stdout.write(json.dumps(refusal) + "\n")
        return EXIT_FAILED
    server = UnixServer(runtime, path, recorder)
    watch_lifetime(runtime.loop, server.shutdown, runtime.kill_all)  # before the banner: a client may act on it
    try:
        server.start()
    except OSError as exc:
        log(f"cannot listen on {path}: {exc.strerror or exc}")
        return EXIT_FAILED
    try:
        runtime.loop.run()
    finally:
        server.close_listener()
    return EXIT_OK
