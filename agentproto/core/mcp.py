"""MCP (the Model Context Protocol) server endpoint, sans-IO: one endpoint over a tool set.

The stdio MCP frontend (mcp_stdio.py) is this endpoint over stdin/stdout with the
``agentproto_<op>`` tools; an HTTP listener is the same endpoint over HTTP with another
tool set. The endpoint never touches a descriptor and knows nothing of sessions ids or
transports: decoded messages go in through ``receive`` with a ``Reply`` saying where
their answers go, and the tool set answers each call when it can (``ToolCall``).

Rules of this file:
- Two eras on one endpoint (MCP's "dual-era" server), chosen per request: a request whose
  ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion``, and every
  ``server/discover``, is served statelessly by revision 2026-07-28 (``MODERN``); anything
  else by the ``initialize`` handshake of ``VERSIONS``. Neither era's requests change how
  the other's are served.
- ``initialize`` answers the client's protocol version when it is one of ``VERSIONS``,
  and the newest otherwise (the client then decides whether it can go on). An
  ``initialize`` carrying the 2026-07-28 ``_meta`` is refused (-32601: 2026-07-28 has no
  handshake; the message names ``server/discover``).
- A 2026-07-28 request is checked before it runs (``modern_problem``): ``_meta`` missing,
  not an object, without a string version or an object of client capabilities is -32602;
  a version not in ``MODERN`` is -32022 naming every version served (``SUPPORTED``).
  Methods of the handshake era (``ping``) are -32601 there. Every 2026-07-28 result
  carries ``resultType: "complete"`` and the server's identity in ``_meta``; the
  cacheable ones (``server/discover``, ``tools/list``) ``ttlMs`` and ``cacheScope``.
- Over HTTP, the transport also checks the request's headers against its body and maps
  codes to statuses (mcp_headers.py).
- A notification is never answered; a request is answered exactly once (a tool call
  that is never answered keeps its reply open, which is the tool set's business).
- Messages are classified by ``jsonrpc.Peer`` (strict): an invalid one is answered with
  its id when the id could be read, ``null`` otherwise.
- A batch is bounded by ``jsonrpc.batch_entries``; its entries run concurrently and each
  answer goes to the reply as it comes (``Reply.respond``), never collected here. Once
  ``initialize`` has settled on ``NO_BATCHES`` or later (MCP 2025-06-18 removed batching),
  a batch is one Invalid Request error (id null) and none of its entries runs. A
  2026-07-28 request in a batch is one Invalid Request error (with its id), the others
  run.
- Progress notifications go out only for a call whose client gave a ``progressToken``,
  numbered from 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from agentproto.core import jsonrpc
from agentproto.core.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Invalid, Request, RpcError

if TYPE_CHECKING:
    from agentproto.core.mcp_types import (
        CallToolResult,
        InitializeResult,
        McpTool,
        ProgressParams,
        RpcMessage,
        ServerInfo,
    )
    from agentproto.core.wire_types import JsonObject

#: The protocol versions this endpoint speaks, oldest first.
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The first version without JSON-RPC batches.
NO_BATCHES = "2025-06-18"
#: The stateless revisions (no handshake: each request carries its version in ``_meta``).
MODERN = ("2026-07-28",)
#: Every version served, newest first (``server/discover``'s ``supportedVersions``).
SUPPORTED = tuple(reversed(VERSIONS + MODERN))
#: The reserved ``_meta`` keys of a 2026-07-28 request, and of its result.
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
#: MCP's own error codes (2026-07-28).
HEADER_MISMATCH = -32020
UNSUPPORTED_VERSION = -32022
#: How long a 2026-07-28 client may cache ``tools/list`` and ``server/discover`` (the tool
#: sets served here never change while their endpoint lives).
TTL_MS = 3_600_000


def is_modern(msg: Any) -> bool:
    """Whether a decoded message is a 2026-07-28 one (served statelessly)."""
    if not isinstance(msg, dict):
        return False
    if msg.get("method") == "server/discover":
        return True
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_VERSION in meta


def unsupported(requested: str) -> RpcError:
    """-32022: the request's version is not one served; the data names those that are."""
    return RpcError(
        UNSUPPORTED_VERSION,
        f"Unsupported protocol version: {requested[:40]} (supported: {', '.join(SUPPORTED)})",
        {"supported": list(SUPPORTED), "requested": requested},
    )


