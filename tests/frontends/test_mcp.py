"""`serve --transport mcp`: through the official MCP Python SDK (`mcp` on PyPI) over stdio,
and in raw JSON-RPC lines for what the SDK hides (version negotiation, server/discover): both
MCP eras, the 2026-07-28 one (stateless) and the initialize handshake."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from ops_support import ROOT, Proc, base_env, script

from agentproto.frontends.ops_framing import CHECKS, OPERATIONS
from agentproto.core.mcp import VERSIONS as MCP_VERSIONS
from agentproto.frontends.mcp_stdio import TOOL_OPS as MCP_TOOL_OPS

TOOLS = [f"agentproto_{op}" for op in MCP_TOOL_OPS]


def run_sdk(body: Any, *args: str) -> Any:
    """Run ``body(session)`` against a real server with a real MCP client; return its value."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentproto", "serve", "--transport", "mcp", *args],
            env=base_env(),
            cwd=str(ROOT),
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                with anyio.fail_after(60):
                    return await body(session)

    return anyio.run(main)


def test_sdk_lists_every_tool_with_its_op_request_schema():
    async def body(session: ClientSession) -> Any:
        return (await session.list_tools()).tools

    tools = run_sdk(body)
    assert [t.name for t in tools] == TOOLS
    # Every op an MCP host can use is a tool; only halt (which would stop the server under
    # its host) is not.
    assert sorted(op for op in OPERATIONS if op != "halt") == sorted(t.name.removeprefix("agentproto_") for t in tools)
    for tool in tools:
        op = tool.name.removeprefix("agentproto_")
        schema = tool.input_schema if hasattr(tool, "input_schema") else tool.inputSchema
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and "op" not in schema["properties"]
        required, optional = CHECKS[op]
        assert set(schema["properties"]) >= set(required) | (set(optional) - {"dir"})
        assert set(schema.get("required", [])) == set(required) - {"session"}
        assert tool.description


def test_sdk_generate_delegates_to_another_agent():
    async def body(session: ClientSession) -> Any:
        return await session.call_tool("agentproto_generate", {"agent": "mock", "dir": "/tmp", "prompt": "write a haiku"})

    result = run_sdk(body)
    assert result.is_error is False
    structured = result.structured_content
    assert structured == {"op": "generate", "ok": True, "text": "write a haiku"}
    assert json.loads(result.content[0].text) == structured


def test_sdk_session_tools_with_a_permission_request():
    async def body(session: ClientSession) -> Any:
        out = {}
        out["open"] = await session.call_tool("agentproto_open", {"agent": "mock", "dir": "/tmp"})
        out["prompt"] = await session.call_tool("agentproto_prompt", {"text": "run the tests"})
        out["answer"] = await session.call_tool(
            "agentproto_answer", {"request": "r1", "answer": {"Permission": "AllowOnce"}}
        )
        out["info"] = await session.call_tool("agentproto_info", {})
        out["close"] = await session.call_tool("agentproto_close", {})
        out["again"] = await session.call_tool("agentproto_info", {"session": "s1"})
        return out

    out = run_sdk(body, "--mock", script("turn"))
    assert out["open"].structured_content["session"]["id"] == "s1"
    assert out["prompt"].structured_content["waiting"]["Permission"]["id"] == "r1"
    assert out["answer"].structured_content["stop"] == {"Completed": {"source": "Protocol"}}
    assert out["info"].structured_content["session"]["status"] == "Idle"
    assert out["close"].structured_content == {"op": "close", "ok": True, "session_id": "s1"}
    again = out["again"]
    assert again.is_error is True and again.structured_content["error"]["kind"] == "SessionClosed"
    assert json.loads(again.content[0].text)["error"]["kind"] == "SessionClosed"


def test_sdk_refusals_are_tool_errors_and_protocol_errors_are_jsonrpc_errors():
    async def body(session: ClientSession) -> Any:
        out: dict[str, Any] = {}
        out["explain"] = await session.call_tool("agentproto_explain", {"code": "NoSuchKind"})
        out["capabilities"] = await session.call_tool("agentproto_capabilities", {})
        for name, args in [
            ("unknown", ("agentproto_frobnicate", {})),
            ("missing", ("agentproto_explain", {})),
            ("mistyped", ("agentproto_prompt", {"session": "s1", "text": 7})),
            ("halt", ("agentproto_halt", {})),
        ]:
            try:
                await session.call_tool(*args)
                out[name] = None
            except Exception as exc:  # the SDK raises its MCPError for JSON-RPC errors
                out[name] = exc
        return out

    out = run_sdk(body)
    assert out["explain"].is_error is True
    assert out["explain"].structured_content["error"]["kind"] == "InvalidRequest"
    assert out["capabilities"].structured_content["contract"] == "agentproto/1"
    for name in ("unknown", "missing", "mistyped", "halt"):
        assert out[name] is not None and getattr(out[name], "code", None) == -32602, (name, out[name])
    assert "missing required `code`" in str(out["missing"])


