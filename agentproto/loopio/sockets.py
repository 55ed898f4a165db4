"""Listening sockets: a Unix socket at a path, a TCP socket at an address, and accepting.

Rules of this file:
- A listener is non-blocking and watched by the loop; an ``Acceptor`` takes at most a
  batch of connections per wake-up, so a flood of connections cannot hold the loop.
- Out of descriptors (EMFILE, ENFILE: the connection stays in the backlog and the
  listener stays readable), an ``Acceptor`` stops watching its listener instead of
  spinning on it: it says so once, and tries again when its server frees a descriptor
  (``freed``) or after a backoff that grows to ``MAX_BACKOFF`` (a descriptor may free
  anywhere: an agent's pipes, a file); once it accepts again it says that too. It stops
  the same way before it would take one of the last ``descriptors.FLOOR`` descriptors
  (kept for the sidecar's own files; ``descriptors.accept_room`` says how many a wake-up
  may take), the connections waiting in the backlog.
- A Unix socket is created 0600 (under a umask, never by a chmod that could follow a
  swapped-in link). Only a stale socket of ours at the path (nobody listens) is replaced,
  and only if the path still holds the socket file that was checked (device and inode),
  and on close only the socket file we made is removed, never what has replaced it since.
  Its directory must be ours or root's, and writable by nobody else unless sticky (as
  /tmp is): in a directory another user can write, they could swap our socket for theirs.
- An ``Exchange`` may check who serves the socket it reached (``check_peer``) before it
  sends anything.
"""

from __future__ import annotations

import errno
import os
import socket
import stat

from agentproto.core.errors import log
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio import descriptors, private
from agentproto.loopio.loop import Alarm
from agentproto.loopio.streams import Output, Reader

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.loopio.loop import Loop
    from agentproto.loopio.streams import LineReader


