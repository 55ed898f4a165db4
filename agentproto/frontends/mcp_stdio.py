"""The MCP server on stdio (``serve --transport mcp``): mcp.py's endpoint over stdin/stdout
with the ``agentproto_<op>`` tool set.

Each tool ``agentproto_<op>`` has the op's request schema (from agentproto/schema.json,
without ``op``) as its ``inputSchema``; a result is the op's result object as JSON text
plus ``structuredContent``, ``isError`` when refused. Tool calls run concurrently: a long
``prompt`` never delays a ``ping``. A session's events become progress notifications
when the client gives a ``progressToken``.

Rules of this file:
- Newline-delimited JSON-RPC: a line that is not JSON is a -32700 with id null; every
  other rule is the endpoint's, both MCP eras included (a 2026-07-28 request is served
  by itself whatever came before it on the same stdin, an ``initialize`` starts the
  handshake era's conversation).
- ``--record`` pairs each input line with every line written for it (its progress
  notifications and its response), once the line's last answer is out.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agentproto import __version__
from agentproto.core.jsonrpc import INVALID_PARAMS, RpcError
from agentproto.core.mcp import McpEndpoint, ToolCall
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import encode, event_kind_name
from agentproto.engine.session import EngineSession
from agentproto.frontends.ops_framing import OpsContext, OpsError, parse_request
from agentproto.frontends.ops_stdio import LineServer, ResultOut
from agentproto.loopio.lifetime import capture

if TYPE_CHECKING:
    from agentproto.core.mcp_types import McpTool, RpcMessage

TOOL_PREFIX = "agentproto_"
#: Every op but ``halt``, which would stop the server under its host (the host ends it by
#: closing its stdin). A test holds this to ``ops.OPERATIONS``.
TOOL_OPS = (
    "capabilities",
    "discover",
    "probe",
    "plan_usage",
    "plan_usage_all",
    "generate",
    "open",
    "prompt",
    "answer",
    "cancel",
    "configure",
    "rollback",
    "dequeue",
    "compact",
    "info",
    "close",
    "explain",
    "inspect",
)
NOT_TOOLS = ("halt",)
INSTRUCTIONS = (
    "agentproto drives coding agents (Claude Code, Codex, Gemini, ACP agents) for you. "
    "agentproto_generate runs one hands-off turn and returns its text; for a conversation, "
    "agentproto_open a session, then agentproto_prompt it (and agentproto_answer when the "
    "result is `waiting`), then agentproto_close. agentproto_capabilities lists the agents; "
    "agentproto_explain explains an error kind."
)

# -- the tools' schemas, from agentproto/schema.json -----------------------------------------

_SCHEMA: dict[str, Any] | None = None


def _schema() -> dict[str, Any]:
    global _SCHEMA
    if _SCHEMA is None:
        from importlib import resources

        _SCHEMA = json.loads(resources.files("agentproto").joinpath("schema.json").read_text(encoding="utf-8"))
    return _SCHEMA


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref[len("#/definitions/") :])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _rebase(node: Any) -> Any:
    if isinstance(node, dict):
        old = "#/definitions/"
        return {
            k: "#/$defs/" + v[len(old) :] if k == "$ref" and isinstance(v, str) and v.startswith(old) else _rebase(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rebase(v) for v in node]
    return node


def request_schema(op: str) -> dict[str, Any]:
    """The op's request variant from agentproto/schema.json."""
    for variant in _schema()["definitions"]["OpsRequest"]["oneOf"]:
        if variant["properties"]["op"]["const"] == op:
            return dict(variant)
    raise KeyError(op)


def input_schema(op: str) -> dict[str, Any]:
    """The op's request schema without ``op``, self-contained (``$defs``)."""
    variant = copy.deepcopy(request_schema(op))
    props = variant["properties"]
    del props["op"]
    required = [name for name in variant.get("required", []) if name != "op"]
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    definitions = _schema()["definitions"]
    needed: set[str] = set()
    _refs(props, needed)
    seen: set[str] = set()
    while needed - seen:
        name = sorted(needed - seen)[0]
        seen.add(name)
        _refs(definitions[name], needed)
    if seen:
        out["$defs"] = {name: copy.deepcopy(definitions[name]) for name in sorted(seen)}
    rebased: dict[str, Any] = _rebase(out)
    return rebased


