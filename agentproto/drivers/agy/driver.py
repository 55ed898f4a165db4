"""The Antigravity driver: Google's ``agy`` CLI in print mode over stream-json (seed 003).

agy reads one ``user`` line per turn on stdin and answers with ``step_update`` lines and
one ``result``; it has no control channel. So everything a session is given at open goes
in a plugin, in a 0700 directory of the session's own passed as ``--add-dir``
(``agy_plugin.py``): the instructions and notes as rules files, the app's tools (the
listener's MCP endpoint) and ``mcp_servers`` in ``mcp_config.json``, the app's hooks in
``hooks.json`` as ``curl`` commands that post to the listener. Attached images are saved
there too (agy takes text blocks only). The pure mappings are in ``agy_mapping.py``;
a throwaway session's probe (agy's version, models and sign-in) is ``agy/probe.py``.

Rules of this file:
- A ``result`` ends the turn whose line it answers, in the order the lines were written,
  so a late result of a turn the engine gave up on never ends the next one.
- A process takes input only once it wrote ``init`` and until it is asked to go: cancel
  (SIGINT) and a model switch (EOF) end it, and a new one starts on the same conversation
  (``--conversation``) once it has exited. A turn's line written meanwhile waits in the
  outbox; nothing is lost and nothing goes to a process that is leaving.
- An exit before ``init`` fails the open: AuthRequired with the login step when agy says it
  is signed out, in an ERROR ``result`` or on stderr only (``agy_mapping.signed_out``).
- An ERROR ``result`` in a rate limit's words (drivers/ratelimits.py) is reported as one.
- An exit nobody asked for ends the session (engine/restart.py may resume it); the session
  directory, with every file that holds the listener's token, goes when the driver ends.
"""

from __future__ import annotations

import json
import os
import signal
from collections import deque
from collections.abc import Callable
from typing import Any

from agentproto.core.errors import AgentError, Kind, excerpt
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers import ratelimits
from agentproto.drivers.agy.mapping import (
    HOOK_EVENTS,
    SIGNED_IN,
    add_usage,
    body_of,
    build_argv,
    context_usage,
    conversation_of,
    details,
    early_exit,
    result_error,
    server_names,
    startup_error,
    stop_reason,
    tool_error,
    tool_snapshot,
    turn_usage,
    user_message,
)
from agentproto.drivers.agy.plugin import SessionDir
from agentproto.drivers.agy.probe import probe
from agentproto.drivers.base import APP_SERVER, NOT_JSON, Host, Launch, Lifecycle, LineDriver
from agentproto.drivers.fields import obj, objects, text
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentRequest, ConfigChoice, JsonObject, StopReason, ToolUpdate, TurnUsage
    from agentproto.drivers.agy.types import StepBody, UserLine

HANDSHAKE_TIMEOUT = 60.0
#: How long ``close`` waits after ending agy's input before signalling its group.
CLOSE_GRACE = 2.0
#: How long agy may take to exit once asked (SIGINT, EOF) before it is killed.
EXIT_GRACE = 5.0


def handshake_timeout() -> float:
    try:
        value = float(os.environ.get("AGENTPROTO_AGY_HANDSHAKE_TIMEOUT") or HANDSHAKE_TIMEOUT)
    except ValueError:
        return HANDSHAKE_TIMEOUT
    return value if value > 0 else HANDSHAKE_TIMEOUT


#: The session's lifecycle (``Lifecycle``). agy's ``init`` (or probe's answers) opens it
#: and its ``exit`` ends it, unless the exit was asked for (a restart: it stays open).
#: ``close`` asks a running process to go; ``discard`` ends a session with none running.
LIFECYCLE: dict[str, dict[str, str]] = {
    "new": {"open": "opening", "discard": "gone", "kill": "closing"},
    "opening": {
        "init": "open", "probed": "open",
        "close": "closing", "discard": "gone", "kill": "closing", "exited": "gone",
    },
    "open": {"restart_failed": "gone", "close": "closing", "discard": "gone", "kill": "closing", "exited": "gone"},
    "closing": {"close": "closing", "discard": "gone", "kill": "closing", "exited": "gone"},
    "gone": {"discard": "gone", "kill": "gone"},
}
AGENT_EVENTS = frozenset({"init", "probed", "exited"})


