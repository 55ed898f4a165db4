"""Replay's side of a recording, sans-IO: reading it, normalizing it, and the timeline.

A recording (record.py) is read into runs, one per header. Each run becomes a timeline:
the *inputs* (what the app sent: protocol 1 lines, its input's end, ops requests, HTTP
POSTs; what the agent sent: each read of its output, its exit) and, per stream, the
*expectations* (what agentproto wrote: protocol 1 lines out per connection, ops
responses, and per session what the driver wrote to its agent, its spawn and shutdown
steps, each restart of its process). Replay injects each input once every expectation
recorded before it has been met (so the live run is fed in the order the recorded one
was), and compares each live record with the next expectation of its stream.

Volatile values are normalized on both sides before comparing, everything else must be
equal byte for byte:
- event ``occurred_at`` and a PlanUsage's ``fetched_at`` (zeroed), durations (members
  named ``duration_ms``, ``duration_api_ms``, ``elapsed_ms``, ``age_s``: zeroed), process ids (``pid``) and a rate
  limit's reset time (``retry_at``, from the clock) with the wait it gives (``wait_s``, and
  the number in "sent again in N s");
- temp paths: the recording machine's temp directory and the replay's own become
  ``$TMP``, and the sidecar's private directories (``agentproto-XXXXXXXX/...``)
  ``$PRIVATE``. A temp directory is a path of its own only where it starts one (at the
  start of the text, after a quote, whitespace, ``=``, ``:`` or ``file://``) and ends one
  (before ``/``, JSON's escaped slash, the end of the text or a character no path has there:
  a quote, whitespace, ``=``, ``:``, ``,``, ``;``, a backslash, a closing bracket), on
  both sides: ``/var/tmp/x`` holds no ``/tmp``, nor does ``/tmpx``. Its JSON-escaped
  spelling (each ``/`` escaped) is one too;
- loopback ports (``127.0.0.1:PORT``) and secrets: redact.py's rules on both sides
  (``[redacted]``; the recorded side already had them but for a rule added since);
- agentproto's own version where it reports it (``$VERSION``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentproto import __version__
from agentproto.core import redact
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentInstallation

WIRE_DIRS = frozenset({"launch", "spawn", "id", "to_agent", "from_agent", "control", "exit", "restart"})
APP_DIRS = frozenset({"in", "out", "eof", "post"})
#: The live records replay compares (the rest are inputs echoed back).
EXPECTED_DIRS = frozenset({"out", "to_agent", "spawn", "control", "restart"})


class Invalid(Exception):
    """A line that is not a valid record (exit 2)."""

    def __init__(self, lineno: int, why: str) -> None:
        super().__init__(f"line {lineno}: {why}")


# -- reading ------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a recording: its header (None for records before any header) and records."""

    header: dict[str, Any] | None
    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: The header's line number in the file (0: no header).
    header_line: int = 0

    @property
    def frontend(self) -> str:
        if self.header is not None and isinstance(self.header.get("frontend"), str):
            return str(self.header["frontend"])
        if any("request" in record for _, record in self.records):
            return "agent"
        return "serve"


_STR = (str,)


#: The members a record of each direction has of its own, with their types.
_MEMBERS: dict[str, dict[str, tuple[type, ...]]] = {
    "from_agent": {"read": (int,)},
    "spawn": {"argv": (list,)},
    "id": {"purpose": _STR, "value": _STR},
    "control": {"action": _STR},
    "restart": {"process": (int,)},
    "exit": {"stderr": _STR},
    "launch": {"agent": (dict,)},
    "post": {"path": _STR},
}


def _need(record: dict[str, Any], lineno: int, **kinds: Any) -> None:
    for key, types in kinds.items():
        if key not in record:
            raise Invalid(lineno, f"a {record.get('dir')} record without `{key}`")
        if not isinstance(record[key], types) or isinstance(record[key], bool) and bool not in types:
            raise Invalid(lineno, f"`{key}` of a {record.get('dir')} record has the wrong type")


def check_record(record: Any, lineno: int) -> str:
    """What a line holds ("header", "pair", "transcript"), or ``Invalid``."""
    if not isinstance(record, dict):
        raise Invalid(lineno, "not a JSON object")
    if "recording" in record:
        if not isinstance(record["recording"], int) or record["recording"] < 1:
            raise Invalid(lineno, "a header whose `recording` is not a format number")
        mock = record.get("mock")
        if mock is not None and not isinstance(mock, dict):
            raise Invalid(lineno, "a header whose `mock` is not an object")
        return "header"
    if "request" in record or "response" in record:
        if set(record) != {"request", "response"}:
            raise Invalid(lineno, "a pair has exactly `request` and `response`")
        if not isinstance(record["request"], str) or not isinstance(record["response"], str):
            raise Invalid(lineno, "a pair's `request` and `response` are strings")
        return "pair"
    direction = record.get("dir")
    if not isinstance(direction, str) or direction not in WIRE_DIRS | APP_DIRS:
        raise Invalid(lineno, "not a record (no header, pair or known `dir`)")
    _need(record, lineno, t=(int,))
    if direction in ("in", "out", "to_agent", "from_agent"):
        _need(record, lineno, line=_STR)
    if direction in WIRE_DIRS:
        _need(record, lineno, session=_STR)
    _need(record, lineno, **_MEMBERS.get(direction, {}))
    return "transcript"


