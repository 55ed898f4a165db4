"""``fs/*`` for an ACP agent, confined to the session's ``dir`` without races.

What this confines, and what it does not: the agent process itself is NOT confined. It
runs with the user's rights and can read, write and run anything the user can; so can
every command it starts in a terminal. What is confined is what agentproto does on the
agent's behalf: the ``fs/*`` requests and a terminal's ``cwd``. That stops an agent (or
text it was fed) from using agentproto as the deputy that reaches outside ``dir``.

Rules of this file:
- Every path is opened from a descriptor of the session's ``dir``, one component at a
  time, each with ``O_NOFOLLOW`` (``O_DIRECTORY`` for the intermediate ones), so nothing can
  be swapped between a check and the open: there is no check apart from the open. ``..``
  never climbs above ``dir``. An absolute path must start with ``dir`` (as given, or its
  real path). Symlinks are resolved here, not by the kernel, component by component
  relative to the descriptors already open (at most ``MAX_HOPS`` of them): one whose
  target stays inside ``dir`` is followed, one that leads out (an absolute target
  elsewhere, or ``..`` past ``dir``) is refused.
- Only regular files with one link are read or written: a hard link could be the name of
  a file outside ``dir``, and a FIFO or a device could block the loop or never end. The
  type is checked with ``lstat`` before the open, the open is ``O_NONBLOCK`` (a FIFO swapped
  in meanwhile cannot block it), and ``fstat`` then checks it is still that same file.
- Reads are bounded: at most ``READ_TEXT_CAP`` characters returned, at most
  ``READ_SCAN_CAP`` bytes of the file looked at, streamed from the descriptor (``line`` and
  ``limit`` stop the read where they say). Beyond a cap the answer is an error naming it,
  never silently cut text (an agent would write a cut file back).
- Writes replace the content in place (never truncating before the checks) and create the
  file (0644, ``O_EXCL``) and its missing directories inside ``dir``, as before.
- Malformed params never raise anything but ``RpcError`` (INVALID_PARAMS, naming the field).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import io
import os
import re
import stat
import sys
from typing import Any, Iterator

from agentproto.core.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio import private

if TYPE_CHECKING:
    from agentproto.drivers.acp.types import ReadTextFile

#: ACP's own JSON-RPC error code (the others are JSON-RPC's, from jsonrpc.py).
RESOURCE_NOT_FOUND = -32002

#: Symlinks resolved in one path, at most (Linux's own MAXSYMLINKS), and a path's length
#: (Linux's PATH_MAX): the walk makes a few system calls per component, so both bound it.
MAX_HOPS = 40
MAX_PATH = 4096
#: Characters one fs/read_text_file returns, at most.
READ_TEXT_CAP = 16 << 20
#: Bytes of a file one fs/read_text_file looks at, at most (skipping to ``line`` included):
#: a bound on the time one read holds the loop (~0.2 s), as the text cap bounds memory.
READ_SCAN_CAP = 64 << 20


def not_found(field: str, path: str) -> RpcError:
    """-32002 in the ACP SDKs' own wording, ``Resource not found: <path>`` with
    ``data.uri``: agents match that text (Gemini CLI creates a file only after a read of it
    fails so), and ``data.field`` says which parameter named it."""
    return RpcError(RESOURCE_NOT_FOUND, f"Resource not found: {path}", {"uri": path, "field": field})


def invalid(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


def params_object(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise invalid("`params` must be an object")
    return params


def os_text(value: Any, name: str, empty: bool = False) -> str:
    """A string the OS can take: no NUL, no lone surrogate; non-empty unless ``empty``."""
    if not isinstance(value, str) or not (value or empty):
        raise invalid(f"`{name}` must be a {'' if empty else 'non-empty '}string")
    if "\0" in value:
        raise invalid(f"`{name}` contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"`{name}` is not valid Unicode text (a lone surrogate)") from None
    return value


def count_param(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= sys.maxsize:
        raise invalid(f"`{name}` must be an integer from 0 to {sys.maxsize}")
    return value


# -- fs/*: resolving a path under a descriptor of the session dir ---------------------------

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: an open of a FIFO or a device never waits. O_NOCTTY: a tty never becomes ours.
_O_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _under(root: str, path: str) -> list[str] | None:
    """``path``'s components below ``root`` (relative paths are), or None if it is elsewhere.

    Purely lexical: ``..`` is left in place, for the walk to resolve against what is
    really on disk (``a/../b`` is not ``b`` when ``a`` is a symlink).
    """
    parts = _components(path)
    if not path.startswith("/"):
        return parts
    for base in {os.path.abspath(root), os.path.realpath(root)}:
        prefix = _components(base)
        if parts[: len(prefix)] == prefix:
            return parts[len(prefix) :]
    return None


class _Refused(Exception):
    """The path leads out of ``dir`` (the message names the field and the path)."""


def resolve(root: str, path: str, field: str, want: str) -> int:
    """Open ``path`` under ``root`` without leaving it; the caller owns the descriptor.

    ``want`` is "read" (an existing regular file), "write" (one, created with its missing
    directories if need be, not truncated) or "dir" (an existing directory).
    """
    if len(path.encode("utf-8")) > MAX_PATH:
        raise invalid(f"`{field}` is longer than {MAX_PATH} bytes")
    parts = _under(root, path)
    if parts is None:
        raise invalid(f"refused: `{field}` {path} is outside the session directory {root}")
    try:
        private.check_confined(root, "the session directory")  # replay: only inside its own
    except private.UnsafePath as exc:
        raise invalid(f"refused: {exc.strerror}") from None
    pending = collections.deque(parts)
    try:
        stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    except OSError as exc:
        raise RpcError(INTERNAL_ERROR, f"cannot open the session directory {root}: {exc.strerror}") from None
    hops = 0
    try:
        while pending:
            name = pending.popleft()
            if name == "..":
                if len(stack) == 1:
                    raise _Refused()
                os.close(stack.pop())
                continue
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_HOPS:
                    raise invalid(f"refused: `{field}` {path} has more than {MAX_HOPS} symbolic links to follow")
                target = os.readlink(name, dir_fd=stack[-1])
                inside = _under(root, target)
                if inside is None:
                    raise _Refused()
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending.extendleft(reversed(inside))
                continue
            if pending or want == "dir":
                if st is None and want == "write":
                    try:
                        os.mkdir(name, 0o777, dir_fd=stack[-1])
                    except FileExistsError:
                        pass  # made meanwhile: the O_NOFOLLOW open below still decides
                elif st is None:
                    raise not_found(field, path)
                elif not stat.S_ISDIR(st.st_mode):
                    raise invalid(f"not a directory: `{field}` {path} ({name})")
                stack.append(os.open(name, _O_DIR, dir_fd=stack[-1]))
                continue
            return _open_file(stack[-1], name, st, want, field, path)
        if want == "dir":
            return stack.pop()
        raise invalid(f"is a directory: `{field}` {path}")
    except _Refused:
        raise invalid(f"refused: `{field}` {path} leads outside the session directory {root}") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EEXIST):
            # O_NOFOLLOW/O_DIRECTORY/O_EXCL found something other than what lstat saw.
            raise invalid(f"refused: `{field}` {path} changed while it was being opened") from None
        if exc.errno == errno.ENOENT:
            raise not_found(field, path) from None
        raise RpcError(INTERNAL_ERROR, f"cannot open `{field}` {path}: {exc.strerror}") from None
    finally:
        for fd in stack:
            os.close(fd)


def _refuse_odd(st: os.stat_result, field: str, path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise invalid(f"is a directory: `{field}` {path}")
    if not stat.S_ISREG(st.st_mode):
        raise invalid(f"refused: `{field}` {path} is not a regular file (a FIFO, socket or device)")
    if st.st_nlink > 1:
        raise invalid(f"refused: `{field}` {path} has {st.st_nlink} hard links (one may be outside)")


def _open_file(dir_fd: int, name: str, st: os.stat_result | None, want: str, field: str, path: str) -> int:
    if st is None:
        if want != "write":
            raise not_found(field, path)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_FILE, 0o644, dir_fd=dir_fd)
    else:
        _refuse_odd(st, field, path)
        fd = os.open(name, (os.O_WRONLY if want == "write" else os.O_RDONLY) | _O_FILE, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if st is not None and (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise invalid(f"refused: `{field}` {path} changed while it was being opened")
        _refuse_odd(now, field, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- fs/read_text_file, fs/write_text_file ------------------------------------------------


class _CappedReader(io.RawIOBase):
    """The descriptor's bytes up to ``cap``; ``over`` once the file turned out longer."""

    def __init__(self, fd: int, cap: int) -> None:
        super().__init__()
        self.fd = fd
        self.left = cap
        self.over = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            self.over = self.over or bool(os.read(self.fd, 1))
            return 0
        data = os.read(self.fd, min(len(buffer), self.left))
        buffer[: len(data)] = data
        self.left -= len(data)
        return len(data)


