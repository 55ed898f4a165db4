"""JSON-RPC 2.0 on stdio (``serve --transport jsonrpc``): one more framing of the ops.

Method ``request`` takes an ops request as ``params``; every op is also a method of its
own with its fields as ``params``. A session's events go out as ``event`` notifications
before the response; the response's ``result`` is the op's result object (``op``, ``ok``,
and the payload or ``error``), so a command refusal is a result with ``ok: false``.

Rules of this file:
- Messages are classified by ``jsonrpc.Peer`` (strict) and every error code comes from
  jsonrpc.py: -32700 a line that is not JSON (id null), -32600 a message that is not a
  request (with its id when the id can be read), -32601 an unknown method, -32602 params
  that do not make an ops request.
- Requests are answered in order (``stdio.Pipeline``); only ``cancel`` starts at once. A
  batch runs its entries one after another and is answered by one array without the
  notifications' entries (nothing at all when every entry was a notification).
- A notification runs (an ``open`` sets the default session) but is never answered.
"""

from __future__ import annotations

from typing import Any, Callable

from agentproto.core import jsonrpc
from agentproto.core.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    Invalid,
    Request,
    Response,
    RpcError,
)
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import encode
from agentproto.engine.session import EngineSession
from agentproto.frontends.ops_framing import OPERATIONS, OpsError, parse_request
from agentproto.frontends.ops_stdio import LineServer, ResultOut
from agentproto.loopio.lifetime import Job

if TYPE_CHECKING:
    from agentproto.core.mcp_types import RpcMessage

Respond = Callable[["RpcMessage | None"], None]
Write = Callable[[bytes, "EngineSession | None"], None]


def ops_object(method: str, params: Any) -> dict[str, Any]:
    """The ops request a JSON-RPC call stands for; ``OpsError`` (-32602) when params don't fit."""
    if method == "request":
        if not isinstance(params, dict):
            raise OpsError("`request` takes an ops request object as params")
        return params
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise OpsError(f"`{method}` takes its fields as a params object")
    return {**params, "op": method}


class _RpcOut(ResultOut):
    """The ops ``Out`` of one JSON-RPC call: events as notifications, then the response."""

    def __init__(self, peer: jsonrpc.Peer, rpc_id: Any, notification: bool, write: Write, respond: Respond) -> None:
        self.peer = peer
        self.rpc_id = rpc_id
        self.notification = notification
        self.write = write
        self.respond = respond

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None:
        if obj.get("kind") == "event" and not self.notification:  # the hot path: a turn's events
            self.write(encode(self.peer.notification("event", obj["event"])), session)
            return
        if self.keep(obj) or self.notification:
            if session is not None:
                session.delivered(1)
            return
        params = {k: v for k, v in obj.items() if k != "kind"}  # log, progress
        self.write(encode(self.peer.notification(str(obj.get("kind")), params)), session)

    def done(self, exit_code: int) -> None:
        if self.notification:
            self.respond(None)
        elif self.result is not None:
            self.respond(self.peer.result(self.rpc_id, self.result))
        else:
            self.respond(self.peer.error(self.rpc_id, RpcError(INVALID_PARAMS, self.error or "invalid params")))


class JsonRpcServer(LineServer):
    """The JSON-RPC frontend: requests answered in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peer = jsonrpc.Peer(strict=True)

    def request(self, raw: bytes, msg: Any) -> None:
        op = _op_of(msg)
        self.pipeline.submit(Job(lambda job: self._run(msg, job), raw, eager=op == "cancel", op=op))

    def refuse(self, raw: bytes, problem: str, too_long: bool) -> None:
        self.submit_lines(raw, encode(self.peer.error(None, RpcError(PARSE_ERROR, f"Parse error: {problem}"))))

    def _run(self, msg: Any, job: Job) -> None:
        def write(data: bytes, session: EngineSession | None = None) -> None:
            self.pipeline.write(job, data, None if session is None else session.delivered)

        if not isinstance(msg, list):
            def single(response: RpcMessage | None) -> None:
                if response is not None:
                    write(encode(response))
                self.pipeline.finish(job)

            self.call(msg, write, single)
            return
        entries = jsonrpc.batch_entries(msg)
        if isinstance(entries, Invalid):
            write(encode(self.peer.error(entries.id, entries.error)))
            self.pipeline.finish(job)
            return
        # Each answer is encoded as it comes; the array is only joined at the end.
        answers: list[bytes] = []

        def step(index: int) -> None:
            if index == len(entries):
                if answers:
                    write(b"[" + b",".join(answer.rstrip(b"\n") for answer in answers) + b"]\n")
                self.pipeline.finish(job)
                return

            def answered(response: RpcMessage | None) -> None:
                if response is not None:
                    answers.append(encode(response))
                self.loop.call_soon(lambda: step(index + 1))

            self.call(entries[index], write, answered)

        step(0)

    def call(self, msg: Any, write: Write, respond: Respond) -> None:
        """Answer one JSON-RPC message (``respond(None)`` for a notification)."""
        message = self.peer.receive(msg)
        if isinstance(message, Invalid):
            respond(self.peer.error(message.id, message.error))
            return
        if isinstance(message, Response):
            # This server makes no calls: a response answers nothing of ours.
            why = "Invalid Request: a response, but this server makes no calls"
            respond(self.peer.error(None, RpcError(INVALID_REQUEST, why)))
            return
        notification = not isinstance(message, Request)
        rpc_id = message.id if isinstance(message, Request) else None
        method, params = message.method, message.params
        if method != "request" and method not in OPERATIONS:
            error = RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            respond(None if notification else self.peer.error(rpc_id, error))
            return
        try:
            op, args = parse_request(ops_object(method, params), self.ctx.default)
        except OpsError as exc:
            error = RpcError(INVALID_PARAMS, f"Invalid params: {exc.message}")
            respond(None if notification else self.peer.error(rpc_id, error))
            return
        self.ctx.run_parsed(op, args, _RpcOut(self.peer, rpc_id, notification, write, respond))


def _op_of(msg: Any) -> str | None:
    """The op a single JSON-RPC request stands for (a batch counts as an `open`: never overtaken)."""
    if isinstance(msg, list):
        return "open"
    if not isinstance(msg, dict):
        return None
    method, params = msg.get("method"), msg.get("params")
    if method == "request" and isinstance(params, dict):
        op = params.get("op")
        return op if isinstance(op, str) else None
    return method if isinstance(method, str) else None
