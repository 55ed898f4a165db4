"""JSON-RPC 2.0, sans-IO: the one peer behind every JSON-RPC user.

Codex's app-server client, the ACP client, the JSON-RPC frontend and MCP (on stdio and on
the loopback listener) all speak through ``Peer``. It never touches a descriptor: decoded
messages go in through ``receive``, and every method that makes a message returns it as a
dict for the caller to encode and write.

Rules of this file:
- Both sides of a conversation number their own calls, so an incoming message is
  classified by its keys, never by its id: ``method`` with ``id`` is a request, ``method``
  alone a notification, ``id`` with ``result`` or ``error`` a response to one of ours.
- A response is matched to its call by id and handed to that call's callback exactly
  once; ``fail_pending`` answers every call still waiting (the peer went away), so no
  caller waits forever.
- ``strict`` peers (our servers) hold the other side to the specification: ``"jsonrpc":
  "2.0"``, a string method, params an object or an array, an id that is a string, a
  finite number or null (NaN, Infinity or 1e400 is an unreadable id). Lenient peers
  (Codex omits ``"jsonrpc"``) classify by keys alone.
- A message that cannot be classified is ``Invalid``, carrying the id when it can be read
  (the specification answers an unreadable id with ``null``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Union

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from agentproto.core.mcp_types import RpcErrorBody, RpcMessage

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

#: Upper bound on the entries of one batch a server takes: a batch is answered entry by
#: entry, but a million-entry array must not become a million pending answers.
MAX_BATCH = 1000


class RpcError(Exception):
    """An error object: ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def body(self) -> RpcErrorBody:
        body: RpcErrorBody = {"code": self.code, "message": self.message}
        if self.data is not None:
            body["data"] = self.data
        return body

    @classmethod
    def from_body(cls, body: Any) -> "RpcError":
        """The error member of a response, whatever shape the other side gave it."""
        if isinstance(body, dict):
            code = body.get("code")
            message = body.get("message")
            return cls(
                code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
                message if isinstance(message, str) else _text(message),
                body.get("data"),
            )
        return cls(INTERNAL_ERROR, _text(body))

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r})"


def _text(value: Any) -> str:
    """A non-string message as text. A value nested close to the decoder's limit is still
    valid JSON, but str() recurses further than decoding did: it must not raise."""
    try:
        return str(value)
    except RecursionError:
        return f"(an error message that is a {type(value).__name__} nested too deeply to show)"


class _Message:
    """What the kinds of message below share: their members are slots, and their repr shows
    each of them but ``params`` and ``result`` (which may be large)."""

    __slots__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        shown = (f"{name}={getattr(self, name)!r}" for name in self.__slots__ if name not in ("params", "result"))
        return f"{type(self).__name__}({', '.join(shown)})"


class Request(_Message):
    """A call from the other side; answer it with ``Peer.result`` or ``Peer.error``."""

    __slots__ = ("id", "method", "params")

    def __init__(self, rpc_id: Any, method: str, params: Any) -> None:
        self.id = rpc_id
        self.method = method
        self.params = params


class Notification(_Message):
    __slots__ = ("method", "params")

    def __init__(self, method: str, params: Any) -> None:
        self.method = method
        self.params = params


class Response(_Message):
    """The other side's answer to one of our calls (``matched`` when it was ours)."""

    __slots__ = ("id", "result", "error", "matched")

    def __init__(self, rpc_id: Any, result: Any, error: RpcError | None, matched: bool) -> None:
        self.id = rpc_id
        self.result = result
        self.error = error
        self.matched = matched


class Invalid(_Message):
    """A message that is not JSON-RPC; ``id`` is the request's id when it could be read."""

    __slots__ = ("id", "error")

    def __init__(self, rpc_id: Any, error: RpcError) -> None:
        self.id = rpc_id
        self.error = error


Message = Union[Request, Notification, Response, Invalid]
OnResponse = Callable[[Any, "RpcError | None"], None]


def _valid_id(value: Any) -> bool:
    # NaN and Infinity (Python's json reads them, and 1e400 overflows to inf) are no JSON:
    # an answer could not carry them back, so such an id is unreadable.
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or (isinstance(value, (str, int)) and not isinstance(value, bool))


