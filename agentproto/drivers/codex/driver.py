"""The Codex driver: OpenAI's ``codex app-server`` (JSON-RPC over stdio) mapped onto protocol 1.

app-server is the only Codex interface with approvals, interrupts, steering, resume and
fork (``codex exec --json`` always runs with the approval policy "never"). Its lines are
JSON-RPC 2.0 without the ``"jsonrpc"`` member; both sides number their own request ids,
so a line is classified by its keys: ``method`` + ``id`` is a request from Codex,
``method`` alone a notification, ``id`` alone a reply to us.

This file is the session: launch, handshake and thread, its lifecycle (``LIFECYCLE``),
the JSON-RPC line path, the end. ``codex/turns.py`` runs the turns (the no-progress
watchdog, the settings each turn carries); ``codex_items.py`` maps what Codex says
during the session (notifications, items) and what it asks (approvals, questions);
``codex_mapping.py`` holds the pure value mappings.

Rules of this file:
- The sandbox is never widened on our own: it stays Codex's configured one unless
  ``configure sandbox`` says.
- Values given to Codex as ``-c key=value`` are TOML, written by ``toml_value`` with the
  standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentproto.core.errors import AgentError, Kind
from agentproto.core.jsonrpc import (
    INTERNAL_ERROR,
    Invalid,
    Notification,
    OnResponse,
    Peer,
    Request,
    RpcError,
)
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers.base import NOT_JSON, Deltas, Host, Launch, Lifecycle, LineDriver
from agentproto.drivers.codex.items import CodexItems
from agentproto.drivers.codex.mapping import (
    DELTAS,
    LOGIN,
    SANDBOX_NAMES,
    app_server_config,
    auth_status,
    config_options,
    mcp_config,
    toml_value,
    version_of,
)
from agentproto.drivers.codex.turns import CodexTurns
from agentproto.drivers.codex.usage import CAPABILITIES, CLIENT_INFO, PlanUsageRead, app_server_env
from agentproto.drivers.fields import obj, objects, text
from agentproto.loopio.loop import Alarm
from agentproto.loopio.transport import LineTransport

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentDetails, ToolUpdate
    from agentproto.drivers.base import PlanUsageDone
    from agentproto.drivers.codex.types import AccountReply, Model, NotificationParams, RequestParams, ThreadParams
    from agentproto.loopio.loop import Loop
    from agentproto.loopio.transport import Spawner

HANDSHAKE_TIMEOUT = 60.0
DEFAULT_STALL_SECS = 300.0
CLOSE_GRACE = 3.0

FEATURES = ["Images", "Resume", "Fork", "Steer", "Permissions", "Questions", "Plan", "ContextUsage", "Compact"]
MODES = ("default", "plan")

#: Config overrides for generate: no shell, no subagents, no goals, no web search.
TOOLS_OFF = (
    "features.shell_tool=false",
    "features.unified_exec=false",
    "features.multi_agent=false",
    "features.goals=false",
    "features.default_mode_request_user_input=false",
    'web_search="disabled"',
)
TEXT_ONLY = "Answer with text only. Do not call any tool, do not run commands and do not edit files."

#: The session's lifecycle (``Lifecycle``): opening from the engine's open until the thread
#: is ready, closing from a close, a kill, a failed open or Codex's exit on. A refusal may
#: come after the close (an answer the exit failed): it changes nothing then.
LIFECYCLE: dict[str, dict[str, str]] = {
    "new": {"open": "opening", "close": "closing"},
    "opening": {"ready": "open", "refused": "closing", "close": "closing", "exited": "closing"},
    "open": {"close": "closing", "exited": "closing"},
    "closing": {"refused": "closing", "close": "closing", "exited": "closing"},
}
AGENT_EVENTS = frozenset({"ready", "refused", "exited"})


# -- the driver -------------------------------------------------------------------------


class CodexDriver(CodexTurns, CodexItems, LineDriver):
    #: The app's tools: the MCP server ``agentproto`` in the thread's config (see
    #: ``_thread_params``). Codex has no hook channel.
    app_tools = True
    #: Codex resolves model names and efforts itself, listed or not.
    open_choices = {"model": "a model name", "effort": "a reasoning effort"}

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        self.tools_disabled = launch.tools_disabled
        # app-server's JSON-RPC leaves out the "jsonrpc" member, both ways.
        self.rpc = Peer(version_member=False)
        self.life = Lifecycle("codex", LIFECYCLE, AGENT_EVENTS, "new")
        self._handshake = Alarm(self.loop, self._handshake_expired)
        self.thread_id: str | None = None
        self.details: AgentDetails = {}  # type: ignore[typeddict-item]  # (filled at initialize)
        # settings sent with the next turn/start (None: Codex's own)
        self.model: str | None = launch.configure.get("model")
        self.effort: str | None = launch.configure.get("effort")
        self.sandbox: str | None = launch.configure.get("sandbox")
        self.mode: str = launch.configure.get("mode") or "default"
        self._send_sandbox = False
        self._send_mode = "mode" in launch.configure
        self._models: list[Model] = []
        # the running turn
        self.turn_id: str | None = None  # Codex's id of the running turn
        self._turn_wanted = False  # a turn of ours is running (started or starting)
        self._cancel_wanted = False
        self._ended: set[str] = set()
        self._streamed: set[str] = set()
        self.deltas = Deltas(host)
        self._tools: dict[str, ToolUpdate] = {}
        self._requests: dict[str, tuple[Any, str, RequestParams]] = {}
        self._usage_base: dict[str, int] | None = None
        self._usage_total: dict[str, int] = {}
        self._stall_check = Alarm(self.loop, self._stalled)
        self._last_progress = 0.0
        self._compacted_turn: Any = None
        self.mcp_env: dict[str, str] = {}  # AGENTPROTO_MCP_<n>_<m>: the MCP servers' secrets
        env = launch.child_env()
        try:
            self.stall_secs = float(env.get("AGENTPROTO_CODEX_STALL_SECS") or DEFAULT_STALL_SECS)
        except ValueError:
            self.stall_secs = DEFAULT_STALL_SECS

    @classmethod
    def plan_usage(cls, loop: Loop, launch: Launch, spawn: Spawner, done: PlanUsageDone) -> None:
        """The login's rate limits, read by a short-lived app-server (codex/usage.py)."""
        PlanUsageRead(loop, launch, spawn, done).start()

    def deterministic(self, origin: Any) -> bool:
        return True  # Codex always ends its turns with turn/completed

    # -- lifecycle ------------------------------------------------------------------------

    def argv(self) -> list[str]:
        argv = [self.launch.executable, "app-server"]
        if self.launch.mcp_servers:
            # Values stay off argv (world-readable): they go in Codex's environment.
            table, self.mcp_env = mcp_config(self.launch.mcp_servers)
            argv += ["-c", "mcp_servers=" + toml_value(table)]
        if self.tools_disabled:
            for override in TOOLS_OFF:
                argv += ["-c", override]
        return argv + list(self.launch.args)

    def open(self) -> None:
        self.life.move("open")
        env = app_server_env(self.launch)
        try:
            argv = self.argv()
        except ValueError as exc:
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"mcp_servers: {exc}") from None
        env.update(self.mcp_env)
        # Codex locks the thread while any of its processes lives: the exit is reported
        # once the whole group is gone, so a resume can follow at once.
        self.spawn(argv, env, wait_group=True)
        self._handshake.set(HANDSHAKE_TIMEOUT)
        self._request("initialize", {"clientInfo": CLIENT_INFO, "capabilities": CAPABILITIES}, self._initialized)

    def _handshake_expired(self) -> None:
        if self.life.state == "opening":
            self._open_failed(
                AgentError.detail(
                    Kind.HANDSHAKE_TIMEOUT, f"codex app-server did not start a thread within {HANDSHAKE_TIMEOUT:g} s"
                )
            )

    def _open_failed(self, error: AgentError) -> None:
        self._handshake.cancel()
        self.life.move("refused", self.line)
        self.host.open_failed(error)

    def _initialized(self, result: Any, error: RpcError | None) -> None:
        if error is not None:
            self._open_failed(AgentError.protocol_failed(f"initialize: {error.message}", self.line))
            return
        # OutputSchema (anyagent HEAD's capability): every turn/start carries the launch's
        # output_schema (turns.py), so Codex constrains its answers natively. Listed only
        # when the app gave one, so an app that never sends output_schema (anyagent's
        # clients) never reads a Capability its reference schema lacks.
        features = [*FEATURES, *(["OutputSchema"] if self.launch.output_schema is not None else [])]
        self.details = {
            "version": version_of(text(obj(result).get("userAgent"))),
            "auth": "Unknown",
            "capabilities": {"features": features, "mcp_transports": ["Stdio", "Http"]},
            "config_options": [],
            "commands": [],
        }
        self._notify("initialized")
        waiting = {"account": True, "models": True}

        def account(result: AccountReply | None, error: RpcError | None) -> None:
            if error is None and isinstance(result, dict):
                self.details["auth"] = auth_status(result, self.launch.child_env())
                # PlanUsage: only a ChatGPT login has rate limits to read (plan_usage).
                login = result.get("account")
                if isinstance(login, dict) and login.get("type") == "chatgpt":
                    self.details["capabilities"]["features"].append("PlanUsage")
            waiting["account"] = False
            if not waiting["models"]:
                self._start_thread()

        def models(result: Any, error: RpcError | None) -> None:
            if error is None and isinstance(result, dict):
                self._models = [m for m in objects(result.get("data")) if not m.get("hidden")]
            waiting["models"] = False
            if not waiting["account"]:
                self._start_thread()

        self._request("account/read", {"refreshToken": False}, account)
        self._request("model/list", {}, models)

    def _thread_params(self) -> ThreadParams:
        launch = self.launch
        params: ThreadParams = {"cwd": launch.dir, "approvalPolicy": "never" if self.tools_disabled else "on-request"}
        if self.model:
            params["model"] = self.model
        if self.sandbox:
            params["sandbox"] = self.sandbox
        elif self.tools_disabled:
            params["sandbox"] = "read-only"
        config: dict[str, str | float] = {}
        if self.effort:
            config["model_reasoning_effort"] = self.effort
        if self.host.tools_url is not None:
            config.update(app_server_config(self.host.tools_url, launch.tool_timeout))
        if config:
            params["config"] = config
        instructions = launch.instructions
        if self.tools_disabled:
            instructions = TEXT_ONLY + ("\n\n" + instructions if instructions else "")
        if instructions:
            params["developerInstructions"] = instructions
        return params

    def _start_thread(self) -> None:
        if self.life.state == "closing":
            return
        launch = self.launch
        params = self._thread_params()
        if launch.resume:
            method = "thread/resume"
            params["threadId"] = launch.resume
        elif launch.fork:
            method = "thread/fork"
            params["threadId"] = launch.fork
            if launch.fork_at:
                params["lastTurnId"] = launch.fork_at
        else:
            method = "thread/start"
            if launch.throwaway:
                params["ephemeral"] = True
        self._request(method, params, lambda result, error: self._thread_ready(method, result, error))

    def _thread_ready(self, method: str, result: Any, error: RpcError | None) -> None:
        if self.life.state == "closing":
            return
        if error is not None:
            message = error.message
            if method in ("thread/resume", "thread/fork"):
                self._open_failed(
                    AgentError.detail(
                        Kind.RESUME_FAILED, f"{method} {self.launch.resume or self.launch.fork}: {message}"
                    )
                )
            else:
                self._open_failed(AgentError.protocol_failed(f"{method}: {message}", self.line))
            return
        if (
            (not self.launch.throwaway or self.tools_disabled)
            and isinstance(self.details.get("auth"), dict)
            and "Unauthenticated" in self.details["auth"]
        ):
            self._open_failed(
                AgentError.auth_required("Codex is not logged in: run `codex login` or set OPENAI_API_KEY", LOGIN)
            )
            return
        thread = result.get("thread") or {}
        self.thread_id = thread.get("id")
        self.model = self.model or result.get("model")
        self.effort = self.effort or result.get("reasoningEffort")
        sandbox = (result.get("sandbox") or {}).get("type")
        self.sandbox = self.sandbox or SANDBOX_NAMES.get(str(sandbox))
        self.details["config_options"] = config_options(self._models, self.model, self.effort, self.sandbox, self.mode)
        self.life.move("ready", self.line)
        self._handshake.cancel()
        self.host.opened(self.details, resume_token=self.thread_id, title=thread.get("name"))

    def close(self) -> None:
        self._end(lambda transport: transport.shutdown(CLOSE_GRACE))

    def kill(self) -> None:
        self._end(lambda transport: transport.kill())

    def _end(self, stop: Callable[[LineTransport], None]) -> None:
        self.life.move("close")
        self._stall_check.cancel()
        if self.transport is None:
            self.host.closed()
        else:
            stop(self.transport)  # its exit reports closed (on_exit)

    def on_exit(self, status: str | None, stderr: str) -> None:
        self.deltas.flush()
        self._stall_check.cancel()
        self._handshake.cancel()
        if self.life.move("exited") != "closing":
            self.host.fail(AgentError.process_exited(status, stderr))
        self.rpc.fail_pending(RpcError(INTERNAL_ERROR, "codex exited"))
        self.host.closed()

    # -- JSON-RPC -------------------------------------------------------------------------

    def _request(self, method: str, params: Any, callback: OnResponse) -> None:
        if self.transport is not None:
            self.send(self.rpc.request(method, params, callback))

    def _notify(self, method: str, params: Any = None) -> None:
        self.send(self.rpc.notification(method, params))

    def _reply(self, request_id: Any, result: Any) -> None:
        self.send(self.rpc.result(request_id, result))

    def _reply_error(self, request_id: Any, code: int, message: str) -> None:
        self.send(self.rpc.error(request_id, RpcError(code, message)))

    def on_line(self, line: bytes) -> None:
        message = self.decode(line, "codex: skipped")
        if message is NOT_JSON:
            return
        if type(message) is dict and "id" not in message:
            method = message.get("method")
            delta_kind = DELTAS.get(method) if type(method) is str else None
            if delta_kind is not None:
                # The hot path: one line per streamed token.
                params: NotificationParams = obj(message.get("params"))
                if (
                    self._turn_wanted
                    and params.get("threadId") == self.thread_id
                    and (params.get("turnId") == self.turn_id or self._current(params))
                ):
                    item_id = params.get("itemId")
                    delta = params.get("delta")
                    if type(delta) is str and type(item_id) is str:
                        self._buffer_delta(delta_kind, item_id, delta)
                    else:
                        self.deltas.flush()
                        self._skipped(str(method), "its delta and itemId must be strings")
                return
        self.deltas.flush()
        kind = self.rpc.receive(message)  # a response runs its call's callback here
        if isinstance(kind, (Request, Notification)):
            if isinstance(kind, Request):
                self._server_request(kind.id, kind.method, obj(kind.params))
            else:
                self._notification(kind.method, obj(kind.params))
        elif isinstance(kind, Invalid):
            self.host.diagnostic(
                "Warning", f"codex: skipped a line that is not JSON-RPC ({kind.error.message}): {line[:200]!r}"
            )

    # -- streamed text, merged per read --------------------------------------------------

    def _buffer_delta(self, kind: str, item_id: str, text: str) -> None:
        """Hold a text delta; consecutive ones of one message become one event.

        Codex writes one line per model token. Those that arrive together (one read of
        its pipe) are merged, and flushed before any other line and at the end of the
        loop tick, so order and latency are kept while a burst costs one event.
        """
        self._last_progress = self.loop.time()
        self._streamed.add(item_id)
        self.deltas.delta(kind, item_id, text)
