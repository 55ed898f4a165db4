"""``python -m agentproto mcp-bridge``: a stdio MCP server relayed to one Streamable HTTP
MCP endpoint (a session's ``tools_url``, from ``AGENTPROTO_TOOLS_URL`` or the command line),
for agents that take only stdio servers.

Rules of this file:
- One JSON-RPC message per stdin line goes to the endpoint as one POST; a response (or a
  batch) comes back as one stdout line; a 202 (a notification's) writes nothing. Messages
  run concurrently: a slow tool call never holds a ping.
- The ``Mcp-Session-Id`` of ``initialize``'s response goes on every later POST (messages
  that arrive while the first ``initialize`` is answered wait for it), with the
  negotiated ``MCP-Protocol-Version``. A 2026-07-28 request (mcp.is_modern) goes at once
  with the headers its body calls for (``MCP-Protocol-Version``, ``Mcp-Method``,
  ``Mcp-Name``, and the ``Mcp-Param-`` headers of the tool's ``x-mcp-header`` arguments,
  from the ``tools/list`` answers relayed) and no session.
- It exits when either side closes: 0 at the end of stdin, once the messages already sent
  are answered; 1 once the endpoint is gone (refused connection, or a 404 that is not a
  JSON-RPC answer: the session closed), after answering the request that found out with a JSON-RPC error, or once
  stdout is.
- The URL holds the session's token: it is never written to stdout, stderr or a log, and
  it belongs in the environment (``AGENTPROTO_TOOLS_URL``), not on the command line.
- Standard library only, on agentproto's own loop (one process, no thread).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agentproto.core import mcp, mcp_headers
from agentproto.core.jsonrpc import INTERNAL_ERROR, PARSE_ERROR, RpcError
from agentproto.core.wire import TooLong, decode_json_line, encode
from agentproto.loopio.loop import Loop
from agentproto.loopio.streams import LineReader, Output
from agentproto.tools.mcp_client import HttpResponse, McpHttpClient

EXIT_OK, EXIT_GONE, EXIT_USAGE = 0, 1, 2
#: Where the bridge finds the URL: the environment, which only the same user can read
#: (a command line is visible to every local user, and the URL holds the session's token).
TOOLS_URL = "AGENTPROTO_TOOLS_URL"


class Bridge:
    def __init__(self, loop: Loop, client: McpHttpClient, stdin: int = 0, stdout: int = 1) -> None:
        self.loop = loop
        self.client = client
        self.output = Output(loop, stdout, lambda _exc: self.stop(EXIT_GONE))
        self.reader = LineReader(loop, stdin, self._line, self._eof)
        self.in_flight = 0
        self.ended = False  # stdin ended: exit once what was sent is answered
        self.initializing = False
        self.waiting: list[bytes] = []  # lines read while the first initialize is answered
        self.exit_code: int | None = None
        #: Each tool's inputSchema, from the tools/list answers relayed (x-mcp-header).
        self.schemas: dict[str, Any] = {}

    def run(self) -> int:
        self.reader.start()
        self.loop.run(until=lambda: self.exit_code is not None)
        return EXIT_GONE if self.exit_code is None else self.exit_code

    def stop(self, code: int) -> None:
        if self.exit_code is None:
            self.reader.close()
            # What is written already goes out before the exit (the last error, a response).
            if not self.output.queue or self.output.failed:
                self.exit_code = code
            else:
                self.output.on_drained = lambda: setattr(self, "exit_code", code)

    def _eof(self) -> None:
        self.ended = True
        if not self.in_flight and not self.waiting:
            self.stop(EXIT_OK)

    def _write(self, message: Any) -> None:
        self.output.send(encode(message))

    def _line(self, line: bytes | TooLong) -> None:
        if self.exit_code is not None:
            return
        if isinstance(line, TooLong):
            self._unreadable("line too long")
            return
        try:
            message = decode_json_line(line)
        except ValueError as exc:
            self._unreadable(str(exc))
            return
        if mcp.is_modern(message):
            # Stateless: never waits; the schemas seen tell which arguments go in headers too.
            self._post(line, message, mcp_headers.request_headers(message, self.schemas))
            return
        if self.initializing:
            self.waiting.append(line)
            return
        if isinstance(message, dict) and message.get("method") == "initialize" and self.client.session_id is None:
            self.initializing = True
        self._post(line, message)

    def _unreadable(self, why: str) -> None:
        self._write({"jsonrpc": "2.0", "id": None, "error": RpcError(PARSE_ERROR, f"Parse error: {why}").body()})

    def _post(self, raw: bytes, message: Any, headers: dict[str, str] | None = None) -> None:
        is_initialize = isinstance(message, dict) and message.get("method") == "initialize"

        def answered(response: HttpResponse | None, why: str | None) -> None:
            self.in_flight -= 1
            if is_initialize:
                self._initialized(response)
            if response is None:
                self._fail(message, f"the tools endpoint is gone ({why})")
            elif response.status == 404 and not (headers is not None and _rpc_answer(response)):
                self._fail(message, "the tools endpoint is gone (HTTP 404: the session closed)")
            elif response.status != 202:
                self._relay(message, response)
            if self.ended and not self.in_flight and not self.waiting:
                self.stop(EXIT_OK)

        self.in_flight += 1
        self.client.post(bytes(raw), answered, headers)

    def _initialized(self, response: HttpResponse | None) -> None:
        if response is not None and response.status == 200:
            session_id = response.headers.get("mcp-session-id")
            if session_id:
                self.client.session_id = session_id
            try:
                result = json.loads(response.body).get("result") or {}
            except (ValueError, AttributeError):
                result = {}
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self.client.protocol_version = version
        if self.initializing:
            self.initializing = False
            waiting, self.waiting = self.waiting, []
            for line in waiting:
                self._line(line)

    def _relay(self, message: Any, response: HttpResponse) -> None:
        try:
            answer = json.loads(response.body)
        except ValueError:
            answer = None
        if isinstance(answer, (dict, list)):
            self._learn(message, answer)
            self._write(answer)
        else:
            self._answer_error(message, f"the tools endpoint answered HTTP {response.status}")

    def _learn(self, message: Any, answer: Any) -> None:
        if isinstance(message, dict) and message.get("method") == "tools/list" and isinstance(answer, dict):
            result = answer.get("result")
            tools = result.get("tools") if isinstance(result, dict) else None
            for tool in tools if isinstance(tools, list) else ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    self.schemas[tool["name"]] = tool.get("inputSchema")

    def _answer_error(self, message: Any, why: str) -> None:
        if isinstance(message, dict) and "id" in message and "method" in message:
            self._write({"jsonrpc": "2.0", "id": message["id"], "error": RpcError(INTERNAL_ERROR, why).body()})

    def _fail(self, message: Any, why: str) -> None:
        self._answer_error(message, why)
        sys.stderr.write(f"agentproto mcp-bridge: {why}\n")
        self.stop(EXIT_GONE)


def _rpc_answer(response: HttpResponse) -> bool:
    """A 404 that is a JSON-RPC answer (a 2026-07-28 unknown method), not a closed session."""
    try:
        answer = json.loads(response.body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("jsonrpc") == "2.0" and "error" in answer


def run_bridge(url: str) -> int:
    loop = Loop()
    try:
        client = McpHttpClient(loop, url)
    except ValueError as exc:
        sys.stderr.write(f"agentproto mcp-bridge: {exc}\n")  # names the problem, never the URL
        return EXIT_USAGE
    try:
        return Bridge(loop, client).run()
    finally:
        loop.close()