# -- raw lines ------------------------------------------------------------------------------


@pytest.fixture
def raw():
    p = Proc(["serve", "--transport", "mcp"])
    yield p
    p.stop()


def call(p: Proc, method: str, params: Any = None, rpc_id: Any = 1) -> Any:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        msg["params"] = params
    p.send(msg)
    return p.line()


@pytest.mark.parametrize("version", MCP_VERSIONS)
def test_initialize_echoes_a_supported_version(raw, version):
    response = call(raw, "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    result = response["result"]
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "agentproto" and "tools" in result["capabilities"]


def test_initialize_offers_the_newest_when_the_clients_is_unknown(raw):
    response = call(raw, "initialize", {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    assert response["result"]["protocolVersion"] == "2025-11-25"


# -- MCP 2026-07-28 (stateless) beside the handshake ---------------------------------------

MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def modern(params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {**(params or {}), "_meta": {**MODERN_META, **meta}}


@pytest.mark.parametrize("mode, era", [("auto", "2026-07-28"), ("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")])
def test_sdk_client_of_either_era(mode, era):
    from mcp import Client

    async def main() -> Any:
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "agentproto", "serve", "--transport", "mcp"], env=base_env(), cwd=str(ROOT)
        )
        async with Client(server, mode=mode) as client:  # auto: server/discover, answered
            with anyio.fail_after(60):
                listed = await client.list_tools()
                result = await client.call_tool("agentproto_generate", {"agent": "mock", "dir": "/tmp", "prompt": "two eras"})
                return client.protocol_version, listed, result

    version, listed, result = anyio.run(main)
    assert version == era
    assert [t.name for t in listed.tools] == TOOLS
    assert result.is_error is False and result.structured_content == {"op": "generate", "ok": True, "text": "two eras"}


def test_server_discover_answers_with_no_handshake(raw):
    response = call(raw, "server/discover", modern(), rpc_id=7)
    result = response["result"]
    assert response["id"] == 7 and result["supportedVersions"] == ["2026-07-28", *reversed(MCP_VERSIONS)]
    assert result["resultType"] == "complete" and result["cacheScope"] == "public" and result["instructions"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agentproto"
    listed = call(raw, "tools/list", modern(), rpc_id="l")["result"]
    assert [t["name"] for t in listed["tools"]] == TOOLS and listed["ttlMs"] > 0 and listed["resultType"] == "complete"
    called = call(raw, "tools/call", modern({"name": "agentproto_capabilities"}), rpc_id=8)["result"]
    assert called["isError"] is False and called["resultType"] == "complete"
    # ...and the handshake on the same stdin still works, before and after.
    init = call(raw, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}, rpc_id=9)
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert call(raw, "ping", rpc_id=10) == {"jsonrpc": "2.0", "id": 10, "result": {}}
    assert call(raw, "tools/list", modern(), rpc_id=11)["result"]["resultType"] == "complete"


@pytest.mark.parametrize(
    "method, params, code",
    [
        ("server/discover", {}, -32602),
        ("server/discover", {"_meta": "2026-07-28"}, -32602),
        ("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}, -32602),
        ("tools/list", modern(**{"io.modelcontextprotocol/protocolVersion": ["2026-07-28"]}), -32602),
        ("tools/call", modern({"name": "agentproto_capabilities"}, **{"io.modelcontextprotocol/clientCapabilities": "all"}), -32602),
        ("tools/list", modern(**{"io.modelcontextprotocol/protocolVersion": "2099-01-01"}), -32022),
        ("initialize", modern({"protocolVersion": "2026-07-28", "capabilities": {}}), -32601),
        ("ping", modern(), -32601),
    ],
)
def test_2026_07_28_refusals_keep_the_id(raw, method, params, code):
    response = call(raw, method, params, rpc_id="req-42")
    assert response["id"] == "req-42" and response["error"]["code"] == code, response
    if code == -32022:
        assert response["error"]["data"] == {"supported": ["2026-07-28", *reversed(MCP_VERSIONS)], "requested": "2099-01-01"}
    if method == "initialize":
        assert "server/discover" in response["error"]["message"]
        # It started nothing: a handshake initialize after it is answered as ever.
        assert call(raw, "initialize", {"protocolVersion": "2025-11-25"}, rpc_id=2)["result"]["protocolVersion"] == "2025-11-25"


def test_notifications_get_no_answer_and_framing_errors_follow_jsonrpc(raw):
    raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    raw.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    raw.write(b"{oops\n")
    assert raw.line()["error"]["code"] == -32700
    raw.send({"jsonrpc": "1.0", "id": 3, "method": "ping"})  # the id can be read: it is kept
    assert raw.line() == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32600, "message": 'Invalid Request: `jsonrpc` must be "2.0"'}}
    raw.send({"jsonrpc": "2.0", "id": [3], "method": "ping"})
    assert raw.line()["id"] is None
    assert call(raw, "resources/list", {}, rpc_id=4)["error"]["code"] == -32601
    response = call(raw, "tools/call", {"name": "agentproto_capabilities"}, rpc_id=5)
    assert response["result"]["isError"] is False


def test_progress_notifications_when_the_client_asks(raw):
    params = {
        "name": "agentproto_generate",
        "arguments": {"agent": "mock", "dir": "/tmp", "prompt": "tick tock"},
        "_meta": {"progressToken": "tok"},
    }
    raw.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    progress = []
    while True:
        line = raw.line()
        if line.get("method") == "notifications/progress":
            progress.append(line["params"])
            continue
        break
    assert line["result"]["structuredContent"]["text"] == "tick tock"
    assert progress and all(p["progressToken"] == "tok" for p in progress)
    assert [p["progress"] for p in progress] == list(range(1, len(progress) + 1))


def test_tool_calls_run_concurrently_so_ping_and_cancel_get_through(tmp_path):
    from ops_support import SLOW_TURN, write_script

    p = Proc(["serve", "--transport", "mcp", "--mock", write_script(tmp_path, "slow", [SLOW_TURN])])
    try:
        assert "result" in call(p, "tools/call", {"name": "agentproto_open", "arguments": {"agent": "mock", "dir": "/tmp"}}, rpc_id=1)
        p.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "agentproto_prompt", "arguments": {"text": "slow"}}})
        assert call(p, "ping", rpc_id=3) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        p.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "agentproto_cancel", "arguments": {}}})
        answers = {line["id"]: line for line in (p.line(), p.line())}
        assert answers[4]["result"]["structuredContent"] == {"op": "cancel", "ok": True, "session_id": "s1"}
        assert answers[2]["result"]["structuredContent"]["stop"] == "Cancelled"
    finally:
        p.stop()


