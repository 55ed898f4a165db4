"""The Claude Code driver: the ``claude`` CLI over stream-json and its control protocol.

The CLI is launched the way Anthropic's own SDK launches it (``--input-format
stream-json --output-format stream-json --verbose``), with ``--permission-prompt-tool
stdio`` so every permission comes to us as a ``can_use_tool`` control request and
``--include-partial-messages`` so text streams as deltas. One process serves the whole
session; each user message we write is one turn, ended by a ``result`` message.

Three files: this one is the session (launch, handshake, turns, settings, the end);
``claude_stream.py`` turns the CLI's messages into events; ``claude_control.py`` is the
control protocol both ways (permissions and questions included). The pure mappings are
in ``claude_mapping.py``, tested on captured CLI output without a process.

Rules of this file:
- The CLI is the source of truth for turn boundaries: a ``result`` ends the turn whose
  user message it answers, in the order the messages were written, so a late result of
  a cancelled turn never ends the next one.
- The CLI also runs turns of its own (2.1.332: when a background subagent finishes, it
  tells the model in a turn nobody prompted). Their output starts an ``Agent`` turn in
  the engine; the ``result`` that follows with no prompted turn running ends it.
- Unknown message types and subtypes are skipped (newer CLIs add them); a line that is
  not JSON becomes a ``Diagnostic``.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers import ratelimits
from agentproto.drivers.base import NOT_JSON, Host, Launch, Lifecycle, LineDriver
from agentproto.drivers.claude.control import ControlChannel, OnControl
from agentproto.drivers.claude.mapping import (
    FEATURES,
    HOOK_EVENTS,
    MCP_TRANSPORTS,
    auth_status,
    build_argv,
    config_options,
    hooks_config,
    initial_mode,
    login_methods,
    mcp_config,
    slash_commands,
    stop_reason,
    turn_usage,
    user_message,
)
from agentproto.drivers.claude.stream import MessageStream
from agentproto.drivers.fields import integer, obj, text
from agentproto.loopio import private
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentRequest, JsonObject, StopReason
    from agentproto.drivers.claude.types import (
        InitializeResponse,
        OutgoingRequest,
        ResultMessage,
        SystemMessage,
        VersionResponse,
    )

HANDSHAKE_TIMEOUT = 60.0
#: How long ``close`` waits after ending the CLI's input before signalling its group.
CLOSE_GRACE = 2.0

#: The session's lifecycle (``Lifecycle``). ``ready``, ``refused`` (initialize refused,
#: not logged in, or no answer in time) and ``exited`` are the CLI's. A kill while opening
#: leaves it opening: the exit then fails the open.
LIFECYCLE: dict[str, dict[str, str]] = {
    "new": {"open": "opening", "kill": "new"},
    "opening": {"ready": "open", "refused": "closing", "close": "closing", "kill": "opening", "exited": "gone"},
    "open": {"close": "closing", "kill": "closing", "exited": "gone"},
    "closing": {"close": "closing", "kill": "closing", "exited": "gone"},
    "gone": {"kill": "gone"},
}
AGENT_EVENTS = frozenset({"ready", "refused", "exited"})

# -- the driver --------------------------------------------------------------------------


class ClaudeDriver(LineDriver):
    #: The app's tools: the listener's URL as the ``http`` server ``agentproto`` in the
    #: --mcp-config file. Hooks: over the control protocol, registered at ``initialize``.
    app_tools = True
    hook_events = HOOK_EVENTS
    #: Any model id goes through unchanged, listed or not: the CLI resolves it.
    open_choices = {"model": "a model id"}

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        self.tools_disabled = launch.tools_disabled
        self.session_id: str | None = None
        self.life = Lifecycle("claude", LIFECYCLE, AGENT_EVENTS, "new")
        self._init: InitializeResponse | None = None
        self._version: Any = False  # False until get_binary_version answered
        self._handshake = Alarm(host.loop, self._handshake_expired)
        self.stream = MessageStream(host, launch.new_id)
        #: The CLI's last wait on a 429/529 this turn (seconds): the reset when it gives up.
        self._rate_delay: float | None = None
        self.control = ControlChannel(host, self.send, self.stream)
        #: What each message type of the CLI's goes to.
        self._handlers: dict[str, Callable[[Any], None]] = {  # a decoded line, by its type
            "control_response": self.control.on_response,
            "control_request": self.control.on_request,
            "control_cancel_request": self.control.on_cancel,
            "system": self._on_system,
            "stream_event": self.stream.on_stream_event,
            "assistant": self.stream.on_assistant,
            "user": self.stream.on_user,
            "result": self._on_result,
        }
        #: Entries of the user messages written, oldest first, until their result:
        #: the engine's turn id, or None for a turn the engine has given up on.
        self._written: deque[str | None] = deque()
        self._turn: str | None = None
        self._cancelling = False
        self._compacting = False
        self._details: dict[str, Any] = {}  # as reported to the engine, kept current
        self._settings: dict[str, Any] = {}  # option id -> current value
        self._private: str | None = None  # the session's private directory, if it needs one
        #: The CLI wrote output while no prompted turn ran (a turn of its own) since the last result.
        self._own_output = False

    # -- the engine's hooks
    def deterministic(self, origin: Any) -> bool:
        return True  # every turn ends with a ``result``; no quiet-window inference

    # -- lifecycle
    def open(self) -> None:
        self.life.move("open")
        launch = self.launch
        if launch.resume and not launch.fork:
            self.session_id = launch.resume
            new_id = None
        else:
            self.session_id = new_id = launch.new_id("session")
        env = launch.child_env()
        env.pop("CLAUDECODE", None)  # a parent Claude Code must not make the child think it is nested
        if launch.config_home:
            env["CLAUDE_CONFIG_DIR"] = os.path.abspath(os.path.expanduser(launch.config_home))
        try:
            argv = build_argv(launch, new_id, self._write_mcp_config())
        except OSError as exc:
            private.remove_tree(self._private)
            raise AgentError.detail(
                Kind.SPAWN_FAILED, f"{exc.filename or launch.executable}: {exc.strerror or exc}"
            ) from None
        try:
            # Closed means gone: the exit is reported once the CLI's whole group (its
            # MCP servers, the commands it runs) has exited.
            self.spawn(argv, env, wait_group=True)
        except BaseException:
            private.remove_tree(self._private)
            raise
        self._handshake.set(HANDSHAKE_TIMEOUT)
        # The app's hooks are callbacks of ours: no shell command, no settings file.
        self.control.register_hooks(launch.hooks)
        self._request({"subtype": "initialize", "hooks": hooks_config(launch.hooks)}, self._initialized)
        self._request({"subtype": "get_binary_version"}, self._got_version)

    def _write_mcp_config(self) -> str | None:
        """``--mcp-config`` as a 0600 file in the session's private directory: the
        servers' env and header values, and the app's tools URL with its token, must not
        be on the command line, which every local user can read in /proc/PID/cmdline.
        Removed once the CLI is gone."""
        tools_url = self.host.tools_url
        if not self.launch.mcp_servers and tools_url is None:
            return None
        self._private = private.session_dir("claude")
        path = os.path.join(self._private, "mcp.json")
        config = mcp_config(self.launch.mcp_servers, tools_url, self.launch.tool_timeout)
        private.write_private(path, json.dumps(config))
        return path

    def _handshake_expired(self) -> None:
        if self.life.state == "opening":
            self.life.move("refused")
            self.host.open_failed(
                AgentError.detail(
                    Kind.HANDSHAKE_TIMEOUT,
                    f"claude did not answer initialize in {HANDSHAKE_TIMEOUT:g} s",
                )
            )
            self.kill()

    def _initialized(self, response: InitializeResponse | None, error: str | None) -> None:
        if self.life.state != "opening":
            return
        if error is not None or response is None:
            self.life.move("refused", self.line)
            self.host.open_failed(AgentError.protocol_failed(f"claude refused initialize: {error}", self.line))
            self.kill()
            return
        self._init = response
        self._maybe_opened()

    def _got_version(self, response: VersionResponse | None, error: str | None) -> None:
        version = response.get("version") if isinstance(response, dict) else None
        self._version = version if isinstance(version, str) else None
        self._maybe_opened()

    def _maybe_opened(self) -> None:
        if self.life.state != "opening" or self._init is None or self._version is False:
            return
        self._handshake.cancel()
        launch = self.launch
        auth = auth_status(self._init.get("account"), launch.executable)
        probing = launch.throwaway and not launch.tools_disabled
        if "Unauthenticated" in auth and not probing:
            self.life.move("refused", self.line)
            self.host.open_failed(
                AgentError.auth_required("Claude Code is not logged in", auth["Unauthenticated"]["login"])
            )
            self.kill()
            return
        self.life.move("ready", self.line)
        effort = launch.configure.get("effort")
        details = {
            "version": self._version,
            "auth": auth,
            "capabilities": {
                "features": list(FEATURES),
                "mcp_transports": list(MCP_TRANSPORTS),
            },
            "config_options": config_options(
                self._init,
                launch.configure.get("model"),
                initial_mode(launch),
                effort if isinstance(effort, str) else None,
            ),
            "commands": slash_commands(self._init),
        }
        self._details = details
        self._settings = {o["id"]: o["current"] for o in details["config_options"] if o["current"] is not None}
        # The engine keeps (and edits) its own copy.
        self.host.opened(json.loads(json.dumps(details)), resume_token=self.session_id)

    def _setting_changed(self, option: str, value: Any) -> bool:
        """Track a setting's value (the engine keeps its own copy); True if it changed."""
        if self._settings.get(option) == value:
            return False
        self._settings[option] = value
        for entry in self._details.get("config_options", []):
            if entry["id"] == option:
                entry["current"] = value
        return True

    def close(self) -> None:
        if self.transport is None or self.life.state == "gone":
            self.host.closed()
            return
        if self.life.move("close") == "open" and self._turn is not None:
            self._request({"subtype": "interrupt"}, lambda r, e: None)
        self.transport.shutdown(CLOSE_GRACE)

    def kill(self) -> None:
        self.life.move("kill")
        self.kill_agent()

    def on_exit(self, status: str | None, stderr: str) -> None:
        private.remove_tree(self._private)
        self.stream.flush()
        previous = self.life.move("exited")
        self._handshake.cancel()
        self.control.fail_calls("claude exited")
        if previous == "opening":
            tail = stderr.strip()[-2000:]
            detail = f"claude exited (status {status}) before it was ready" + (f": {tail}" if tail else "")
            self.host.open_failed(AgentError.detail(Kind.SPAWN_FAILED, detail))
        elif previous == "open":
            self.host.fail(AgentError.process_exited(status, stderr))
        self.host.closed()

    # -- turns
    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        self._begin(turn_id)
        self.send(user_message(text, attachments))

    def compact(self) -> None:
        self._begin("compact")
        self._compacting = True
        self.send(user_message("/compact", []))

    def _begin(self, turn_id: str) -> None:
        # A turn the engine already ended (cancel grace ran out) still owes a result;
        # it must not end this one.
        self._written = deque(None if entry == self._turn else entry for entry in self._written)
        self._turn = turn_id
        self._cancelling = False
        self._compacting = False
        self.stream.auth_failed = None
        self._written.append(turn_id)

    def cancel(self) -> None:
        if self._turn is None or self.life.state != "open":
            return
        self._cancelling = True
        self._request({"subtype": "interrupt"}, lambda r, e: None)

    def answer(self, request: AgentRequest, answer: Any) -> None:
        self.control.answer(request, answer)

    # -- settings
    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        if option == "model":
            request: OutgoingRequest = {"subtype": "set_model", "model": value}
        elif option == "mode":
            request = {"subtype": "set_permission_mode", "mode": value}
        elif option == "effort":
            request = {
                "subtype": "apply_flag_settings",
                "settings": {"effortLevel": value},
            }
        else:
            done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option}: claude has no such setting"))
            return

        def applied(response: JsonObject | None, error: str | None) -> None:
            if error is not None:
                done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option}: {error}"))
            else:
                self._setting_changed(option, value)
                done(None)

        if self.life.state != "open":
            done(AgentError.session_closed(self.host.session_id))
            return
        self._request(request, applied)

    def _request(self, request: OutgoingRequest, callback: OnControl) -> None:
        self.control.request(request, callback)

    # -- what the CLI writes
    def on_line(self, line: bytes) -> None:
        msg = self.decode(line, "claude wrote", _shown, self.stream.flush)
        if msg is NOT_JSON:
            return
        if self.stream.holding and not (isinstance(msg, dict) and msg.get("type") == "stream_event"):
            self.stream.flush()  # whatever this line reports comes after the deltas before it
        if not isinstance(msg, dict):
            self.host.diagnostic("Warning", "claude wrote a JSON value that is not an object")
            return
        kind = msg.get("type")
        if self._turn is None and kind in ("assistant", "stream_event", "user"):
            self._own_output = True
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(msg)
        # Newer CLIs add message types: what we do not know is skipped. A line that
        # raises in its handler is the line guard's (LineDriver): a Diagnostic.

    def _on_system(self, msg: SystemMessage) -> None:
        subtype = msg.get("subtype")
        if subtype == "init":
            session_id = msg.get("session_id")
            if isinstance(session_id, str) and session_id and session_id != self.session_id:
                self.session_id = session_id
                self.host.update(resume_token=session_id)
            if self._written and self._written[0] is not None and self._written[0] == self._turn:
                self.host.turn_acknowledged()
        elif subtype == "api_retry":
            why = (
                f"claude: API error {msg.get('error_status')} ({msg.get('error')}); retry "
                f"{msg.get('attempt')}/{msg.get('max_retries')} in {integer(msg.get('retry_delay_ms')) / 1000:.1f} s"
            )
            if msg.get("error_status") in (429, 529):  # a rate limit or an overload: one kind of report
                self._rate_delay = integer(msg.get("retry_delay_ms")) / 1000
                ratelimits.report(self.host, why, ratelimits.after(self._rate_delay))
            else:
                self.host.diagnostic("Warning", why)
        elif subtype == "task_started" and msg.get("is_backgrounded") is True:
            # A background subagent's prompt comes only here (a foreground one's comes as
            # its user message, parent_tool_use_id set: stream.on_user).
            prompt, parent = msg.get("prompt"), msg.get("tool_use_id")
            if isinstance(prompt, str) and isinstance(parent, str) and parent:
                self.stream.user_message(text(msg.get("uuid")), prompt, parent)
        elif subtype == "compact_boundary":
            self.stream.context_used = 0
            self.stream.emit("ContextCompacted")
        elif subtype == "status":
            if msg.get("compact_result") == "failed":
                self.host.diagnostic("Warning", f"claude: compact failed: {msg.get('compact_error')}")
            mode = msg.get("permissionMode")
            # The CLI changes its own mode too (approving ExitPlanMode leaves plan mode).
            if isinstance(mode, str) and self._details and self._setting_changed("mode", mode):
                self.host.update(
                    details=json.loads(json.dumps(self._details)),
                    configuration={"options": dict(self._settings)},
                )

    def _on_result(self, msg: ResultMessage) -> None:
        owner = self._written.popleft() if self._written else None
        own, self._own_output = self._own_output and self._turn is None, False
        if own:
            # The end of a turn the CLI ran by itself: the engine's Agent turn its output started.
            self._end_turn(msg, stop_reason(msg, False))
            return
        if owner is None or owner != self._turn:
            return  # the result of a turn the engine already ended
        self._end_turn(msg, stop_reason(msg, self._cancelling))

    def _end_turn(self, msg: ResultMessage, stop: StopReason) -> None:
        stream = self.stream
        stream.end_messages()
        window = None
        for entry in obj(msg.get("modelUsage")).values():
            if isinstance(entry, dict) and isinstance(entry.get("contextWindow"), int):
                window = max(window or 0, entry["contextWindow"])
        cost = msg.get("total_cost_usd")
        cost_usd = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
        if stream.context_used or cost_usd is not None:
            stream.emit(
                {"ContextUsage": {"used_tokens": stream.context_used, "window_tokens": window, "cost_usd": cost_usd}}
            )
        auth_failed = stream.auth_failed
        if self._compacting and not self._cancelling and "Failed" not in stop:
            stop = {"Completed": {"source": "Protocol"}}
        self._turn = None
        self._cancelling = False
        self._compacting = False
        stream.auth_failed = None
        stream.tools.clear()
        self.control.requests.clear()
        delay, self._rate_delay = self._rate_delay, None
        if isinstance(stop, dict) and "Failed" in stop and ratelimits.is_rate_limit(stop["Failed"]["message"]):
            # The CLI gave up on a rate limit: its reset, when it names one, else its last wait.
            message = stop["Failed"]["message"]
            ratelimits.report(self.host, message, ratelimits.reset_of(message) or ratelimits.after(delay), "Error")
        self.host.end_turn(stop, turn_usage(msg))
        if auth_failed is not None:
            self.host.fail(AgentError.auth_required(auth_failed, login_methods(self.launch.executable)))


def _shown(line: bytes) -> str:
    """How a line that is not JSON is quoted: its head, as text."""
    return line[:200].decode("utf-8", "replace")
