"""The observations database: one row per ended turn, for ``inspect view cost``.

Every runtime has an ``Observer`` the engine tells about ended turns and the agents'
ContextUsage reports. It keeps each live session's figures (token totals, cost)
for ``inspect view agents`` and, with a database, queues one row per ended turn: time,
agent, model, session, turn, input/output/cached tokens, the turn's cost in USD where
the agent reports one, duration and stop reason. Never a prompt, never an answer, never
a message: a stop reason is stored by its name only (a failure's message may quote one).

Where: ``--db PATH``, else ``AGENTPROTO_DB``, else ``$XDG_STATE_HOME/agentproto/
observations.db`` (``~/.local/state`` when unset); ``off`` (either way) disables it. The run
that creates the file says where it is, once, on stderr.

Retention: rows older than ``--db-keep`` (else ``AGENTPROTO_DB_KEEP``, else ``DEFAULT_KEEP``:
90 days; a span ``90d``, ``12w``, ``36h`` or a number of days; ``0`` or ``none`` keeps every
row) are deleted when the writer opens the file and then at most once every
``PRUNE_EVERY`` seconds, at most ``PRUNE_ROWS`` rows at a time (the oldest first), within the
write budget: never on every write, never holding the loop. A prune that fails or runs out
of budget costs one line and is not tried again in the run; the rows are still written.

Versions: the file's ``PRAGMA user_version`` is its schema version (``SCHEMA_VERSION``); a
file of version 0 with a ``turns`` table was written before versions existed and is version
1's table (the writer marks it 1). A file of another version is refused, writing (one line,
no rows written in the run) and reading (``inspect``: an error naming the file and both
versions), never misread.

Rules of this file:
- Off the hot path: an ended turn only appends a tuple. Rows are written in one
  transaction at most once every ``FLUSH_DELAY`` seconds (and at close), with a zero busy
  timeout (a locked database never makes the loop wait) in WAL mode without a sync per
  commit. A failure (locked, full, unwritable) costs one line on stderr per kind of
  failure and keeps the rows for the next try, up to ``MAX_PENDING``; never a session.
- Costs: agents report a session's running total (Claude's ``total_cost_usd``, ACP's
  cumulative ``cost``) in ContextUsage; a row stores the difference since the session's
  last ended turn.
- The file and its directory are owner-only (0600 / 0700), never opened through a link.
  Writing or reading (``inspect``), the file must be a regular file you own, in a directory
  you own that nobody else can write (sqlite opens its ``-wal``/``-shm``/``-journal``
  beside it, following links: another user's directory could plant them), else OSError
  before sqlite touches it: a FIFO, a device or another user's file never blocks or leads
  anywhere. ``inspect`` opens it read-only.
- A database is data, never code we run at length: ``trusted_schema`` is off, and every
  use of it has a work budget (``WRITE_BUDGET``, ``READ_BUDGET`` seconds, checked by
  sqlite's progress handler), so a trigger or a view planted in the file cannot hold the
  loop. A write that runs out of budget stops the writing for the run (one line).
"""

from __future__ import annotations

import os
import stat
import time
import weakref

from agentproto.core.errors import log
from agentproto.core.typecheck import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import sqlite3
    from typing import Any, Mapping

    from agentproto.core.inspect_types import TokenFigures, TurnRow
    from agentproto.core.wire_types import SessionInfo, StopReason, TurnUsage
    from agentproto.drivers.base import Launch
    from agentproto.engine.turns import Turn
    from agentproto.loopio.loop import Loop, Timer


class ObservedSession(Protocol):
    """What of a session (an ``EngineSession``) the observer reads: the engine calls it, so it
    cannot import the engine."""

    id: str
    launch: "Launch"
    info: SessionInfo