def classify(msg: Any, strict: bool = False) -> Message:
    """What one decoded message is. Never raises."""
    if not isinstance(msg, dict):
        return Invalid(None, RpcError(INVALID_REQUEST, "Invalid Request: a message is a JSON object"))
    rpc_id = msg.get("id")
    readable_id = rpc_id if _valid_id(rpc_id) else None
    if strict and msg.get("jsonrpc") != "2.0":
        return Invalid(readable_id, RpcError(INVALID_REQUEST, 'Invalid Request: `jsonrpc` must be "2.0"'))
    if "method" in msg:
        method = msg["method"]
        if not isinstance(method, str):
            return Invalid(readable_id, RpcError(INVALID_REQUEST, "Invalid Request: `method` must be a string"))
        params = msg.get("params")
        if strict and "params" in msg and not isinstance(params, (dict, list)):
            why = "Invalid Request: `params` must be an object or an array"
            return Invalid(readable_id, RpcError(INVALID_REQUEST, why))
        if "id" not in msg:
            return Notification(method, params)
        if not _valid_id(rpc_id):
            return Invalid(None, RpcError(INVALID_REQUEST, "Invalid Request: `id` must be a string, a number or null"))
        return Request(rpc_id, method, params)
    if "id" in msg and ("result" in msg or "error" in msg):
        error = RpcError.from_body(msg["error"]) if msg.get("error") is not None else None
        return Response(rpc_id, msg.get("result"), error, False)
    why = "Invalid Request: neither a request, a notification nor a response"
    return Invalid(readable_id, RpcError(INVALID_REQUEST, why))


def batch_entries(msg: list[Any], limit: int = MAX_BATCH) -> list[Any] | Invalid:
    """The entries of a batch a server will answer, or why it will not."""
    if not msg:
        return Invalid(None, RpcError(INVALID_REQUEST, "Invalid Request: an empty batch"))
    if len(msg) > limit:
        return Invalid(None, RpcError(INVALID_REQUEST, f"Invalid Request: a batch of more than {limit} entries"))
    return msg


class Peer:
    """One side of a JSON-RPC conversation.

    ``version_member`` puts ``"jsonrpc": "2.0"`` on every message we make (Codex's
    app-server leaves it out, and so do we towards it).
    """

    def __init__(self, *, version_member: bool = True, strict: bool = False) -> None:
        self.version_member = version_member
        self.strict = strict
        self._next_id = 0
        self._pending: dict[Any, OnResponse] = {}

    def _message(self, **members: Any) -> RpcMessage:
        if self.version_member:
            return {"jsonrpc": "2.0", **members}  # type: ignore[typeddict-item]  # (members: RpcMessage's)
        return members  # type: ignore[return-value]

    @property
    def pending(self) -> int:
        """How many of our calls wait for their response."""
        return len(self._pending)

    # -- what we send -------------------------------------------------------------------

    def request(self, method: str, params: Any, on_response: OnResponse) -> RpcMessage:
        """A call; ``on_response(result, error)`` runs once its response arrives."""
        rpc_id = self._next_id
        self._next_id += 1
        self._pending[rpc_id] = on_response
        if params is None:
            return self._message(id=rpc_id, method=method)
        return self._message(id=rpc_id, method=method, params=params)

    @property
    def last_id(self) -> int:
        """The id of the most recent call made (to cancel or correlate it)."""
        return self._next_id - 1

    def notification(self, method: str, params: Any = None) -> RpcMessage:
        if params is None:
            return self._message(method=method)
        return self._message(method=method, params=params)

    def result(self, rpc_id: Any, result: Any) -> RpcMessage:
        return self._message(id=rpc_id, result=result)

    def error(self, rpc_id: Any, error: RpcError) -> RpcMessage:
        return self._message(id=rpc_id, error=error.body())

    def forget(self, rpc_id: Any) -> bool:
        """Stop waiting for a call's response (its callback will not run)."""
        return self._pending.pop(rpc_id, None) is not None

    # -- what we receive ----------------------------------------------------------------

    def receive(self, msg: Any) -> Message:
        """Classify one decoded message; a response to one of our calls runs its callback."""
        message = classify(msg, self.strict)
        if isinstance(message, Response):
            key = message.id
            on_response = self._pending.pop(key, None) if _hashable(key) else None
            if on_response is not None:
                message.matched = True
                on_response(message.result, message.error)
        return message

    def fail_pending(self, error: RpcError) -> None:
        """Answer every call still waiting with ``error`` (the other side is gone)."""
        pending, self._pending = self._pending, {}
        for on_response in pending.values():
            on_response(None, error)


def _hashable(value: Any) -> bool:
    # true == 1 in Python, but not in JSON: a boolean id matches none of our calls.
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))
