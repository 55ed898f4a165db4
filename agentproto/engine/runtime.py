"""The runtime: every session of one sidecar, the runtime-level commands, and the one
dispatcher that every framing and transport calls.

``Runtime.execute(name, args, sink, scope, done)`` runs one validated command (see
``commands.COMMANDS``). ``discover``, ``probe``, ``plan_usage`` and ``generate`` live here;
session commands go to ``engine.Session``. A ``Scope`` is what one frontend may touch:
its own sessions (a stdio or socket connection), or all of them (HTTP, where sessions
outlive connections).

Rules of this file:
- The runtime imports the engine, never the reverse: each Session gets the runtime's
  ``engine.Context`` (loop, stall timeout, a forget callback) and nothing else of it.
- It calls drivers only through the members ``drivers/base.Driver`` defines
  (``plan_usage``, ``deterministic``, ``tools_disabled``) and gives them what they need in
  their ``Launch`` (the mock's script included): no probing for optional hooks.
"""

from __future__ import annotations

import json
import os

from agentproto.core import commands, redact
from agentproto.core.answers import hands_off_answer, request_id_of
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers import catalog
from agentproto.drivers.base import Launch
from agentproto.drivers.catalog import AgentSpec
from agentproto.engine.observations import Observer
from agentproto.engine.session import Context, Session, Sink
from agentproto.loopio import descriptors
from agentproto.loopio.loop import Loop
from agentproto.loopio.process_transport import process_transport, run_capture
from agentproto.tools import apptools

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.engine.session import Done
    from agentproto.loopio.record import Sink as RecordSink
    from agentproto.loopio.transport import TransportFactory
    from agentproto.tools.listener import Listener

#: The optional ``open`` fields only some drivers honour (``Driver.open_fields``).
OPEN_FIELDS = ("notes", "reminder")
#: Commands a session may hold while it opens (answered in order once the open is answered);
#: one more is SessionBusy.
OPENING_QUEUE = 64
#: The longest answer generate collects, in characters (16 MiB of ASCII): past it generate
#: fails ProtocolFailed rather than keep an agent's flood.
MAX_ANSWER = 16 << 20


