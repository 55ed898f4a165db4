"""``inspect``: a sidecar's live sessions, and what its agents' turns cost. Sans-IO but for
reading the observations database.

Two views, with the seed's keys (all optional):

- ``view: "agents"`` (default): the live sessions of a runtime: id, agent, model, status,
  turns, token totals, cost so far, open requests, age, the agent's pid. ``agent: ID``
  gives that one session's full snapshot (its SessionInfo besides). ``sock`` asks a
  running sidecar's control socket instead of this process (control.py does the asking).
- ``view: "cost"``: the ended turns in the observations database (``db``, else the
  runtime's) since ``since`` (``24h`` default; ``30m``, ``7d``, ``90s``, or an ISO date or
  time), grouped ``by`` ``agent`` (default), ``model``, ``day``, ``session`` or ``db``, with
  totals; ``top: N`` adds the N most expensive turns. ``db`` may be a list of databases
  (one per machine, copied together): their rows are united (a turn in two of them, a
  copied file, counts once), ``dbs`` names them all and ``db`` the first; each must be of
  this agentproto's schema version (else an error naming the file and both versions), a
  missing one holds no rows.
- ``format``: ``json`` (the payload itself) or ``table`` (aligned, within 80 columns).

Rules of this file:
- The JSON payload is the stable contract (schema.json's ``InspectAgents`` and
  ``InspectCost``); the table is for people and may change.
- A bad key value is an ``InvalidRequest`` naming the key, the value and what it takes.
- The table shows no control character (escape sequences, bidi overrides): each is ``?``.
  Its cells come from agents (a model's name, a title) and the database, and it is printed
  to a terminal, which would act on them.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from typing import TYPE_CHECKING, Any, Sequence

from agentproto.core.errors import AgentError, Kind
from agentproto.engine import observations

if TYPE_CHECKING:
    from agentproto.core.inspect_types import (
        AgentRow,
        CostFigures,
        CostGroup,
        InspectAgents,
        InspectArgs,
        InspectCost,
        InspectView,
        TurnRow,
    )
    from agentproto.core.wire_types import JsonObject
    from agentproto.engine.runtime import Engine

VIEWS = ("agents", "cost")
BYS = ("agent", "model", "day", "session", "db")
FORMATS = ("table", "json")
DEFAULT_SINCE = "24h"
WIDTH = 80
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def bad(key: str, value: Any, takes: str) -> AgentError:
    return AgentError.detail(Kind.INVALID_REQUEST, f"inspect: {key} {json.dumps(value)}: {takes}")


def check_args(args: JsonObject) -> InspectArgs:
    """The request's keys, checked and defaulted (InvalidRequest naming a bad one)."""
    view = args.get("view") or "agents"
    if view not in VIEWS:
        raise bad("view", view, "one of agents, cost")
    by = args.get("by") or "agent"
    if by == "provider":  # the seed's default name for the same grouping
        by = "agent"
    if by not in BYS:
        raise bad("by", by, "one of " + ", ".join(BYS))
    fmt = args.get("format") or "json"
    if fmt not in FORMATS:
        raise bad("format", fmt, "table or json")
    top = args.get("top")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 0):
        raise bad("top", top, "a whole number >= 0")
    agent = args.get("agent")
    if agent is not None and not isinstance(agent, (str, int)) or isinstance(agent, bool):
        raise bad("agent", agent, "a session id")
    since = args.get("since") or DEFAULT_SINCE
    if not isinstance(since, str):
        raise bad("since", since, "a span (30m, 24h, 7d) or an ISO date")
    parse_since(since)
    sock = args.get("sock")
    if sock is not None and not isinstance(sock, str):
        raise bad("sock", sock, "a path")
    db = args.get("db")
    dbs: list[str] | None = None
    if isinstance(db, str):
        dbs = [db]
    elif isinstance(db, list) and db and all(isinstance(one, str) for one in db):
        dbs = list(db)
    elif db is not None:
        raise bad("db", db, "a path, or a non-empty list of paths")
    return {"view": view, "by": by, "format": fmt, "top": top, "since": since, "sock": sock,
            "db": dbs, "agent": None if agent is None else str(agent)}  # fmt: skip