class _Turn:
    __slots__ = ("id", "prompted", "tools", "usage", "messages")

    def __init__(self, turn_id: str) -> None:
        self.id = turn_id
        self.prompted = False  # its own user_input step came (later ones are injected)
        self.tools: dict[int, ToolUpdate] = {}  # step index -> the running tool's snapshot
        self.usage: dict[str, int] = {}
        self.messages: set[str] = set()


class AgyDriver(LineDriver):
    usage_reports = False  # the conversation's context size only: no turn's tokens, no cost
    open_fields = frozenset({"notes", "reminder"})
    app_tools = True
    hook_events = HOOK_EVENTS
    #: Any id goes (agy lists its models in probe); one agy does not know is refused when
    #: the new process starts, and the session goes on with its model.
    open_choices = {"model": "a model id"}

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        self.life = Lifecycle("agy", LIFECYCLE, AGENT_EVENTS, "new")
        self.conversation = launch.resume
        #: Whether the conversation has a step: agy saves a conversation with its first
        #: step, so one interrupted before any cannot be resumed (a new one starts).
        self.used = bool(launch.resume)
        model = launch.configure.get("model")
        #: The model asked for (None: agy's default); ``running_model`` is the one the
        #: last process to start reported in its ``init``.
        self.model: str | None = model if isinstance(model, str) and model else None
        self.running_model: str | None = None
        self.spawned_model: str | None = None  # the --model of the current process
        self.initialized = False  # the current process wrote its init
        self.restart = False  # the current process was asked to exit; a new one follows
        self.dir: SessionDir | None = None
        self.outbox: deque[tuple[str, UserLine]] = deque()
        #: The turn of each line written to the current process, until its result (None:
        #: a turn the engine has ended already).
        self.written: deque[str | None] = deque()
        self.turn: _Turn | None = None
        self.cancelling = False
        self.injected: deque[str] = deque()  # what the app's PreInvocation hooks injected
        self.switches: list[Callable[[AgentError | None], None]] = []
        self.startup_failure: AgentError | None = None
        #: The current process's deadlines: its init, and its exit once asked to leave.
        self.handshake = Alarm(host.loop, self._handshake_expired)
        self.exit_grace = Alarm(host.loop, self.kill_agent)
        self.servers = server_names([APP_SERVER] + [str(s["name"]) for s in launch.mcp_servers])

    # -- lifecycle
    def open(self) -> None:
        self.life.move("open")
        self._check_launch()
        directory = SessionDir(self.launch)  # checks what agy would take wrongly
        if self.launch.throwaway:
            probe(self.host, self.launch, self._probed)  # the version and the models, no conversation
            return
        directory.create(self.host.tools_url, self.host.hook_url)
        self.dir = directory
        try:
            self._spawn()
        except BaseException:
            self._remove_dir()
            raise

    def _check_launch(self) -> None:
        """Refuse what agy cannot do, before anything starts (UnsupportedFeature says why)."""
        launch = self.launch

        def refuse(why: str) -> None:
            raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)

        if launch.tools_disabled:
            refuse("generate: agy can neither switch its tools off nor ask before using one (print mode)")
        if launch.fork or launch.fork_at:
            refuse("fork: agy cannot fork a conversation")
        if launch.permission_mode_given and launch.permission_mode != "AutoApprove":
            refuse(
                f"permission_mode {launch.permission_mode}: agy's print mode cannot ask for approval, so an agy "
                "session always runs always-proceed; omit permission_mode or pass AutoApprove"
            )
        if any(rule.get("action") != "allow" for rule in launch.policy):
            refuse("policy: agy's print mode never asks before using a tool, so a deny or ask rule would never apply")
        if launch.config_home:
            refuse("config_home: agy keeps its state under ~/.gemini/antigravity-cli and takes no other place")

    def _remove_dir(self) -> None:
        if self.dir is not None:
            self.dir.remove()
            self.dir = None

    def _spawn(self) -> None:
        assert self.dir is not None and self.dir.path is not None
        conversation = self.conversation if self.used else None
        argv = build_argv(self.launch.executable, self.dir.path, self.model, conversation, self.launch.args)
        self.initialized = False
        self.restart = False
        self.startup_failure = None
        self.spawned_model = self.model
        self.written.clear()
        # The exit is reported once agy's whole group (its MCP servers, hooks and
        # commands) is gone: nothing of a session outlives it.
        self.spawn(argv, self.launch.child_env(), wait_group=True)
        self.handshake.set(handshake_timeout())

    def _handshake_expired(self) -> None:
        if self.initialized or self.life.state not in ("opening", "open"):
            return
        error = AgentError.detail(Kind.HANDSHAKE_TIMEOUT, f"agy wrote no init in {handshake_timeout():g} s")
        if self.life.state == "opening":
            self.host.open_failed(error)
        else:
            self.host.fail(error)
        self.kill()

    def _probed(self, version: str | None, auth: Any, choices: list[ConfigChoice]) -> None:
        if self.life.state != "opening":
            return
        self.life.move("probed")
        self.host.opened(details(version, auth, self.model, choices))

    def close(self) -> None:
        self._end_switches(AgentError.session_closed(self.host.session_id))
        if self.transport is None or self.life.state == "gone":
            self.life.move("discard")
            self._remove_dir()
            self.host.closed()
            return
        self.life.move("close")
        if self.turn is not None and self.initialized:
            self.transport.signal(signal.SIGINT)  # end the turn now, not when agy is done with it
        self.transport.shutdown(CLOSE_GRACE)

    def kill(self) -> None:
        self.life.move("kill")
        if self.transport is not None:
            self.transport.kill()
        else:
            self._remove_dir()

    def on_exit(self, status: str | None, stderr: str) -> None:
        self.handshake.cancel()
        self.exit_grace.cancel()
        self.transport = None
        self.initialized = False
        failure, self.startup_failure = self.startup_failure, None
        if self.life.state == "open" and failure is None and self.restart:
            self._restarted()
            return
        if (
            self.life.state == "open"
            and failure is not None
            and failure.kind == Kind.INVALID_CONFIGURATION
            and self.switches
        ):
            # The new model was refused: the session goes on with the one that ran.
            self.model = self.running_model
            self._end_switches(failure)
            self._restarted()
            return
        previous = self.life.move("exited")
        self._remove_dir()
        if previous == "opening":
            self.host.open_failed(failure or early_exit(status, stderr, self.launch.executable))
        elif previous == "open":
            self._end_switches(AgentError.session_closed(self.host.session_id))
            self.host.fail(failure or AgentError.process_exited(status, stderr))
        self.host.closed()

    def _restarted(self) -> None:
        """The process exited as asked: end what it left, start the next on the conversation."""
        turn = self.turn
        if turn is not None and not any(entry[0] == turn.id for entry in self.outbox):
            # Cut off before its result came (SIGINT while agy was idle, or a kill).
            self._end_turn(turn, "Cancelled" if self.cancelling else {"Failed": {"message": "agy exited"}}, None)
        try:
            self._spawn()
        except AgentError as error:
            self.life.move("restart_failed")
            self._remove_dir()
            self.host.fail(error)
            self.host.closed()

    def _leave(self, how: Callable[[], None]) -> None:
        """Ask the current process to exit (a new one follows); killed if it does not."""
        self.restart = True
        how()
        self.exit_grace.set(EXIT_GRACE)

    # -- turns
    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        # A turn the engine already ended still owes a result: it must not end this one.
        ended = self.turn.id if self.turn is not None else None
        self.written = deque(None if entry == ended else entry for entry in self.written)
        self.outbox.clear()  # lines of turns the engine ended before they were written
        self.turn = _Turn(turn_id)
        self.cancelling = False
        self.injected.clear()
        notes = self.dir.attach(attachments) if self.dir is not None else []
        self.outbox.append((turn_id, user_message(text, self.launch.reminder, notes)))
        self._flush()

    def _flush(self) -> None:
        while self.outbox and self.initialized and not self.restart:
            turn_id, message = self.outbox.popleft()
            self.written.append(turn_id)
            self.send(message)
            if self.turn is not None and self.turn.id == turn_id:
                self.host.turn_acknowledged()

    def cancel(self) -> None:
        turn = self.turn
        if turn is None or self.life.state != "open":
            return
        if any(entry[0] == turn.id for entry in self.outbox):
            # Not written yet (a new process is starting): there is nothing to interrupt.
            self.outbox = deque(entry for entry in self.outbox if entry[0] != turn.id)
            self.host.loop.call_soon(lambda: self._end_turn(turn, "Cancelled", None))
            return
        if self.initialized and not self.restart and self.transport is not None:
            self.cancelling = True
            transport = self.transport
            self._leave(lambda: transport.signal(signal.SIGINT))

    def _end_turn(self, turn: _Turn, stop: StopReason, usage: TurnUsage | None) -> None:
        if self.turn is not turn:
            return
        self._close_tools(turn, stop)
        self.turn = None
        self.cancelling = False
        self._maybe_switch()  # before the engine starts the next turn
        self.host.end_turn(stop, usage)

    def _close_tools(self, turn: _Turn, stop: Any) -> None:
        why = "interrupted" if stop == "Cancelled" else "the turn ended before the tool did"
        tools, turn.tools = turn.tools, {}
        for snapshot in tools.values():  # cut off: agy sends no DONE for them
            self.host.emit({"ToolUpdated": {**snapshot, "status": "Failed", "output": why}})

    def answer(self, request: AgentRequest, answer: Any) -> None:
        pass  # agy asks nothing: the app's own requests are answered through the listener

    def hook_answered(self, event: str, output: JsonObject) -> None:
        if event == "PreInvocation":
            for step in objects(output.get("injectSteps")):
                message = step.get("userMessage")
                if isinstance(message, str) and message:
                    self.injected.append(message)

    # -- settings
    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        if option != "model":
            done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option}: agy has no such setting"))
            return
        if self.life.state != "open" or self.launch.throwaway:
            done(AgentError.session_closed(self.host.session_id))
            return
        # No way to switch the model of a running process: a new one on the same
        # conversation, once idle. The reply comes when it runs the model.
        self.model = value
        self.switches.append(done)
        self._maybe_switch()
        self._settle_switches()

    def _maybe_switch(self) -> None:
        if self.life.state != "open" or self.restart or not self.initialized or self.transport is None:
            return
        # Once nothing is in flight in this process: a turn whose line still waits in the
        # outbox runs on the new model.
        if not self.model or self.model == self.running_model or self.written:
            return
        transport = self.transport
        self._leave(transport.close_stdin)  # agy ends at EOF

    def _settle_switches(self) -> None:
        if self.initialized and not self.restart and self.model == self.running_model:
            self._end_switches(None)

    def _end_switches(self, error: AgentError | None) -> None:
        """Answer every model switch waiting: done (None), or failed with ``error``."""
        waiting, self.switches = self.switches, []
        for done in waiting:
            done(error)

    # -- what agy writes
    def on_line(self, line: bytes) -> None:
        msg = self.decode(line, "agy wrote", excerpt)
        if msg is NOT_JSON:
            return
        if not isinstance(msg, dict):
            self.host.diagnostic("Warning", f"agy wrote a JSON value that is not an object: {excerpt(line)}")
            return
        event = msg.get("event")
        if event in ("step_update", "result") and not isinstance(msg.get(event), dict):
            self.host.diagnostic("Warning", f"agy wrote a {event} whose body is not an object: {excerpt(line)}")
            return
        if event == "init":
            self._on_init(msg)
        elif event == "step_update":
            self._on_step(msg)
        elif event == "result":
            self._on_result(msg)
        else:
            self.host.diagnostic("Warning", f"agy wrote an unknown event {json.dumps(event)[:80]}: {excerpt(line)}")

    def _on_init(self, msg: dict[str, Any]) -> None:
        if self.initialized:
            return
        self.handshake.cancel()
        self.initialized = True
        body = body_of(msg)
        self.running_model = text(body.get("model")) or self.model
        if self.model == self.spawned_model:
            # agy's own name for the model it was started with (or its default): a switch
            # to it is done, whatever the app called it.
            self.model = self.running_model
        conversation = conversation_of(msg)
        if conversation and conversation != self.conversation:
            self.conversation = conversation
            if self.life.state == "open":
                self.host.update(resume_token=conversation)
        if self.life.state == "opening":
            self.life.move("init", self.line)
            self.host.opened(details(None, SIGNED_IN, self.running_model, []), resume_token=self.conversation)
        self._settle_switches()
        self._maybe_switch()  # asked for while this process was starting: before any turn
        self._flush()

    def _on_step(self, msg: dict[str, Any]) -> None:
        body = body_of(msg)
        self.used = True
        kind, state, index = body.get("step_type"), body.get("state"), body.get("step_index")
        if kind == "system_message":
            note = text(body.get("text")) or text(body.get("message"))
            self.host.diagnostic("Info", f"agy: {note}" if note else "agy: a system message")
            return
        turn = self.turn
        if turn is None or not self.written or self.written[0] != turn.id or not isinstance(index, int):
            return  # not the running turn's (a turn the engine ended already)
        if kind == "user_input":
            if not turn.prompted:
                turn.prompted = True  # the prompt itself: never replayed to the app
            elif self.injected:
                message_id = f"u{index}"
                self.host.emit({"UserMessage": {"message_id": message_id, "text": self.injected.popleft()}})
                self.host.emit({"MessageEnded": {"message_id": message_id}})
        elif kind == "agent_response":
            message_id = f"m{index}"
            delta = body.get("text_delta")
            if delta is not None and not isinstance(delta, str):
                self.host.diagnostic(
                    "Warning", f"agy wrote a text_delta that is not a string: {excerpt(self.line or b'')}"
                )
            elif delta:
                turn.messages.add(message_id)
                self.host.emit({"TextDelta": {"message_id": message_id, "text": delta}})
            if state == "DONE":
                add_usage(turn.usage, body.get("usage"))
                if message_id in turn.messages:
                    turn.messages.discard(message_id)
                    self.host.emit({"MessageEnded": {"message_id": message_id}})
        elif kind == "tool":
            self._on_tool(turn, index, state, body)

    def _on_tool(self, turn: _Turn, index: int, state: Any, body: StepBody) -> None:
        info = obj(body.get("tool_info"))
        snapshot = turn.tools.get(index)
        if snapshot is None:
            name = text(body.get("tool_name")) or text(info.get("name")) or "tool"
            snapshot = tool_snapshot(f"step-{index}", name, info, self.servers)
        if state == "DONE":
            turn.tools.pop(index, None)
            self.host.emit({"ToolUpdated": {**snapshot, "status": "Completed", "output": text(info.get("output"))}})
        elif state == "ERROR":
            turn.tools.pop(index, None)
            self.host.emit({"ToolUpdated": {**snapshot, "status": "Failed", "output": tool_error(info)}})
        else:
            turn.tools[index] = snapshot
            self.host.emit({"ToolUpdated": snapshot})

    def _on_result(self, msg: dict[str, Any]) -> None:
        body = body_of(msg)
        if not self.initialized:
            # Before init: agy could not start the conversation. Its exit reports it.
            error = result_error(body) or "agy could not start"
            self.startup_failure = startup_error(error, self.launch.executable, self.model, self.conversation)
            return
        owner = self.written.popleft() if self.written else None
        turn = self.turn
        if owner is None or turn is None or owner != turn.id:
            return  # the result of a turn the engine already ended
        stop = stop_reason(body)
        if isinstance(stop, dict) and "Failed" in stop and ratelimits.is_rate_limit(stop["Failed"]["message"]):
            ratelimits.report(self.host, f"agy: {stop['Failed']['message']}", None, "Error")  # names no reset
        self._close_tools(turn, stop)
        context = context_usage(body)
        if context is not None:
            self.host.emit(context, {"agy": {"conversation_usage": obj(body.get("usage"))}})
        denied = body.get("denied_actions")
        if denied:
            self.host.diagnostic("Warning", f"agy denied actions it would have asked for: {json.dumps(denied)[:500]}")
        self._end_turn(turn, stop, turn_usage(turn.usage))
