"""The per-user control directory: where every ``serve`` (and ``agent``) opens its control
socket, so that ``inspect`` with no ``--sock`` finds every sidecar this user runs.

Rules of this file (SECURITY.md, "The control directory"):
- Where: ``AGENTPROTO_CONTROL_DIR``, else ``$XDG_RUNTIME_DIR/agentproto`` (when that is an
  absolute path), else ``/tmp/agentproto-<uid>``: one place every process of the user
  agrees on, whatever its TMPDIR.
- It is made with ``mkdir(0700)`` by its user and never chmod-ed or chown-ed afterwards: what
  is found at the path must already be a directory (not a symbolic link) of this user with
  mode 0700 exactly, or it is refused (``UnsafePath``, saying which) and nothing is made,
  bound, listed or removed in it. Another user could otherwise read the sockets' names,
  plant one, or (through a link) have us write somewhere else. Its parent (``/tmp``) is
  sticky, so once checked the entry stays ours.
- A sidecar's socket is ``<pid>.sock`` in it, bound owner-only (sockets.bind_unix) and
  removed at exit if it is still the one bound.
- A socket left by a sidecar that died (SIGKILL) is removed only after a connect to it
  failed (nobody listens) and only when the path still holds the very socket file that was
  listed (same owner, ourselves; same device and inode): ``remove_stale``.
- Nothing here touches the loop or imports more than ``os`` and ``stat``: serve opens the
  socket after its hello, and the directory costs a start nothing.
"""

from __future__ import annotations

import os
import stat

from agentproto.loopio.private import UnsafePath

ENV = "AGENTPROTO_CONTROL_DIR"
SUFFIX = ".sock"


def directory() -> str:
    """Where this user's sidecars open their control sockets."""
    given = os.environ.get(ENV)
    if given:
        return os.path.abspath(given)
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, "agentproto")
    return f"/tmp/agentproto-{os.geteuid()}"


def ensure(path: str, create: bool = True) -> bool:
    """Check the directory at ``path`` (made 0700 first when missing and ``create``):
    True when it is there and safe, False when it is missing (``create`` false);
    ``UnsafePath`` when something else is at the path."""
    if create:
        try:
            os.mkdir(path, 0o700)  # the umask may only take bits away: checked below
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            raise
        return False
    check(path, st)
    return True


def check(path: str, st: os.stat_result) -> None:
    """``UnsafePath`` unless ``st`` (an lstat of ``path``) is a 0700 directory of ours."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"the control directory {path} is a symbolic link; refusing it")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"the control directory {path} is not a directory; refusing it")
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"the control directory {path} belongs to uid {st.st_uid}, not to you; refusing it")
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o700:
        raise UnsafePath(f"the control directory {path} has mode {mode:04o}, not 0700; refusing it")


def socket_path(path: str, pid: int | None = None) -> str:
    """This process's (or ``pid``'s) control socket in the directory ``path``."""
    return os.path.join(path, f"{os.getpid() if pid is None else pid}{SUFFIX}")


def sockets(path: str) -> list[tuple[str, os.stat_result]]:
    """The control sockets in the (checked) directory ``path``, by pid, each with its lstat:
    what is not a ``<pid>.sock`` socket file of ours is left alone and not listed."""
    found: list[tuple[int, str, os.stat_result]] = []
    for name in os.listdir(path):
        stem = name[: -len(SUFFIX)]
        if not name.endswith(SUFFIX) or not stem.isdigit():
            continue
        full = os.path.join(path, name)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            continue  # its sidecar ended meanwhile
        if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
            found.append((int(stem), full, st))
    return [(full, st) for _pid, full, st in sorted(found)]


def remove_stale(path: str, listed: os.stat_result) -> bool:
    """Remove the socket at ``path`` that a connect just failed on, if it is still the
    socket file ``listed`` (ours, same device and inode): True when removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid() or (st.st_dev, st.st_ino) != (
        listed.st_dev,
        listed.st_ino,
    ):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
