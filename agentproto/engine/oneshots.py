"""The runtime's one-shot commands: ``discover``, ``probe``, ``plan_usage``,
``plan_usage_all`` and ``generate``.

Each answers once and keeps nothing: discover reads the catalog and asks each agent found
for its version; probe opens a throwaway session and closes it as soon as it is open;
plan_usage asks a driver once; plan_usage_all asks every discovered agent at once;
generate runs one hands-off turn in a throwaway session and answers its text.

Rules of this file:
- The one-shots never import the dispatcher (engine/runtime.py): the runtime hands each
  what it needs (its loop, its ``open`` and ``launch`` members, the transport factory) and
  they call nothing else of it.
- generate is hands-off: the session opens with the permission mode ``Ask`` and tools
  disabled, every request reaches its watcher, which declines permissions, answers free-text
  questions blank and fails on anything else (a tool use, a question that needs a person).
  A ``policy`` answers before the watcher does (engine/guard.py).
- plan_usage_all answers one row per discovered agent, in discover's order: its
  AgentInstallation and its PlanUsage, or the ErrorBody of why it has none. Every agent is
  asked in the same tick (their answers come through the loop, so they run concurrently);
  a row not answered within ``agent_timeout`` seconds (default ``PLAN_USAGE_TIMEOUT``) is that
  agent's HandshakeTimeout and its late answer is dropped; a driver that raises costs its
  own row only. Nothing is cached: each call asks every agent afresh.
- Every process a one-shot starts goes through ``Processes.start`` (the runtime's
  ``oneshots``), which tracks it until its exit is reported: a server that must end kills
  them (``kill``), and at the sidecar's exit, once its loop has stopped, ``end`` kills what
  is left and reaps their trees (each one's process group and whatever the kill reached,
  however detached; blocking, at most ``REAP_GRACE`` seconds): none outlives the sidecar,
  not even as a zombie left to init.
- With ``output_schema`` and ``output_retries: N``, an answer that fails the schema is sent
  back as a prompt in the same session naming each error (path, expected, got), up to N
  times; the last failure is ProtocolFailed with its errors, as without retries.
"""

from __future__ import annotations

import json
import os

from agentproto.core.answers import hands_off_answer, request_id_of
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers import catalog
from agentproto.loopio.process_transport import run_capture

if TYPE_CHECKING:
    from typing import Any, Callable, Protocol

    from agentproto.core.wire_types import AgentInstallation, DiscoveryReport, Request
    from agentproto.drivers.base import Launch
    from agentproto.drivers.catalog import AgentSpec
    from agentproto.engine.session import EngineSession, EventSink
    from agentproto.engine.turns import Done
    from agentproto.loopio.loop import Loop
    from agentproto.loopio.record import Wire
    from agentproto.loopio.transport import LineTransport, Spawn, TransportFactory

    #: The runtime's ``launch``: the spec and Launch of an open's fields (a throwaway's).
    LaunchOf = Callable[[dict[str, Any]], tuple[AgentSpec, Launch]]

    class Opener(Protocol):
        """The runtime's ``open``: a session of ``args`` whose output goes to ``sink`` (None when
        the open was refused at once: ``done`` has its error)."""

        def __call__(
            self,
            args: dict[str, Any],
            sink: EventSink,
            done: Done,
            throwaway: bool = False,
            tools_disabled: bool = False,
        ) -> EngineSession | None: ...

#: How long plan_usage_all waits for one agent's answer, in seconds (its ``agent_timeout``
#: overrides it); past it that agent's row is HandshakeTimeout.
PLAN_USAGE_TIMEOUT = 30.0

#: At the sidecar's exit: how long the killed processes of one-shots get to be reaped.
REAP_GRACE = 2.0

#: The longest answer generate collects, in characters (16 MiB of ASCII): past it generate
#: fails ProtocolFailed rather than keep an agent's flood.
MAX_ANSWER = 16 << 20


