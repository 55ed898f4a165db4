"""The Unix-socket server, and the recorder every transport shares.

Rules of this file:
- Everything runs on the one selectors loop: no thread per connection, nothing blocks.
- ``--record`` is best effort: a failed write is logged to stderr and the session goes on.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from typing import Any, Callable

from agentproto import private, record
from agentproto.engine import log
from agentproto.runtime import Runtime
from agentproto.serve import P1Connection
from agentproto.stdio import watch_lifetime
from agentproto.streams import Output

EXIT_OK, EXIT_PROTOCOL = 0, 2
__all__ = ["Recorder", "UnixServer", "accept_ready", "bind_unix", "run_unix", "watch_lifetime"]

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
            with private.open_append(self.path) as f:  # records hold env and keys: 0600, no symlink
                f.write(line)
        except OSError as exc:
            if not self.warned:
                log(f"--record {self.path}: {exc.strerror or exc}; recording skipped, the session goes on")
                self.warned = True


# -- Unix socket: protocol 1 per connection -------------------------------------------------


def bind_unix(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """A listening socket at ``path``, owner-only, and its file's (st_dev, st_ino). Only a
    stale socket there is replaced: anything else is refused (OSError), never deleted."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(f"{path} exists and is not a socket; refusing to replace it")
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
    old = os.umask(0o177)  # 0600 from the start: a chmod by path could follow a swapped-in link
    try:
        sock.bind(path)
        st = os.lstat(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    sock.listen(128)
    sock.setblocking(False)
    return sock, (st.st_dev, st.st_ino)


class UnixServer:
    """``serve --transport unix``: one independent protocol 1 loop per accepted connection."""

    def __init__(self, runtime: Runtime, path: str, recorder: "record.Recorder | None" = None) -> None:
        self.runtime = runtime
        self.accepted = 0
        self.loop = runtime.loop
        self.path = path
        self.recorder = recorder
        self.listener: socket.socket | None = None
        self.identity: tuple[int, int] | None = None  # our socket file's (st_dev, st_ino)
        self.conns: dict[int, tuple[socket.socket, P1Connection, Output]] = {}
        self.stopping = False

    def start(self) -> None:
        self.listener, self.identity = bind_unix(self.path)
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
                st = os.lstat(self.path)
                if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self.identity:
                    os.unlink(self.path)  # only the socket we made: a replacement is not ours
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


def run_unix(runtime: Runtime, path: str, recorder: "record.Recorder | None" = None) -> int:
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
