"""The ACP driver: any Agent Client Protocol (version 1) agent behind the driver seam.

Rules of this file:
- JSON-RPC 2.0, one message per line. Both sides number their own requests from 0, so
  a message is classified by its keys: ``method`` with ``id`` is the agent's request,
  ``method`` alone a notification, ``id`` with ``result``/``error`` an answer to ours.
- Error -32000 at any step means "authentication required": it becomes ``AuthRequired``
  with the agent's ``authMethods`` as login steps.
- A permission answer selects the agent's option whose *kind* matches; option ids differ
  between agents and are never guessed.
- The agent and every terminal it starts live in their own process groups; close leaves
  none of them behind, even when the agent's leader already exited.
- What the agent sends is mapped by the pure functions of ``acp_mapping``; fs/* and
  terminal/* are served by ``acp_services``. This file is the session: the JSON-RPC line
  path, the handshake, the session's setup, its lifecycle (``LIFECYCLE``), shutdown; the
  turns, the session updates and the agent's requests are ``acp_turns.py``; the details,
  the configuration and ``configure`` are ``acp/settings.py``.
- Elicitation (form mode, acp/elicitation.py) is a ``Question``, pending like a permission
  (cancel and close answer it ``cancel``); the agent's ``$/cancel_request`` withdraws either
  (``RequestClosed``, -32800); agentproto sends one for a prompt it gives up on.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from agentproto.core.errors import AgentError, Kind, excerpt
from agentproto.core.jsonrpc import (
    Invalid,
    OnResponse,
    Peer,
    Request,
    Response,
    RpcError,
)
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers.acp.mapping import (
    STATE_UPDATES,
    app_server_entry,
    auth_message,
    login_steps,
    map_config_options,
    mcp_servers,
)
from agentproto.drivers.acp.services import Terminals
from agentproto.drivers.acp.settings import AcpSettings
from agentproto.drivers.acp.turns import AUTH_REQUIRED, AcpTurn, AcpTurns
from agentproto.drivers.base import NOT_JSON, Host, Launch, Lifecycle, LineDriver
from agentproto.drivers.fields import obj
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentDetails, AgentRequest, ConfigOption, LoginMethod, SlashCommand
    from agentproto.drivers.acp.types import AcpToolSnapshot, PermissionOption

PROTOCOL_VERSION = 1
INVALID_PARAMS = -32602
REQUEST_CANCELLED = -32800  # ACP's "Request cancelled" ($/cancel_request)

DEFAULT_HANDSHAKE_TIMEOUT = 120.0
DEFAULT_TURN_TIMEOUT = 1800.0
PIPE_SIZE = 1 << 20
#: After the agent's exit, how long its terminals get to go.
TERMINALS_GRACE = 3.0

#: The session's lifecycle (``Lifecycle``). ``ready`` (the handshake and the launch's
#: settings are done), ``refused`` (the open failed: an error answer, a timeout, a refused
#: setting) and ``exited`` are the agent's; ``gone`` is reported once its terminals are too.
#: Turn content is only taken while open (session/load's replay of the history ends before).
LIFECYCLE: dict[str, dict[str, str]] = {
    "new": {"open": "opening", "close": "closed", "kill": "closed"},
    "opening": {
        "spawn_failed": "closed", "ready": "open", "refused": "closing",
        "close": "closing", "kill": "closing", "exited": "closing",
    },
    "open": {"close": "closing", "kill": "closing", "exited": "closing"},
    "closing": {"close": "closing", "kill": "closing", "exited": "closing", "gone": "closed"},
    "closed": {"close": "closed", "kill": "closed"},
}
AGENT_EVENTS = frozenset({"ready", "refused", "exited"})

# -- the driver --------------------------------------------------------------------------


class AcpDriver(AcpSettings, AcpTurns, LineDriver):
    """One ACP agent process serving one agentproto session."""

    #: The app's tools: one more ``mcpServers`` entry at session/new (load, resume, fork).
    #: ACP has no hook channel.
    app_tools = True

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        from agentproto.drivers.catalog import spec_for

        spec = spec_for(launch.agent_id)
        self._extra: dict[str, Any] = dict(spec.extra) if spec is not None else {}
        env = self._child_env()
        self.handshake_timeout = _seconds(env.get("AGENTPROTO_ACP_HANDSHAKE_TIMEOUT"), DEFAULT_HANDSHAKE_TIMEOUT)
        self.turn_timeout = _seconds(env.get("AGENTPROTO_ACP_TURN_TIMEOUT"), DEFAULT_TURN_TIMEOUT)
        self.argv = [launch.executable, *launch.acp_args, *launch.args]
        self.rpc = Peer()
        self.life = Lifecycle("acp", LIFECYCLE, AGENT_EVENTS, "new")
        self._session: str | None = None
        self._replaying = False
        self._init: dict[str, Any] = {}
        self._options: list[tuple[ConfigOption, str, str]] = []
        self._commands: list[SlashCommand] = []
        self._features_seen: set[str] = set()
        self._auth: Any = "Unknown"
        self._title: str | None = None
        self._instructed = bool(launch.resume or launch.fork)
        self._reported: AgentDetails | dict[str, Any] = {}
        self._turn: AcpTurn | None = None
        #: The elicitations the app is asked (a Question): request id -> (rpc id, params).
        self._questions: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._message: tuple[str, Any, str] | None = None  # (kind, acp messageId, our id)
        self._message_seq = 0
        self._tools: dict[str, AcpToolSnapshot] = {}
        self._permissions: dict[str, tuple[Any, list[PermissionOption]]] = {}
        self._permission_seq = 0
        self._waiting_on_us = 0  # agent requests we have not answered yet (permission, wait)
        self._last_seen = self.loop.time()
        self._heard = 0  # lines the agent wrote (the turn timer's sign of life)
        self._heard_checked = 0
        self._handshake = Alarm(self.loop, self._handshake_expired)
        self._turn_check = Alarm(self.loop, self._turn_timer)
        self._term_tool: dict[str, str] = {}
        self._term_backlog: dict[str, list[str]] = {}
        self.terminals = Terminals(
            self.loop, launch.child_env, launch.dir, self._terminal_output, launch.max_terminals
        )
        self._handlers: dict[str, Callable[[Any], None]] = {  # an update, by its sessionUpdate
            "agent_message_chunk": self._on_message_chunk,
            "agent_thought_chunk": self._on_thought_chunk,
            "user_message_chunk": self._on_user_chunk,
            "tool_call": self._on_tool_call,
            "tool_call_update": self._on_tool_call,
            "plan": self._on_plan,
            "available_commands_update": self._on_commands,
            "current_mode_update": self._on_mode,
            "config_option_update": self._on_config_options,
            "session_info_update": self._on_session_info,
            "usage_update": self._on_usage,
        }

    # -- JSON-RPC ---------------------------------------------------------------------

    def _request(self, method: str, params: dict[str, Any], on_answer: OnResponse) -> int:
        self.send(self.rpc.request(method, params, on_answer))
        return self.rpc.last_id

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        self.send(self.rpc.notification(method, params))

    def _respond(self, rpc_id: Any, result: Any = None, error: RpcError | None = None) -> None:
        self.send(self.rpc.error(rpc_id, error) if error is not None else self.rpc.result(rpc_id, result))

    def on_line(self, line: bytes) -> None:
        # Counted, not timed: the turn timer reads the count (a clock call per streamed
        # chunk would be a visible part of the relay's cost).
        self._heard += 1
        msg = self.decode(line, "the agent wrote")
        if msg is NOT_JSON:
            return
        live = self.life.state == "open"
        if type(msg) is dict and live and msg.get("method") == "session/update" and "id" not in msg:
            # The hot path, before the peer classifies: a streamed chunk of the answer.
            params = msg.get("params")
            update = params.get("update") if type(params) is dict else None
            if type(update) is dict and update.get("sessionUpdate") == "agent_message_chunk":
                content = update.get("content")
                if type(content) is dict and content.get("type") == "text":
                    text = content.get("text")
                    if type(text) is str:
                        if text:
                            message = self._message
                            acp_id = update.get("messageId")
                            if message is None or message[0] != "text" or message[1] != acp_id:
                                message_id = self._message_id("text", acp_id)
                            else:
                                message_id = message[2]
                            self.host.emit({"TextDelta": {"message_id": message_id, "text": text}})
                        return
                # Anything else takes the general path (which also says what is wrong).
        kind = self.rpc.receive(msg)  # an answer to one of our calls runs its callback here
        if isinstance(kind, Invalid):
            self.host.diagnostic("Warning", f"the agent wrote JSON that is not a JSON-RPC message: {line[:200]!r}")
            return
        if isinstance(kind, Response):
            return
        method = kind.method
        params = kind.params if isinstance(kind.params, dict) else {}
        if isinstance(kind, Request):
            if method == "elicitation/create":
                self._on_elicitation(kind.id, params)
            else:
                self._on_agent_request(kind.id, method, params)
        elif method == "$/cancel_request":
            self._on_cancel_request(params.get("requestId"))
        elif method == "session/update":
            update = params.get("update")
            if isinstance(update, dict):
                name = update.get("sessionUpdate")
                if not isinstance(name, str):
                    self.host.diagnostic(
                        "Warning",
                        f"the agent sent a session/update whose sessionUpdate is not a string: {excerpt(line)}",
                    )
                    return
                handler = self._handlers.get(name)
                # Before the session is open (and while session/load replays history)
                # only the session's state is taken, never turn content.
                if handler is not None and (live or name in STATE_UPDATES):
                    handler(update)
        # Other notifications (elicitation/complete: URL mode only; extensions) need nothing from us.

    # -- elicitation and the agent's cancellations --------------------------------------

    def _on_elicitation(self, rpc_id: Any, params: dict[str, Any]) -> None:
        from agentproto.drivers.acp.elicitation import question_of

        self._permission_seq += 1
        request_id = f"elicit-{self._permission_seq}"
        question = question_of(request_id, params)
        if isinstance(question, str):
            self._respond(rpc_id, error=RpcError(INVALID_PARAMS, question))
        elif self._turn is None or self._turn.cancelled:
            self._respond(rpc_id, {"action": "cancel"})  # nobody to ask, as for a permission
        else:
            self._questions[request_id] = (rpc_id, params)
            self._waiting_on_us += 1
            if "Questions" not in self._features_seen:  # learned when first used, as ContextUsage
                self._features_seen.add("Questions")
                self._changed()
            self._end_message()
            self.host.emit({"RequestOpened": {"Question": question}})

    def answer(self, request: AgentRequest, answer: Any) -> None:
        if "Question" not in request:
            super().answer(request, answer)
            return
        from agentproto.drivers.acp.elicitation import response_of

        entry = self._questions.pop(request["Question"]["id"], None)
        if entry is not None:
            self._waiting_on_us -= 1
            self._last_seen = self.loop.time()
            self._respond(entry[0], response_of(entry[1], answer))

    def cancel(self) -> None:
        super().cancel()
        self._cancel_questions()

    def _cancel_questions(self) -> None:
        pending, self._questions = self._questions, {}
        for rpc_id, _ in pending.values():
            self._waiting_on_us -= 1
            self._respond(rpc_id, {"action": "cancel"})

    def _on_cancel_request(self, rpc_id: Any) -> None:
        """The agent no longer waits for ``rpc_id``: the app's permission or question is withdrawn (-32800)."""
        asked = [rid for rid, (pending, _) in self._permissions.items() if pending == rpc_id]
        asked += [rid for rid, (pending, _) in self._questions.items() if pending == rpc_id]
        for request_id in asked:
            self._permissions.pop(request_id, None)
            self._questions.pop(request_id, None)
            self._waiting_on_us -= 1
            self.host.request_withdrawn(request_id)
            self._respond(rpc_id, error=RpcError(REQUEST_CANCELLED, "Request cancelled"))

    def on_too_long(self, size: int) -> None:
        self.host.diagnostic("Warning", f"the agent wrote a line of more than {size} bytes; skipped")

    # -- lifecycle --------------------------------------------------------------------

    def open(self) -> None:
        self.life.move("open")
        try:
            if self._extra.get("folder_trust") == "gemini" and (self.host.tools_url or self.launch.mcp_servers):
                from agentproto.drivers.acp.folder_trust import refuse_untrusted  # the app's tools: gemini's trust
                refuse_untrusted(self.launch.dir, self._child_env())
            # A bigger pipe: a wake per thousands of lines, not per 64 KiB; the exit once its group is gone.
            self.spawn(self.argv, self._child_env(), wait_group=True, pipe_size=PIPE_SIZE)
        except AgentError:
            self.life.move("spawn_failed")
            raise
        self._handshake.set(self.handshake_timeout)
        self._request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": bool(self._extra.get("fs_read", True)), "writeTextFile": True},
                    "terminal": True,
                    "auth": {"terminal": True},
                    "session": {"configOptions": {"boolean": {}}},
                    "elicitation": {"form": {}},
                },
                "clientInfo": {"name": "agentproto", "title": "agentproto", "version": _version()},
            },
            self._on_initialized,
        )

    def _handshake_expired(self) -> None:
        if self.life.state == "opening":
            self._open_failed(
                AgentError.detail(Kind.HANDSHAKE_TIMEOUT, f"no answer within {self.handshake_timeout:g}s")
            )

    def _open_failed(self, error: AgentError) -> None:
        if self.life.state != "opening":
            return
        self.life.move("refused")
        self._handshake.cancel()
        self.host.open_failed(error)
        self._shutdown(grace=0.5)

    def _on_initialized(self, result: Any, error: RpcError | None) -> None:
        if error is not None:
            self._open_failed(self._error("initialize", error))
            return
        if not isinstance(result, dict):
            self._open_failed(AgentError.protocol_failed("initialize answered without a result object", self.line))
            return
        self._init = result
        version = result.get("protocolVersion")
        if version != PROTOCOL_VERSION:
            self._open_failed(
                AgentError.protocol_failed(f"the agent speaks ACP version {version!r}; agentproto speaks 1", self.line)
            )
            return
        caps = self._caps()
        session_caps = obj(caps.get("sessionCapabilities"))
        mcp = obj(caps.get("mcpCapabilities"))
        try:
            servers = mcp_servers(self.launch.mcp_servers, bool(mcp.get("http")), bool(mcp.get("sse")))
        except AgentError as exc:
            self._open_failed(exc)
            return
        tools_url = self.host.tools_url
        if tools_url is not None:
            servers.append(app_server_entry(tools_url, bool(mcp.get("http"))))
        base = {"cwd": os.path.abspath(self.launch.dir), "mcpServers": servers}
        if self.launch.fork_at:
            self._open_failed(AgentError.detail(Kind.UNSUPPORTED_FEATURE, "fork_at: ACP forks a whole session"))
        elif self.launch.fork:
            if session_caps.get("fork") is None:
                self._open_failed(
                    AgentError.detail(Kind.UNSUPPORTED_FEATURE, "fork: the agent does not offer session/fork")
                )
                return
            self._request("session/fork", {"sessionId": self.launch.fork, **base}, self._on_session)
        elif self.launch.resume:
            params = {"sessionId": self.launch.resume, **base}
            if session_caps.get("resume") is not None:
                self._request("session/resume", params, lambda r, e: self._on_session(r, e, self.launch.resume))
            elif caps.get("loadSession"):
                # session/load replays the conversation first; that history is not a turn.
                self._replaying = True
                self._request("session/load", params, lambda r, e: self._on_session(r, e, self.launch.resume))
            else:
                self._open_failed(
                    AgentError.detail(
                        Kind.UNSUPPORTED_FEATURE, "resume: the agent offers neither session/resume nor session/load"
                    )
                )
        else:
            self._request("session/new", base, self._on_session)

    def _caps(self) -> dict[str, Any]:
        caps = self._init.get("agentCapabilities")
        return caps if isinstance(caps, dict) else {}

    def _child_env(self) -> dict[str, str]:
        """The sidecar's environment, the catalog's defaults for this agent, the session's env."""
        env = dict(os.environ)
        env.update(self._extra.get("env", {}))
        env.update(self.launch.env)
        return env

    def _login(self) -> list[LoginMethod]:
        return login_steps(self._init.get("authMethods"), self.argv, self._extra.get("login"))

    def _error(self, step: str, error: RpcError) -> AgentError:
        message = error.message or "error"
        data = error.data
        if isinstance(data, dict) and isinstance(data.get("details"), str):
            message += f" ({data['details']})"
        if error.code == AUTH_REQUIRED:
            return AgentError.auth_required(auth_message(message, self._init.get("authMethods")), self._login())
        if step == "resume":
            return AgentError.detail(Kind.RESUME_FAILED, message)
        return AgentError.protocol_failed(f"{step}: {message}", self.line)

    def _on_session(self, result: Any, error: RpcError | None, session_id: str | None = None) -> None:
        self._replaying = False
        if self.life.state != "opening":
            return
        if error is not None:
            step = "resume" if self.launch.resume else "session"
            if error.code == AUTH_REQUIRED and self.launch.throwaway and not self.launch.tools_disabled:
                # probe: not logged in is an answer, not a failure.
                self._auth = {"Unauthenticated": {"login": self._login()}}
                self._opened()
                return
            self._open_failed(self._error(step, error))
            return
        result = result if isinstance(result, dict) else {}
        self._session = result.get("sessionId") or session_id
        if not isinstance(self._session, str):
            self._open_failed(AgentError.protocol_failed("session/new answered without a sessionId", self.line))
            return
        self._options = map_config_options(result.get("configOptions"), result.get("modes"), result.get("models"))
        self._apply_launch_configure(list(self.launch.configure.items()))

    def _opened(self) -> None:
        self.life.move("ready")
        self._handshake.cancel()
        self._reported = self.details()
        self.host.opened(
            self.details(), resume_token=self._session, title=self._title, configuration=self.configuration()
        )

    def close(self) -> None:
        previous = self.life.move("close")
        if previous == "new":
            self.host.closed()
        elif previous in ("opening", "open"):
            self._cancel_permissions()
            self._cancel_questions()
            self._shutdown(grace=3.0)

    def kill(self) -> None:
        previous = self.life.move("kill")
        if previous == "new":
            self.host.closed()
        elif previous != "closed":
            self.terminals.close_all()
            self.kill_agent()

    def _shutdown(self, grace: float) -> None:
        self.terminals.close_all()
        self._handshake.cancel()
        self._turn_check.cancel()
        if self.transport is not None:
            self.transport.shutdown(grace)

    def on_exit(self, status: str | None, stderr: str) -> None:
        state = self.life.move("exited")
        self.terminals.close_all()
        self._handshake.cancel()
        self._turn_check.cancel()
        if state == "opening":
            self.host.open_failed(AgentError.process_exited(status, stderr))
        elif state == "open":
            self.host.fail(AgentError.process_exited(status, stderr))
        self._await_terminals(self.loop.time() + TERMINALS_GRACE)

    def _await_terminals(self, deadline: float) -> None:
        """Report closed once no terminal the agent started is left either."""
        if self.terminals.any_alive() and self.loop.time() < deadline:
            self.terminals.close_all()
            self.loop.call_later(0.02, lambda: self._await_terminals(deadline))
            return
        self.life.move("gone")
        self.host.closed()

    def deterministic(self, origin: Any) -> bool:
        """Prompted turns end with the prompt's answer; content outside one has no end."""
        return bool(origin != "Agent")

    # -- flow control -----------------------------------------------------------------

    # The agent's pipe and every terminal's: ToolOutputDelta events pile up like any other.
    def pause_output(self) -> None:
        super().pause_output()
        self.terminals.pause()

    def resume_output(self) -> None:
        super().resume_output()
        self.terminals.resume()


def _seconds(value: str | None, default: float) -> float:
    try:
        seconds = float(value) if value else default
    except ValueError:
        return default
    return seconds if seconds > 0 else default


def _version() -> str:
    try:
        from agentproto import __version__

        return str(__version__)
    except ImportError:
        return "0"