# -- the tool set --------------------------------------------------------------------------


class OpsTools:
    """``agentproto_<op>`` for each op of ``TOOL_OPS``, over one ops context."""

    def __init__(self, ctx: OpsContext) -> None:
        self.ctx = ctx
        self._tools: list[McpTool] | None = None

    def tools(self) -> list[McpTool]:
        if self._tools is None:
            self._tools = [
                {
                    "name": TOOL_PREFIX + op,
                    "title": f"agentproto {op}",
                    "description": request_schema(op)["description"],
                    "inputSchema": input_schema(op),
                }
                for op in TOOL_OPS
            ]
        return self._tools

    def call(self, call: ToolCall) -> None:
        try:
            op, args = parse_request({**call.arguments, "op": call.name[len(TOOL_PREFIX) :]}, self.ctx.default)
        except OpsError as exc:
            call.fail(RpcError(INVALID_PARAMS, f"Invalid arguments for {call.name}: {exc.message}"))
            return
        self.ctx.run_parsed(op, args, _ToolOut(call))


class _ToolOut(ResultOut):
    """The ops ``Out`` of one tool call: the result object becomes the tool result."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None:
        if session is not None:
            session.delivered(1)
        if obj.get("kind") != "event":
            self.keep(obj)
        elif self.call.wants_progress:
            event_kind = obj["event"]["kind"]
            name = event_kind_name(event_kind)
            self.call.progress(event_kind[name]["text"] if name in ("TextDelta", "ReasoningDelta") else name)

    def done(self, exit_code: int) -> None:
        if self.result is None:
            self.call.fail(RpcError(INVALID_PARAMS, f"Invalid params: {self.error}"))
            return
        text = json.dumps(self.result, ensure_ascii=False)
        self.call.result(
            {
                "content": [{"type": "text", "text": text}],
                "structuredContent": self.result,
                "isError": not self.result.get("ok", False),
            }
        )


# -- the endpoint over stdin/stdout --------------------------------------------------------


class _LineReply:
    """The answers to one input line: written as they come (a batch's as one array)."""

    def __init__(self, server: "McpStdio", raw: bytes) -> None:
        self.server = server
        self.raw = raw
        self.captured = capture(server.recorder is not None)
        self.entries: list[bytes] | None = None

    def _send(self, data: bytes) -> None:
        self.captured.add(data)
        self.server.output.send(data)

    def batch(self) -> None:
        self.entries = []

    def respond(self, response: RpcMessage) -> None:
        if self.entries is None:
            self._send(encode(response))
        else:
            self.entries.append(encode(response).rstrip(b"\n"))

    def notify(self, notification: RpcMessage) -> None:
        self._send(encode(notification))

    def finish(self) -> None:
        if self.entries:
            self._send(b"[" + b",".join(self.entries) + b"]\n")
        self.server.line_answered(self)


class McpStdio(LineServer):
    """``serve --transport mcp``: the endpoint over one input descriptor and one ``Output``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.endpoint = McpEndpoint(
            OpsTools(self.ctx), name="agentproto", version=__version__, instructions=INSTRUCTIONS, cache_scope="public"
        )
        self.pending = 0

    def open_requests(self) -> int:
        return self.pending

    def request(self, raw: bytes, msg: Any) -> None:
        self.pending += 1
        self.endpoint.receive(msg, _LineReply(self, raw))

    def refuse(self, raw: bytes, problem: str, too_long: bool) -> None:
        self.pending += 1
        reply = _LineReply(self, raw)
        reply.respond(self.endpoint.parse_error(problem))
        reply.finish()

    def line_answered(self, reply: _LineReply) -> None:
        self.pending -= 1
        self.answered(reply.raw, reply.captured)