def read_runs(text: str) -> list[Run]:
    """The runs of a recording's text, or ``Invalid`` for its first bad line."""
    runs: list[Run] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise Invalid(lineno, f"not JSON ({exc})") from None
        what = check_record(record, lineno)
        if what == "header":
            runs.append(Run(record, header_line=lineno))
        else:
            if not runs:
                runs.append(Run(None))
            runs[-1].records.append((lineno, record))
    if not runs:
        raise Invalid(0, "the file holds no records")
    return runs


# -- normalization -------------------------------------------------------------------------------

_OCCURRED = re.compile(r'("(?:occurred_at|fetched_at)":\s*\{"secs_since_epoch":\s*)\d+(,\s*"nanos_since_epoch":\s*)\d+')
_VOLATILE_NUMBER = re.compile(
    r'((?:\\*")(?:duration_ms|duration_api_ms|elapsed_ms|age_s|pid|retry_at|wait_s)(?:\\*")\s*:\s*)-?\d+(?:\.\d+)?'
)
#: The wait before a rate-limited turn is sent again, in its Diagnostic's text: the clock's too.
_RETRY_WAIT = re.compile(r"(sent again in )\d+(?:\.\d+)? s")
_PRIVATE = re.compile(r"agentproto-[a-z0-9_]{8}(?:/[A-Za-z0-9_.-]+-[a-z0-9_]{8})?")
_PORT = re.compile(r"((?:127\.0\.0\.1|localhost|\[::1\]):)\d+")


class Normalizer:
    """Both sides' volatile values, made equal (see the module's docstring)."""

    def __init__(self, recorded_tmpdir: str | None, live_tmpdir: str, replay_root: str, recorded_version: str | None):
        self.recorded = [p for p in (recorded_tmpdir,) if p]
        # Longest first: the replay's root lies inside the live temp dir.
        self.live = sorted({replay_root, live_tmpdir}, key=len, reverse=True)
        self.recorded_version = recorded_version
        self.replay_root = replay_root

    def to_live(self, text: str) -> str:
        """A recorded input as the live run gets it: the recording's temp paths moved into
        the replay's own directory."""
        for prefix in self.recorded:
            text = _replace_path(text, prefix, self.replay_root)
        return text

    def _common(self, text: str, prefixes: list[str], version: str | None) -> str:
        for prefix in prefixes:
            text = _replace_path(text, prefix, "$TMP")
        text = _PRIVATE.sub("$PRIVATE", text)
        text = _OCCURRED.sub(r"\g<1>0\g<2>0", text)
        text = _VOLATILE_NUMBER.sub(r"\g<1>0", text)
        text = _RETRY_WAIT.sub(r"\g<1>N s", text)
        text = _PORT.sub(r"\g<1>PORT", text)
        if version:
            text = text.replace(f'"{version}"', '"$VERSION"').replace(f'\\"{version}\\"', '\\"$VERSION\\"')
        return text

    def recorded_side(self, text: str) -> str:
        # The rules again: a recording made before a rule was added is compared as if
        # it had been made under it (a no-op on one made under it).
        return self._common(redact.clean(text), self.recorded, self.recorded_version)

    def live_side(self, text: str) -> str:
        return self._common(redact.clean(text), self.live, __version__)


#: What may come before a temp directory for it to start a path, and after it for it to
#: end one (see the module's docstring).
_BEFORE = r"""(?:(?<![^\s"'=:])|(?<=file://))"""
_AFTER = r"""(?=/|\\/|$|[\s"'=:,;\\\])}>])"""


def _replace_path(text: str, prefix: str, replacement: str) -> str:
    prefix = prefix.rstrip("/") or "/"
    if prefix == "/":
        return text
    # /tmp, /tmp/x, "/tmp", x=/tmp, never /tmpfoo or /var/tmp; and JSON's \/tmp\/x.
    escaped, escaped_by = prefix.replace("/", "\\/"), replacement.replace("/", "\\/")
    pattern = _BEFORE + "(?:(" + re.escape(prefix) + ")|" + re.escape(escaped) + ")" + _AFTER
    return re.sub(pattern, lambda m: replacement if m.group(1) is not None else escaped_by, text)


