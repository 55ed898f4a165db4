"""agentproto/core/mcp.py: the sans-IO MCP endpoint over a tool set of the test's own, with
deferred answers (a tool call answered only when the test says so), as the loopback
listener's tools will be."""

from __future__ import annotations

from typing import Any

import pytest

from agentproto.core import jsonrpc
from agentproto.core.jsonrpc import RpcError
from agentproto.core import mcp, mcp_headers
from agentproto.core.mcp import VERSIONS, McpEndpoint, ToolCall


class Tools:
    """Two tools: ``echo`` answers at once, ``later`` waits in ``self.waiting``."""

    def __init__(self) -> None:
        self.waiting: list[ToolCall] = []

    def tools(self) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return [
            {"name": "echo", "description": "echo the text", "inputSchema": schema},
            {"name": "later", "description": "answer when told", "inputSchema": schema},
        ]

    def call(self, call: ToolCall) -> None:
        if call.name == "echo":
            call.progress("echoing")
            call.result({"content": [{"type": "text", "text": call.arguments.get("text", "")}], "isError": False})
        else:
            self.waiting.append(call)


class Reply:
    def __init__(self) -> None:
        self.lines: list[Any] = []
        self.in_batch = False
        self.finished = 0

    def batch(self) -> None:
        assert not self.lines, "batch() comes before any answer"
        self.in_batch = True

    def respond(self, response: dict[str, Any]) -> None:
        assert not self.finished
        self.lines.append(("response", response))

    def notify(self, notification: dict[str, Any]) -> None:
        assert not self.finished
        self.lines.append(("notify", notification))

    def finish(self) -> None:
        self.finished += 1

    @property
    def responses(self) -> list[dict[str, Any]]:
        return [body for what, body in self.lines if what == "response"]


def request(rpc_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


@pytest.fixture
def endpoint() -> McpEndpoint:
    return McpEndpoint(Tools(), name="test", version="1.2.3", instructions="use echo")


def ask(endpoint: McpEndpoint, msg: Any) -> Reply:
    reply = Reply()
    endpoint.receive(msg, reply)
    return reply


@pytest.mark.parametrize("version", VERSIONS)
def test_initialize_answers_a_supported_version(endpoint, version):
    reply = ask(endpoint, request(1, "initialize", {"protocolVersion": version, "capabilities": {}}))
    assert reply.finished == 1
    result = reply.responses[0]["result"]
    assert result["protocolVersion"] == version == endpoint.protocol_version
    assert result["serverInfo"] == {"name": "test", "title": "test", "version": "1.2.3"}
    assert result["instructions"] == "use echo" and result["capabilities"] == {"tools": {"listChanged": False}}


@pytest.mark.parametrize("params", [{"protocolVersion": "1999-01-01"}, {}, None, {"protocolVersion": 5}])
def test_initialize_offers_the_newest_for_anything_else(endpoint, params):
    reply = ask(endpoint, request(1, "initialize", params))
    assert reply.responses[0]["result"]["protocolVersion"] == VERSIONS[-1] == "2025-11-25"


def test_ping_list_and_unknown_methods(endpoint):
    assert ask(endpoint, request("p", "ping")).responses == [{"jsonrpc": "2.0", "id": "p", "result": {}}]
    tools = ask(endpoint, request(2, "tools/list")).responses[0]["result"]["tools"]
    assert [tool["name"] for tool in tools] == ["echo", "later"]
    for method in ("resources/list", "prompts/get"):
        response = ask(endpoint, request(3, method)).responses[0]
        assert response == {"jsonrpc": "2.0", "id": 3, "error": {"code": jsonrpc.METHOD_NOT_FOUND, "message": f"Method not found: {method}"}}


def test_notifications_and_responses_are_never_answered(endpoint):
    for msg in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo"}},
        {"jsonrpc": "2.0", "id": 5, "result": {}},
    ):
        reply = ask(endpoint, msg)
        assert reply.lines == [] and reply.finished == 1