class _Collector:
    """The sink of throwaway sessions (probe, generate): keeps text, drops the rest.

    Each message's text is kept as its pieces (by message id, in the order messages first
    spoke) and joined once, at the end: an answer of N deltas costs O(N), not the O(N^2) of
    growing one string per delta. Past ``limit`` characters nothing more is kept and
    ``on_overflow`` is called, once."""

    def __init__(
        self, on_event: Callable[[Session, dict[str, Any]], None] | None = None, limit: int | None = None
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

    def event(self, session: Session, event: dict[str, Any]) -> None:
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

    def session_error(self, session: Session, error: AgentError) -> None:
        self.error = error

    def session_closed(self, session: Session) -> None:
        self.closed = True
        if self.on_closed is not None:
            self.on_closed()


class Runtime:
    """Every session of one sidecar process, shared by all of its frontends."""

    def __init__(
        self,
        loop: Loop,
        *,
        mock_script: dict[str, Any] | None = None,
        stall_timeout: float = 60.0,
        transport_factory: TransportFactory = process_transport,
        recorder: "RecordSink | None" = None,
        observer: Observer | None = None,
        listener_bounds: tuple[int, int] | None = None,
        max_terminals: int = 16,
    ) -> None:
        # Every command that runs sessions builds a runtime: the descriptor limit is raised
        # here, once per process (descriptors.py).
        descriptors.raise_limit()
        self.loop = loop
        self.mock_script = mock_script
        #: Live terminals one ACP session may hold (``serve --max-terminals``).
        self.max_terminals = max_terminals
        self.sessions: dict[str, Session] = {}
        #: Session ids are issued in order (s1, s2, …): an id up to this one that is not live
        #: is closed. Nothing is kept per closed session (a sidecar may see millions).
        self._last_id = 0
        #: The frontend's ``--record``: every session's agent wire is recorded into it too.
        self.recorder = recorder
        #: Every session's figures for inspect, and the observations database's rows.
        self.observer = observer if observer is not None else Observer(loop, None)
        #: The loopback listener of the sessions' own tools and hooks, opened on first use.
        self.listener: Listener | None = None
        #: The connections and unanswered tool calls one session may hold on it (None: its defaults).
        self.listener_bounds = listener_bounds
        #: What every session shares; the stall timeout and how sessions start their agents
        #: (replay and fault injection put their own in) are kept there, and only there.
        self.context = Context(loop, stall_timeout, self._forget, transport_factory, self._listen, self.observer)
        #: Commands sent to a session while it was opening, by session id, in order: run once
        #: its open is answered (an entry exists only while there is something to hold).
        self._held: dict[str, list[tuple[str, dict[str, Any], Sink, Scope, Done]]] = {}

    def _forget(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        if session.launch.wire is not None:
            session.launch.wire.close()

    def issued(self, session_id: str) -> bool:
        """Whether this runtime issued ``session_id`` (live or closed since)."""
        if type(session_id) is not str:  # in-process callers pass what they have (None)
            return False
        digits = session_id[1:]
        if session_id[:1] != "s" or not (digits.isascii() and digits.isdigit()) or digits[0] == "0":
            return False
        # Compared by length first: int() of a 5,000-digit string raises (and costs).
        last = str(self._last_id)
        return len(digits) < len(last) or (len(digits) == len(last) and digits <= last)

    # -- the seams replay replaces (replay.py) ------------------------------------------

    def resolve(self, agent: Any, session_id: str | None) -> tuple[AgentSpec, dict[str, Any]]:
        """The spec and AgentInstallation of an AgentRef (``NotInstalled`` if missing), for
        the session about to be ``session_id`` (None: no session, plan_usage)."""
        return catalog.resolve_ref(agent)

    def made_up(self, session_id: str, purpose: str) -> str:
        """An id a session's driver makes up itself (see ``Launch.new_id``)."""
        from agentproto.drivers.base import fresh_id

        return fresh_id(purpose)

    def _listen(self, served: apptools.AppTools) -> apptools.Registration:
        if self.listener is None:
            from agentproto.tools.listener import Listener  # only a session with tools or hooks needs it

            listener = Listener(self.loop, *self.listener_bounds) if self.listener_bounds else Listener(self.loop)
            listener.start()  # OSError: this open fails (SpawnFailed), the next one tries again
            self.listener = listener
        return self.listener.register(served)

    # -- launch -----------------------------------------------------------------------

    def _launch(
        self, args: dict[str, Any], throwaway: bool = False, tools_disabled: bool = False, session_id: str | None = None
    ) -> tuple[AgentSpec, Launch]:
        # Checked once here, for every driver, before anything is resolved or started: a NUL
        # in an argv or an `=` in an env name would otherwise surface as a driver's ValueError.
        problem = commands.launch_text_problem(args)
        if problem is not None:
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, problem)
        spec, installation = self.resolve(args["agent"], session_id)
        directory = args.get("dir")
        if not directory:
            import tempfile  # here, not at the top: most opens name their dir

            directory = tempfile.gettempdir()
        if not os.path.isdir(directory):
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"dir is not a directory: {directory}")
        tools = apptools.check_tools(args.get("tools"))
        if tools and any(server.get("name") == apptools.APP_SERVER for server in args.get("mcp_servers") or []):
            why = f"mcp_servers: the name {apptools.APP_SERVER} is the app's tools' (tools)"
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, why)
        launch = Launch(
            agent_id=installation["id"],
            installation=installation,
            executable=installation["executable_path"],
            dir=os.path.abspath(directory),
            resume=args.get("resume"),
            fork=args.get("fork"),
            fork_at=args.get("fork_at"),
            permission_mode=args.get("permission_mode") or "Ask",
            permission_mode_given=args.get("permission_mode") is not None,
            mcp_servers=list(args.get("mcp_servers") or []),
            configure=dict(args.get("configure") or {}),
            instructions=args.get("instructions"),
            notes=args.get("notes"),
            reminder=args.get("reminder"),
            output_schema=args.get("output_schema"),
            env=dict(args.get("env") or {}),
            args=list(args.get("args") or []),
            config_home=args.get("config_home"),
            record_wire=args.get("record_wire"),
            throwaway=throwaway,
            tools_disabled=tools_disabled,
            acp_args=list(installation.get("acp_args") or []),
            mock_script=self.mock_script,
            tools=tools,
            hooks=apptools.check_hooks(args.get("hooks")),
            max_terminals=self.max_terminals,
            tool_timeout=float(args.get("tool_timeout") or apptools.TOOL_TIMEOUT),
            hook_timeout=float(args.get("hook_timeout") or apptools.HOOK_TIMEOUT),
        )
        return spec, launch

    def open(
        self, args: dict[str, Any], sink: Sink, done: Done, throwaway: bool = False, tools_disabled: bool = False
    ) -> Session | None:
        session_id = f"s{self._last_id + 1}"
        try:
            spec, launch = self._launch(args, throwaway, tools_disabled, session_id)
            driver_class = spec.driver_class()
            for name in OPEN_FIELDS:
                if args.get(name) and name not in driver_class.open_fields:
                    why = f"{name}: {launch.agent_id} cannot take it"
                    raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)
            self._wire(session_id, launch)
        except AgentError as error:
            done(None, error)
            return None
        self._last_id += 1
        session = Session(self.context, session_id, launch, sink)

        def answered(info: Any, error: AgentError | None) -> None:
            done(info, error)
            if session_id in self._held:
                self.loop.call_soon(lambda: self._run_held(session_id))

        session.open_done = answered
        self.sessions[session.id] = session
        try:
            session.driver = driver_class(session, launch)
            session.serve_app()  # the driver configures its agent with the tools' URL
            for url in (session.tools_url, *(session.hook_url(event) for event in launch.hooks)):
                if url is not None:
                    redact.SECRETS.learn_url(url)  # its token must never reach a record
            session.driver.open()
        except AgentError as error:
            session.driver_gone = True
            session.open_failed(error)
        except OSError as error:
            session.driver_gone = True
            session.open_failed(AgentError.detail(Kind.SPAWN_FAILED, str(error)))
        except Exception:
            # A bug of the driver's costs this open only: the session is forgotten (and
            # whatever its driver started is killed) instead of lingering as "opening".
            session.open_failed(AgentError.internal(f"open {launch.agent_id}"))
        return session

    def _wire(self, session_id: str, launch: Launch) -> None:
        """Record the session's agent wire (``--record``, ``record_wire``), and the ids its
        driver makes up with it."""
        launch.new_id = lambda purpose: self.made_up(session_id, purpose)
        if self.recorder is None and not launch.record_wire:
            return
        from agentproto.loopio import record

        try:
            wire = record.session_wire(self.loop, session_id, self.recorder, launch.record_wire)
        except OSError as exc:
            why = f"record_wire: {launch.record_wire}: {exc.strerror or exc}"
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, why) from None
        if wire is None:
            return
        launch.wire = wire
        wire.launch(launch.installation, launch.env, launch.mcp_servers)

        def new_id(purpose: str) -> str:
            value = self.made_up(session_id, purpose)
            wire.made_up(purpose, value)
            return value

        launch.new_id = new_id

    # -- runtime commands -------------------------------------------------------------

    def discover(self, done: Done) -> None:
        agents = [catalog.installation(catalog.MOCK, "mock", "Pinned")]
        agents[0]["version"] = "mock"
        report: dict[str, Any] = {"agents": agents, "missing": [], "diagnostics": []}
        if self.mock_script is not None:
            done(report, None)
            return
        pending: list[dict[str, Any]] = []
        for spec in catalog.CATALOG:
            found = catalog.locate(spec)
            if isinstance(found, list):
                report["missing"].append(catalog.missing(spec, found))
                continue
            entry = catalog.installation(spec, *found)
            entry["version"] = None
            agents.append(entry)
            pending.append(entry)
            override = os.environ.get(spec.env_override)
            if override and found[1] != "EnvOverride":
                message = f"{spec.id}: ${spec.env_override}={override} is not an executable; using {found[0]}"
                report["diagnostics"].append({"level": "Warning", "message": message})
        if not pending:
            done(report, None)
            return
        remaining = [len(pending)]

        def finish(entry: dict[str, Any], code: int | None, out: str, err: str) -> None:
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

            def version_read(code: int | None, out: str, err: str, entry: dict[str, Any] = entry) -> None:
                finish(entry, code, out, err)

            run_capture(
                self.loop,
                [entry["executable_path"], *found_spec.version_args],
                version_read,
                timeout=10.0,
                factory=self.context.transport_factory,
            )

    def probe(self, args: dict[str, Any], done: Done) -> Session | None:
        if args.get("resume") or args.get("fork"):
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "probe does not take resume or fork"))
            return None
        collector = _Collector()

        def opened(info: Any, error: AgentError | None) -> None:
            if error is not None:
                done(None, error)
                return
            details = info["details"]
            collector.on_closed = lambda: done(details, None)
            # open() may answer synchronously, before ``session`` is bound: close next tick.
            self.loop.call_soon(lambda: None if session is None else session.close(lambda _ok, _err: None))

        session = self.open(args, collector, opened, throwaway=True)
        return session

    def plan_usage(self, args: dict[str, Any], done: Done) -> None:
        if args.get("resume") or args.get("fork"):
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "plan_usage does not take resume or fork"))
            return
        try:
            spec, launch = self._launch(args, throwaway=True)
            spec.driver_class().plan_usage(self.loop, launch, done)
        except AgentError as error:
            done(None, error)

    def generate(
        self,
        args: dict[str, Any],
        done: Done,
        on_event: Callable[[Session, dict[str, Any]], None] | None = None,
    ) -> Session | None:
        if args.get("resume") or args.get("fork"):
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "generate requires a new session"))
            return None
        schema = args.get("output_schema")
        #: The schema's patterns, compiled once (within the schema's compile budget) for
        #: the answer's check.
        patterns: dict[str, Any] = {}
        if schema is not None:
            # The schema is checked before anything runs: a bad one is the app's to fix, and
            # the answer's check (in a loop callback) then cannot raise or loop.
            from agentproto.core.jsonschema_lite import schema_problems

            problems = schema_problems(schema, patterns=patterns)
            if problems:
                done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, "output_schema: " + "; ".join(problems)))
                return None
        collector = _Collector(on_event, MAX_ANSWER)
        outcome: list[Any] = []

        def finish(value: Any, error: AgentError | None) -> None:
            if outcome:
                return
            outcome.append((value, error))
            if session is not None and session.state != "closed":
                collector.on_closed = lambda: done(value, error)
                session.close(lambda _ok, _err: None)
            else:
                done(value, error)

        def watch(name: str, body: Any) -> None:
            # generate is hands-off: permissions are declined, free-text questions get blank
            # answers, and anything that needs a person or runs a tool fails it.
            if name == "ToolUpdated":
                finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, "the agent tried to use a tool during generate"))
            elif name == "RequestOpened":
                self.loop.call_soon(lambda: decline(body))

        def decline(request: dict[str, Any]) -> None:
            if outcome or session is None or session.state != "open":
                return
            answer = hands_off_answer(request)
            if answer is None:
                finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, "the agent asked a question during generate"))
            else:
                session.answer(request_id_of(request), answer, lambda _v, _e: None)

        def overflowed() -> None:
            why = f"the answer is longer than {MAX_ANSWER >> 20} MiB ({MAX_ANSWER:,} characters), generate's bound"
            finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, why))

        collector.on_overflow = overflowed

        def turn_ended() -> None:
            stop = collector.ended
            text = collector.text()
            if isinstance(stop, dict) and "Completed" in stop:
                if schema is not None:
                    # Only generate with a schema needs the validator: not imported at start-up.
                    from agentproto.core.jsonschema_lite import answer_problems

                    problems = answer_problems(text, schema, patterns)
                    if problems:
                        why = "the answer does not match output_schema: " + "; ".join(problems[:5])
                        finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, why))
                        return
                finish(text, None)
            elif isinstance(stop, dict) and "Failed" in stop:
                finish(None, collector.error or AgentError.detail(Kind.PROTOCOL_FAILED, stop["Failed"]["message"]))
            else:
                finish(None, AgentError.detail(Kind.PROTOCOL_FAILED, f"the turn ended {json.dumps(stop)}"))

        def closed_early() -> None:
            early = AgentError.detail(Kind.PROTOCOL_FAILED, "the session closed before the answer")
            finish(None, collector.error or early)

        def opened(info: Any, error: AgentError | None) -> None:
            if error is not None:
                finish(None, error)
                return
            # open() may answer synchronously, before ``session`` is bound: start next tick.
            self.loop.call_soon(lambda: start(info))

        def start(info: Any) -> None:
            assert session is not None
            if outcome or session.state != "open":
                return
            if "Permissions" not in info["details"]["capabilities"]["features"] and not session.driver.tools_disabled:
                why = "generate needs an agent whose tool use can be refused"
                finish(None, AgentError.detail(Kind.UNSUPPORTED_FEATURE, why))
                return
            collector.on_turn_end = turn_ended
            collector.on_closed = closed_early
            session.prompt(args["prompt"], list(args.get("attachments") or []), lambda _d, _e: None)

        session: Session | None = None
        # Hands-off whatever the app asked: every request reaches the watcher, which declines.
        launch_args = {**args, "permission_mode": "Ask"}
        session = self.open(launch_args, collector, opened, throwaway=True, tools_disabled=True)
        if session is not None:
            session.watcher = watch
        return session

    def close_all(self, sessions: list[Session] | None = None) -> None:
        for session in list(self.sessions.values() if sessions is None else sessions):
            session.abandon()

    def kill_all(self) -> None:
        """Kill every session's agent now (a server that must end: a signal's grace ran
        out). Each session still closes as usual once its agent's exit is seen."""
        for session in list(self.sessions.values()):
            if session.driver is None or session.driver_gone:
                continue
            try:
                session.driver.kill()
            except Exception:  # a bug of one driver must not keep the others' agents alive
                AgentError.internal(f"kill {session.id}")

    # -- the one dispatcher every framing and transport calls -------------------------

    def execute(
        self,
        name: str,
        args: dict[str, Any],
        sink: Sink,
        scope: "Scope",
        done: Done,
        on_event: Callable[[Session, dict[str, Any]], None] | None = None,
    ) -> None:
        """Run one validated command (see commands.COMMANDS) for a frontend.

        ``on_event`` sees every event of generate's throwaway session (the ops framing
        streams them); no other command uses it.
        """
        if name == "discover":
            self.discover(done)
        elif name == "open":
            scope.add(self.open(args, sink, done))
        elif name == "probe":
            scope.add(self.probe(args, done), visible=False)
        elif name == "plan_usage":
            self.plan_usage(args, done)
        elif name == "generate":
            scope.add(self.generate(args, done, on_event), visible=False)
        else:
            try:
                session = scope.lookup(args["session"])
            except AgentError as error:
                done(None, error)
                return
            held = self._held.get(session.id)
            if session.state == "opening" or held is not None:
                # Not a false "closed": the command waits for the open's answer, in order with
                # the session's other held commands, then runs (or is SessionClosed if the open
                # failed, which it then is).
                if held is None:
                    held = self._held[session.id] = []
                if len(held) >= OPENING_QUEUE:
                    why = f"{session.id} is opening and already holds {OPENING_QUEUE} commands"
                    done(None, AgentError.detail(Kind.SESSION_BUSY, why))
                else:
                    held.append((name, args, sink, scope, done))
            elif session.state != "open":
                done(None, AgentError.session_closed(session.id))
            elif name in SESSION_COMMANDS:
                SESSION_COMMANDS[name](session, args, done)
            else:
                done(None, AgentError.detail(Kind.INVALID_REQUEST, f"unknown command {name}"))

    def _run_held(self, session_id: str) -> None:
        for name, args, sink, scope, done in self._held.pop(session_id, ()):
            self.execute(name, args, sink, scope, done)