def modern_problem(params: Any) -> RpcError | None:
    """What is wrong with a 2026-07-28 request's ``_meta`` (-32602, -32022), or None."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return RpcError(
            INVALID_PARAMS,
            f"Invalid params: MCP 2026-07-28 requests carry `_meta` with {META_VERSION!r} and {META_CAPABILITIES!r}",
        )
    missing = [key for key in (META_VERSION, META_CAPABILITIES) if key not in meta]
    if missing:
        return RpcError(INVALID_PARAMS, f"Invalid params: `_meta` lacks {', '.join(repr(k) for k in missing)}")
    version = meta[META_VERSION]
    if not isinstance(version, str):
        return RpcError(INVALID_PARAMS, f"Invalid params: `_meta` {META_VERSION!r} must be a string")
    if not isinstance(meta[META_CAPABILITIES], dict):
        return RpcError(INVALID_PARAMS, f"Invalid params: `_meta` {META_CAPABILITIES!r} must be an object")
    if version not in MODERN:
        return unsupported(version)
    return None


class Reply(Protocol):
    """Where the answers to one incoming message (a line, a POST body) go."""

    def batch(self) -> None:
        """The message is a batch: the responses that follow form one array."""

    def respond(self, response: RpcMessage) -> None:
        """One response (of the message, or of one entry of its batch)."""

    def notify(self, notification: RpcMessage) -> None:
        """A notification that belongs to the message's calls (progress)."""

    def finish(self) -> None:
        """Every response of the message has been given."""


#: How a tool call's answer is handed back: its result, or the error instead.
Answer = Callable[["CallToolResult | None", "RpcError | None"], None]