def test_invalid_messages_keep_a_readable_id(endpoint):
    assert ask(endpoint, {"jsonrpc": "1.0", "id": 4, "method": "ping"}).responses[0]["id"] == 4
    assert ask(endpoint, {"id": 4, "method": 5}).responses[0]["id"] == 4
    for msg in ({"jsonrpc": "2.0", "id": True, "method": "ping"}, 7, "ping"):
        response = ask(endpoint, msg).responses[0]
        assert response["id"] is None and response["error"]["code"] == jsonrpc.INVALID_REQUEST


def test_tools_call_checks_its_params(endpoint):
    cases = [
        (None, "Invalid params: tools/call takes {name, arguments}"),
        ({"arguments": {}}, "Invalid params: tools/call takes {name, arguments}"),
        ({"name": "nope"}, "Unknown tool: nope"),
        ({"name": "echo", "arguments": [1]}, "Invalid params: `arguments` must be an object"),
    ]
    for params, message in cases:
        response = ask(endpoint, request(9, "tools/call", params)).responses[0]
        assert response["error"] == {"code": jsonrpc.INVALID_PARAMS, "message": message}


def test_a_call_answered_at_once_with_progress_only_when_asked(endpoint):
    reply = ask(endpoint, request(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert [what for what, _ in reply.lines] == ["response"]
    assert reply.responses[0]["result"]["content"][0]["text"] == "hi"
    reply = ask(endpoint, request(2, "tools/call", {"name": "echo", "_meta": {"progressToken": "t"}}))
    assert reply.lines[0] == (
        "notify",
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1, "message": "echoing"}},
    )
    assert reply.lines[1][0] == "response" and reply.finished == 1


