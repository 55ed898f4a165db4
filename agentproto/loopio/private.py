"""The sidecar's private temp area, and the rules for every file agentproto creates.

Other local users must never read what we write (MCP configs carry API keys and header
values; records carry whole requests, ``env`` included) nor make us write somewhere
else by planting a symlink or a file of their own at a path we use. So:

- ``session_dir(name) -> path``: a fresh 0700 directory for one session's files, inside
  one 0700 directory per sidecar process (``agentproto-XXXXXXXX`` under
  ``tempfile.gettempdir()``, made on first use). The session removes it with
  ``remove_tree(path)`` once its processes are gone.
- ``write_private(path, data)``: a new file, 0600, never an existing path or a symlink
  (O_CREAT|O_EXCL|O_NOFOLLOW).
- ``open_append(path) -> file``: a text file to append to (records), created 0600 if
  missing; a symlink, a non-regular file (FIFO, device, socket…) or a file another user
  owns is refused with ``UnsafePath`` (an OSError) saying which, and nothing is written.
- ``cleanup()``: removes the whole area; run at exit (atexit) and by the frontends as
  they end. A sidecar killed with SIGKILL leaves its (owner-only) area behind.
- ``confine(root)``: replay's rule (replay.py), a recording from anyone touches nothing
  outside the replay's own temp directory. While it holds, the private area is made in
  ``root``, and ``check_confined(path, what)`` refuses (``UnsafePath``) every path outside
  ``root`` that agentproto would open, make or connect to on a request's behalf (an
  attachment, ``config_home``, ``inspect``'s ``db`` and ``sock``, ACP ``fs/*``' directory).

Nothing here touches the loop: these are small local file operations done at open and
close, like every other file access of the sidecar.
"""

from __future__ import annotations

import atexit
import errno
import os
import stat

# tempfile and shutil are imported where they are used: every start imports this module
# (for cleanup), and they cost more start-up time than the rest of it (see cli.py).
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["UnsafePath", "session_dir", "remove_tree", "write_private", "open_append", "lstat", "cleanup",
           "confine", "check_confined"]  # fmt: skip

_root: str | None = None
_root_pid = 0  # the process that made it: a forked child must not remove its parent's area
_registered = False
_confined: str | None = None  # replay's directory (``confine``)


class UnsafePath(OSError):
    """A path agentproto refuses to write through; ``strerror`` says why (like OSError's)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.strerror = reason


def _area() -> str:
    global _root, _root_pid, _registered
    if _root is None or _root_pid != os.getpid() or not os.path.isdir(_root):
        import tempfile

        # mkdtemp: mkdir with mode 0700, failing rather than reusing a planted name.
        _root = tempfile.mkdtemp(prefix="agentproto-", dir=_confined or tempfile.gettempdir())
        _root_pid = os.getpid()
        if not _registered:
            atexit.register(cleanup)
            _registered = True
    return _root


def confine(root: str | None) -> None:
    """Confine what agentproto does on a request's behalf to ``root`` (None: no longer)."""
    global _confined
    _confined = os.path.realpath(root) if root is not None else None
    cleanup()  # the next private area is made where the rule says


def check_confined(path: str, what: str) -> None:
    """Under ``confine``: ``UnsafePath`` unless ``path`` (symlinks resolved) is inside the
    confining directory. Otherwise nothing."""
    if _confined is None:
        return
    real = os.path.realpath(path)
    if real != _confined and not real.startswith(_confined.rstrip("/") + "/"):
        raise UnsafePath(f"replay touches nothing outside its own directory: {what} {path} is outside it")


def session_dir(name: str) -> str:
    """A new 0700 directory for one session (``name`` is a readable prefix, e.g. "claude")."""
    import tempfile

    return tempfile.mkdtemp(prefix=f"{name}-", dir=_area())


def remove_tree(path: str | None) -> None:
    """Remove a directory made by ``session_dir``; quiet if it is already gone."""
    if path:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def cleanup() -> None:
    """Remove this process's whole private area (every session directory in it)."""
    global _root
    if _root is not None and _root_pid == os.getpid():
        import shutil

        shutil.rmtree(_root, ignore_errors=True)
    _root = None


def write_private(path: str, data: str | bytes) -> None:
    """Write ``data`` to a new 0600 file at ``path`` (FileExistsError if anything is there)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def open_append(path: str) -> TextIO:
    """A UTF-8 text file opened to append, created 0600 if missing; UnsafePath if refused."""
    st = lstat(path)
    if st is not None:
        # Refuse before opening: opening a FIFO or a device can block or act on it.
        _check(st)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink since the lstat
            raise UnsafePath(_SYMLINK) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, made since the lstat
            raise UnsafePath(_NOT_REGULAR) from None
        raise
    try:
        _check(os.fstat(fd))  # what was actually opened, whatever raced the lstat
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def lstat(path: str) -> os.stat_result | None:
    """What is at ``path`` itself (a symbolic link is not followed), or None: nothing is."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


_SYMLINK = "it is a symbolic link; refusing to write through it"
_NOT_REGULAR = "it is not a regular file; refusing to write to it"


def _check(st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(_SYMLINK)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(_NOT_REGULAR)
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"it belongs to another user (uid {st.st_uid}); refusing to write to it")