def parse_since(text: str, now: float | None = None) -> float:
    """``since`` as epoch seconds: a span back from now (``30m``, ``24h``, ``7d``) or an
    ISO date (``2026-12-01``, midnight UTC) or date and time (UTC unless it says)."""
    now = datetime.datetime.now(datetime.timezone.utc).timestamp() if now is None else now
    span = _SPAN.match(text)
    if span:
        return now - float(span.group(1)) * _UNIT[span.group(2)]
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise bad("since", text, "a span (30m, 24h, 7d) or an ISO date (2026-12-01)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


# -- view agents ------------------------------------------------------------------------------


def session_row(runtime: "Engine", session: Any) -> AgentRow:
    figures = runtime.observer.of(session)
    turn = session.turn
    open_requests = len(turn.requests if turn is not None else ()) + sum(
        1 for pending in session.app.pending.values() if pending.turn is None
    )
    transport = session.transport
    return {
        "id": session.id,
        "agent": session.launch.agent_id,
        "model": observations.model_of(session),
        "status": session.info["status"] if session.state == "open" else session.state.capitalize(),
        "turns": session.turn_counter,
        "tokens": figures.tokens(),
        "cost_usd": figures.cost_usd,
        "open_requests": open_requests,
        "age_s": round(max(0.0, runtime.loop.time() - session.created), 3),
        "pid": None if transport is None else transport.pid,
    }


def agents_view(runtime: "Engine", agent: str | None = None) -> InspectAgents:
    sessions = [s for s in runtime.sessions.values() if not s.launch.throwaway]
    if agent is None:
        return {"view": "agents", "pid": os.getpid(), "agents": [session_row(runtime, s) for s in sessions]}
    session = runtime.sessions.get(agent)
    if session is None:
        raise AgentError.unknown_session(agent)
    row: AgentRow = {**session_row(runtime, session), "info": session.snapshot()}
    return {"view": "agents", "pid": os.getpid(), "agent": row}


# -- view cost --------------------------------------------------------------------------------

_FIGURES = ("turns", "input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "duration_ms")


def _group_key(row: TurnRow, by: str) -> str:
    if by == "day":
        return iso(row["ended_at"])[:10]
    if by == "session":
        return f"{row['run']}/{row['session']}"
    if by == "db":
        return row["db"]
    value = row["agent"] if by == "agent" else row["model"]  # (BYS: agent or model here)
    return value if value is not None else "(unknown)"


def _add(total: CostFigures, row: TurnRow) -> None:
    total["turns"] += 1
    for key in ("input_tokens", "output_tokens", "cached_input_tokens", "duration_ms"):
        total[key] += row[key]
    if row["cost_usd"] is not None:
        total["cost_usd"] = (total["cost_usd"] or 0.0) + row["cost_usd"]


def _empty() -> CostFigures:
    return {"turns": 0, "input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0,
            "cost_usd": None, "duration_ms": 0}  # fmt: skip


def read_all(paths: list[str], start: float) -> list[TurnRow]:
    """The rows of every database in ``paths`` since ``start``, united (a turn, by its run,
    session and turn ids, counts once: the first database holding it names it), oldest
    first; each row says its ``db``."""
    rows: list[TurnRow] = []
    seen: set[tuple[str, str, str]] = set()
    for path in dict.fromkeys(paths):  # a path given twice is read once
        try:
            found = observations.read_rows(path, start)
        except FileNotFoundError:
            found = []  # nothing observed yet
        except observations.VersionMismatch as exc:
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"inspect: {exc}") from None
        except observations.errors() as exc:
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"inspect: cannot read {path}: {exc}") from None
        for row in found:
            key = (row["run"], row["session"], row["turn"])
            if key not in seen:
                seen.add(key)
                rows.append({**row, "db": path})
    if len(paths) > 1:
        rows.sort(key=lambda row: row["ended_at"])
    return rows


def cost_view(
    path: str | list[str] | None, since: str, by: str, top: int | None, now: float | None = None
) -> InspectCost:
    """The cost view over the database at ``path``, or the databases (None: disabled)."""
    start = parse_since(since, now)
    if path is None:
        why = "inspect: the observations database is off (AGENTPROTO_DB=off)"
        raise AgentError.detail(Kind.INVALID_CONFIGURATION, why)
    paths = [path] if isinstance(path, str) else path
    rows = read_all(paths, start)
    groups: dict[str, CostGroup] = {}
    total = _empty()
    for row in rows:
        key = _group_key(row, by)
        _add(groups.setdefault(key, {"key": key, **_empty()}), row)
        _add(total, row)
    ordered = sorted(groups.values(), key=lambda g: (-(g["cost_usd"] or 0.0), -g["input_tokens"] - g["output_tokens"],
                                                      g["key"]))  # fmt: skip
    view: InspectCost = {"view": "cost", "db": paths[0], "dbs": list(dict.fromkeys(paths)), "since": iso(start),
                         "by": by, "groups": ordered, "total": total}  # fmt: skip
    if top:
        expensive = sorted(rows, key=lambda r: (-(r["cost_usd"] or 0.0), -r["input_tokens"] - r["output_tokens"]))
        view["top"] = [{**row, "ended_at": iso(row["ended_at"])} for row in expensive[:top]]
    return view