# -- the timeline ---------------------------------------------------------------------------------


@dataclass
class Input:
    """Something the live run is given: ``kind`` and its ``body``, at ``position``."""

    position: float
    kind: str  # connect, in, eof, request, post, read, exit
    body: dict[str, Any]
    lineno: int


@dataclass
class Expected:
    """A record the live run must produce, in ``stream``, at ``position``."""

    position: float
    stream: tuple[Any, ...]
    text: str  # normalized text (a pair's response: all its lines)
    lineno: int
    request: str  # the app's request it answers (for the drift report)


@dataclass
class Timeline:
    inputs: list[Input]
    streams: dict[tuple[Any, ...], list[Expected]]
    #: Per session: its launch (the agent's installation) and the ids its driver made up.
    installations: dict[str, AgentInstallation]
    ids: dict[tuple[str, str], list[str]]
    wired: set[str]
    #: Per session and JSON-RPC id (its JSON text): the answers agentproto wrote to the
    #: agent's own requests (``to_agent`` lines with a result or an error), in order, as the
    #: live run gets them (its temp paths moved): replay answers with them (recorded_answer).
    answers: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def recorded_answer(self, session: str, rpc_id: Any) -> str | None:
        """The next recorded answer to the agent's request ``rpc_id`` of ``session``, if any."""
        try:
            key = json.dumps(rpc_id, sort_keys=True)
        except (TypeError, ValueError):
            return None
        left = self.answers.get((session, key))
        return left.pop(0) if left else None


def expected_text(record: dict[str, Any]) -> str:
    """The part of a record replay compares (before normalization)."""
    direction = record.get("dir")
    if "response" in record:
        return str(record["response"])
    if direction in ("out", "to_agent"):
        return str(record["line"])
    if direction == "spawn":
        return json.dumps({"argv": record["argv"], "cwd": record.get("cwd")})
    if direction in ("control", "restart"):
        return json.dumps({k: v for k, v in record.items() if k not in ("t", "dir", "session")}, sort_keys=True)
    raise ValueError(direction)


def stream_of(record: dict[str, Any]) -> tuple[Any, ...]:
    if "response" in record:
        return ("pairs",)
    if record["dir"] == "out":
        return ("conn", record.get("conn"))
    return ("wire", record["session"])


def build(run: Run, normalizer: Normalizer) -> Timeline:
    """The run's inputs and expectations (see the module's docstring)."""
    inputs: list[Input] = []
    streams: dict[tuple[Any, ...], list[Expected]] = {}
    installations: dict[str, AgentInstallation] = {}
    ids: dict[tuple[str, str], list[str]] = {}
    wired: set[str] = set()
    answers: dict[tuple[str, str], list[str]] = {}
    reads: dict[str, tuple[int, Input]] = {}  # session -> its read being gathered
    conns: set[Any] = set()
    ops = run.frontend not in ("serve", "unix")
    segment_start = 0.0  # ops: where the next request goes (before its wire, see record.py)
    request = ""
    last_in: dict[Any, str] = {}
    for index, (lineno, record) in enumerate(run.records):
        position = float(index)
        direction = record.get("dir")
        if direction in WIRE_DIRS:
            session = record["session"]
            if direction != "from_agent":
                reads.pop(session, None)
            if direction == "launch":
                installations[session] = record["agent"]
            elif direction == "id":
                ids.setdefault((session, record["purpose"]), []).append(record["value"])
            elif direction == "from_agent":
                wired.add(session)
                gathering = reads.get(session)
                line = normalizer.to_live(record["line"])
                if gathering is not None and gathering[0] == record["read"]:
                    gathering[1].body["lines"].append(line)
                else:
                    item = Input(position, "read", {"session": session, "lines": [line]}, lineno)
                    reads[session] = (record["read"], item)
                    inputs.append(item)
            elif direction == "restart":
                # A new agent process (engine/restart.py): expected, but no sign of a
                # recorded agent (a mock session records it too).
                _expect(streams, record, position, lineno, request, normalizer)
            elif direction == "exit":
                wired.add(session)
                stderr = normalizer.to_live(record["stderr"])
                body = {"session": session, "status": record.get("status"), "stderr": stderr}
                inputs.append(Input(position, "exit", body, lineno))
            else:
                wired.add(session)
                _expect(streams, record, position, lineno, request, normalizer)
                if direction == "to_agent":
                    _keep_answer(answers, session, normalizer.to_live(record["line"]))
            continue
        reads.clear()
        if "request" in record:
            raw = normalizer.to_live(record["request"])
            inputs.append(Input(segment_start - 0.5, "request", {"raw": raw}, lineno))
            _expect(streams, record, position, lineno, record["request"], normalizer)
            segment_start = position + 1
        elif direction == "post":
            inputs.append(Input(position, "post", {"path": record["path"], "raws": []}, lineno))
            segment_start = position + 1
        elif direction in ("in", "out", "eof"):
            conn = record.get("conn")
            if conn not in conns:
                conns.add(conn)
                inputs.append(Input(position - 0.5, "connect", {"conn": conn}, lineno))
            if direction == "in":
                request = last_in[conn] = record["line"]
                body = {"conn": conn, "line": normalizer.to_live(record["line"]), **_too_long(record)}
                inputs.append(Input(position, "in", body, lineno))
            elif direction == "eof":
                inputs.append(Input(position, "eof", {"conn": conn}, lineno))
            else:
                _expect(streams, record, position, lineno, last_in.get(conn, "(the connection's start)"), normalizer)
    if ops:
        _gather_posts(inputs)
        if run.frontend != "single-shot":
            # The app's input ended after its last request: what the sessions did then
            # (closing) follows it.
            inputs.append(Input(segment_start - 0.5, "eof", {"conn": None}, 0))
    inputs.sort(key=lambda item: item.position)
    return Timeline(inputs, streams, installations, ids, wired, answers)