DB_ENV = "AGENTPROTO_DB"
KEEP_ENV = "AGENTPROTO_DB_KEEP"
OFF = "off"
#: What ``SCHEMA`` makes: bumped with any change of the table a reader would misread.
SCHEMA_VERSION = 1
#: How long rows are kept by default (seconds): 90 days.
DEFAULT_KEEP = 90 * 86400.0
#: Pruning: at most this many rows per go, at most once per this many seconds.
PRUNE_ROWS = 5000
PRUNE_EVERY = 86400.0

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY,
    ended_at REAL NOT NULL,            -- seconds since the epoch
    agent TEXT NOT NULL,
    model TEXT,
    run TEXT NOT NULL,                 -- one sidecar process
    session TEXT NOT NULL,             -- its session id ("s1"), unique within the run
    turn TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cost_usd REAL,                     -- null: the agent reported no cost
    duration_ms INTEGER NOT NULL,
    stop TEXT NOT NULL                 -- the StopReason's name (Completed, Failed, ...)
);
CREATE INDEX IF NOT EXISTS turns_ended_at ON turns (ended_at);
PRAGMA user_version = {SCHEMA_VERSION};
"""
COLUMNS = (
    "ended_at", "agent", "model", "run", "session", "turn", "input_tokens", "output_tokens",
    "cached_input_tokens", "cost_usd", "duration_ms", "stop",
)  # fmt: skip


def db_path(flag: str | None = None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The database to use (None: disabled)."""
    chosen = flag if flag is not None else environ.get(DB_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in (OFF, "") else os.path.expanduser(chosen)
    state = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "agentproto", "observations.db")


_KEEP_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def keep_seconds(text: str | None, environ: Mapping[str, str] = os.environ) -> float:
    """The retention (``--db-keep``, else ``AGENTPROTO_DB_KEEP``, else ``DEFAULT_KEEP``) in
    seconds; 0: keep every row. ValueError naming what it takes when ``text`` is not one."""
    chosen = text if text is not None else environ.get(KEEP_ENV)
    if chosen is None or not chosen.strip():
        return DEFAULT_KEEP
    value = chosen.strip().lower()
    if value in ("0", "none", OFF, "never"):
        return 0.0
    unit = value[-1] if value[-1] in _KEEP_UNITS else "d"
    number = value[:-1] if value[-1] in _KEEP_UNITS else value
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if not (0 <= amount < float("inf")):
        raise ValueError(f"{chosen!r}: a span (90d, 12w, 36h), a number of days, or 0/none to keep every row")
    return amount * _KEEP_UNITS[unit]


class VersionMismatch(OSError):
    """The file holds another schema version than this agentproto's."""

    def __init__(self, path: str, version: int) -> None:
        super().__init__(f"{path} is an observations database of schema version {version}; this agentproto "
                         f"reads and writes version {SCHEMA_VERSION}")  # fmt: skip
        self.version = version


