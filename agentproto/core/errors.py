"""Error kinds, and the one error family that says who broke it. Sans-IO but for ``log``,
the package's one writer of stderr.

Rules of this file:
- A kind is a constant of ``Kind`` (never a free string), and ``ERROR_KINDS`` lists every
  kind the wire carries; explain.py explains each one (a test checks the two agree).
- Every error a command or a session reports is an ``AgentError``: the reference schema's
  ``ErrorBody`` (``kind``, ``message`` and the variant's own fields). Its subclass says
  whose fault it is, as h11's Local/RemoteProtocolError do: ``AppError`` (the app sent
  something wrong, or stopped reading), ``AgentFault`` (the agent broke its protocol,
  died, lost its login), ``SetupError`` (this machine: the agent is missing or cannot
  start) and ``InternalError`` (a bug of ours).
- Building an error through the base (``AgentError(kind, ...)``, ``AgentError.detail``)
  picks the subclass from the kind, so every call site classifies the same way and no
  caller has to know the table.
- A bug of ours is logged with its traceback before it becomes a reply (``internal``):
  the app only sees the one-line message, and without the traceback nobody can fix it.
"""

from __future__ import annotations

import os
import select
import stat
import sys

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from agentproto.core.wire_types import LoginMethod


class Kind:
    """Every error kind, by name. ErrorBody.kind is any string in anyagent's schema, so the
    two kinds anyagent's sidecar does not send (Internal, ConsumerLagged) are additive."""

    # The app's fault.
    BAD_FRAME = "BadFrame"
    INVALID_REQUEST = "InvalidRequest"
    INVALID_CONFIGURATION = "InvalidConfiguration"
    UNKNOWN_SESSION = "UnknownSession"
    SESSION_CLOSED = "SessionClosed"
    SESSION_BUSY = "SessionBusy"
    UNSUPPORTED_FEATURE = "UnsupportedFeature"
    #: The app stopped reading a session's events (the stall timeout). anyagent's own
    #: wrappers use this kind for the same fault on their side of the pipe.
    CONSUMER_LAGGED = "ConsumerLagged"
    #: A bound of the session's ``budget`` was reached (issue 24): the turn that crossed it
    #: failed, and prompts are refused until ``configure budget`` raises it.
    BUDGET_EXCEEDED = "BudgetExceeded"
    # The agent's fault.
    PROTOCOL_FAILED = "ProtocolFailed"
    PROCESS_EXITED = "ProcessExited"
    AUTH_REQUIRED = "AuthRequired"
    HANDSHAKE_TIMEOUT = "HandshakeTimeout"
    RESUME_FAILED = "ResumeFailed"
    # The machine's: the agent is not there, or cannot be started.
    NOT_INSTALLED = "NotInstalled"
    SPAWN_FAILED = "SpawnFailed"
    # Ours: a bug in agentproto, logged with its traceback.
    INTERNAL = "Internal"


#: Every kind, in the order the README lists them (anyagent's first, then ours).
ERROR_KINDS: tuple[str, ...] = (
    Kind.NOT_INSTALLED,
    Kind.SPAWN_FAILED,
    Kind.AUTH_REQUIRED,
    Kind.HANDSHAKE_TIMEOUT,
    Kind.UNSUPPORTED_FEATURE,
    Kind.INVALID_CONFIGURATION,
    Kind.INVALID_REQUEST,
    Kind.RESUME_FAILED,
    Kind.SESSION_BUSY,
    Kind.PROTOCOL_FAILED,
    Kind.PROCESS_EXITED,
    Kind.SESSION_CLOSED,
    Kind.BAD_FRAME,
    Kind.UNKNOWN_SESSION,
    Kind.CONSUMER_LAGGED,
    Kind.BUDGET_EXCEEDED,
    Kind.INTERNAL,
)

#: How many characters of an offending agent line an error or a diagnostic quotes: enough
#: to recognise the message, not a whole file's content from a tool result.
LINE_EXCERPT = 200