def test_a_batch_is_answered_by_one_array_line(raw):
    raw.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "agentproto_capabilities"}},
        ]
    )
    batch = raw.line()
    assert isinstance(batch, list) and sorted(r["id"] for r in batch) == [1, 2]
    assert call(raw, "ping", rpc_id=3)["id"] == 3  # nothing else was written for the batch
    raw.send([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
    assert call(raw, "ping", rpc_id=4)["id"] == 4  # an all-notification batch gets nothing


def test_ids_no_answer_could_carry_back_are_unreadable(raw):
    """NaN, Infinity and 1e400 (inf once read) are no JSON ids: an Invalid Request with id
    null, never a result that answers nobody; a fractional or huge id is kept exactly."""
    for text in ("NaN", "-Infinity", "1e400"):
        raw.write(b'{"jsonrpc": "2.0", "id": %s, "method": "ping"}\n' % text.encode())
        response = raw.line()
        assert response["id"] is None and response["error"]["code"] == -32600, (text, response)
    assert call(raw, "ping", rpc_id=2.5)["id"] == 2.5
    assert call(raw, "ping", rpc_id=10**30)["id"] == 10**30


@pytest.mark.parametrize("version", MCP_VERSIONS)
def test_a_batch_after_initialize_at_2025_06_18_or_later_is_one_error(raw, version):
    """MCP 2025-06-18 removed JSON-RPC batching: once a session settled on it (or later), a
    batch is one Invalid Request (id null) and none of its entries runs; earlier versions
    still get one array."""
    call(raw, "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    raw.send([{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "agentproto_open", "arguments": {"agent": "mock", "dir": "/tmp"}}},
              {"jsonrpc": "2.0", "id": 2, "method": "ping"}])  # fmt: skip
    answer = raw.line()
    if version < "2025-06-18":
        assert isinstance(answer, list) and sorted(r["id"] for r in answer) == [1, 2]
        return
    assert answer == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message":
                      f"Invalid Request: MCP {version} has no batches; send one message at a time"}}  # fmt: skip
    viewed = call(raw, "tools/call", {"name": "agentproto_inspect", "arguments": {}}, rpc_id=3)
    assert viewed["id"] == 3 and viewed["result"]["structuredContent"]["agents"] == [], viewed  # nothing opened