def test_a_deferred_call_is_answered_when_the_tool_set_answers(endpoint):
    tools: Tools = endpoint.tool_set  # type: ignore[assignment]
    reply = ask(endpoint, request(1, "tools/call", {"name": "later", "_meta": {"progressToken": 0}}))
    assert reply.lines == [] and reply.finished == 0  # still open: the app has not answered
    assert ask(endpoint, request(2, "ping")).responses[0]["id"] == 2  # and nothing waits for it
    call = tools.waiting.pop()
    call.progress("one")
    call.progress("two", total=2)
    call.result({"content": [], "isError": False})
    call.result({"content": [], "isError": True})  # a second answer is dropped
    call.progress("late")  # and so is progress after the answer
    assert [body["params"]["progress"] for what, body in reply.lines if what == "notify"] == [1, 2]
    assert reply.lines[1][1]["params"]["total"] == 2
    assert reply.responses == [{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": False}}]
    assert reply.finished == 1


def test_a_deferred_call_can_fail_with_a_protocol_error(endpoint):
    tools: Tools = endpoint.tool_set  # type: ignore[assignment]
    reply = ask(endpoint, request(1, "tools/call", {"name": "later"}))
    tools.waiting.pop().fail(RpcError(jsonrpc.INVALID_PARAMS, "bad text"))
    assert reply.responses == [{"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad text"}}]


def test_a_batch_streams_each_answer_as_it_comes(endpoint):
    tools: Tools = endpoint.tool_set  # type: ignore[assignment]
    reply = ask(
        endpoint,
        [
            request(1, "tools/call", {"name": "later"}),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            request(2, "ping"),
            {"jsonrpc": "1.0", "id": 3, "method": "ping"},
            request(4, "tools/call", {"name": "later"}),
        ],
    )
    assert reply.in_batch
    assert [r["id"] for r in reply.responses] == [2, 3] and reply.finished == 0
    second, first = tools.waiting.pop(), tools.waiting.pop()
    second.result({"content": [], "isError": False})
    assert [r["id"] for r in reply.responses] == [2, 3, 4] and reply.finished == 0
    first.result({"content": [], "isError": False})
    assert [r["id"] for r in reply.responses] == [2, 3, 4, 1] and reply.finished == 1


def test_a_batch_of_notifications_finishes_with_no_answer(endpoint):
    reply = ask(endpoint, [{"jsonrpc": "2.0", "method": "notifications/initialized"}] * 3)
    assert reply.in_batch and reply.lines == [] and reply.finished == 1


def test_empty_and_oversized_batches_are_one_error(endpoint):
    small = McpEndpoint(Tools(), name="t", version="0", max_batch=3)
    for target, msg in ((endpoint, []), (small, [request(i, "ping") for i in range(4)])):
        reply = ask(target, msg)
        assert not reply.in_batch and reply.finished == 1
        assert len(reply.responses) == 1
        assert reply.responses[0]["id"] is None and reply.responses[0]["error"]["code"] == jsonrpc.INVALID_REQUEST
    reply = ask(small, [request(i, "ping") for i in range(3)])
    assert [r["id"] for r in reply.responses] == [0, 1, 2]


def test_two_endpoints_are_two_conversations():
    a, b = McpEndpoint(Tools(), name="a", version="1"), McpEndpoint(Tools(), name="b", version="1")
    ask(a, request(1, "initialize", {"protocolVersion": VERSIONS[0]}))
    ask(b, request(1, "initialize", {"protocolVersion": VERSIONS[2]}))
    assert (a.protocol_version, b.protocol_version) == (VERSIONS[0], VERSIONS[2])


def test_no_batches_once_a_version_without_them_is_settled():
    """MCP 2025-06-18 removed batching: a batch is then one Invalid Request, none of it runs."""
    for version in VERSIONS:
        endpoint = McpEndpoint(Tools(), name="t", version="0")
        ask(endpoint, request(0, "initialize", {"protocolVersion": version}))
        reply = ask(endpoint, [request(1, "tools/call", {"name": "later"}), request(2, "ping")])
        tools: Tools = endpoint.tool_set  # type: ignore[assignment]
        if version < "2025-06-18":
            assert reply.in_batch and [r["id"] for r in reply.responses] == [2] and len(tools.waiting) == 1
            continue
        assert not reply.in_batch and reply.finished == 1 and not tools.waiting
        assert [(r["id"], r["error"]["code"]) for r in reply.responses] == [(None, jsonrpc.INVALID_REQUEST)]


# -- MCP 2026-07-28: stateless, beside the handshake ----------------------------------------

MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
SERVER_INFO = {"io.modelcontextprotocol/serverInfo": {"name": "test", "title": "test", "version": "1.2.3"}}


def modern(rpc_id: Any, method: str, params: Any = None, **meta: Any) -> dict[str, Any]:
    return request(rpc_id, method, {**(params or {}), "_meta": {**MODERN_META, **meta}})


def test_server_discover_names_both_eras_with_no_handshake(endpoint):
    result = ask(endpoint, modern("d", "server/discover")).responses[0]["result"]
    assert result == {
        "supportedVersions": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"],
        "capabilities": {"tools": {}},
        "instructions": "use echo",
        "ttlMs": mcp.TTL_MS,
        "cacheScope": "private",
        "resultType": "complete",
        "_meta": SERVER_INFO,
    }
    assert endpoint.protocol_version is None  # nothing negotiated: the next request stands alone


def test_modern_results_carry_result_type_server_info_and_cache_hints(endpoint):
    listed = ask(endpoint, modern(1, "tools/list")).responses[0]["result"]
    assert [t["name"] for t in listed["tools"]] == ["echo", "later"]
    assert (listed["resultType"], listed["ttlMs"], listed["cacheScope"], listed["_meta"]) == ("complete", mcp.TTL_MS, "private", SERVER_INFO)
    reply = ask(endpoint, modern(2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, progressToken="t"))
    assert reply.lines[0][1]["method"] == "notifications/progress"  # progress still rides the request
    assert reply.responses[0] == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"content": [{"type": "text", "text": "hi"}], "isError": False, "resultType": "complete", "_meta": SERVER_INFO},
    }
    # A deferred call answers statelessly too, when the tool set does.
    waiting = ask(endpoint, modern(3, "tools/call", {"name": "later"}))
    endpoint.tool_set.waiting.pop().result({"content": [], "isError": True})
    assert waiting.responses[0]["result"] == {"content": [], "isError": True, "resultType": "complete", "_meta": SERVER_INFO}
    # The handshake era, beside it, is as it was: no resultType.
    assert "resultType" not in ask(endpoint, request(4, "tools/list")).responses[0]["result"]