class Collector:
    """The sink of throwaway sessions (probe, generate): keeps text, drops the rest.

    Each message's text is kept as its pieces (by message id, in the order messages first
    spoke) and joined once, at the end: an answer of N deltas costs O(N), not the O(N^2) of
    growing one string per delta. Past ``limit`` characters nothing more is kept and
    ``on_overflow`` is called, once."""

    def __init__(
        self, on_event: Callable[[EngineSession, dict[str, Any]], None] | None = None, limit: int | None = None
    ) -> None:
        self.pieces: dict[str, list[str]] = {}
        self.size = 0
        self.limit = limit
        self.overflowed = False
        self.ended: Any = None
        self.error: AgentError | None = None
        self.closed = False
        self.on_event = on_event
        self.on_turn_end: Callable[[], None] | None = None
        self.on_closed: Callable[[], None] | None = None
        self.on_overflow: Callable[[], None] | None = None

    def text(self) -> str:
        """Every message's text, joined (once per call: call it at the end)."""
        return "".join("".join(pieces) for pieces in self.pieces.values())

    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        session.delivered(1)
        if self.on_event is not None:
            self.on_event(session, event)
        kind = event["kind"]
        if isinstance(kind, dict):
            if "TextDelta" in kind:
                if self.overflowed:
                    return
                body = kind["TextDelta"]
                piece = body["text"]
                self.size += len(piece)
                if self.limit is not None and self.size > self.limit:
                    self.overflowed = True
                    self.pieces.clear()
                    if self.on_overflow is not None:
                        self.on_overflow()
                    return
                pieces = self.pieces.get(body["message_id"])
                if pieces is None:
                    pieces = self.pieces[body["message_id"]] = []
                pieces.append(piece)
            elif "TurnEnded" in kind:
                self.ended = kind["TurnEnded"]["stop"]
                if self.on_turn_end is not None:
                    self.on_turn_end()

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        self.error = error

    def session_closed(self, session: EngineSession) -> None:
        self.closed = True
        if self.on_closed is not None:
            self.on_closed()


class Processes:
    """The processes one-shots started that have not exited yet (see the rules)."""

    def __init__(self, loop: Loop, factory: TransportFactory) -> None:
        self.loop = loop
        #: The sessions' transport factory (replay's starts nothing).
        self.factory = factory
        self.live: set[LineTransport] = set()

    def start(self, loop: Loop, spawn: Spawn, wire: Wire | None = None) -> LineTransport:
        """A ``TransportFactory``: ``factory``'s transport, tracked until its exit is reported."""
        exited = spawn.on_exit
        ended: list[bool] = []  # its exit may be reported before the factory returns
        transport: LineTransport | None = None

        def on_exit(status: str | None, stderr: str) -> None:
            ended.append(True)
            if transport is not None:
                self.live.discard(transport)
            exited(status, stderr)

        spawn.on_exit = on_exit
        transport = self.factory(loop, spawn, wire)
        if not ended:
            self.live.add(transport)
        return transport

    def kill(self) -> None:
        """SIGKILL every one's group now (each still reports its exit as usual)."""
        for transport in list(self.live):
            transport.kill()

    def end(self, grace: float = REAP_GRACE) -> None:
        """Only once the loop has stopped: kill every one, and reap their trees (blocking, at
        most ``grace`` seconds). Their exits reach nobody: nobody is left to read an answer."""
        trees = [transport.tree for transport in self.live if transport.tree is not None]
        self.kill()
        self.live.clear()
        self.loop.reap_trees(trees, grace)