# A line ends as universal newlines end it (what `newline=""` iteration did before).
_ENDS = re.compile(r"\r\n|\r|\n")
_CHUNK = 1 << 16


def _ends(text: str) -> int:
    ends = text.count("\n")
    if "\r" in text:  # rare: the common case costs one pass, not three
        ends += text.count("\r") - text.count("\r\n")
    return ends


def _after(text: str, n: int) -> int:
    """The index just past the ``n``-th line end in ``text`` (it has at least ``n``)."""
    for i, match in enumerate(_ENDS.finditer(text), 1):
        if i == n:
            return match.end()
    raise AssertionError("fewer line ends than counted")


def _chunks(text: io.TextIOWrapper) -> Iterator[str]:
    """The text in pieces that never split a ``\r\n``."""
    carry = ""
    while True:
        data = text.read(_CHUNK)
        if not data:
            if carry:
                yield carry
            return
        data = carry + data
        carry = ""
        if data.endswith("\r"):
            carry, data = "\r", data[:-1]
        if data:
            yield data


@contextlib.contextmanager
def _file(root: str, path: str, want: str) -> Iterator[int]:
    """The descriptor of ``path`` (``resolve``'s, for ``want``), closed after; an OSError
    meanwhile fails the call with an internal error that names the path."""
    fd = resolve(root, path, "path", want)
    try:
        yield fd
    except OSError as exc:
        raise RpcError(INTERNAL_ERROR, f"cannot {want} `path` {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_text_file(root: str, params: Any) -> ReadTextFile:
    """``fs/read_text_file``: ``line`` is 1-based, ``limit`` a count of lines."""
    params = params_object(params)
    path = os_text(params.get("path"), "path")
    line = count_param(params.get("line"), "line")
    limit = count_param(params.get("limit"), "limit")
    skip = max(line - 1, 0) if line else 0
    taken: list[str] = []
    size = 0
    with _file(root, path, "read") as fd:
        raw = _CappedReader(fd, READ_SCAN_CAP)
        if limit == 0:
            return {"content": ""}
        text = io.TextIOWrapper(io.BufferedReader(raw, _CHUNK), encoding="utf-8", errors="replace", newline="")
        for chunk in _chunks(text):
            if skip:
                ends = _ends(chunk)
                if ends < skip:
                    skip -= ends
                    continue
                chunk = chunk[_after(chunk, skip) :]
                skip = 0
            done = False
            if limit is not None:
                ends = _ends(chunk)
                if ends >= limit:
                    chunk, done = chunk[: _after(chunk, limit)], True
                else:
                    limit -= ends
            size += len(chunk)
            if size > READ_TEXT_CAP:
                raise invalid(
                    f"refused: `path` {path}: more than {READ_TEXT_CAP} characters to return; "
                    "read it in parts with `line` and `limit`"
                )
            taken.append(chunk)
            if done:
                break
        else:
            if raw.over:
                raise invalid(
                    f"refused: `path` {path}: the read stopped after the first {READ_SCAN_CAP} bytes "
                    "of the file (the most one read looks at)"
                )
    return {"content": "".join(taken)}


def write_text_file(root: str, params: Any) -> None:
    """``fs/write_text_file``: creates the file (and its directories inside ``root``)."""
    params = params_object(params)
    path = os_text(params.get("path"), "path")
    content = params.get("content")
    if not isinstance(content, str):
        raise invalid("`content` must be a string")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid("`content` is not valid Unicode text (a lone surrogate)") from None
    with _file(root, path, "write") as fd:
        # Truncated only now, after the checks: the open itself never cut a file.
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    return None