@pytest.mark.parametrize(
    "params, code, words",
    [
        ({}, -32602, "carry `_meta`"),
        ({"_meta": "2026-07-28"}, -32602, "carry `_meta`"),
        ({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}, -32602, "clientCapabilities"),
        ({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}, -32602, "protocolVersion"),
        ({"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": 2026}}, -32602, "must be a string"),
        ({"_meta": {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": []}}, -32602, "must be an object"),
        ({"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}, -32022, "Unsupported protocol version"),
        ({"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}}, -32022, "Unsupported protocol version"),
    ],
)
def test_a_missing_or_invalid_meta_is_refused_keeping_the_id(endpoint, params, code, words):
    for method in ("server/discover", "tools/list", "tools/call"):
        meta = params.get("_meta")
        if method != "server/discover" and not (isinstance(meta, dict) and mcp.META_VERSION in meta):
            continue  # without the 2026-07-28 version in _meta, those are the handshake era's
        response = ask(endpoint, request("x-7", method, params)).responses[0]
        assert response["id"] == "x-7" and response["error"]["code"] == code and words in response["error"]["message"], response
        if code == -32022:
            requested = params["_meta"]["io.modelcontextprotocol/protocolVersion"]
            assert response["error"]["data"] == {"supported": list(mcp.SUPPORTED), "requested": requested}


def test_initialize_and_ping_do_not_exist_in_2026_07_28(endpoint):
    refused = ask(endpoint, modern(5, "initialize", {"protocolVersion": "2026-07-28", "capabilities": {}})).responses[0]
    assert refused["id"] == 5 and refused["error"]["code"] == -32601 and "server/discover" in refused["error"]["message"]
    assert endpoint.protocol_version is None
    assert ask(endpoint, modern(6, "ping")).responses[0]["error"]["code"] == -32601
    # The same endpoint still serves a handshake client, and then a 2026-07-28 request alike.
    assert ask(endpoint, request(7, "initialize", {"protocolVersion": "2025-06-18"})).responses[0]["result"]["protocolVersion"] == "2025-06-18"
    assert ask(endpoint, modern(8, "tools/list")).responses[0]["result"]["resultType"] == "complete"


def test_a_2026_request_in_a_batch_is_refused_alone(endpoint):
    reply = ask(endpoint, [modern(1, "tools/list"), request(2, "ping")])
    first, second = reply.responses
    assert first["id"] == 1 and first["error"]["code"] == jsonrpc.INVALID_REQUEST and "no batches" in first["error"]["message"]
    assert second == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_http_headers_must_match_the_body():
    msg = modern(1, "tools/call", {"name": "café"})
    headers = {k.lower(): v for k, v in mcp_headers.request_headers(msg).items()}
    assert headers == {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "=?base64?Y2Fmw6k=?="}
    assert mcp_headers.header_problem(msg, headers) is None
    for name, value in (("mcp-protocol-version", "2025-11-25"), ("mcp-method", "tools/list"), ("mcp-name", "cafe"), ("mcp-name", "=?base64?!!?=")):
        problem = mcp_headers.header_problem(msg, {**headers, name: value})
        assert problem is not None and problem.code == mcp.HEADER_MISMATCH, name
    for name in headers:
        problem = mcp_headers.header_problem(msg, {k: v for k, v in headers.items() if k != name})
        assert problem is not None and problem.code == mcp.HEADER_MISMATCH and "no " in problem.message, name
    listing = modern(2, "tools/list")
    assert mcp_headers.header_problem(listing, {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}) is None
    assert mcp_headers.request_headers(request(3, "tools/list")) == {}  # a handshake request: its session's headers
    assert [mcp_headers.http_status({"code": c}) for c in (-32602, -32020, -32022, -32601, -32603)] == [400, 400, 400, 404, 200]
    assert mcp_headers.http_status(None) == 200
