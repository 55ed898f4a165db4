"""The driver seam: what the engine asks of an agent adapter, and what it offers back.

A driver adapts one agent to protocol 1's normalized events. It never writes protocol
lines, keeps no turn or queue state of the engine's, and never emits the engine-owned
kinds (TurnStarted, TurnEnded, RequestClosed, SessionUpdated, StatusChanged): it reports
facts to its ``Host`` and the engine turns them into ordered events.

Engine -> driver (``Driver``): open, start_turn, steer, answer, cancel, configure, rollback, compact,
close, kill, pause_output, resume_output, hook_answered; the facts deterministic(), tools_disabled,
open_fields; with no session, the class's plan_usage(). ``Launch`` carries all a driver is given.

Driver -> engine (``Host``): opened / open_failed, turn_acknowledged, emit, end_turn,
update, diagnostic, request_withdrawn, fail, closed, spent (a running turn's usage so far:
budgets count it); and the app's tools and hooks below.

The app's own tools and hooks (apptools.py; the engine does all their bookkeeping):
- A driver that can give its agent the app's tools sets ``Driver.app_tools``; one with a
  hook channel lists the hook events it can deliver in ``Driver.hook_events``. The engine
  refuses an ``open`` with tools or hooks the driver cannot take (UnsupportedFeature naming
  the agent) before ``open()`` is called.
- Tools: by ``open()``, ``host.tools_url`` is the session's Streamable HTTP MCP endpoint on
  the loopback listener (None when the app declared no tools). Configure the agent with it
  as one MCP server named ``APP_SERVER`` (``"agentproto"``); ``launch.tools`` holds the
  declarations. The URL carries the session's secret token: never log it, never put it on
  a command line (write it to a 0600 file or pass it through the agent's environment).
  The agent's calls reach the engine through the listener, never through the driver.
- A call of one of the app's tools is the app's decision: when the agent asks permission
  for a tool, ``host.is_app_tool(server, tool)`` says whether it is one of these (allow it
  yourself: never raise a Permission request for it).
- Hooks: every invocation, whatever channel it came through (Claude's ``hook_callback``
  over the control protocol, the listener's ``POST /<token>/hook/<event>``), goes to
  ``host.hook(event, input, reply)``; ``reply(output)`` is called exactly once with the
  agent's hook output (the app's ``HookResult``, or ``{}``: neutral). ``launch.hooks``
  lists the events the app answers; ``host.hook_url(event)`` is the listener's URL for an
  agent whose hooks are commands that post their input (the same secret rules apply).
  Whatever the channel, ``Driver.hook_answered(event, output)`` then says what the agent
  was answered (a hook the listener took never passed through the driver).

A driver never starts a process: ``LineDriver.spawn`` asks the host for a line transport
(``loopio/transport.py``: a child process, or what carries lines in a test or a replay);
``plan_usage`` is handed the runtime's ``spawn`` for its own, which it bounds and reaps.

Each driver's lifecycle is a transition table run by ``Lifecycle`` (the shape of h11's
``_state.py``): its states, the events that move them, one dict state -> {event: next
state}. ``Lifecycle.move`` is the only writer of the state; an event the table has no entry
for is one uniform error: ``ProtocolFailed`` when the agent caused it (a ProtocolFailed
raised while a line is handled fails the session), ``Internal`` when the engine did (a bug).

The tools layer is read only through this module: a family's modules (claude/, codex/,
acp/, agy/) take ``APP_SERVER`` and the timeouts from here, never from ``agentproto.tools``
(scripts/import_graph.py's rule, tests/test_layers.py). The mock, which calls the app's
tools over HTTP as an agent does, imports the tools' MCP client itself (lazily).
"""

from __future__ import annotations

import os

from agentproto.core.errors import AgentError, Kind, excerpt, log
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.core.wire import Record, decode_json_line
from agentproto.loopio.loop import Soon
from agentproto.tools.apptools import APP_SERVER as APP_SERVER
from agentproto.tools.apptools import HOOK_TIMEOUT, TOOL_TIMEOUT

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import (
        AgentDetails,
        AgentInstallation,
        AgentRequest,
        CheckedTool,
        ConfigOption,
        JsonObject,
        McpServer,
        StopReason,
        TurnUsage,
    )
    from agentproto.loopio.loop import Loop
    from agentproto.loopio.record import Wire
    from agentproto.loopio.transport import LineTransport, Spawn, Spawner
    PlanUsageDone = Callable[[Any, AgentError | None], None]  # plan_usage's answer, once


