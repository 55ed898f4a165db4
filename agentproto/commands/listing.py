"""``agentproto list`` and ``agentproto probe AGENT``: the catalog as this machine has it, and
what each installed agent says of itself (login, models, commands, capabilities).

Rules of this file:
- The report is ``discover``'s (engine/oneshots.py): versions are read in parallel through
  the loop, each ``--version`` a child process of its own. Then every installed agent is
  probed, all at once on the same loop (one selectors loop, no thread): the runtime's
  ``probe`` opens a throwaway session in an empty private directory (private.py, removed
  at exit) and closes it once open, so nothing is prompted and no turn reaches a model
  (nor does the agent start in the user's directory). A probe that has not answered within
  ``--timeout`` seconds (default 10) is that agent's error; closing the loop at the end
  kills whatever it started.
- Only the table (or the JSON) goes to stdout. What discovery or a probe could not read is
  shown in the table, under the agent it concerns, never as a stray stderr line. The table
  shows no control character (each is ``?``): model names and commands come from agents.
- ``--json`` is the discovery report as before, each probed agent's entry with ``details``
  (AgentDetails) or ``probe_error`` ({kind, message}) added; nothing renamed.
- Progress (a spinner, the agents answered so far and the elapsed time) is drawn on stderr
  only when stderr is a terminal that can take it: never into a pipe, never under
  ``NO_COLOR`` or ``TERM=dumb``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from typing import Any, Callable

from agentproto import __version__
from agentproto.core.errors import AgentError, Kind, write_stderr
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.engine.runtime import Engine
from agentproto.loopio import private
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


#: How long one agent's probe may take (``--timeout``), in seconds.
PROBE_TIMEOUT = 10.0


class Listing:
    """One ``list`` (or ``probe``) on its own loop: the report, then every probe, each
    answer filed as it comes (``probes``: agent id -> ("details", AgentDetails) or
    ("error", {kind, message}))."""

    def __init__(self, progress: bool, timeout: float | None) -> None:
        self.loop = Loop(adopt_orphans=True)
        self.runtime = Engine(self.loop)
        self.progress = progress
        self.timeout = timeout
        self.report: DiscoveryReport | None = None
        self.probes: dict[str, tuple[str, Any]] = {}
        self.pending: set[str] = set()
        self.signalled: list[int] = []
        self.what = "reading the agents' versions"
        self.workdir: str | None = None

    def finished(self) -> bool:
        return (self.report is not None and not self.pending) or bool(self.signalled)

    def run(self, start: Callable[[], None]) -> None:
        """Run ``start``'s work to its end (or a signal: ``Interrupted``, once the loop is
        closed and every child it started killed: none outlives the command, not even one
        that hangs or detaches)."""
        loop = self.loop

        def on(signum: int) -> Callable[[], None]:
            return lambda: self.signalled.append(signum)

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, on(signum))
        begun = loop.time()
        frame = [0]

        def draw() -> None:
            if self.finished():
                return
            frame[0] += 1
            elapsed = loop.time() - begun
            answered = f" {len(self.probes)}/{len(self.probes) + len(self.pending)}" if self.pending else ""
            _status(f"{SPINNER[frame[0] % len(SPINNER)]} {self.what}…{answered} {elapsed:.1f}s")
            loop.call_later(TICK, draw)

        start()
        if self.progress and not self.finished():
            loop.call_later(TICK, draw)
        try:
            loop.run(until=self.finished)
        finally:
            self.runtime.end_oneshots()  # a signal: the version runs still going are killed and reaped
            loop.close()
            if self.progress:
                _status("")
        if self.signalled:
            raise Interrupted(self.signalled[0])

    def discover(self) -> None:
        """The discovery report, then (``timeout`` not None) a probe of every agent found."""

        def found(report: DiscoveryReport, _error: Any) -> None:
            if self.timeout is not None:
                for agent in report["agents"]:
                    self.probe(agent["id"], {"agent": agent["id"]})
            self.report = report

        self.runtime.discover(found)

    def probe(self, key: str, args: dict[str, Any]) -> None:
        """Probe the agent of ``args`` (an open's fields), filed under ``key``, in an empty
        private directory (made once, removed at exit): not the user's cwd, not /tmp."""
        if self.workdir is None:
            self.workdir = private.session_dir("probe")
        args = {"dir": self.workdir, **args}
        self.pending.add(key)
        n = len(self.pending) + len(self.probes)
        self.what = f"probing {n} agent{'s' if n > 1 else ''} (login, models, commands)"
        timeout = PROBE_TIMEOUT if self.timeout is None else self.timeout
        session: list[Any] = []

        def answered(details: Any, error: AgentError | None) -> None:
            if key not in self.pending:
                return  # it answered after its time was up
            self.pending.discard(key)
            alarm.cancel()
            self.probes[key] = ("error", error.body()) if error is not None else ("details", details)

        def late() -> None:
            if key not in self.pending:
                return
            self.pending.discard(key)
            error = AgentError.detail(Kind.HANDSHAKE_TIMEOUT, f"no answer within {timeout:g} s (--timeout)")
            self.probes[key] = ("error", error.body())
            opened = session[0] if session else None
            if opened is not None and opened.state == "opening":
                opened.open_failed(error)  # its agent killed now
            elif opened is not None and opened.state == "open":
                opened.close(lambda _ok, _err: None)  # and the loop's close kills what is left

        alarm = self.loop.call_later(timeout, late)
        session.append(self.runtime.probe(args, answered))


def _status(text: str) -> None:
    write_stderr("\r\x1b[K" + text)


def rows(
    report: DiscoveryReport, probes: dict[str, tuple[str, Any]] | None = None, show_missing: bool = True
) -> list[tuple[str, str, str, str, list[str]]]:
    """(id, status, version, where, notes) per agent: mock, the installed ones (with what their
    probe said), the missing (``show_missing``; else only their notes, loose)."""
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
    probes = probes or {}
    for agent in report["agents"]:
        said = describe(probes[agent["id"]]) if agent["id"] in probes else []
        if agent["id"] == "mock":
            out.append(("mock", "built-in", __version__, "inside agentproto: nothing to install", said))
            continue
        version = agent.get("version") or "unknown"
        out.append((agent["id"], "installed", version, agent["executable_path"], notes.get(agent["id"], []) + said))
    if show_missing:
        for missing in report["missing"]:
            searched = [_searched(place) for place in missing["searched"]]
            extra = notes.get(missing["id"], []) + ["searched: " + ", ".join(searched)]
            out.append((missing["id"], "missing", "-", f"install: {missing['install_hint']}", extra))
    else:
        loose += [note for missing in report["missing"] for note in notes.get(missing["id"], [])]
    if loose:
        out.append(("", "", "", "", loose))
    return out


#: How many of a list (models, commands) a line names before "(+N more)".
SHOWN = 8


def _some(names: list[str], shown: int = SHOWN) -> str:
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def login_text(auth: Any) -> str:
    """An AuthStatus in words: logged in (how, as whom), not logged in (how to), unknown."""
    if isinstance(auth, dict) and "Authenticated" in auth:
        body = auth["Authenticated"]
        kind = body.get("kind")
        how = {"Subscription": "subscription", "ApiKey": "API key", "CloudProvider": "cloud provider"}.get(
            kind if isinstance(kind, str) else "", kind["Other"] if isinstance(kind, dict) and "Other" in kind else "?"
        )
        account = body.get("account") or {}
        who = ", ".join(str(v) for v in (account.get("email"), account.get("plan")) if v)
        return f"logged in ({how}{', ' + who if who else ''})"
    if isinstance(auth, dict) and "Unauthenticated" in auth:
        ways = []
        for method in auth["Unauthenticated"].get("login") or []:
            if "Terminal" in method:
                ways.append("run `" + " ".join(method["Terminal"]["command"]) + "`")
            elif "EnvVar" in method:
                ways.append("set " + method["EnvVar"]["name"])
        return "NOT logged in" + (": " + " or ".join(ways) if ways else "")
    return "unknown (the agent does not say)"


def option_text(option: Any) -> str:
    """A config option and its values, the current one marked with ``*``."""
    kind = option.get("kind")
    current = option.get("current")
    if isinstance(kind, dict) and "Select" in kind:
        values = [str(c.get("value")) + ("*" if c.get("value") == current else "") for c in kind["Select"]["choices"]]
        return _some(values) if values else "-"
    return f"{str(kind).lower()}, now {json.dumps(current)}"


def describe(probe: tuple[str, Any]) -> list[str]:
    """A probe's answer as the lines under its agent: login, each option (models first),
    commands, capabilities; or why it could not be probed."""
    what, body = probe
    if what == "error":
        return [f"probe failed: {body.get('kind', 'Error')}: {body.get('message', '')}"]
    lines = [f"login: {login_text(body.get('auth'))}"]
    options = sorted(body.get("config_options") or [], key=lambda o: (o.get("id") != "model", o.get("id", "")))
    for option in options:
        label = "models" if option.get("id") == "model" else str(option.get("id"))
        lines.append(f"{label}: {option_text(option)}")
    commands = ["/" + str(c.get("name", "")).lstrip("/") for c in body.get("commands") or []]
    if commands:
        lines.append(f"commands: {_some(commands, 12)}")
    capabilities = body.get("capabilities") or {}
    features = list(capabilities.get("features") or [])
    transports = list(capabilities.get("mcp_transports") or [])
    lines.append("capabilities: " + (", ".join(features) or "-") + (f"; MCP over {', '.join(transports)}" if
                                                                     transports else ""))  # fmt: skip
    return lines


def _searched(place: str) -> str:
    # "$AGENTPROTO_CODEX_BIN=/nowhere" is where the override pointed: say it led nowhere.
    if place.startswith("$") and "=" in place:
        return f"{place} (not an executable)"
    return place


def table(report: DiscoveryReport, probes: dict[str, tuple[str, Any]] | None = None, show_all: bool = True) -> str:
    lines = rows(report, probes, show_all)
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
    if not show_all and report["missing"]:
        names = ", ".join(m["id"] for m in report["missing"])
        text.append(f"not installed: {names} (`list --all` shows how to install each)")
    return "\n".join(_clean(line) for line in text) + "\n"


#: What a terminal acts on instead of showing (an agent's model names and command
#: descriptions reach the table): C0 and C1 controls, DEL, direction marks and overrides.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _clean(line: str) -> str:
    return _CONTROLS.sub("?", line)


def json_report(report: DiscoveryReport, probes: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The discovery report, each probed agent's entry with ``details`` or ``probe_error``."""
    agents = []
    for agent in report["agents"]:
        entry: dict[str, Any] = dict(agent)
        if agent["id"] in probes:
            what, body = probes[agent["id"]]
            entry["details" if what == "details" else "probe_error"] = body
        agents.append(entry)
    return {**report, "agents": agents}


def run(as_json: bool, show_all: bool = False, timeout: float | None = PROBE_TIMEOUT) -> int:
    """``list``: ``timeout`` None reads the versions only (``--no-probe``)."""
    listing = Listing(progress=live_terminal(sys.stderr), timeout=timeout)
    try:
        listing.run(listing.discover)
    except Interrupted as exc:
        return 128 + exc.signum  # 130 for Ctrl-C, as every command
    report = listing.report
    assert report is not None
    if as_json:
        sys.stdout.write(json.dumps(json_report(report, listing.probes), indent=2) + "\n")
    else:
        sys.stdout.write(table(report, listing.probes, show_all))
    sys.stdout.flush()
    return 0


def run_probe(agent: Any, as_json: bool, timeout: float) -> int:
    """``probe AGENT``: one agent's details, a table or JSON; 1 when it cannot be probed."""
    listing = Listing(progress=live_terminal(sys.stderr), timeout=timeout)
    name = agent if isinstance(agent, str) else json.dumps(agent)
    listing.report = {"agents": [], "missing": [], "diagnostics": []}
    try:
        listing.run(lambda: listing.probe(name, {"agent": agent}))
    except Interrupted as exc:
        return 128 + exc.signum
    what, body = listing.probes[name]
    if what == "error":
        write_stderr(f"agentproto probe: {name}: {body.get('message') or body.get('kind')}\n")
        return 1
    if as_json:
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return 0
    lines = [("agent", name), ("version", str(body.get("version") or "unknown"))]
    for line in describe((what, body)):
        label, _, rest = line.partition(": ")
        lines.append((label, rest))
    for command in body.get("commands") or []:
        text = "/" + str(command.get("name", "")).lstrip("/")
        lines.append(("", f"{text}  {command.get('description') or ''}".rstrip()))
    width = max(len(label) for label, _ in lines)
    sys.stdout.write("".join(_clean(f"{label:<{width}}  {value}".rstrip()) + "\n" for label, value in lines))
    return 0