def bind_unix(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """A listening socket at ``path``, owner-only, and its file's (st_dev, st_ino). Only a
    stale socket there is replaced: anything else is refused (OSError), never deleted."""
    directory = os.path.dirname(os.path.abspath(path))
    me = os.geteuid()
    held = os.stat(directory)
    if held.st_uid not in (me, 0):
        raise OSError(f"its directory {directory} belongs to uid {held.st_uid}: they could swap the socket")
    if held.st_mode & 0o022 and not held.st_mode & stat.S_ISVTX:
        raise OSError(f"others can write to its directory {directory} (no sticky bit): they could swap the socket")
    st = private.lstat(path)
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(f"{path} exists and is not a socket; refusing to replace it")
        if st.st_uid != me:
            raise OSError(f"{path} is the socket of uid {st.st_uid}; refusing to replace it")
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
        again = private.lstat(path)
        if again is not None:
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                raise OSError(f"{path} was replaced while it was checked; refusing to replace it")
            os.unlink(path)  # the stale socket that was checked (owner, nobody listening), no other
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


def unlink_unix(path: str, identity: tuple[int, int] | None) -> None:
    """Remove the socket file at ``path`` if it is still the one ``bind_unix`` made."""
    try:
        st = os.lstat(path)
        if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == identity:
            os.unlink(path)  # only the socket we made: a replacement is not ours
    except OSError:
        pass


def tcp_address(host: str, port: int) -> tuple[int, int, int, Any]:
    """``(family, type, proto, sockaddr)`` to listen on ``host:port`` (port 0 picks one)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return family, kind, proto, addr


def bind_tcp(family: int, kind: int, proto: int, addr: Any) -> socket.socket:
    """A listening, non-blocking TCP socket at a ``tcp_address``."""
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def hang_up(loop: "Loop", sock: socket.socket, output: "Output") -> None:
    """Close an accepted connection for good: its writer (later lines are dropped, and
    counted as delivered), its watch, then the socket."""
    output.on_drained = None
    loop.forget(sock)
    output.close()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Accepted:
    """One accepted connection: its socket, its writer (a write that fails closes it) and
    the reader its subclass makes. ``close`` hangs it up once, then ``forget`` lets its
    server drop it."""

    reader: "Reader | LineReader"

    def __init__(self, loop: "Loop", sock: socket.socket) -> None:
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.output = Output(loop, self.fd, lambda _exc: self.close())
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.reader.close()
        hang_up(self.loop, self.sock, self.output)
        self.forget()

    def forget(self) -> None:
        """The connection is closed: its server lets go of it."""


#: accept() errors that mean "no descriptor (or memory) for it now": back off, don't spin.
STARVED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Acceptor:
    """Accepts what waits on a listening socket, each as a non-blocking socket handed to
    ``serve``; at most ``BATCH`` per wake-up (one flood of connections cannot hold the loop).
    It owns the socket from then on: ``close`` closes it."""

    BATCH = 64
    FIRST_BACKOFF = 0.05
    MAX_BACKOFF = 1.0

    def __init__(self, loop: "Loop", listener: socket.socket, serve: Callable[[socket.socket], None]) -> None:
        self.loop = loop
        self.listener = listener
        self.serve = serve
        self.starved = 0  # accept() calls refused for want of a descriptor, this episode
        self.backoff = self.FIRST_BACKOFF
        #: Armed while accepting is stopped for want of a descriptor.
        self.retry = Alarm(loop, self._retry)
        self.closed = False

    def start(self) -> None:
        self.loop.add_reader(self.listener, self._ready)

    def close(self) -> None:
        """Stop accepting and close the listening socket."""
        self.closed = True
        self.retry.cancel()
        self.loop.forget(self.listener)
        self.listener.close()

    def freed(self) -> None:
        """A descriptor of ours was closed: if accepting was stopped for want of one, try now."""
        if self.retry.armed and not self.closed:
            self.retry.cancel()
            self._retry()

    def _ready(self) -> None:
        room = descriptors.accept_room()
        if room == 0:
            self._starve(OSError(errno.EMFILE, descriptors.why_short(descriptors.FLOOR)))
            return
        for _ in range(self.BATCH if room is None else min(room, self.BATCH)):
            try:
                sock, _addr = self.listener.accept()
                descriptors.accepted(1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in STARVED:
                    self._starve(exc)
                else:
                    log(f"accept failed: {exc}")  # ECONNABORTED and the like: that client only
                return
            if self.starved:
                log(f"accepting connections again (after {self.starved} refused attempt(s))")
                self.starved = 0
                self.backoff = self.FIRST_BACKOFF
            sock.setblocking(False)
            self.serve(sock)

    def _starve(self, exc: OSError) -> None:
        if not self.starved:
            log(f"accept: {exc.strerror or exc}: not accepting connections until a descriptor frees")
        self.starved += 1
        self.loop.remove_reader(self.listener)
        self.retry.set(self.backoff)
        self.backoff = min(self.backoff * 2, self.MAX_BACKOFF)

    def _retry(self) -> None:
        if not self.closed:
            self.loop.add_reader(self.listener, self._ready)


class UnixListener(Acceptor):
    """An ``Acceptor`` on a Unix socket listening at ``path`` (``bind_unix``), accepting from
    construction to ``close``: the unix transport's and the control socket's."""

    def __init__(self, loop: "Loop", path: str, serve: Callable[[socket.socket], None]) -> None:
        self.path = path
        sock, self.identity = bind_unix(path)  # OSError: the path is someone else's
        super().__init__(loop, sock, serve)
        self.start()

    def close(self) -> None:
        """Stop accepting, close the socket, and remove its file if it is still ours."""
        super().close()
        unlink_unix(self.path, self.identity)


class Exchange:
    """One request and its answer over a client socket of its own, on the loop: connected
    without blocking, the request written through an ``Output`` and the answer read through
    a ``Reader`` (so ``loop.io`` sees every byte), within the deadline ``timeout`` sets (0:
    none). ``end(answer, problem)`` calls ``done`` with them once and closes it all; the
    subclass reads the answer (``received``, ``closed``) and words a failure (``fail``)."""

    #: How much one read takes (None: the Reader's default).
    read_size: int | None = 64 * 1024

    def __init__(
        self, loop: "Loop", family: int, request: bytes, done: Callable[[Any, Any], None], timeout: float
    ) -> None:
        self.loop = loop
        self.request = request
        self.done: Callable[[Any, Any], None] | None = done
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        fd = self.sock.fileno()
        self.output = Output(loop, fd, self.unsent)  # written once connected
        self.reader = Reader(loop, fd, self.received, self.closed, self.read_size)
        self.deadline = Alarm(loop, self.late)
        if timeout > 0:
            self.deadline.set(timeout)

    def connect(self, address: Any) -> None:
        """Start connecting to ``address`` (an OSError it raises is the caller's)."""
        code = self.sock.connect_ex(address)
        if code in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            self.loop.add_writer(self.sock, self._connected)
        else:
            self.loop.call_soon(lambda: self.refused(code))

    def _connected(self) -> None:
        self.loop.remove_writer(self.sock)
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self.refused(code)
            return
        wrong = self.check_peer()
        if wrong is not None:
            self.fail(wrong)
            return
        self.output.send(self.request)
        self.reader.start()

    # What the subclass decides.
    def check_peer(self) -> str | None:
        """Why the server reached must not be asked (None: ask it)."""
        return None

    def received(self, data: bytes) -> None:
        raise NotImplementedError

    def closed(self) -> None:
        """The other side closed the connection."""
        raise NotImplementedError

    def fail(self, why: str) -> None:
        self.end(None, why)

    def refused(self, code: int) -> None:
        self.fail(f"cannot connect: {errno.errorcode.get(code, code)}")

    def unsent(self, exc: OSError) -> None:
        self.fail(f"cannot send: {exc.strerror or exc}")

    def late(self) -> None:
        self.fail("no response in time")

    # The end.
    def end(self, answer: Any, problem: Any) -> None:
        done, self.done = self.done, None
        if done is None:
            return
        self.deadline.cancel()
        self.reader.close()
        self.output.close()
        self.loop.forget(self.sock)
        self.sock.close()
        done(answer, problem)