_PREFIX = {
    Kind.SPAWN_FAILED: "could not start the agent",
    Kind.HANDSHAKE_TIMEOUT: "the agent did not finish its handshake in time",
    Kind.UNSUPPORTED_FEATURE: "unsupported feature",
    Kind.INVALID_CONFIGURATION: "invalid configuration",
    Kind.INVALID_REQUEST: "invalid request",
    Kind.RESUME_FAILED: "resume failed",
    Kind.SESSION_BUSY: "session busy",
    Kind.PROTOCOL_FAILED: "protocol failure",
    Kind.SESSION_CLOSED: "session closed",
    Kind.BAD_FRAME: "bad frame",
    Kind.CONSUMER_LAGGED: "the app fell behind",
    Kind.BUDGET_EXCEEDED: "budget exceeded",
    Kind.INTERNAL: "internal error",
}


#: Log lines dropped (or cut short) since the last one written: stderr was not being read.
_dropped = 0


def log(message: str) -> None:
    """One line on stderr, the package's only way to write there; never blocks.

    The event loop calls this, so a stderr nobody reads must not stop it: a pipe or a
    socket is written only as far as it takes without waiting (its descriptor's flags
    are left alone: it may be the parent's own stderr). A line that does not fit is
    dropped and counted, and the next line that can be written says how many were lost.
    A closed or broken stderr never costs the caller. No secret reaches it: the message
    is scrubbed by redact.py first (a traceback may quote a request or an agent's line):
    secret shapes and the values learned so far; not the key rule, which reads JSON, and
    a message is prose that may quote a cut line.
    """
    from agentproto.core import redact  # the same layer; here, as most runs never log

    _write_stderr(f"agentproto: {redact.scrub(message)}\n", say_dropped=True)


def write_stderr(text: str) -> None:
    """``text`` on stderr as it is (a terminal command's prompt, note or status line: no
    prefix, no newline added), by ``log``'s rule: never blocks, and what does not fit is
    dropped and counted."""
    _write_stderr(text, say_dropped=False)


def _write_stderr(text: str, say_dropped: bool) -> None:
    global _dropped
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by something in memory (a test's capture)
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        return
    if say_dropped and _dropped:
        notice = f"agentproto: {_dropped} log line(s) dropped or cut short: stderr was not being read\n"
        if not _write_nowait(fd, notice.encode()):
            _dropped += 1
            return
        _dropped = 0
    if not _write_nowait(fd, text.encode("utf-8", "replace")):
        _dropped += 1


def _write_nowait(fd: int, data: bytes) -> bool:
    """Write ``data`` to ``fd`` without ever waiting on a pipe or a socket; False when
    any of it could not be written (nothing is written of a first piece that does not fit)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return True  # no stderr at all: nothing to count
    pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    # Up to PIPE_BUF bytes go into a pipe that polls writable at once, whole; a longer
    # line is written in such pieces, each only once the last one is in.
    piece = 4096
    view = memoryview(data)
    try:
        while view:
            if pollable and not select.select([], [fd], [], 0)[1]:
                return False
            written = os.write(fd, view[:piece] if pollable else view)
            view = view[written:]
    except BlockingIOError:  # its description was made non-blocking (2>&1 onto our stdout)
        return False
    except (OSError, ValueError):
        return True  # closed or broken: nobody will ever read it, nothing to report
    return True


def excerpt(line: bytes | str, limit: int = LINE_EXCERPT) -> str:
    """The start of an agent line, as text, for an error or a diagnostic to quote."""
    text = line.decode("utf-8", "replace") if isinstance(line, (bytes, bytearray)) else line
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class AgentError(Exception):
    """An ``ErrorBody``: ``kind``, ``message`` and the variant's own fields."""

    #: Whose fault: "app", "agent", "setup" or "internal" (set by each subclass).
    fault = "unknown"

    def __new__(cls, *args: Any, **fields: Any) -> "AgentError":
        # AgentError(kind, ...) builds the kind's subclass: the existing call sites (and an
        # error read back from a body) are classified without naming a subclass.
        if cls is AgentError and args and isinstance(args[0], str):
            cls = FAULTS.get(args[0], AgentError)
        return super().__new__(cls)

    def __init__(self, kind: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fields = fields

    def body(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **self.fields}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!r}, {self.message!r}, {self.fields!r})"

    # The variants, with the fields the reference schema's clients read.
    @classmethod
    def not_installed(cls, agent: str, message: str | None = None) -> "AgentError":
        return AgentError(Kind.NOT_INSTALLED, message or f"agent not installed: {agent}", agent=agent)

    @classmethod
    def auth_required(cls, message: str, login: list[LoginMethod]) -> "AgentError":
        return AgentError(Kind.AUTH_REQUIRED, message, login=login)

    @classmethod
    def process_exited(cls, status: str | None, stderr: str) -> "AgentError":
        shown = "unknown" if status is None else status
        return AgentError(Kind.PROCESS_EXITED, f"agent process exited (status {shown})", status=status, stderr=stderr)

    @classmethod
    def detail(cls, kind: str, detail: str, message: str | None = None) -> "AgentError":
        return AgentError(kind, message or f"{_PREFIX.get(kind, kind)}: {detail}", detail=detail)

    @classmethod
    def protocol_failed(cls, detail: str, line: bytes | str | None = None) -> "AgentError":
        """The agent broke its protocol; ``line`` is the agent line that showed it, if one did."""
        error = AgentError.detail(Kind.PROTOCOL_FAILED, detail)
        if line is not None:
            error.fields["line"] = excerpt(line)
        return error

    @classmethod
    def unknown_session(cls, session: str) -> "AgentError":
        return AgentError(Kind.UNKNOWN_SESSION, f"unknown session: {session}", session=session)

    @classmethod
    def session_closed(cls, session: str) -> "AgentError":
        return AgentError(Kind.SESSION_CLOSED, f"session closed: {session}", detail=session)

    @classmethod
    def internal(cls, context: str) -> "AgentError":
        """A bug of ours, from inside the ``except`` that caught it: logs the traceback to
        stderr and returns the ``Internal`` error to answer with."""
        exc = sys.exc_info()[1]
        import traceback  # only on this path: it is not free at start-up

        log(f"internal error on {context}:\n{traceback.format_exc().rstrip()}")
        return AgentError.detail(Kind.INTERNAL, f"{context}: {exc!r}")