def _keep_answer(answers: dict[tuple[str, str], list[str]], session: str, line: str) -> None:
    if '"id"' not in line:
        return
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return
    if isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message):
        try:
            key = json.dumps(message.get("id"), sort_keys=True)
        except (TypeError, ValueError):
            return
        answers.setdefault((session, key), []).append(line)


def is_mock(agent: Any) -> bool:
    """Whether a ``launch`` record's agent (an AgentInstallation) is the built-in mock."""
    return isinstance(agent, dict) and agent.get("id") == "mock" and agent.get("executable_path") == "mock"


def describe_agent(agent: Any) -> str:
    """An agent (an AgentRef or an AgentInstallation) named for a message."""
    if isinstance(agent, dict) and isinstance(agent.get("acp"), dict):
        agent = {"id": agent["acp"].get("name"), "executable_path": agent["acp"].get("path")}
    if isinstance(agent, dict):
        name, path = agent.get("id"), agent.get("executable_path", agent.get("path"))
        return f"{name} ({path})" if path is not None and path != name else str(name)
    return str(agent)


def unwired_agents(run: Run) -> list[str]:
    """Replay starts no agent: each session of ``run`` launched with an agent other than the
    built-in mock and without a recorded wire to play back instead, named with its agent."""
    launches: dict[str, tuple[int, Any]] = {}
    wired: set[str] = set()
    for lineno, record in run.records:
        direction = record.get("dir")
        if direction == "launch":
            launches.setdefault(record["session"], (lineno, record["agent"]))
        elif direction in WIRE_DIRS and direction != "id":
            wired.add(record["session"])
    return [
        f"line {lineno}: session {session} has no recorded agent wire and its agent is "
        f"{describe_agent(agent)}, not the built-in mock: replay starts no agent"
        for session, (lineno, agent) in launches.items()
        if session not in wired and not is_mock(agent)
    ]


def _too_long(record: dict[str, Any]) -> dict[str, Any]:
    return {"too_long": record["too_long"]} if isinstance(record.get("too_long"), int) else {}


def _expect(streams: dict[tuple[Any, ...], list[Expected]], record: dict[str, Any], position: float,
            lineno: int, request: str, normalizer: Normalizer) -> None:  # fmt: skip
    stream = stream_of(record)
    text = normalizer.recorded_side(expected_text(record))
    streams.setdefault(stream, []).append(Expected(position, stream, text, lineno, request))


def _gather_posts(inputs: list[Input]) -> None:
    """HTTP: the requests after a ``post`` marker are that POST's (one body, one default
    session); the marker becomes the one input that carries them."""
    post: Input | None = None
    for item in sorted(inputs, key=lambda i: i.position):
        if item.kind == "post":
            post = item
        elif item.kind == "request" and post is not None:
            post.body["raws"].append(item.body["raw"])
            item.kind = "posted"  # carried by its POST
    inputs[:] = [item for item in inputs if item.kind != "posted"]


def first_difference(recorded: str, live: str) -> tuple[int, str, str]:
    """(line number from 1, recorded line, live line) of the first differing line."""
    want, got = recorded.split("\n"), live.split("\n")
    for index in range(max(len(want), len(got))):
        a = want[index] if index < len(want) else "(nothing)"
        b = got[index] if index < len(got) else "(nothing)"
        if a != b:
            return index + 1, a, b
    return 0, "", ""
