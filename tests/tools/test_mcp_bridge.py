"""``python -m agentproto mcp-bridge``: stdio MCP relayed to a session's tools_url, driven by
the official MCP SDK's stdio client, and its lifetime (it exits when either side closes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from listener_support import LOOKUP, ROUTED, InThread, opened_request, text_result
from mcp import Client, StdioServerParameters
from sidecar import ROOT, Sidecar, base_env, script


@pytest.fixture
def car() -> Any:
    sidecar = Sidecar(["--mock", script("tools")], reference=False)
    yield sidecar
    sidecar.close()


def _bridge(url: str | None, *args: str) -> subprocess.Popen[bytes]:
    env = base_env({"AGENTPROTO_TOOLS_URL": url} if url else None)
    return subprocess.Popen(
        [sys.executable, "-m", "agentproto", "mcp-bridge", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(ROOT),
    )


@pytest.mark.parametrize("mode, era", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_the_sdk_stdio_client_calls_the_apps_tool_through_the_bridge(car: Sidecar, mode: str, era: str) -> None:
    info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]})
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "agentproto", "mcp-bridge"], env=base_env({"AGENTPROTO_TOOLS_URL": info["tools_url"]}), cwd=str(ROOT)
    )

    async def agent() -> Any:
        # 2026-07-28 through the bridge: it gives each request the headers its body calls for.
        async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
            listed = await client.list_tools()
            result = await client.call_tool("lookup", {"word": "bridge"})
            return client.protocol_version, listed, result

    calls = InThread(lambda: asyncio.run(agent()))
    request = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
    assert request["arguments"] == {"word": "bridge"}
    car.ok({"cmd": "answer", "session": info["id"], "request": request["id"], "answer": text_result("over stdio")})
    version, listed, result = calls.result()
    assert version == era
    assert [tool.name for tool in listed.tools] == ["lookup"] and listed.tools[0].input_schema == LOOKUP["input_schema"]
    assert result.content[0].text == "over stdio" and not result.is_error


def test_the_bridge_exits_when_either_side_closes(car: Sidecar) -> None:
    info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]})
    url = info["tools_url"]
    token = url.split("/")[3]
    # The end of stdin: exit 0.
    bridge = _bridge(url)
    out, err = bridge.communicate(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}\n', timeout=20)
    assert bridge.returncode == 0
    assert json.loads(out.splitlines()[0])["result"]["serverInfo"]["name"] == "agentproto"
    # The session closes: the next request is answered with an error, and the bridge exits 1.
    bridge = _bridge(url)
    assert bridge.stdin is not None and bridge.stdout is not None
    bridge.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}\n')
    bridge.stdin.write(b"not json\n")
    bridge.stdin.write(b'{"jsonrpc":"2.0","id":"p","method":"ping"}\n')
    bridge.stdin.flush()
    # Answers come as they are ready: the bad line's at once, the others' from the listener.
    answers = {json.dumps(a["id"]): a for a in (json.loads(bridge.stdout.readline()) for _ in range(3))}
    assert answers["1"]["result"]["protocolVersion"] == "2025-06-18"
    assert answers['"p"']["result"] == {}  # sent while initialize was answered: it waited for the session id
    assert answers["null"]["error"]["code"] == -32700
    car.ok({"cmd": "close", "session": info["id"]})
    bridge.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n')
    bridge.stdin.flush()
    answer = json.loads(bridge.stdout.readline())
    assert answer["id"] == 2 and "gone" in answer["error"]["message"]
    assert bridge.wait(20) == 1
    stderr = bridge.stderr.read() if bridge.stderr else b""
    assert b"gone" in stderr and token.encode() not in stderr  # the URL's token is never shown
    for stream in (bridge.stdin, bridge.stdout, bridge.stderr):
        if stream is not None:
            stream.close()


def test_the_bridge_needs_its_url(car: Sidecar) -> None:
    bridge = _bridge(None)
    _, err = bridge.communicate(b"", timeout=20)
    assert bridge.returncode == 2 and b"AGENTPROTO_TOOLS_URL" in err
    bridge = _bridge("ftp://127.0.0.1/secret-token")
    _, err = bridge.communicate(b"", timeout=20)
    assert bridge.returncode == 2 and b"secret-token" not in err


def test_the_bridge_gives_a_2026_tool_call_the_mcp_param_headers_its_schema_asks_for(car: Sidecar) -> None:
    info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [ROUTED]})
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "agentproto", "mcp-bridge"], env=base_env({"AGENTPROTO_TOOLS_URL": info["tools_url"]}), cwd=str(ROOT)
    )

    async def agent() -> Any:
        async with Client(server, mode="2026-07-28") as client:
            await client.list_tools()  # the bridge learns which arguments go in headers
            return await client.call_tool("routed", {"region": "Zürich", "shard": {"n": 7}, "query": "q"})

    calls = InThread(lambda: asyncio.run(agent()))
    request = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
    assert request["arguments"]["region"] == "Zürich"
    car.ok({"cmd": "answer", "session": info["id"], "request": request["id"], "answer": text_result("routed")})
    assert calls.result().content[0].text == "routed"


def test_a_2026_refusal_is_relayed_and_the_bridge_goes_on(car: Sidecar) -> None:
    info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]})
    bridge = _bridge(info["tools_url"])
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": meta}},  # 404 from the listener: an answer
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {**meta, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}},
    ]
    out, _ = bridge.communicate(b"".join(json.dumps(line).encode() + b"\n" for line in lines), timeout=20)
    assert bridge.returncode == 0  # not "gone": a 404 carrying a JSON-RPC error is the method's answer
    answers = {a["id"]: a for a in map(json.loads, out.splitlines())}
    assert answers[1]["error"]["code"] == -32601 and answers[2]["error"]["code"] == -32022
    assert answers[3]["result"]["tools"][0]["name"] == "lookup" and answers[3]["result"]["resultType"] == "complete"
