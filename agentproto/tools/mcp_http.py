"""MCP over Streamable HTTP with JSON responses (no SSE stream), both eras, on one URL: the
loopback listener's ``tools_url`` (listener.py) and ``serve --transport mcp --listen``
(frontends/mcp_http.py) serve their tool sets through it.

Rules of this file:
- Which era answers is mcp.py's rule, per POST: a 2026-07-28 request (its ``_meta``, or
  that version's ``MCP-Protocol-Version`` header) is served statelessly; anything else by
  the handshake.
- The handshake (2024-11-05 to 2025-11-25): ``initialize`` gets an ``Mcp-Session-Id``
  (random), required on every later request: 400 without one, 404 for one we do not
  know; at most ``max_sessions`` (the oldest goes). An ``MCP-Protocol-Version`` header of
  no version served is 400 (-32022, the versions served in its data).
- 2026-07-28: one JSON-RPC message per POST, no session (an ``Mcp-Session-Id`` is ignored,
  none is given); an ``MCP-Protocol-Version`` header other than ``_meta``'s version is
  400 (-32020) first, then a bad ``_meta`` is 400 (-32602 or -32022), headers that disagree with the body
  (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``, the ``Mcp-Param-`` headers a
  tool's ``x-mcp-header`` calls for) 400 (-32020), an unknown
  method 404 (-32601); a notification 202. Every error keeps the request's id when it
  has one.
- An answer not given yet keeps its HTTP request open (a deferred response).
- No log line here: a URL may hold a token.
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from agentproto.core import mcp, mcp_headers
from agentproto.core.jsonrpc import INVALID_REQUEST, PARSE_ERROR, RpcError

if TYPE_CHECKING:
    from agentproto.core.http1 import Request
    from agentproto.core.mcp_types import RpcMessage
    from agentproto.loopio.httpserver import Response

#: The JSON-RPC code MCP servers answer an unknown session id with.
SESSION_NOT_FOUND = -32001


def rpc_error(code: int, message: str) -> RpcMessage:
    return {"jsonrpc": "2.0", "id": None, "error": RpcError(code, message).body()}


def error_of(message: Any, error: RpcError) -> RpcMessage:
    """An error response keeping the request's id when it has a usable one."""
    rpc_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, (str, int, float)):
        rpc_id = None
    return {"jsonrpc": "2.0", "id": rpc_id, "error": error.body()}


class _Reply:
    """The answers to one POSTed message: one JSON response, an array for a batch, or 202."""

    __slots__ = ("response", "headers", "responses", "is_batch", "modern")

    def __init__(self, response: Response, headers: dict[str, str], modern: bool = False) -> None:
        self.response = response
        self.headers = headers
        self.responses: list[RpcMessage] = []
        self.is_batch = False
        #: A 2026-07-28 request: its error's code sets the status (mcp_headers.http_status).
        self.modern = modern

    def batch(self) -> None:
        self.is_batch = True

    def respond(self, response: RpcMessage) -> None:
        self.responses.append(response)

    def notify(self, notification: RpcMessage) -> None:
        pass  # JSON responses only: there is no stream to send progress on

    def finish(self) -> None:
        if self.response.finished:
            return
        if not self.responses:
            self.response.empty(202, self.headers)  # only notifications (or responses) came
        else:
            body = self.responses if self.is_batch else self.responses[0]
            modern = self.modern and not self.is_batch
            status = mcp_headers.http_status(self.responses[0].get("error")) if modern else 200
            self.response.json(status, body, self.headers)


def _is_call(message: Any, method: str) -> bool:
    return isinstance(message, dict) and message.get("method") == method and "id" in message


class McpHttp:
    """One MCP URL over a tool set: the handshake's sessions, and the stateless endpoint."""

    def __init__(
        self,
        tools: mcp.ToolSet,
        *,
        name: str,
        version: str,
        instructions: str | None = None,
        cache_scope: str = "private",
        max_sessions: int = 64,
    ) -> None:
        self.tools = tools
        self.options: dict[str, Any] = {
            "name": name,
            "version": version,
            "instructions": instructions,
            "cache_scope": cache_scope,
        }
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[str, mcp.McpEndpoint] = OrderedDict()
        #: Serves the 2026-07-28 requests (stateless: one for all of them).
        self.stateless = mcp.McpEndpoint(tools, **self.options)

    def close(self) -> None:
        self.sessions.clear()

    def _session(self) -> tuple[str, mcp.McpEndpoint]:
        """A new handshake session (``initialize``), and its id."""
        session_id = secrets.token_hex(16)
        endpoint = mcp.McpEndpoint(self.tools, **self.options)
        self.sessions[session_id] = endpoint
        while len(self.sessions) > self.max_sessions:
            self.sessions.popitem(last=False)
        return session_id, endpoint

    def serve(self, request: Request, response: Response) -> None:
        """Answer one POST to the MCP URL (now, or later for a deferred tool call)."""
        version = request.headers.get("mcp-protocol-version")
        try:
            message = json.loads(request.body)
        except (ValueError, RecursionError) as exc:
            response.json(400, rpc_error(PARSE_ERROR, f"Parse error: {str(exc)[:200]}"))
            return
        if mcp.is_modern(message) or version in mcp.MODERN:
            self._modern(message, request, response)
            return
        if version is not None and version not in mcp.VERSIONS:
            response.json(400, error_of(message, mcp.unsupported(version)))
            return
        headers: dict[str, str] = {}
        session_id = request.headers.get("mcp-session-id")
        if session_id is None:
            if _is_call(message, "initialize"):
                session_id, endpoint = self._session()
                headers["Mcp-Session-Id"] = session_id
            else:
                response.json(400, rpc_error(INVALID_REQUEST, "Bad Request: no Mcp-Session-Id (initialize first)"))
                return
        else:
            found = self.sessions.get(session_id)
            if found is None:
                response.json(404, rpc_error(SESSION_NOT_FOUND, "Session not found: initialize again"))
                return
            self.sessions.move_to_end(session_id)
            endpoint = found
        endpoint.receive(message, _Reply(response, headers))

    def _modern(self, message: Any, request: Request, response: Response) -> None:
        if not isinstance(message, dict) or "method" not in message:
            why = "Invalid Request: MCP 2026-07-28 takes one JSON-RPC request or notification per POST"
            response.json(400, error_of(message, RpcError(INVALID_REQUEST, why)))
            return
        if "id" in message:
            problem = (
                mcp_headers.version_mismatch(message, request.headers)
                or mcp.modern_problem(message.get("params"))
                or mcp_headers.header_problem(message, request.headers)
                or mcp_headers.param_problem(message, request.headers, self.tools.tools())
            )
            if problem is not None:
                response.json(400, error_of(message, problem))
                return
        self.stateless.receive(message, _Reply(response, {}, modern=True))