class ToolCall:
    """One ``tools/call`` being answered: the tool set calls ``result`` or ``fail`` once."""

    __slots__ = ("name", "arguments", "_answer", "_notify", "_token", "_progress")

    def __init__(
        self,
        name: str,
        arguments: JsonObject,
        answer: Answer,
        notify: Callable[[RpcMessage], None],
        token: Any,
    ) -> None:
        self.name = name
        self.arguments = arguments
        self._answer: Answer | None = answer  # None once answered
        self._notify = notify
        self._token = token
        self._progress = 0

    @property
    def wants_progress(self) -> bool:
        return self._token is not None

    def progress(self, message: str, total: float | None = None) -> None:
        """A progress notification, when the client asked for them (else nothing)."""
        if self._token is None or self._answer is None:
            return
        self._progress += 1
        params: ProgressParams = {"progressToken": self._token, "progress": self._progress, "message": message}
        if total is not None:
            params["total"] = total
        self._notify({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    def then(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the call is answered (at once if it is already), before the
        answer goes out."""
        answer = self._answer
        if answer is None:
            callback()
            return

        def answered(result: CallToolResult | None, error: RpcError | None) -> None:
            callback()
            answer(result, error)

        self._answer = answered

    def result(self, result: CallToolResult) -> None:
        """The call's ``CallToolResult`` (``content``, ``structuredContent``, ``isError``)."""
        self._give(result, None)

    def fail(self, error: RpcError) -> None:
        """A protocol error instead of a result (bad arguments, an unknown tool)."""
        self._give(None, error)

    def _give(self, result: CallToolResult | None, error: RpcError | None) -> None:
        answer, self._answer = self._answer, None
        if answer is not None:
            answer(result, error)


class ToolSet(Protocol):
    """The tools an endpoint serves."""

    def tools(self) -> list[McpTool]:
        """Each tool's ``name``, ``description``, ``inputSchema`` (and ``title``)."""

    def call(self, call: ToolCall) -> None:
        """Run ``call.name`` with ``call.arguments``; answer through ``call`` now or later."""


class _Pending:
    """The answers still owed for one incoming message."""

    __slots__ = ("reply", "left", "started", "reply_is_batch")

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.reply_is_batch = False
        self.left = 0
        self.started = False  # every entry has been started: the count can reach 0

    def respond(self, response: RpcMessage | None) -> None:
        if response is not None:
            self.reply.respond(response)
        self.left -= 1
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self.started and self.left == 0:
            self.started = False
            self.reply.finish()


class McpEndpoint:
    """One MCP conversation (one client session) over a tool set."""

    def __init__(
        self,
        tools: ToolSet,
        *,
        name: str,
        version: str,
        instructions: str | None = None,
        max_batch: int = jsonrpc.MAX_BATCH,
        cache_scope: str = "private",
    ) -> None:
        self.tool_set = tools
        self.server_info: ServerInfo = {"name": name, "title": name, "version": version}
        self.instructions = instructions
        self.max_batch = max_batch
        #: ``cacheScope`` of the cacheable 2026-07-28 results: "public" when any client may
        #: share them, "private" when they belong to one (a session's token is in its URL).
        self.cache_scope = cache_scope
        self.peer = jsonrpc.Peer(strict=True)
        #: The negotiated protocol version, once ``initialize`` has been answered.
        self.protocol_version: str | None = None

    def receive(self, msg: Any, reply: Reply) -> None:
        """Answer one decoded message (an object or a batch) through ``reply``."""
        pending = _Pending(reply)
        if isinstance(msg, list):
            version = self.protocol_version
            if version is not None and version >= NO_BATCHES:
                why = f"Invalid Request: MCP {version} has no batches; send one message at a time"
                reply.respond(self.peer.error(None, RpcError(jsonrpc.INVALID_REQUEST, why)))
                reply.finish()
                return
            entries = jsonrpc.batch_entries(msg, self.max_batch)
            if isinstance(entries, Invalid):
                reply.respond(self.peer.error(entries.id, entries.error))
                reply.finish()
                return
            reply.batch()
            pending.reply_is_batch = True
        else:
            entries = [msg]
        pending.left = len(entries)
        for entry in entries:
            self._one(entry, pending)
        pending.started = True
        pending._maybe_finish()

    def parse_error(self, message: str) -> RpcMessage:
        """The response to a message that is not JSON (its transport found out)."""
        return self.peer.error(None, RpcError(jsonrpc.PARSE_ERROR, f"Parse error: {message}"))

    # -- one message -----------------------------------------------------------------------

    def _one(self, msg: Any, pending: _Pending) -> None:
        message = self.peer.receive(msg)
        if isinstance(message, Invalid):
            pending.respond(self.peer.error(message.id, message.error))
        elif isinstance(message, Request):
            if is_modern(msg):
                if pending.reply_is_batch:
                    why = "Invalid Request: MCP 2026-07-28 has no batches; send one message at a time"
                    pending.respond(self.peer.error(message.id, RpcError(jsonrpc.INVALID_REQUEST, why)))
                else:
                    self._modern(message, pending)
            else:
                self._request(message, pending)
        else:
            # A notification (initialized, cancelled, ...) is never answered, and we make no
            # calls, so a response is nobody's.
            pending.respond(None)

    def _request(self, request: Request, pending: _Pending) -> None:
        rpc_id, params = request.id, request.params

        def answer(result: Any, error: RpcError | None) -> None:
            pending.respond(self.peer.error(rpc_id, error) if error is not None else self.peer.result(rpc_id, result))

        method = request.method
        if method == "initialize":
            answer(self._initialize(params), None)
        elif method == "ping":
            answer({}, None)
        elif method == "tools/list":
            answer({"tools": self.tool_set.tools()}, None)
        elif method == "tools/call":
            self._call(params, answer, pending.reply.notify)
        else:
            answer(None, RpcError(METHOD_NOT_FOUND, f"Method not found: {method}"))

    def _modern(self, request: Request, pending: _Pending) -> None:
        """A 2026-07-28 request: checked, then answered statelessly (no state read or set)."""
        rpc_id, params, method = request.id, request.params, request.method

        def answer(result: Any, error: RpcError | None) -> None:
            if error is not None:
                pending.respond(self.peer.error(rpc_id, error))
                return
            result = dict(result)
            result["resultType"] = "complete"
            meta = result.get("_meta")
            result["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: self.server_info}
            pending.respond(self.peer.result(rpc_id, result))

        problem = modern_problem(params)
        if problem is not None:
            answer(None, problem)
        elif method == "server/discover":
            discovered: JsonObject = {
                "supportedVersions": list(SUPPORTED),
                "capabilities": {"tools": {}},
                "ttlMs": TTL_MS,
                "cacheScope": self.cache_scope,
            }
            if self.instructions:
                discovered["instructions"] = self.instructions
            answer(discovered, None)
        elif method == "tools/list":
            answer({"tools": self.tool_set.tools(), "ttlMs": TTL_MS, "cacheScope": self.cache_scope}, None)
        elif method == "tools/call":
            self._call(params, answer, pending.reply.notify)
        elif method == "initialize":
            why = (
                "Method not found: MCP 2026-07-28 has no initialize (call server/discover;"
                " an initialize without the 2026-07-28 _meta starts a handshake session)"
            )
            answer(None, RpcError(METHOD_NOT_FOUND, why))
        else:
            answer(None, RpcError(METHOD_NOT_FOUND, f"Method not found: {method} (MCP 2026-07-28)"))

    def _initialize(self, params: Any) -> InitializeResult:
        wanted = params.get("protocolVersion") if isinstance(params, dict) else None
        self.protocol_version = wanted if wanted in VERSIONS else VERSIONS[-1]
        result: InitializeResult = {
            "protocolVersion": self.protocol_version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": self.server_info,
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _call(
        self,
        params: Any,
        answer: Callable[[Any, RpcError | None], None],
        notify: Callable[[RpcMessage], None],
    ) -> None:
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            answer(None, RpcError(INVALID_PARAMS, "Invalid params: tools/call takes {name, arguments}"))
            return
        name = params["name"]
        if not any(tool["name"] == name for tool in self.tool_set.tools()):
            answer(None, RpcError(INVALID_PARAMS, f"Unknown tool: {name}"))
            return
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            answer(None, RpcError(INVALID_PARAMS, "Invalid params: `arguments` must be an object"))
            return
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        self.tool_set.call(ToolCall(name, arguments, answer, notify, token))

