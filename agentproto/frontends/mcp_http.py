"""The MCP server over Streamable HTTP (``serve --transport mcp --listen HOST:PORT`` or
``--port N``): mcp_stdio.py's ``agentproto_<op>`` tools on one URL, ``/mcp``, both MCP eras
(tools/mcp_http.py).

    POST /mcp    MCP (JSON responses): 2026-07-28 stateless, or the 2025 handshake revisions

Rules of this file:
- The connections, limits, timeouts and the checks against web pages (Host 421, Origin
  403, Content-Type 415) are the HTTP server's, as for ``--transport http``; this handler
  adds its one route (anything else 404, a method but POST 405) and the same bearer token
  (``--auth-token`` or ``AGENTPROTO_AUTH_TOKEN``: 401 without it), checked once the head is
  in, before the body is read or any tool runs.
- Without a token, only a loopback address may be listened on: anyone who can reach the
  port could run any program as this user. The URL is announced on stderr
  (``listening on http://HOST:PORT/mcp``) once the socket listens.
- Sessions (agentproto's) belong to the server, not to an MCP client: any call may name
  any session, and the default session (the last opened) is the server's one. A session
  idle for ``idle_timeout`` (``--session-idle-timeout``, default ``IDLE_TIMEOUT``; 0:
  never) is closed as a ``close`` op would.
- ``--record`` is the stdio transports': refused here (a usage error) rather than
  writing an empty record.
"""

from __future__ import annotations

from typing import Any

from agentproto import __version__
from agentproto.core.errors import log
from agentproto.core.http1 import Request, authorized
from agentproto.engine.runtime import Engine
from agentproto.frontends.mcp_stdio import INSTRUCTIONS, OpsTools
from agentproto.frontends.ops_framing import EXIT_OK, OpsContext, OpsHub
from agentproto.frontends.ops_http import IDLE_TIMEOUT, REQUEST_TIMEOUT, listen_guarded
from agentproto.loopio.httpserver import HttpServer, Refusal, Response
from agentproto.loopio.lifetime import watch_lifetime
from agentproto.tools.mcp_http import McpHttp

#: The MCP endpoint's path.
PATH = "/mcp"
#: Handshake-era MCP sessions kept at once (the oldest goes).
MAX_SESSIONS = 256

__all__ = ["IDLE_TIMEOUT", "McpOverHttp", "run_mcp_http"]


class McpOverHttp:
    """httpserver's handler: the one MCP route, behind the bearer token when there is one."""

    def __init__(self, runtime: Engine, auth_token: str | None, idle_timeout: float = 0.0) -> None:
        self.auth_token = auth_token
        self.hub = OpsHub(runtime, shared=True, idle_timeout=idle_timeout)
        self.ctx = OpsContext(self.hub)
        self.mcp = McpHttp(
            OpsTools(self.ctx),
            name="agentproto",
            version=__version__,
            instructions=INSTRUCTIONS,
            # The same tools for every client; behind a token, no shared cache keeps them.
            cache_scope="public" if auth_token is None else "private",
            max_sessions=MAX_SESSIONS,
        )

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message}

    def refuse(self, request: Request) -> Refusal | None:
        if self.auth_token is not None and not authorized(request.headers.get("authorization"), self.auth_token):
            return 401, {"error": "unauthorized"}, {"WWW-Authenticate": "Bearer"}
        if request.path.rstrip("/") != PATH:
            return 404, {"error": "not found (the MCP endpoint is POST /mcp)"}, {}
        if request.method != "POST":
            return 405, {"error": "only POST (no SSE stream here)"}, {"Allow": "POST"}
        return None

    def handle(self, request: Request, response: Response) -> None:
        self.mcp.serve(request, response)


def run_mcp_http(
    runtime: Engine, address: tuple[str, int], auth_token: str | None, idle_timeout: float = IDLE_TIMEOUT
) -> int:
    """``serve --transport mcp --listen``: the MCP handler on an HTTP server until a signal or EOF."""
    loop = runtime.loop
    handler = McpOverHttp(runtime, auth_token, idle_timeout)
    server = HttpServer(loop, handler, request_timeout=REQUEST_TIMEOUT)
    stopping = [False]

    def shutdown() -> None:
        if not stopping[0]:
            stopping[0] = True
            server.close()
            handler.mcp.close()
            handler.hub.close_all(loop.stop)

    watch_lifetime(loop, shutdown, runtime.kill_all)  # before the banner: a client may act on it
    bound = listen_guarded(server, address, auth_token)  # the HTTP transport's rule, and its exit codes
    if isinstance(bound, int):
        return bound
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    log(f"listening on http://{shown}:{bound[1]}{PATH}")
    loop.run()
    return EXIT_OK