#: The commands an open session runs: each calls its Session method with the command's fields.
SESSION_COMMANDS: dict[str, Callable[[Session, dict[str, Any], Done], None]] = {
    "prompt": lambda session, args, done: session.prompt(args["text"], list(args.get("attachments") or []), done),
    "answer": lambda session, args, done: session.answer(args["request"], args["answer"], done),
    "configure": lambda session, args, done: session.configure(args["option"], args["value"], done),
    "cancel": lambda session, args, done: session.cancel(bool(args.get("clear_queue")), args.get("turn"), done),
    "rollback": lambda session, args, done: session.rollback(args["turns"], args["scope"], done),
    "dequeue": lambda session, args, done: session.dequeue(args["prompt"], done),
    "compact": lambda session, args, done: session.compact(done),
    "close": lambda session, args, done: session.close(done),
    "info": lambda session, args, done: done(session.snapshot(), None),
}


class Scope:
    """The sessions one frontend may touch: its own (a connection), or all (HTTP).

    It also holds the frontend's throwaway sessions (probe, generate), which no command
    can name but which must close with the frontend all the same.
    """

    def __init__(self, runtime: Runtime, shared: bool = False) -> None:
        self.runtime = runtime
        self.shared = shared
        self.live: dict[str, Session] = {}
        self.hidden: dict[str, Session] = {}
        #: Called when the last session of this scope has closed.
        self.on_empty: Callable[[], None] | None = None

    def add(self, session: Session | None, visible: bool = True) -> None:
        """Hold the session a command opened (none, or one closed already: nothing to hold)."""
        if session is None or session.state == "closed":
            return
        (self.live if visible else self.hidden)[session.id] = session
        session.scopes.append(self)

    def discard(self, session: Session) -> None:
        if self.live.pop(session.id, None) is None and self.hidden.pop(session.id, None) is None:
            return
        if self.on_empty is not None and not self.live and not self.hidden:
            self.on_empty()

    def sessions(self) -> list[Session]:
        return [*self.live.values(), *self.hidden.values()]

    def lookup(self, session_id: str) -> Session:
        live = self.runtime.sessions if self.shared else self.live
        session = live.get(session_id)
        if session is not None:
            return session
        # Issued and no longer live anywhere: closed (whichever frontend opened it; ids are
        # sequential, so saying so tells nothing new). Another connection's live session
        # stays unknown to this one.
        runtime = self.runtime
        if runtime.issued(session_id) and session_id not in runtime.sessions:
            raise AgentError.session_closed(session_id)
        raise AgentError.unknown_session(session_id)

