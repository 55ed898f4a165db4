"""The runtime: every session of one sidecar, the runtime-level commands, and the one
dispatcher that every framing and transport calls.

``Engine.execute(name, args, sink, scope, done)`` runs one validated command (see
``commands.COMMANDS``). ``discover``, ``probe``, ``plan_usage``, ``plan_usage_all`` and
``generate`` live in oneshots.py (which never imports this file: the runtime hands them its
loop and its ``open`` and ``launch``); session commands go to ``EngineSession``. A ``Scope`` is what one frontend
may touch: its own sessions (a stdio or socket connection), or all of them (HTTP, where
sessions outlive connections).

Rules of this file:
- The runtime imports the engine, never the reverse: each EngineSession gets the runtime's
  ``engine.Context`` (loop, stall timeout, a forget callback) and nothing else of it.
- It calls drivers only through the members ``drivers/base.Driver`` defines
  (``plan_usage``, ``deterministic``, ``tools_disabled``) and gives them what they need in
  their ``Launch`` (the mock's script included): no probing for optional hooks.
- Every process a one-shot starts (discover's ``--version`` runs, plan_usage's) is tracked
  (``oneshots.Processes``): ``kill_all`` kills them too, and ``end_oneshots`` (the sidecar's
  exit) kills and reaps what is left of them. Probe and generate run sessions.
- A start loads none of what only a session needs (session.py and what it imports, the
  driver base, the app's tools, the process transport): ``context`` and ``launch`` import
  them when the first session opens (or a one-shot runs), so that ``serve`` writes its
  hello and ``--single-shot capabilities`` answers without them (tests/test_startup.py).
"""

from __future__ import annotations

import os

from agentproto.core import commands
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers import catalog
from agentproto.drivers.catalog import AgentSpec
from agentproto.engine import guard
from agentproto.engine.observations import Observer
from agentproto.loopio import descriptors
from agentproto.loopio.loop import Loop

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import AgentInstallation
    from agentproto.drivers.base import Launch
    from agentproto.engine.oneshots import Processes
    from agentproto.engine.session import Context, Done, EngineSession, EventSink
    from agentproto.loopio.record import RecordSink
    from agentproto.loopio.transport import LineTransport, Spawn, TransportFactory
    from agentproto.tools import apptools
    from agentproto.tools.listener import Listener

#: The optional ``open`` fields only some drivers honour (``Driver.open_fields``).
OPEN_FIELDS = ("notes", "reminder")
#: Commands a session may hold while it opens (answered in order once the open is answered);
#: one more is SessionBusy.
OPENING_QUEUE = 64


def _open_error(exc: Exception, launch: Launch) -> AgentError:
    """What an open that raised answers: an AgentError as itself, an OSError as SpawnFailed,
    anything else (a driver's bug, logged with its traceback) as an internal error."""
    if isinstance(exc, AgentError):
        return exc
    if isinstance(exc, OSError):
        return AgentError.detail(Kind.SPAWN_FAILED, str(exc))
    return AgentError.internal(f"open {launch.agent_id}")