def discover(loop: Loop, mock_only: bool, factory: TransportFactory, done: Done) -> None:
    """The agents installed and missing (``mock_only``: a scripted mock's runtime, which
    reports the mock alone), each found agent's version read with its ``--version``."""
    agents = [catalog.installation(catalog.MOCK, "mock", "Pinned")]
    agents[0]["version"] = "mock"
    report: DiscoveryReport = {"agents": agents, "missing": [], "diagnostics": []}
    if mock_only:
        done(report, None)
        return
    pending: list[AgentInstallation] = []
    for problem in catalog.problems():
        report["diagnostics"].append({"level": "Warning", "message": problem})
    for spec in catalog.all_specs():
        found = catalog.locate(spec)
        if isinstance(found, list):
            report["missing"].append(catalog.missing(spec, found))
            continue
        entry = catalog.installation(spec, *found)
        entry["version"] = None
        agents.append(entry)
        if spec.version_args:  # a declared agent's "version_args": [] asks none
            pending.append(entry)
        override = os.environ.get(spec.env_override)
        if override and found[1] != "EnvOverride":
            message = f"{spec.id}: ${spec.env_override}={override} is not an executable; using {found[0]}"
            report["diagnostics"].append({"level": "Warning", "message": message})
    if not pending:
        done(report, None)
        return
    remaining = [len(pending)]

    def finish(entry: AgentInstallation, code: int | None, out: str, err: str) -> None:
        text = (out.strip() or err.strip()).splitlines()
        entry["version"] = catalog.clean_version(text[0]) if code == 0 and text else None
        if code == 0 and not text:
            message = f"{entry['id']}: `{entry['executable_path']} --version` printed nothing"
            report["diagnostics"].append({"level": "Info", "message": message})
        elif code != 0:
            why = "exit status " + str(code) if code is not None else "did not finish"
            said = err.strip().splitlines()
            if said:
                why += f": {said[-1][:200]}"
            message = f"{entry['id']}: `{entry['executable_path']} --version` failed ({why})"
            report["diagnostics"].append({"level": "Warning", "message": message})
        remaining[0] -= 1
        if remaining[0] == 0:
            done(report, None)

    for entry in pending:
        found_spec = catalog.spec_for(entry["id"])
        assert found_spec is not None

        def version_read(code: int | None, out: str, err: str, entry: AgentInstallation = entry) -> None:
            finish(entry, code, out, err)

        argv = [entry["executable_path"], *found_spec.version_args]
        run_capture(loop, argv, version_read, timeout=10.0, factory=factory)


def probe(loop: Loop, open: Opener, args: dict[str, Any], done: Done) -> EngineSession | None:
    """Open a throwaway session, close it once open, and answer its details."""
    if args.get("resume") or args.get("fork"):
        done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "probe does not take resume or fork"))
        return None
    collector = Collector()

    def opened(info: Any, error: AgentError | None) -> None:
        if error is not None:
            done(None, error)
            return
        details = info["details"]
        collector.on_closed = lambda: done(details, None)
        # open() may answer synchronously, before ``session`` is bound: close next tick.
        loop.call_soon(lambda: None if session is None else session.close(lambda _ok, _err: None))

    session = open(args, collector, opened, throwaway=True)
    return session


def plan_usage(
    loop: Loop, launch: LaunchOf, spawn: Callable[[Spawn], LineTransport], args: dict[str, Any], done: Done
) -> None:
    """The agent's plan usage, as its driver reads it (no session; a process it needs, it
    starts through ``spawn``)."""
    if args.get("resume") or args.get("fork"):
        done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "plan_usage does not take resume or fork"))
        return
    try:
        spec, launched = launch(args)
        spec.driver_class().plan_usage(loop, launched, spawn, done)
    except AgentError as error:
        done(None, error)