class Lifecycle:
    """One driver's lifecycle: a state, moved only by the events its table allows.

    ``table`` maps each state to its events' next states; ``agent_events`` names the events the
    agent causes (a line, an answer, its exit, its silence), every other one is the
    engine's (open, close, kill) or the driver's own. A self-loop entry says an event is
    expected and changes nothing there (a close while closing): the caller decides what to
    do from the state ``move`` returns, the one it left.
    """

    __slots__ = ("name", "state", "table", "agent_events")

    def __init__(self, name: str, table: dict[str, dict[str, str]], agent_events: frozenset[str], state: str) -> None:
        self.name = name
        self.table = table
        self.agent_events = agent_events
        self.state = state

    def move(self, event: str, line: bytes | None = None) -> str:
        """Take ``event``: the state becomes the table's next one; returns the one left.
        No entry: ProtocolFailed (quoting ``line``, the agent line that caused it) for an
        agent event, Internal for any other."""
        previous = self.state
        nxt = self.table.get(previous, {}).get(event)
        if nxt is None:
            detail = f"{self.name}: {event} is not expected while {previous}"
            if event in self.agent_events:
                raise AgentError.protocol_failed(detail, line)
            raise AgentError.detail(Kind.INTERNAL, detail)
        self.state = nxt
        return previous


def fresh_id(purpose: str) -> str:
    """A new id (a UUID4): ``Launch.new_id``'s default."""
    import uuid  # not at start-up: most sessions never make an id up

    return str(uuid.uuid4())


class Launch(Record):
    """One session's launch facts: the wire's SessionOptions, resolved against the catalog."""

    agent_id: str
    installation: AgentInstallation
    executable: str
    dir: str
    resume: str | None = None
    fork: str | None = None
    fork_at: str | None = None
    #: The permission mode every driver applies: the app's, or "Ask" when it sent none.
    permission_mode: str = "Ask"
    #: The permission policy's rules (core/policy.py; the engine applies them), the budget
    #: (engine/guard.py) and the rate-limit retry (``{"max_wait_s": N}``), as the app gave them.
    policy: list[Any] = []
    budget: dict[str, Any] | None = None
    retry: dict[str, Any] | None = None
    #: Whether the app sent ``permission_mode`` (not omitted, not null): a driver whose
    #: agent has one fixed mode (agy) tells "the app did not say" from an explicit "Ask".
    permission_mode_given: bool = False
    mcp_servers: list[McpServer] = []
    configure: dict[str, Any] = {}
    instructions: str | None = None
    #: Notes kept beside the instructions, and text that starts every user message; only a
    #: driver with the field in ``Driver.open_fields`` gets them (the runtime refuses others).
    notes: str | None = None
    reminder: str | None = None
    output_schema: Any = None
    env: dict[str, str] = {}
    args: list[str] = []
    config_home: str | None = None
    record_wire: str | None = None
    #: A session that only exists to serve probe or generate; generate: the agent must answer
    #: in text, without tools.
    throwaway: bool = False
    tools_disabled: bool = False
    #: For ACP agents: the arguments that make the executable speak ACP.
    acp_args: list[str] = []
    #: For the mock: the script it plays (``serve --mock``); None plays the echo agent.
    mock_script: dict[str, Any] | None = None
    #: The app's own tools, checked (apptools.check_tools): name, description,
    #: input_schema and output_schema (when declared), as the app declared them.
    tools: list[CheckedTool] = []
    #: The hook events the app answers (``Host.hook``); terminals an ACP agent may hold live
    #: at once (``serve --max-terminals``); seconds a tool call (a hook) waits for the app.
    hooks: list[str] = []
    max_terminals: int = 16
    tool_timeout: float = TOOL_TIMEOUT
    hook_timeout: float = HOOK_TIMEOUT
    #: Where the session's agent wire is recorded (``--record``, ``record_wire``), if anywhere.
    wire: "Wire | None" = None
    #: Every id a driver makes up itself (Claude's session id, a message id the agent did
    #: not give) comes from here, named by its purpose: a recording keeps them, and replay
    #: hands the recorded ones back, so a replayed driver writes what it wrote then.
    new_id: Callable[[str], str] = fresh_id
    #: Replay only: agentproto's recorded answer to the agent's own request ``id`` (the
    #: JSON-RPC line written then), or None when the recording has none. While it is set, a
    #: driver serves nothing on the agent's behalf itself (ACP's ``fs/*`` and
    #: ``terminal/*``: no file read or written, no process started): it answers what was
    #: answered then, or an error.
    recorded_answer: Callable[[Any], str | None] | None = None

    def child_env(self) -> dict[str, str]:
        """The sidecar's environment with the session's ``env`` over it (its values win)."""
        env = dict(os.environ)
        env.update(self.env)
        return env


