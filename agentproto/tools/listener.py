"""The token-guarded loopback listener: every session's own tools (MCP over HTTP) and hooks,
for all the sessions of one sidecar, on the one loop.

    POST /<token>/mcp/agentproto   Streamable HTTP MCP with JSON responses (no SSE stream),
                                   2026-07-28 and the 2025 handshake revisions
    POST /<token>/hook/<event>     the hook's input in, the hook's output (JSON) out

Rules of this file:
- One listening socket per sidecar, opened by the first session that needs it, bound to
  127.0.0.1 on a port the OS picks and never to another address. Its connections are
  httpserver.py's, on the one loop: no thread, no second process.
- Every path starts with a session's token (``secrets``, 192 bits), found by its hash and
  compared in constant time; a closed session's token is dead at once. Anything else, a
  wrong or missing token included, is 404 with no detail: a guesser learns nothing.
- A web page must not reach it: httpserver applies httpcore's checks (Host 421, Origin
  403, Content-Type 415) as soon as a head is in, then ``refuse`` checks the token and the
  route, all before the body is read.
- Bounded: a body over ``MAX_BODY`` is 413; a request must arrive within
  ``REQUEST_TIMEOUT``; at most ``MAX_CONNECTIONS`` connections at once (at the bound a new
  one closes the oldest idle one, or is closed if none is idle: httpserver.py) and
  ``MAX_MCP_SESSIONS`` MCP sessions per session (the oldest goes).
- One session's agent cannot starve the others (its token is the owner, httpserver.py):
  once its head is in, a connection counts against its session, which holds at most
  ``connections`` (default ``CONNECTIONS_PER_SESSION``) of the ``MAX_CONNECTIONS``; past
  that, with none of them idle, a request is answered at once and the connection closes:
  each JSON-RPC request in it gets a ``TOO_MANY`` error (a JSON-RPC error, not a 429,
  which clients retry), a hook a 503. And a session has at most ``calls`` (default
  ``CALLS_PER_SESSION``) tool calls unanswered, wherever they came from (a call stays
  pending until its answer, its ``tool_timeout`` or the close, even when its client has
  gone): one more gets a ``TOO_MANY`` error at once.
- An answer the app has not given yet keeps its HTTP request open (a deferred response);
  the loop serves everything else meanwhile.
- Both MCP eras on the one URL, each session's own (mcp_http.py: the handshake's
  ``Mcp-Session-Id`` sessions, at most ``MAX_MCP_SESSIONS`` per session, and 2026-07-28
  served statelessly).
- No log line here names a path or a URL: both hold the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import TYPE_CHECKING, Any, Protocol

from agentproto import __version__
from agentproto.core import mcp
from agentproto.core.errors import log
from agentproto.core.http1 import Request
from agentproto.core.jsonrpc import PARSE_ERROR, RpcError
from agentproto.loopio.httpserver import HttpServer, Refusal, Response
from agentproto.loopio.sockets import bind_tcp, tcp_address
from agentproto.tools.apptools import APP_SERVER
from agentproto.tools.mcp_http import McpHttp

if TYPE_CHECKING:
    from agentproto.core.mcp_types import McpTool, RpcMessage
    from agentproto.core.wire_types import JsonObject
    from agentproto.loopio.loop import Loop

HOST = "127.0.0.1"
MAX_BODY = 4 * 1024 * 1024
REQUEST_TIMEOUT = 30.0
MAX_CONNECTIONS = 256
MAX_MCP_SESSIONS = 64
#: The connections, and the unanswered tool calls, one session may hold (configurable).
CONNECTIONS_PER_SESSION = 32
CALLS_PER_SESSION = 32
#: The JSON-RPC code of a call refused because its session holds too many already.
TOO_MANY = -32005


class Served(Protocol):
    """What a session serves on the listener (apptools.AppTools): a tool set and hooks."""

    def tools(self) -> list[McpTool]: ...

    def call(self, call: mcp.ToolCall) -> None: ...

    def has_hook(self, event: str) -> bool: ...

    def hook(self, event: str, input: Any, reply: Any) -> None: ...


def _key(token: str) -> bytes:
    # Tokens are looked up by their hash: the dict's timing tells nothing about the token.
    return hashlib.sha256(token.encode("latin-1", "replace")).digest()


class Registration:
    """One session's place on the listener (apptools.Registration)."""

    def __init__(self, listener: "Listener", served: Served) -> None:
        self.listener = listener
        self.served = served
        self.token = secrets.token_urlsafe(24)
        self.key = _key(self.token)
        #: Its MCP URL (both eras; the handshake's sessions are its own).
        self.mcp = McpHttp(self, name=APP_SERVER, version=__version__, max_sessions=MAX_MCP_SESSIONS)
        self.closed = False
        #: Its tool calls not answered yet (at most ``listener.calls``).
        self.calls = 0

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.listener.port}/{self.token}"

    @property
    def tools_url(self) -> str:
        return f"{self.base}/mcp/{APP_SERVER}"

    def hook_url(self, event: str) -> str:
        return f"{self.base}/hook/{event}"

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.listener.entries.pop(self.key, None)
            self.mcp.close()

    # -- mcp.ToolSet: the session's tools, its pending calls counted --------------------------
    def tools(self) -> list[McpTool]:
        return self.served.tools()

    def call(self, call: mcp.ToolCall) -> None:
        bound = self.listener.calls
        if self.calls >= bound:
            call.fail(RpcError(TOO_MANY, f"Too many tool calls: this session has its {bound} unanswered already"))
            return
        self.calls += 1
        call.then(self._answered)
        self.served.call(call)

    def _answered(self) -> None:
        self.calls -= 1