def plan_usage_all(
    loop: Loop, discover: Callable[[Done], None], plan_usage: Callable[[dict[str, Any], Done], None],
    args: dict[str, Any], done: Done,
) -> None:  # fmt: skip
    """Every discovered agent's plan usage, or the typed reason it has none, one row each
    in discover's order (see the rules above). ``discover`` and ``plan_usage`` are the
    runtime's own commands."""
    timeout = float(args.get("agent_timeout") or PLAN_USAGE_TIMEOUT)
    directory = args.get("dir")
    if directory and not os.path.isdir(directory):  # once here, not once per row
        done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, f"dir is not a directory: {directory}"))
        return

    def discovered(report: Any, error: AgentError | None) -> None:
        if error is not None:
            done(None, error)
            return
        agents: list[AgentInstallation] = list(report["agents"])
        rows: list[dict[str, Any] | None] = [None] * len(agents)
        left = [len(agents)]
        if not agents:
            done([], None)
            return

        def settle(index: int, value: Any, error: AgentError | None) -> None:
            if rows[index] is not None:
                return  # answered already: a late answer after its timeout, or a second one
            timers[index].cancel()
            agent = agents[index]
            rows[index] = {"agent": agent, **({"plan_usage": value} if error is None else {"error": error.body()})}
            left[0] -= 1
            if left[0] == 0:
                done(rows, None)

        def answer_of(index: int) -> Done:
            return lambda value, error: settle(index, value, error)

        def timer_of(index: int) -> Callable[[], None]:
            why = f"{agents[index]['id']}: no plan usage within {timeout:g} s"
            return lambda: settle(index, None, AgentError.detail(Kind.HANDSHAKE_TIMEOUT, why))

        timers = [loop.call_later(timeout, timer_of(index)) for index in range(len(agents))]
        for index, agent in enumerate(agents):
            # The mock by its id; any other agent at the path discover found it at.
            pinned = {"id": agent["id"], "path": agent["executable_path"]}
            fields: dict[str, Any] = {"agent": agent["id"] if agent["id"] == catalog.MOCK.id else pinned}
            if directory:
                fields["dir"] = directory
            try:
                plan_usage(fields, answer_of(index))
            except Exception:  # a driver's bug costs its own row, never the others'
                settle(index, None, AgentError.internal(f"plan_usage {agent['id']}"))

    discover(discovered)


def generate(
    loop: Loop,
    open: Opener,
    args: dict[str, Any],
    done: Done,
    on_event: Callable[[EngineSession, dict[str, Any]], None] | None = None,
) -> EngineSession | None:
    """One hands-off turn in a throwaway session: its text (checked against
    ``output_schema`` when given), or why there is none. ``on_event`` sees every event of
    the session (the ops framing streams them)."""
    if args.get("resume") or args.get("fork"):
        done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "generate requires a new session"))
        return None
    schema = args.get("output_schema")
    #: The schema's patterns, compiled once (within the schema's compile budget) for the
    #: answer's check.
    patterns: dict[str, Any] = {}
    if schema is not None:
        # The schema is checked before anything runs: a bad one is the app's to fix, and the
        # answer's check (in a loop callback) then cannot raise or loop.
        from agentproto.core.jsonschema_lite import schema_problems

        problems = schema_problems(schema, patterns=patterns)
        if problems:
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "output_schema: " + "; ".join(problems)))
            return None
    generation = _Generation(loop, args, schema, patterns, done, Collector(on_event, MAX_ANSWER))
    # Hands-off whatever the app asked: every request reaches the watcher, which declines.
    launch_args = {**args, "permission_mode": "Ask"}
    session = open(launch_args, generation.collector, generation.opened, throwaway=True, tools_disabled=True)
    generation.session = session
    if session is not None:
        session.watcher = generation.watch
    return session