class Host(Protocol):
    """What the engine offers a driver for one session."""

    loop: "Loop"
    session_id: str

    def opened(self, details: AgentDetails, **info: Any) -> None:
        """The session is ready: AgentDetails and SessionInfo members (resume_token, title…)."""

    def open_failed(self, error: AgentError) -> None: ...

    def turn_acknowledged(self) -> None:
        """The agent accepted the turn the engine started; earlier content was stale."""

    def emit(self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None) -> None:
        """One normalized event (any kind but the engine-owned ones)."""

    def end_turn(self, stop: StopReason, usage: TurnUsage | None = None) -> None:
        """The agent ended its turn with this StopReason."""

    def update(self, **info: Any) -> None:
        """SessionInfo members changed (details, resume_token, title, configuration)."""

    def diagnostic(self, level: str, message: str) -> None: ...

    def spent(self, usage: TurnUsage, cost_usd: float | None = None) -> None:
        """The running turn's usage so far (cumulative; ``cost_usd`` when the agent says)."""

    def request_withdrawn(self, request_id: str) -> None:
        """The agent withdrew an open request itself (it no longer waits for the answer)."""

    def fail(self, error: AgentError) -> None:
        """A terminal session error (the agent died, lost auth…); the engine closes it."""

    def closed(self) -> None:
        """The agent is gone: every process of the session has exited."""

    # -- the app's tools and hooks (see the module's docstring)
    @property
    def tools_url(self) -> str | None:
        """The session's MCP endpoint of the app's tools (secret: it holds the token), or None."""

    def hook_url(self, event: str) -> str | None:
        """The listener's URL a hook command posts its input to (secret too), or None."""

    def hook(self, event: str, input: Any, reply: Callable[[dict[str, Any]], None]) -> None:
        """The agent invoked a hook: the app is asked; ``reply(output)`` runs once, maybe later."""

    def is_app_tool(self, server: str, tool: str) -> bool:
        """Whether the agent's tool ``tool`` of MCP server ``server`` is one of the app's."""

    def spawn(self, spawn: "Spawn") -> "LineTransport":
        """Start the session's agent (OSError if it cannot start); see loopio/transport.py."""