def _rpc_error(code: int, message: str) -> RpcMessage:
    return {"jsonrpc": "2.0", "id": None, "error": RpcError(code, message).body()}


class Listener:
    """The sidecar's loopback listener (httpserver's handler, and its ``Owners``)."""

    def __init__(
        self, loop: "Loop", connections: int = CONNECTIONS_PER_SESSION, calls: int = CALLS_PER_SESSION
    ) -> None:
        self.loop = loop
        self.entries: dict[bytes, Registration] = {}
        #: httpserver.Owners: the connections one session may hold.
        self.per_owner = connections
        #: The tool calls one session may have unanswered.
        self.calls = calls
        self.server = HttpServer(
            loop,
            self,
            max_connections=MAX_CONNECTIONS,
            request_timeout=REQUEST_TIMEOUT,
            max_body=MAX_BODY,
            owners=self,
        )
        self.port = 0

    def start(self) -> None:
        """Listen on 127.0.0.1, on a port the OS picks (OSError if it cannot)."""
        self.port = self.server.listen(bind_tcp(*tcp_address(HOST, 0)))[1]

    def register(self, served: Served) -> Registration:
        registration = Registration(self, served)
        self.entries[registration.key] = registration
        return registration

    def close(self) -> None:
        for registration in list(self.entries.values()):
            registration.close()
        self.server.close()

    # -- routing: /<token>/mcp/agentproto, /<token>/hook/<event> -------------------------------
    def _route(self, path: str) -> tuple[Registration, str] | None:
        """The session and what it is asked ("mcp", or a hook's event), or None (404)."""
        parts = path.split("/")
        if len(parts) != 4 or parts[0] or parts[2] not in ("mcp", "hook"):
            return None
        registration = self.entries.get(_key(parts[1]))
        sent = parts[1].encode("latin-1", "replace")
        if registration is None or not hmac.compare_digest(registration.token.encode(), sent):
            return None
        if parts[2] == "mcp":
            return (registration, "mcp") if parts[3] == APP_SERVER else None
        return (registration, "hook:" + parts[3]) if registration.served.has_hook(parts[3]) else None

    # -- httpserver.Handler -------------------------------------------------------------------
    def error_body(self, status: int, message: str) -> Any:
        return {"error": message}

    def refuse(self, request: Request) -> Refusal | None:
        if self._route(request.path) is None:
            return 404, {"error": "not found"}, {}
        if request.method != "POST":
            return 405, {"error": "only POST (no SSE stream here)"}, {"Allow": "POST"}
        return None

    # -- httpserver.Owners: a session's token owns its connections ----------------------------
    def owner(self, request: Request) -> object | None:
        route = self._route(request.path)
        return None if route is None else route[0]

    def over(self, request: Request, response: Response) -> None:
        route = self._route(request.path)
        bound = self.per_owner
        if route is None or route[1] != "mcp":
            refused = f"too many connections: this session holds its {bound} already (--tool-connections)"
            response.json(503, {"error": refused}, close=True)
            return
        try:
            message = json.loads(request.body)
        except (ValueError, RecursionError) as exc:
            response.json(400, _rpc_error(PARSE_ERROR, f"Parse error: {str(exc)[:200]}"), close=True)
            return
        why = RpcError(TOO_MANY, f"Too many connections: this session holds its {bound} busy already").body()
        entries = message if isinstance(message, list) else [message]
        errors = [
            {"jsonrpc": "2.0", "id": entry["id"], "error": why}
            for entry in entries
            if isinstance(entry, dict) and "method" in entry and "id" in entry
        ]
        if not errors:
            response.empty(202)  # only notifications: nothing to answer
        else:
            response.json(200, errors if isinstance(message, list) else errors[0], close=True)

    def handle(self, request: Request, response: Response) -> None:
        try:
            route = self._route(request.path)
            if route is None:  # the session closed while the body came in
                response.json(404, {"error": "not found"}, close=True)
            elif route[1] == "mcp":
                route[0].mcp.serve(request, response)
            else:
                self._hook(route[0], route[1][len("hook:") :], request, response)
        except Exception:  # a bug costs this request; the log names no path (it holds the token)
            import traceback

            log(f"internal error answering a listener request:\n{traceback.format_exc().rstrip()}")
            if not response.started:
                response.json(500, {"error": "internal error"}, close=True)

    def _hook(self, registration: Registration, event: str, request: Request, response: Response) -> None:
        try:
            hook_input = json.loads(request.body) if request.body.strip() else {}
        except (ValueError, RecursionError):
            response.json(400, {"error": "the hook's input is not JSON"})
            return

        def reply(output: JsonObject) -> None:
            if not response.finished:
                response.json(200, output)

        registration.served.hook(event, hook_input, reply)