# -- rendering --------------------------------------------------------------------------------


def render(view: InspectView, fmt: str) -> list[str]:
    """The view as lines of text: its JSON (one line), or a table."""
    if fmt == "json":
        return [json.dumps(view, separators=(",", ":"))]
    return table(view)


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _count(value: object) -> str:
    return f"{value:,}"


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _cut(value: Any, width: int) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def aligned(header: tuple[str, ...], rows: list[list[str]], numeric: set[int], widest: int = WIDTH) -> list[str]:
    """Columns padded to their widest cell, numbers right-aligned; the widest text columns
    give way (their cells cut with "…") so that no line passes ``widest``."""
    cells: list[Sequence[str]] = [header, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    while sum(widths) + 2 * (len(widths) - 1) > widest:
        text = [i for i in range(len(widths)) if i not in numeric and widths[i] > max(len(header[i]), 4)]
        if not text:
            break
        widths[max(text, key=lambda i: widths[i])] -= 1
    lines = []
    for row in cells:
        parts = [
            (_cut(cell, widths[i]).rjust(widths[i]) if i in numeric else _cut(cell, widths[i]).ljust(widths[i]))
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


#: What a terminal acts on instead of showing: C0 and C1 controls, DEL, zero-width and
#: direction marks and overrides.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def table(view: InspectView) -> list[str]:
    """The view as aligned lines for people, without a control character."""
    return [table_line(line) for line in _table(view)]


def table_line(line: str) -> str:
    """A line for a terminal: each control character ``?``."""
    return _CONTROLS.sub("?", line)


def _table(view: InspectView) -> list[str]:
    if view["view"] == "agents":
        if "agent" in view:
            row = view["agent"]
            fields = [(k, row[k]) for k in ("id", "agent", "model", "status", "turns", "open_requests", "pid")]
            fields += [("tokens", ", ".join(f"{k} {_count(v)}" for k, v in row["tokens"].items()))]
            fields += [("cost", _money(row["cost_usd"])), ("age", _age(row["age_s"]))]
            fields += [("title", row["info"].get("title")), ("resume_token", row["info"].get("resume_token"))]
            return [f"{k:<13} {_cut(v, WIDTH - 14)}" for k, v in fields]
        rows = [
            [str(r["id"]), str(r["agent"]), _cut(r["model"], 18), str(r["status"]), str(r["turns"]),
             _count(r["tokens"]["input"]), _count(r["tokens"]["output"]), str(r["open_requests"]), _age(r["age_s"]),
             str(r["pid"] or "-")]
            for r in view["agents"]
        ]  # fmt: skip
        header = ("SESSION", "AGENT", "MODEL", "STATUS", "TURNS", "IN", "OUT", "REQ", "AGE", "PID")
        if not rows:
            return ["no live sessions"]
        return aligned(header, rows, {4, 5, 6, 7, 8, 9})
    since = str(view["since"])[:16].replace("T", " ")
    lines = [f"cost since {since} UTC, by {view['by']}"]
    for db in view.get("dbs") or [str(view["db"])]:
        lines.append("database " + (db if len(db) <= WIDTH - 9 else "…" + db[-(WIDTH - 10) :]))
    total = view["total"]
    groups: list[CostGroup] = [*view["groups"], {**total, "key": "TOTAL"}]
    rows = [
        [str(g["key"]), str(g["turns"]), _count(g["input_tokens"]), _count(g["output_tokens"]),
         _count(g["cached_input_tokens"]), _money(g["cost_usd"])]
        for g in groups
    ]  # fmt: skip
    lines += aligned((view["by"].upper(), "TURNS", "IN", "OUT", "CACHED", "COST"), rows, {1, 2, 3, 4, 5})
    if "top" in view:
        lines += ["", f"the {len(view['top'])} most expensive turns"]
        top_rows = [
            [str(r["ended_at"])[:16].replace("T", " "), str(r["agent"]), f"{r['session']}/{r['turn']}",
             _count(r["input_tokens"]), _count(r["output_tokens"]), _money(r["cost_usd"]), str(r["stop"])]
            for r in view["top"]
        ]  # fmt: skip
        lines += aligned(("ENDED (UTC)", "AGENT", "TURN", "IN", "OUT", "COST", "STOP"), top_rows, {3, 4, 5})
    return lines