class Driver:
    """Base class of every agent adapter. Defaults refuse what most agents lack.

    The engine and the runtime call only the members defined here; a driver overrides
    them, it adds no hooks of its own for them to look for.
    """

    #: True when this driver runs its agent with every tool off because the launch asked
    #: (``Launch.tools_disabled``, set by generate). A driver that cannot switch tools off
    #: leaves it False: generate then needs the agent's permission requests instead.
    tools_disabled: bool = False

    #: The optional ``open`` fields beyond the common ones that this driver honours
    #: (``notes``, ``reminder``): the runtime refuses the others with UnsupportedFeature
    #: before the driver is made, so a field is never silently dropped.
    open_fields: frozenset[str] = frozenset()

    #: True when this driver gives its agent the app's tools (``Host.tools_url``); whether its
    #: agent reports its usage (tokens or cost: a ``usd`` budget needs it).
    app_tools: bool = False
    usage_reports: bool = True
    #: The hook events this driver can deliver to ``Host.hook`` (empty: no hook channel).
    #: A driver may set it per instance in ``__init__`` (the mock's comes from its script).
    hook_events: frozenset[str] = frozenset()

    def __init__(self, host: Host, launch: Launch) -> None:
        self.host = host
        self.launch = launch
        #: The one loop (its clock and timers), as the host gives it.
        self.loop: Loop = host.loop

    @classmethod
    def plan_usage(cls, loop: "Loop", launch: Launch, spawn: "Spawner", done: "PlanUsageDone") -> None:
        """PlanUsage without a session, through ``done`` once (or an AgentError raised at once)."""
        raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, "plan usage")

    def deterministic(self, origin: Any) -> bool:
        """Whether the agent reports the end of every turn of this origin (``"Agent"`` or a
        prompt's). When it may not, the engine ends a turn that has been quiet too long."""
        return True

    # -- lifecycle
    def open(self) -> None:
        raise NotImplementedError
    def close(self) -> None:
        """Graceful shutdown; call ``host.closed()`` once everything is gone."""
        raise NotImplementedError

    def kill(self) -> None:
        """Immediate shutdown (grace expired, EOF deadline); still ends in ``host.closed()``."""
        self.close()

    # -- turns
    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        raise NotImplementedError

    def steer(self, text: str, attachments: list[str], done: Callable[[bool], None]) -> None:
        done(False)

    def answer(self, request: AgentRequest, answer: Any) -> None:
        """Answer an open request. ``request`` is the RequestOpened payload the app saw."""
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError

    def hook_answered(self, event: str, output: JsonObject) -> None:
        """The agent's ``event`` hook was answered ``output`` (the app's, or ``{}``), whatever
        channel carried it: a driver whose agent reports the hook's effect without its
        content (agy's injected steps carry no text) learns it here."""

    #: Options that take any non-empty string, listed among their choices or not (the agent
    #: resolves it): option id -> what the value is, for the refusal ("a model id").
    open_choices: dict[str, str] = {}

    # -- settings and history
    def validate_config(self, option: ConfigOption, value: Any) -> str | None:
        """Return a problem with ``value`` for ``option``, or None. Strict by default."""
        wanted = self.open_choices.get(str(option.get("id")))
        if wanted is not None:
            return None if isinstance(value, str) and value.strip() else f"expects {wanted}"
        kind = option.get("kind")
        if kind == "Boolean":
            return None if isinstance(value, bool) else "expects a boolean"
        if isinstance(kind, dict) and "Select" in kind:
            choices = [c.get("value") for c in kind["Select"].get("choices", [])]
            if value in choices:
                return None
            return f"expects one of {', '.join(map(str, choices))}"
        return None

    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        done(None)

    def rollback(self, turns: int, scope: str, done: Callable[[AgentError | None, str | None], None]) -> None:
        done(AgentError.detail(Kind.UNSUPPORTED_FEATURE, "rollback"), None)

    def compact(self) -> None:
        raise NotImplementedError

    # -- flow control: the engine calls these as the app falls behind and catches up
    def pause_output(self) -> None:
        pass

    def resume_output(self) -> None:
        pass


#: What ``LineDriver.decode`` returns for a line that is not JSON.
NOT_JSON: Any = object()


def _head(line: bytes) -> str:
    return repr(line[:200])


