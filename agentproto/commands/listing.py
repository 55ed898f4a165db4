"""``agentproto list``: the catalog as this machine has it, as a table or as JSON.

Rules of this file:
- The report is ``discover``'s (runtime.py): versions are read in parallel through the
  loop, each ``--version`` a child process of its own; nothing here spawns anything.
- Only the table (or the JSON) goes to stdout. What discovery could not read is shown in
  the table, under the agent it concerns, never as a stray stderr line.
- Progress (a spinner and the elapsed time while versions are read) is drawn on stderr
  only when stderr is a terminal that can take it: never into a pipe, never under
  ``NO_COLOR`` or ``TERM=dumb``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Callable

from agentproto import __version__
from agentproto.core.errors import write_stderr
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.engine.runtime import Engine
from agentproto.loopio.loop import Loop

if TYPE_CHECKING:
    from agentproto.core.wire_types import DiscoveryReport

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TICK = 0.1


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal; not when it is closed or has no descriptor."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def live_terminal(stream: Any) -> bool:
    """May a spinner or an updating line be drawn on ``stream``? Only on a terminal that
    understands it, and not when the user asked for plain output (``NO_COLOR``)."""
    return is_terminal(stream) and os.environ.get("TERM", "") not in ("", "dumb") and not os.environ.get("NO_COLOR")


class Interrupted(Exception):
    """A signal ended ``list`` before every version was read: ``signum`` names it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def discover(progress: bool) -> DiscoveryReport:
    """The discovery report, with a spinner on stderr meanwhile when ``progress``.

    SIGINT, SIGTERM or SIGHUP while versions are read raise ``Interrupted`` once the loop
    is closed, and closing it kills every ``--version`` still running (the loop adopts
    them): none outlives ``list``, not even one that hangs or detaches."""
    loop = Loop(adopt_orphans=True)
    runtime = Engine(loop)
    result: list[DiscoveryReport] = []
    signalled: list[int] = []

    def on(signum: int) -> Callable[[], None]:
        return lambda: signalled.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, on(signum))
    start = loop.time()
    frame = [0]

    def draw() -> None:
        if result:
            return
        frame[0] += 1
        elapsed = loop.time() - start
        _status(f"{SPINNER[frame[0] % len(SPINNER)]} reading the agents' versions… {elapsed:.1f}s")
        loop.call_later(TICK, draw)

    runtime.discover(lambda value, _error: result.append(value))
    if progress and not result:
        loop.call_later(TICK, draw)
    try:
        loop.run(until=lambda: bool(result) or bool(signalled))
    finally:
        loop.close()
        if progress:
            _status("")
    if signalled:
        raise Interrupted(signalled[0])
    return result[0]


def _status(text: str) -> None:
    write_stderr("\r\x1b[K" + text)


def rows(report: DiscoveryReport) -> list[tuple[str, str, str, str, list[str]]]:
    """(id, status, version, where, notes) per agent: mock, the installed ones, the missing."""
    notes: dict[str, list[str]] = {}
    loose: list[str] = []
    ids = {a["id"] for a in report["agents"]} | {m["id"] for m in report["missing"]}
    for diagnostic in report["diagnostics"]:
        agent_id, _, rest = diagnostic["message"].partition(": ")
        if agent_id in ids and rest:
            notes.setdefault(agent_id, []).append(rest)
        else:
            loose.append(diagnostic["message"])
    out: list[tuple[str, str, str, str, list[str]]] = []
    for agent in report["agents"]:
        if agent["id"] == "mock":
            out.append(("mock", "built-in", __version__, "inside agentproto: nothing to install", []))
            continue
        version = agent.get("version") or "unknown"
        out.append((agent["id"], "installed", version, agent["executable_path"], notes.get(agent["id"], [])))
    for missing in report["missing"]:
        searched = [_searched(place) for place in missing["searched"]]
        extra = notes.get(missing["id"], []) + ["searched: " + ", ".join(searched)]
        out.append((missing["id"], "missing", "-", f"install: {missing['install_hint']}", extra))
    if loose:
        out.append(("", "", "", "", loose))
    return out


def _searched(place: str) -> str:
    # "$AGENTPROTO_CODEX_BIN=/nowhere" is where the override pointed: say it led nowhere.
    if place.startswith("$") and "=" in place:
        return f"{place} (not an executable)"
    return place


def table(report: DiscoveryReport) -> str:
    lines = rows(report)
    header = ("AGENT", "STATUS", "VERSION", "WHERE")
    widths = [max(len(header[i]), *(len(row[i]) for row in lines)) for i in range(3)]
    text = []
    everything: list[tuple[str, str, str, str, list[str]]] = [(*header, []), *lines]
    for row in everything:
        cells = row[:4]
        if any(cells):
            text.append("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(cells[:3])) + "  " + cells[3])
        indent = " " * (sum(widths) + 6) if any(cells) else ""
        for note in row[4]:
            text.append(indent + note)
    return "\n".join(text) + "\n"


def run(as_json: bool) -> int:
    try:
        report = discover(progress=live_terminal(sys.stderr))
    except Interrupted as exc:
        return 128 + exc.signum  # 130 for Ctrl-C, as every command
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(table(report))
    sys.stdout.flush()
    return 0