class _Generation:
    """One generate: its throwaway session, its collector, and its one outcome."""

    def __init__(
        self, loop: Loop, args: dict[str, Any], schema: Any, patterns: dict[str, Any], done: Done, collector: Collector
    ) -> None:
        self.loop, self.args, self.done = loop, args, done
        #: output_schema (None: any text), and its patterns compiled once for the answer's check.
        self.schema, self.patterns = schema, patterns
        self.collector = collector
        collector.on_overflow = self.overflowed
        #: Bound once open() returns (it may answer synchronously, before).
        self.session: EngineSession | None = None
        self.outcome: list[Any] = []
        #: output_retries: answers that fail the schema still sent back, errors named.
        self.retries = int(args.get("output_retries") or 0) if schema is not None else 0

    def finish(self, value: Any, error: AgentError | None) -> None:
        if self.outcome:
            return
        self.outcome.append((value, error))
        session, done = self.session, self.done
        if session is not None and session.state != "closed":
            self.collector.on_closed = lambda: done(value, error)
            session.close(lambda _ok, _err: None)
        else:
            done(value, error)

    def watch(self, name: str, body: Any) -> None:
        # generate is hands-off: permissions are declined, free-text questions get blank
        # answers, and anything that needs a person or runs a tool fails it.
        if name == "ToolUpdated":
            self.finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, "the agent tried to use a tool during generate"))
        elif name == "RequestOpened":
            self.loop.call_soon(lambda: self.decline(body))

    def decline(self, request: Request) -> None:
        session = self.session
        if self.outcome or session is None or session.state != "open":
            return
        answer = hands_off_answer(request)
        if answer is None:
            self.finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, "the agent asked a question during generate"))
        else:
            session.answer(request_id_of(request), answer, lambda _v, _e: None)

    def overflowed(self) -> None:
        why = f"the answer is longer than {MAX_ANSWER >> 20} MiB ({MAX_ANSWER:,} characters), generate's bound"
        self.finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, why))

    def turn_ended(self) -> None:
        collector = self.collector
        stop = collector.ended
        text = collector.text()
        if isinstance(stop, dict) and "Completed" in stop:
            if self.schema is not None:
                # Only generate with a schema needs the validator: not imported at start-up.
                from agentproto.core.jsonschema_lite import answer_problems

                problems = answer_problems(text, self.schema, self.patterns)
                if problems and self.retries > 0 and self.session is not None and self.session.state == "open":
                    self.retries -= 1
                    self.repair(problems)
                    return
                if problems:
                    why = "the answer does not match output_schema: " + "; ".join(problems[:5])
                    self.finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, why))
                    return
            self.finish(text, None)
        elif isinstance(stop, dict) and "Failed" in stop:
            exceeded = self.session.guard.exceeded if self.session is not None else None
            kind = Kind.BUDGET_EXCEEDED if exceeded else Kind.PROTOCOL_FAILED
            failed = AgentError.detail(kind, stop["Failed"]["message"])
            self.finish(None, collector.error or failed)
        else:
            self.finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, f"the turn ended {json.dumps(stop)}"))

    def repair(self, problems: list[str]) -> None:
        """The answer failed the schema: send it back in the same session, the errors named
        (path, expected, got); the next answer is checked afresh."""
        collector = self.collector
        collector.pieces.clear()
        collector.size = 0
        collector.ended = None
        listed = "\n".join(f"- {problem}" for problem in problems[:20])
        text = (
            "Your answer does not match the required JSON Schema:\n"
            f"{listed}\n"
            "Answer again with only the corrected JSON value, nothing else."
        )
        assert self.session is not None
        self.session.prompt(text, [], lambda _value, _error: None)

    def closed_early(self) -> None:
        early = AgentError.detail(Kind.PROTOCOL_FAILED, "the session closed before the answer")
        self.finish(None, self.collector.error or early)

    def opened(self, info: Any, error: AgentError | None) -> None:
        if error is not None:
            self.finish(None, error)
            return
        # open() may answer synchronously, before ``session`` is bound: start next tick.
        self.loop.call_soon(lambda: self.start(info))

    def start(self, info: Any) -> None:
        session = self.session
        assert session is not None
        if self.outcome or session.state != "open":
            return
        if "Permissions" not in info["details"]["capabilities"]["features"] and not session.driver.tools_disabled:
            why = "generate needs an agent whose tool use can be refused"
            self.finish(None, AgentError.detail(Kind.UNSUPPORTED_FEATURE, why))
            return
        self.collector.on_turn_end = self.turn_ended
        self.collector.on_closed = self.closed_early
        session.prompt(self.args["prompt"], list(self.args.get("attachments") or []), lambda _d, _e: None)