class LineDriver(Driver):
    """A driver that talks to its agent over one line transport (``self.transport``)."""

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        self.transport: LineTransport | None = None
        #: The agent line being handled (None between lines): errors it causes quote it.
        self.line: bytes | None = None

    def spawn(
        self, argv: list[str], env: dict[str, str], *, wait_group: bool = False, pipe_size: int | None = None
    ) -> "LineTransport":
        """Start the agent through the host; a start failure is ``SpawnFailed``."""
        from agentproto.loopio.transport import Spawn

        spawn = Spawn(
            argv=argv,
            cwd=self.launch.dir,
            env=env,
            on_line=self._guarded_line,
            on_exit=self.on_exit,
            on_too_long=self.on_too_long,
            wait_group=wait_group,
            pipe_size=pipe_size,
        )
        try:
            self.transport = self.host.spawn(spawn)
        except OSError as exc:
            raise AgentError.detail(Kind.SPAWN_FAILED, f"{argv[0]}: {exc.strerror or exc}") from None
        return self.transport

    def on_line(self, line: bytes) -> None:
        """One line the agent wrote (without its newline)."""
        raise NotImplementedError

    def decode(
        self, line: bytes, who: str, quote: Callable[[bytes], str] = _head, before: Callable[[], None] | None = None
    ) -> Any:
        """The JSON value of one agent line, or NOT_JSON: a Warning then says why (``who``
        "wrote a line that is ...", the line as ``quote`` shows it), after ``before()``
        (a driver that holds deltas sends them first); a blank line, nothing.
        Every line driver decodes its agent's lines here."""
        try:
            return decode_json_line(line)
        except ValueError as exc:
            if line.strip():
                if before is not None:
                    before()
                self.host.diagnostic("Warning", f"{who} a line that is {exc}: {quote(line)}")
            return NOT_JSON

    def _guarded_line(self, line: bytes) -> None:
        # The line guard: whatever one line does to the mapping costs that line only (else
        # the rest of the read would be lost). A ProtocolFailed (a lifecycle event the agent
        # may not cause where it is) is the agent's fault, not the line's: it fails the session.
        self.line = line
        try:
            self.on_line(line)
        except AgentError as exc:
            if exc.kind != Kind.PROTOCOL_FAILED:
                self.line_failed(line, exc)
            else:
                self.host.fail(exc)
        except Exception as exc:
            self.line_failed(line, exc)
        self.line = None

    def line_failed(self, line: bytes, exc: Exception) -> None:
        """One agent line could not be handled: say so (a Diagnostic naming the line and
        the exception, a traceback on stderr) and go on with the next line."""
        import traceback  # only on this path: it is not free at start-up

        shown = excerpt(line)
        log(f"{self.launch.agent_id}: a line raised in the driver: {shown}\n{traceback.format_exc().rstrip()}")
        agent, problem = self.launch.agent_id, f"{type(exc).__name__}: {exc}"
        self.host.diagnostic("Warning", f"{agent}: skipped a line it could not handle ({problem}): {shown}")

    def on_exit(self, status: str | None, stderr: str) -> None:
        """The agent exited and its output ended (``status`` as describe_status says)."""
        raise NotImplementedError

    def on_too_long(self, size: int) -> None:
        self.host.diagnostic("Warning", f"{self.launch.agent_id} wrote a {size}-byte line; skipped")

    def kill_agent(self) -> None:
        """Kill the agent's process group now, if it runs (its exit is reported as ever)."""
        if self.transport is not None:
            self.transport.kill()

    def send(self, obj: Any) -> None:
        """One JSON message to the agent (dropped once the agent is gone)."""
        if self.transport is not None:
            self.transport.write_json(obj)

    # Flow control is the pipe's: stop reading the agent and it blocks on a full pipe.
    def pause_output(self) -> None:
        if self.transport is not None:
            self.transport.pause()

    def resume_output(self) -> None:
        if self.transport is not None:
            self.transport.resume()


class Deltas:
    """Text deltas held back to go out as one event: consecutive deltas of one message (of
    one kind, under one parent tool) become one, sent by ``flush`` (a driver calls it
    before any other event) and on the loop's next pass at the latest. An agent that
    writes a line per token then costs one event per read, not per token."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._held: tuple[str, str, str | None, list[str]] | None = None
        self._flush_soon = Soon(host.loop, self.flush)

    @property
    def holding(self) -> bool:
        return self._held is not None

    def delta(self, kind: str, message_id: str, piece: str, parent: str | None = None) -> None:
        """A ``kind`` delta ("TextDelta", "ReasoningDelta") of ``message_id``."""
        held = self._held
        if held is not None:
            if held[0] == kind and held[1] == message_id and held[2] == parent:
                held[3].append(piece)
                return
            self.flush()
        self._held = (kind, message_id, parent, [piece])
        self._flush_soon.request()

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            kind, message_id, parent, pieces = held
            self.host.emit({kind: {"message_id": message_id, "text": "".join(pieces)}}, None, parent)
