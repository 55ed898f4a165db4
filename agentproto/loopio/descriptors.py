"""The process's file descriptors: the limit, raised at start, and a reserve that what one
agent asks for never takes, so that it cannot make another session's open fail with
``Too many open files``.

Rules of this file:
- ``raise_limit()`` (every ``Engine`` calls it: every command that runs sessions) raises
  the soft ``RLIMIT_NOFILE`` to the hard limit, once per process. Without the ``resource``
  module (not POSIX), or where the system refuses (macOS caps it at ``OPEN_MAX``, tried
  next), the limit stays as it was. Children inherit the raised limit.
- What an agent asks the sidecar to start for it (an ACP terminal) never takes the last
  ``RESERVE`` (64) descriptors: those are kept for opens (a new session's agent pipes) and
  accepts. An open and an accept never take the last ``FLOOR`` (16): the sidecar's own
  files (a record, the observations database, a control answer) still open then.
- Counting, cheaply: the descriptors in use are counted exactly by listing
  ``/proc/self/fd`` (Linux) or ``/dev/fd`` (macOS, the BSDs): about 10 us with 20 open,
  0.4 ms with 1,000. That is done before starting a process (a terminal, an agent: a fork
  and exec cost milliseconds). A listener with connections waiting decides for its whole
  batch at once (those it leaves stay in the backlog) from the last count, less what was
  accepted since, while that count is under a second old, fewer than 64 accepts old, and
  left at least 1,024 free; else it counts again. Where there is no such directory, or no
  limit, nothing is refused.
"""

from __future__ import annotations

import os
import time

#: Descriptors an agent's requests (a terminal) leave for opens and accepts.
RESERVE = 64
#: Descriptors opens and accepts leave for the sidecar's own files.
FLOOR = 16
#: The soft limit to try where the hard one is unlimited, or is refused (macOS: OPEN_MAX).
_FALLBACKS = (1 << 20, 10240)

#: An accept may go by the last count while it left this many free, is this many seconds
#: old at most, and fewer accepts than this have been made since.
_FAR, _FRESH, _EVERY = 1024, 1.0, 64

_raised = False
#: The last count: descriptors free then, when (time.monotonic), and accepted since.
_last: list[float] = [0.0, -1e9, 0.0]
_FD_DIR = next((d for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d)), None)


def raise_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (once per process): the (soft, hard)
    limits after, or None where there is no such limit."""
    global _raised
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _raised or soft == hard:
        _raised = True
        return soft, hard
    _raised = True
    targets = [hard] if hard != resource.RLIM_INFINITY else []
    targets += [n for n in _FALLBACKS if (hard == resource.RLIM_INFINITY or n < hard) and n > soft]
    for target in targets:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target, hard
        except (ValueError, OSError):
            continue
    return soft, hard


def limit() -> int | None:
    """The soft limit on descriptors (None: none, or unknown)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def in_use() -> int | None:
    """Descriptors open in this process now (None where they cannot be listed)."""
    if _FD_DIR is None:
        return None
    try:
        return len(os.listdir(_FD_DIR)) - 1  # the listing's own descriptor is in it
    except OSError:
        return None


def room(keep: int) -> int | None:
    """Descriptors that may still be taken leaving ``keep`` free (0 when none may; None: no
    limit, or nothing can be counted here)."""
    soft = limit()
    used = in_use() if soft is not None else None
    if soft is None or used is None:
        return None
    _last[:] = [soft - used, time.monotonic(), 0]
    return max(0, soft - used - keep)


def accept_room() -> int | None:
    """``room(FLOOR)`` for a listener's batch: from the last count while it is fresh and
    far from the limit (see the rules), else counted again. Report what it takes with
    ``accepted``."""
    free, when, since = _last
    if free >= _FAR and since < _EVERY and time.monotonic() - when < _FRESH:
        return int(free - since) - FLOOR
    return room(FLOOR)


def accepted(count: int) -> None:
    """A listener took ``count`` descriptors since the last count."""
    _last[2] += count


def why_short(keep: int) -> str:
    """What a refusal for want of descriptors says (the count taken again)."""
    return (
        f"{in_use()} of the sidecar's {limit()} file descriptors are in use: "
        f"the last {keep} are kept for {'opens and accepts' if keep == RESERVE else 'its own files'}"
    )


def short(taking: int, keep: int) -> str | None:
    """Why starting something that holds ``taking`` more descriptors would leave fewer than
    ``keep`` free (None: it would not, or nothing can be counted here)."""
    left = room(keep)
    return None if left is None or left >= taking else why_short(keep)