# Whose fault it was (``fault``: "app", "agent", "setup", "internal"), one class each.
class AppError(AgentError):
    """The app's fault: a bad frame or request, a closed or busy session, a reader that stopped."""
    fault = "app"


class AgentFault(AgentError):
    """The agent's fault: it broke its protocol, exited, lost its login or did not answer."""
    fault = "agent"


class SetupError(AgentError):
    """The machine's: the agent is not installed or cannot be started."""
    fault = "setup"


class InternalError(AgentError):
    """A bug of agentproto's (its traceback is on stderr)."""
    fault = "internal"


#: Whose fault each kind is (the README's list says the same, in words).
FAULTS: dict[str, type[AgentError]] = {
    kind: cls
    for cls, kinds in (
        (AppError, (Kind.BAD_FRAME, Kind.INVALID_REQUEST, Kind.INVALID_CONFIGURATION, Kind.UNKNOWN_SESSION,
                    Kind.SESSION_CLOSED, Kind.SESSION_BUSY, Kind.UNSUPPORTED_FEATURE, Kind.CONSUMER_LAGGED,
                    Kind.BUDGET_EXCEEDED)),
        (AgentFault, (Kind.PROTOCOL_FAILED, Kind.PROCESS_EXITED, Kind.AUTH_REQUIRED, Kind.HANDSHAKE_TIMEOUT,
                      Kind.RESUME_FAILED)),
        (SetupError, (Kind.NOT_INSTALLED, Kind.SPAWN_FAILED)),
        (InternalError, (Kind.INTERNAL,)),
    )
    for kind in kinds
}


def error_from_body(body: dict[str, Any]) -> AgentError:
    """An ``ErrorBody`` read back from the wire (a client's side), classified by its kind."""
    fields = {k: v for k, v in body.items() if k not in ("kind", "message")}
    return AgentError(str(body.get("kind", Kind.PROTOCOL_FAILED)), str(body.get("message", "")), **fields)
