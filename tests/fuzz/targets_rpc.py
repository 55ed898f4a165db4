"""Fuzz targets: JSON-RPC messages (jsonrpc.classify / Peer.receive) and the MCP endpoint
(mcp.McpEndpoint over a dummy tool set).

The contract of the peer: classifying never raises; a message is a request, a
notification, a response or invalid by its keys; in strict mode an invalid message keeps
its id when the id is readable (and only then); a response to one of our calls runs its
callback exactly once and nothing else does. The endpoint's: every request (or invalid
message) gets exactly one response carrying its id, a notification none, a batch over
the bound one error; the message is finished exactly once, after its last response;
every response is a well-formed JSON-RPC response that encodes as one line; a 2026-07-28
request's result carries ``resultType`` and the server's identity.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from fuzz.gen import Deep, awkward_text, expand, json_values
from fuzz.harness import target
from fuzz.mutate import mutate_json
from hypothesis import strategies as st

from agentproto.core import jsonrpc, mcp, wire
from agentproto.core.jsonrpc import Invalid, Notification, Peer, Request, Response, RpcError


deep_values = st.sampled_from([400, 900, 990, 2000]).map(Deep)
ids = (
    st.integers(-5, 5)
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | awkward_text
    | st.none()
    | st.booleans()
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)
)
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "notifications/initialized",
    "notifications/cancelled",
    "server/discover",
    "resources/list",
]
TOOL_NAMES = ["echo", "later", "fail", "progress", "nope", ""]
anything = json_values | deep_values
#: A 2026-07-28 request's _meta: right, with members missing or mistyped, or any JSON.
modern_meta = st.fixed_dictionaries(
    {},
    optional={
        mcp.META_VERSION: st.sampled_from(["2026-07-28", "2025-11-25", "2099-01-01"]) | anything,
        mcp.META_CAPABILITIES: st.just({}) | anything,
        "progressToken": ids,
    },
)


@st.composite
def tool_call_params(draw: Any) -> Any:
    params: dict[str, Any] = {"name": draw(st.sampled_from(TOOL_NAMES) | anything)}
    if draw(st.booleans()):
        params["arguments"] = draw(st.dictionaries(st.text(max_size=3), json_values, max_size=2) | anything)
    if draw(st.booleans()):
        params["_meta"] = draw(st.fixed_dictionaries({"progressToken": ids}) | modern_meta | anything)
    return params


@st.composite
def message(draw: Any) -> Any:
    """A JSON-RPC message: well-formed, with members missing or mistyped, or any JSON."""
    if draw(st.integers(0, 9)) == 0:
        return draw(anything)
    msg: dict[str, Any] = {}
    if draw(st.integers(0, 5)):
        msg["jsonrpc"] = "2.0"
    elif draw(st.booleans()):
        msg["jsonrpc"] = draw(json_values)
    if draw(st.booleans()):
        msg["id"] = draw(ids)
    shape = draw(st.sampled_from(["call", "call", "call", "result", "error", "junk"]))
    if shape == "call":
        method = draw(st.sampled_from(METHODS) | anything)
        msg["method"] = method
        if method == "tools/call" and draw(st.integers(0, 3)):
            msg["params"] = draw(tool_call_params())
        elif method == "initialize" and draw(st.booleans()):
            msg["params"] = {"protocolVersion": draw(st.sampled_from([*mcp.VERSIONS, "1999-01-01"]) | anything)}
        elif draw(st.booleans()):
            msg["params"] = draw(st.fixed_dictionaries({"_meta": modern_meta}) | anything)
    elif shape == "result":
        msg["result"] = draw(anything)
    elif shape == "error":
        msg["error"] = draw(
            st.fixed_dictionaries({"code": json_values, "message": anything}, optional={"data": anything}) | anything
        )
    else:
        for key in draw(st.lists(st.sampled_from(["method", "result", "error", "params", "x"]), max_size=3)):
            msg[key] = draw(anything)
    return msg


def readable(value: Any) -> bool:
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


@target(
    "jsonrpc_messages",
    st.tuples(message(), st.booleans(), st.integers(0, 3)),
    examples=400,
    mutate=lambda v, rng: (mutate_json(v[0], rng, deep=True), v[1], v[2]),
)
def jsonrpc_messages(case: tuple[Any, bool, int]) -> None:
    """JSON-RPC: classification never raises and follows the keys; responses match once."""
    msg, strict, calls = expand(case[0]), case[1], case[2]
    peer = Peer(strict=strict)
    answered: Counter[int] = Counter()
    for n in range(calls):
        peer.request("m", None, lambda result, error, n=n: answered.update([n]))
    got = peer.receive(msg)
    assert isinstance(got, (Request, Notification, Response, Invalid))
    is_dict = isinstance(msg, dict)
    if isinstance(got, Request):
        assert is_dict and isinstance(msg.get("method"), str) and "id" in msg and readable(msg["id"])
        assert got.id is msg["id"]
    elif isinstance(got, Notification):
        assert is_dict and isinstance(msg.get("method"), str) and "id" not in msg
    elif isinstance(got, Response):
        assert is_dict and "method" not in msg and "id" in msg and ("result" in msg or "error" in msg)
        assert got.error is None or (isinstance(got.error.code, int) and isinstance(got.error.message, str))
        mine = msg["id"] if readable(msg["id"]) and not isinstance(msg["id"], str) else None
        assert got.matched == (mine is not None and mine in range(calls)), "matched the wrong call"
        assert sum(answered.values()) == (1 if got.matched else 0)
    else:
        assert got.error.code == jsonrpc.INVALID_REQUEST and not answered
        want = msg.get("id") if is_dict and readable(msg.get("id")) else None
        assert got.id is want, "an invalid message's id must be kept when (and only when) it is readable"
        if strict:
            line = wire.encode(peer.error(got.id, got.error))
            assert json.loads(line)["error"]["code"] == jsonrpc.INVALID_REQUEST
    if strict and isinstance(got, (Request, Notification)):
        assert msg.get("jsonrpc") == "2.0" and ("params" not in msg or isinstance(msg["params"], (dict, list)))
    peer.fail_pending(RpcError(jsonrpc.INTERNAL_ERROR, "gone"))
    assert sorted(answered) == list(range(calls)) and set(answered.values()) <= {1}, "a call answered twice or never"


# -- the MCP endpoint ----------------------------------------------------------------------


class Tools:
    """echo answers at once, later after the message, fail with an error, progress with
    a progress notification first."""

    def __init__(self) -> None:
        self.deferred: list[mcp.ToolCall] = []

    def tools(self) -> list[dict[str, Any]]:
        schema = {"type": "object"}
        return [{"name": n, "description": n, "inputSchema": schema} for n in ("echo", "later", "fail", "progress")]

    def call(self, call: mcp.ToolCall) -> None:
        if call.name == "later":
            self.deferred.append(call)
        elif call.name == "fail":
            call.fail(RpcError(jsonrpc.INVALID_PARAMS, "no"))
        else:
            if call.name == "progress":
                call.progress("working", total=2.0)
            call.result({"content": [{"type": "text", "text": json.dumps(call.arguments)[:50]}], "isError": False})


class Reply:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def batch(self) -> None:
        self.events.append(("batch", None))

    def respond(self, response: dict[str, Any]) -> None:
        self.events.append(("respond", response))

    def notify(self, notification: dict[str, Any]) -> None:
        self.events.append(("notify", notification))

    def finish(self) -> None:
        self.events.append(("finish", None))


@target(
    "mcp_messages",
    st.tuples(message() | st.lists(message(), max_size=6), st.sampled_from([3, 1000])),
    examples=300,
    mutate=lambda v, rng: (mutate_json(v[0], rng, deep=True), v[1]),
)
def mcp_messages(case: tuple[Any, int]) -> None:
    """MCP: exactly one response per request (none per notification), finished once."""
    msg, max_batch = expand(case[0]), case[1]
    tools = Tools()
    endpoint = mcp.McpEndpoint(tools, name="fuzz", version="0", max_batch=max_batch)
    reply = Reply()
    endpoint.receive(msg, reply)
    for call in tools.deferred:
        call.result({"content": [], "isError": False})
        call.result({"content": [], "isError": False})  # a second answer is ignored
    kinds = [kind for kind, _ in reply.events]
    assert kinds.count("finish") == 1 and kinds[-1] == "finish", kinds
    responses = [body for kind, body in reply.events if kind == "respond"]
    for response in responses:
        assert response.get("jsonrpc") == "2.0" and "id" in response
        assert ("result" in response) != ("error" in response), response
        if "error" in response:
            assert isinstance(response["error"]["code"], int) and isinstance(response["error"]["message"], str)
        assert readable(response["id"])
        try:
            json.loads(wire.encode(response))
        except RecursionError:
            pass  # a deep result echoed back: the frontend's encoder's business
    if isinstance(msg, list):
        if not msg or len(msg) > max_batch:
            assert kinds == ["respond", "finish"] and responses[0]["id"] is None
            return
        assert kinds[0] == "batch" and kinds.count("batch") == 1
        entries = msg
    else:
        assert "batch" not in kinds
        entries = [msg]
    want: list[str] = []
    for entry in entries:
        classified = jsonrpc.classify(entry, strict=True)
        if isinstance(classified, (Request, Invalid)):
            want.append(repr(classified.id))
    assert sorted(repr(r["id"]) for r in responses) == sorted(want), "not exactly one response per request"
    by_id = {repr(entry.get("id")): entry for entry in entries if isinstance(entry, dict)}
    for response in responses:
        entry = by_id.get(repr(response["id"]))
        if "result" in response and entry is not None and mcp.is_modern(entry):
            # A 2026-07-28 result always says what it is, and who answered.
            assert response["result"]["resultType"] == "complete" and mcp.META_SERVER_INFO in response["result"]["_meta"]
    for kind, body in reply.events:
        if kind == "notify":
            assert body["method"] == "notifications/progress" and body["params"]["progress"] >= 1