def schema_version(db: "sqlite3.Connection") -> int | None:
    """The file's schema version (``PRAGMA user_version``; a version-0 file with a ``turns``
    table or view is version 1's table); None: an empty file (no table yet)."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version == 0:
        known = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'turns'").fetchone()[0]
        return 1 if known else None
    return version


def stop_name(stop: Any) -> str:
    """A StopReason by its name only ("Completed", "Failed", "Cancelled", ...)."""
    if isinstance(stop, dict) and stop:
        return str(next(iter(stop)))
    return str(stop)


#: How long one write (a flush, with the opening) or one read (``inspect``) may keep
#: sqlite busy: both run on the loop. Past it, sqlite stops with "interrupted".
WRITE_BUDGET = 0.5
READ_BUDGET = 2.0


def _refused(why: str) -> OSError:
    return OSError(f"{why}: refused as an observations database")


def check_file(path: str, create: bool) -> None:
    """Refuse (OSError) a database path that is not a regular file of ours in a directory
    only we can write; ``create`` makes the file (0600, and its directory 0700) when missing.
    Opened here without following a link and without blocking (a FIFO), never by sqlite
    first."""
    directory = os.path.dirname(os.path.abspath(path))
    if create:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    me = os.geteuid()
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise FileNotFoundError(2, "no observations database", path) from None
    if st.st_uid != me or st.st_mode & 0o022:
        whose = "is not yours" if st.st_uid != me else "can be written by others"
        raise _refused(f"its directory {directory} {whose} (sqlite's -wal and -journal files go there)")
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_RDWR | os.O_CREAT if create else os.O_RDONLY)
    try:
        fd = os.open(path, flags, 0o600)  # made here, 0600, not by sqlite (which honours only the umask)
    except FileNotFoundError:
        raise FileNotFoundError(2, "no observations database", path) from None
    except OSError as exc:
        if os.path.islink(path):
            raise _refused("a symbolic link") from None
        raise exc from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _refused("not a regular file")
    if st.st_uid != me:
        raise _refused(f"owned by uid {st.st_uid}, not by you")


def bound(db: "sqlite3.Connection", seconds: float) -> None:
    """From now on, sqlite stops (OperationalError "interrupted") what runs past ``seconds``."""
    deadline = time.monotonic() + seconds
    db.set_progress_handler(lambda: time.monotonic() > deadline, 1000)


def connect(path: str, create: bool, budget: float = WRITE_BUDGET) -> "sqlite3.Connection":
    """A connection to the database at ``path`` (``check_file``'s rules), bounded by
    ``budget`` seconds of work; ``create`` makes it when missing and opens it for writing,
    else it is opened read-only. OSError or sqlite3.Error when it cannot."""
    import sqlite3  # only with a database: it costs start-up time otherwise

    check_file(path, create)
    if create:
        db = sqlite3.connect(path, timeout=0, isolation_level=None)
    else:
        uri = "file:" + path.replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro"
        db = sqlite3.connect(uri, timeout=0, isolation_level=None, uri=True)
    try:
        bound(db, budget)
        db.execute("PRAGMA trusted_schema=OFF")
        version = schema_version(db)
        if version is not None and version != SCHEMA_VERSION:
            raise VersionMismatch(path, version)
        if create:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
    except BaseException:
        db.close()
        raise
    return db


class SessionFigures:
    """One live session's figures, as ``inspect view agents`` shows them."""

    __slots__ = ("input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "billed_usd")

    def __init__(self) -> None:
        self.input_tokens = self.output_tokens = self.cached_input_tokens = 0
        #: The agent's running total (ContextUsage.cost_usd), and how much of it is in rows.
        self.cost_usd: float | None = None
        self.billed_usd = 0.0

    def tokens(self) -> TokenFigures:
        return {"input": self.input_tokens, "output": self.output_tokens, "cached_input": self.cached_input_tokens}


class Observer:
    """What the engine tells about every session's ended turns and cost reports
    (``engine.Context.observer``)."""

    FLUSH_DELAY = 1.0
    RETRY_DELAY = 5.0
    MAX_PENDING = 10_000

    def __init__(self, loop: "Loop", path: str | None, keep: float = DEFAULT_KEEP) -> None:
        self.loop = loop
        self.path = path
        #: Rows older than this many seconds are pruned (0: none are).
        self.keep = keep
        #: When rows were last pruned (loop time; None: not yet), and whether pruning gave up.
        self._pruned: float | None = None
        self._prune_failed = False
        #: This process in the rows: session ids repeat from one sidecar to the next.
        self.run = os.urandom(6).hex()
        self.figures: weakref.WeakKeyDictionary[ObservedSession, SessionFigures] = weakref.WeakKeyDictionary()
        self.pending: list[tuple[Any, ...]] = []
        self._db: "sqlite3.Connection | None" = None
        self._timer: Timer | None = None
        self._warned: set[str] = set()
        #: A write ran out of its budget: no more rows are written in this run.
        self.given_up = False
        self.closed = False

    def of(self, session: "ObservedSession") -> SessionFigures:
        figures = self.figures.get(session)
        if figures is None:
            figures = self.figures[session] = SessionFigures()
        return figures

    # -- what the engine calls -------------------------------------------------------------
    def context_usage(self, session: "ObservedSession", body: Any) -> None:
        cost = body.get("cost_usd") if isinstance(body, dict) else None
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            self.of(session).cost_usd = float(cost)

    def turn_ended(self, session: "ObservedSession", turn: "Turn", stop: StopReason, usage: TurnUsage | None) -> None:
        figures = self.of(session)
        spent = [0, 0, 0]
        if usage:
            spent = [
                int(usage.get("input_tokens") or 0),
                int(usage.get("output_tokens") or 0),
                int(usage.get("cached_input_tokens") or 0),
            ]
        figures.input_tokens += spent[0]
        figures.output_tokens += spent[1]
        figures.cached_input_tokens += spent[2]
        cost: float | None = None
        if figures.cost_usd is not None:
            cost = max(0.0, figures.cost_usd - figures.billed_usd)
            figures.billed_usd = figures.cost_usd
        duration = round(max(0.0, self.loop.time() - turn.started) * 1000)
        if self.path is None or self.closed or self.given_up:
            return
        row = (time.time(), session.launch.agent_id, model_of(session), self.run, session.id, turn.id,
               *spent, cost, duration, stop_name(stop))  # fmt: skip
        self.pending.append(row)
        if len(self.pending) > self.MAX_PENDING:
            del self.pending[: len(self.pending) - self.MAX_PENDING]
            self._warn("full", f"observations: more than {self.MAX_PENDING} rows waiting; the oldest were dropped")
        if self._timer is None:
            self._timer = self.loop.call_later(self.FLUSH_DELAY, self._flush_later)

    # -- writing ---------------------------------------------------------------------------
    def _flush_later(self) -> None:
        self._timer = None
        if not self.flush() and self.pending and not self.closed:
            self._timer = self.loop.call_later(self.RETRY_DELAY, self._flush_later)

    def flush(self) -> bool:
        """Write what is pending now, in one transaction; False if it could not."""
        if not self.pending or self.path is None or self.given_up:
            return True
        import sqlite3

        try:
            if self._db is None:
                fresh = not os.path.lexists(self.path)
                self._db = connect(self.path, create=True)
                if fresh:
                    log(f"observations: recording what turns cost in {self.path} (inspect --view cost reads it; "
                        f"--db or {DB_ENV}=off changes that)")  # fmt: skip
            db = self._db
            self.prune()
            bound(db, WRITE_BUDGET)
            db.execute("BEGIN")
            try:
                db.executemany(f"INSERT INTO turns ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                               self.pending)  # fmt: skip
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except VersionMismatch as exc:
            log(f"observations: {exc}; not writing to it in this run (--db PATH chooses another file)")
            self.pending.clear()
            self.given_up = True
            self._close_db()
            return False
        except (sqlite3.Error, OSError) as exc:
            reason = str(getattr(exc, "strerror", None) or exc)
            if reason == "interrupted":  # over budget: a trigger or a view in the file, or a huge one
                log(f"observations {self.path}: writing took more than {WRITE_BUDGET:g} s; not writing to it "
                    "again in this run")  # fmt: skip
                self.pending.clear()
                self.given_up = True
                self._close_db()
                return False
            self._warn(reason, f"observations {self.path}: {reason}; the rows are kept for a later try")
            if isinstance(exc, OSError) or "locked" not in reason and "busy" not in reason:
                self._close_db()  # reopen next time (the path may have been fixed)
            return False
        self.pending.clear()
        return True

    def prune(self, now: float | None = None) -> int:
        """Delete up to ``PRUNE_ROWS`` rows older than ``keep`` (the oldest first), when the
        file was just opened or the last prune is ``PRUNE_EVERY`` seconds old; the count."""
        db = self._db
        if db is None or self.keep <= 0 or self._prune_failed:
            return 0
        if self._pruned is not None and self.loop.time() - self._pruned < PRUNE_EVERY:
            return 0
        import sqlite3

        self._pruned = self.loop.time()
        cutoff = (time.time() if now is None else now) - self.keep
        bound(db, WRITE_BUDGET)
        try:
            cursor = db.execute(
                "DELETE FROM turns WHERE id IN (SELECT id FROM turns WHERE ended_at < ? ORDER BY ended_at LIMIT ?)",
                (cutoff, PRUNE_ROWS),
            )
        except sqlite3.Error as exc:
            self._prune_failed = True
            log(f"observations {self.path}: pruning old rows failed ({exc}); not pruning again in this run")
            return 0
        return max(0, cursor.rowcount)

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log(message)

    def _close_db(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # sqlite3.Error: closing what failed may fail too
                pass
            self._db = None

    def close(self) -> None:
        """The runtime ends: write what is pending (one last try) and let the file go."""
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        self.closed = True
        self._close_db()


def model_of(session: "ObservedSession") -> str | None:
    """The session's model: its ``model`` option's current value, when it has one."""
    value = session.info["configuration"]["options"].get("model")
    return value if isinstance(value, str) else None


def read_rows(path: str, since: float) -> list[TurnRow]:
    """The rows of turns ended at or after ``since`` (epoch seconds), oldest first."""
    import sqlite3

    db = connect(path, create=False, budget=READ_BUDGET)
    try:
        if schema_version(db) is None:
            return []  # made, not written to yet: no table, no rows
        db.row_factory = sqlite3.Row
        query = f"SELECT {', '.join(COLUMNS)} FROM turns WHERE ended_at >= ? ORDER BY ended_at, id"
        try:
            return [dict(row) for row in db.execute(query, (since,))]  # type: ignore[misc]  # (rows of COLUMNS)
        except sqlite3.OperationalError as exc:
            if str(exc) != "interrupted":
                raise
            raise sqlite3.OperationalError(f"reading took more than {READ_BUDGET:g} s: interrupted") from None
    finally:
        db.close()


def errors() -> tuple[type[Exception], ...]:
    """What reading or writing the database may raise."""
    import sqlite3

    return (sqlite3.Error, OSError)