class Engine:
    """Every session of one sidecar process, shared by all of its frontends."""

    def __init__(
        self,
        loop: Loop,
        *,
        mock_script: dict[str, Any] | None = None,
        stall_timeout: float = 60.0,
        transport_factory: TransportFactory | None = None,
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
        self.sessions: dict[str, EngineSession] = {}
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
        #: What every session shares (``context``, made when first needed); the stall timeout
        #: and how sessions start their agents (replay and fault injection put their own in;
        #: None: process_transport) are kept there, and only there.
        self._context: Context | None = None
        self._context_args = (stall_timeout, transport_factory)
        #: Commands sent to a session while it was opening, by session id, in order: run once
        #: its open is answered (an entry exists only while there is something to hold).
        self._held: dict[str, list[tuple[str, dict[str, Any], EventSink, Scope, Done]]] = {}
        #: The processes one-shots started that have not exited (made when first needed).
        self._oneshots: Processes | None = None

    @property
    def context(self) -> Context:
        """What every session of this runtime shares (engine/session.py's ``Context``)."""
        if self._context is None:
            from agentproto.engine.session import Context  # with the first session: see the rules
            from agentproto.loopio.process_transport import process_transport

            stall_timeout, transport_factory = self._context_args
            factory = transport_factory if transport_factory is not None else process_transport
            self._context = Context(self.loop, stall_timeout, self._forget, factory, self._listen, self.observer)
        return self._context

    def _forget(self, session: EngineSession) -> None:
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

    def resolve(self, agent: Any, session_id: str | None) -> tuple[AgentSpec, AgentInstallation]:
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

    def launch(
        self, args: dict[str, Any], throwaway: bool = False, tools_disabled: bool = False, session_id: str | None = None
    ) -> tuple[AgentSpec, Launch]:
        """The spec and ``Launch`` of an open's fields (``InvalidConfiguration`` when they
        cannot start an agent, ``NotInstalled`` when it is missing): what ``open`` starts,
        and what replay adjusts (replay.py)."""
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
        from agentproto.drivers.base import Launch  # with the first session: see the rules
        from agentproto.tools import apptools

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
            policy=guard.checked_policy(args.get("policy")),
            budget=guard.checked_budget(args.get("budget")) or None,
            retry=guard.checked_retry(args.get("retry")),
            max_terminals=self.max_terminals,
            tool_timeout=float(args.get("tool_timeout") or apptools.TOOL_TIMEOUT),
            hook_timeout=float(args.get("hook_timeout") or apptools.HOOK_TIMEOUT),
        )
        return spec, launch

    def open(
        self, args: dict[str, Any], sink: EventSink, done: Done, throwaway: bool = False, tools_disabled: bool = False
    ) -> EngineSession | None:
        session_id = f"s{self._last_id + 1}"
        try:
            spec, launch = self.launch(args, throwaway, tools_disabled, session_id)
            driver_class = spec.driver_class()
            for name in OPEN_FIELDS:
                if args.get(name) and name not in driver_class.open_fields:
                    why = f"{name}: {launch.agent_id} cannot take it"
                    raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)
            self._wire(session_id, launch, spec.extra.get("env") or {})
        except AgentError as error:
            done(None, error)
            return None
        self._last_id += 1
        try:
            # The session builds its driver (it is the driver's Host): a driver that cannot
            # take this launch refuses the open before there is a session to forget.
            from agentproto.engine.session import EngineSession

            session = EngineSession(self.context, session_id, launch, sink, driver_class)
        except Exception as exc:
            if launch.wire is not None:
                launch.wire.close()
            done(None, _open_error(exc, launch))
            return None

        def answered(info: Any, error: AgentError | None) -> None:
            done(info, error)
            if session_id in self._held:
                self.loop.call_soon(lambda: self._run_held(session_id))

        session.open_done = answered
        self.sessions[session.id] = session
        try:
            session.serve_app()  # the driver configures its agent with the tools' URL
            from agentproto.core import redact  # here: a start that opens no session needs none of it

            for url in (session.tools_url, *(session.hook_url(event) for event in launch.hooks)):
                if url is not None:
                    redact.SECRETS.learn_url(url)  # its token must never reach a record
            session.driver.open()
        except Exception as exc:
            # A bug of the driver's (not an AgentError or OSError) costs this open only: the
            # session is forgotten, and whatever its driver started is killed, instead of
            # lingering as "opening".
            if isinstance(exc, (AgentError, OSError)):
                session.driver_gone = True
            session.open_failed(_open_error(exc, launch))
        return session

    def _wire(self, session_id: str, launch: Launch, agent_env: dict[str, str]) -> None:
        """Record the session's agent wire (``--record``, ``record_wire``), and the ids its
        driver makes up with it. ``agent_env``: the catalog's env for this agent (a declared
        agent's, from agents.json), whose secrets a record learns as the session's."""
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
        wire.launch(launch.installation, {**agent_env, **launch.env}, launch.mcp_servers)

        def new_id(purpose: str) -> str:
            value = self.made_up(session_id, purpose)
            wire.made_up(purpose, value)
            return value

        launch.new_id = new_id

    # -- the one-shot commands (oneshots.py), handed what they need of this runtime ------
    # (imported when first run: a sidecar that only opens sessions never loads them)

    @property
    def oneshots(self) -> Processes:
        """The processes one-shots started that have not exited yet (see the rules)."""
        if self._oneshots is None:
            from agentproto.engine.oneshots import Processes

            self._oneshots = Processes(self.loop, self.context.transport_factory)
        return self._oneshots

    def end_oneshots(self) -> None:
        """The sidecar is exiting (its loop has stopped): kill every process a one-shot
        started that still runs, and reap their groups (oneshots.Processes.end)."""
        if self._oneshots is not None:
            self._oneshots.end()

    def discover(self, done: Done) -> None:
        from agentproto.engine import oneshots

        oneshots.discover(self.loop, self.mock_script is not None, self.oneshots.start, done)

    def probe(self, args: dict[str, Any], done: Done) -> EngineSession | None:
        from agentproto.engine import oneshots

        return oneshots.probe(self.loop, self.open, args, done)

    def plan_usage(self, args: dict[str, Any], done: Done) -> None:
        from agentproto.engine import oneshots

        def spawn(what: Spawn) -> LineTransport:  # no session: no agent wire to record
            return self.oneshots.start(self.loop, what, None)

        oneshots.plan_usage(self.loop, lambda fields: self.launch(fields, throwaway=True), spawn, args, done)

    def plan_usage_all(self, args: dict[str, Any], done: Done) -> None:
        from agentproto.engine import oneshots

        oneshots.plan_usage_all(self.loop, self.discover, self.plan_usage, args, done)

    def generate(
        self,
        args: dict[str, Any],
        done: Done,
        on_event: Callable[[EngineSession, dict[str, Any]], None] | None = None,
    ) -> EngineSession | None:
        from agentproto.engine import oneshots

        return oneshots.generate(self.loop, self.open, args, done, on_event)

    def close_all(self, sessions: list[EngineSession] | None = None) -> None:
        for session in list(self.sessions.values() if sessions is None else sessions):
            session.abandon()

    def kill_all(self) -> None:
        """Kill every session's agent, and every one-shot's process, now (a server that must
        end: a signal's grace ran out). Each session still closes as usual once its agent's
        exit is seen; each one-shot answers as the kill makes it."""
        if self._oneshots is not None:
            self._oneshots.kill()
        for session in list(self.sessions.values()):
            if session.driver_gone:
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
        sink: EventSink,
        scope: "Scope",
        done: Done,
        on_event: Callable[[EngineSession, dict[str, Any]], None] | None = None,
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
        elif name == "plan_usage_all":
            self.plan_usage_all(args, done)
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


#: The commands an open session runs: each calls its EngineSession method with the command's fields.
SESSION_COMMANDS: dict[str, Callable[[EngineSession, dict[str, Any], Done], None]] = {
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

    def __init__(self, runtime: Engine, shared: bool = False) -> None:
        self.runtime = runtime
        self.shared = shared
        self.live: dict[str, EngineSession] = {}
        self.hidden: dict[str, EngineSession] = {}
        #: Called when the last session of this scope has closed.
        self.on_empty: Callable[[], None] | None = None

    def add(self, session: EngineSession | None, visible: bool = True) -> None:
        """Hold the session a command opened (none, or one closed already: nothing to hold)."""
        if session is None or session.state == "closed":
            return
        (self.live if visible else self.hidden)[session.id] = session
        session.scopes.append(self)

    def discard(self, session: EngineSession) -> None:
        if self.live.pop(session.id, None) is None and self.hidden.pop(session.id, None) is None:
            return
        if self.on_empty is not None and not self.live and not self.hidden:
            self.on_empty()

    def sessions(self) -> list[EngineSession]:
        return [*self.live.values(), *self.hidden.values()]

    def lookup(self, session_id: str) -> EngineSession:
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

