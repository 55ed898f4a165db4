"""`serve --transport mcp` over Streamable HTTP (`--listen HOST:PORT`, `--port N`): both MCP
eras through the official Python SDK's client, raw HTTP for its rules (the URL announced on
stderr, the route, Host/Origin/Content-Type, the bearer token), on 127.0.0.1 only."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ops_support import Proc, script

from agentproto.frontends.mcp_stdio import TOOL_OPS

TOOLS = [f"agentproto_{op}" for op in TOOL_OPS]
TOKEN = "s3cret-token-0123456789"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


class Server:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = Proc(["serve", "--transport", "mcp", *args], env=env)
        match = self.proc.banner(r"listening on http://([\d.]+):(\d+)/mcp")
        self.host, self.port = match.group(1), int(match.group(2))
        self.url = f"http://{self.host}:{self.port}/mcp"

    def post(self, body: Any, headers: dict[str, str] | None = None, path: str = "/mcp", method: str = "POST") -> tuple[int, Any, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            raw = response.read()
            return response.status, response.headers, json.loads(raw) if raw else None
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def server() -> Any:
    s = Server("--port", "0", "--mock", script("turn"))
    yield s
    s.stop()


def sdk(url: str, mode: str, headers: dict[str, str] | None = None) -> Any:
    async def main() -> Any:
        import httpx2 as httpx  # the SDK's own HTTP client

        async with httpx.AsyncClient(headers=headers or {}) as http_client:
            async with Client(streamable_http_client(url, http_client=http_client), mode=mode) as client:  # type: ignore[arg-type]
                with anyio.fail_after(60):
                    listed = await client.list_tools()
                    generated = await client.call_tool("agentproto_generate", {"agent": "mock", "dir": "/tmp", "prompt": "over http"})
                    return client.protocol_version, listed, generated

    return anyio.run(main)


@pytest.mark.parametrize("mode, era", [("auto", "2026-07-28"), ("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")])
def test_the_sdk_client_of_either_era_over_http(server: Server, mode: str, era: str) -> None:
    version, listed, generated = sdk(server.url, mode)
    assert version == era
    assert [t.name for t in listed.tools] == TOOLS
    assert generated.is_error is False and generated.structured_content["text"] == "Let me check. Done."  # the script's turn


def test_sessions_belong_to_the_server_and_2026_requests_stand_alone(server: Server) -> None:
    def call(rpc_id: int, name: str, arguments: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": name, "arguments": arguments, "_meta": META}}
        status, headers, answer = server.post(body, {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name})
        assert status == 200 and "mcp-session-id" not in headers, answer
        return answer["result"]["structuredContent"]

    opened = call(1, "agentproto_open", {"agent": "mock", "dir": "/tmp"})
    session = opened["session"]["id"]
    # A later, separate POST names the session (nothing ties it to a connection).
    assert call(2, "agentproto_prompt", {"session": session, "text": "hello"})["waiting"]["Permission"]["id"] == "r1"
    assert call(3, "agentproto_close", {"session": session}) == {"op": "close", "ok": True, "session_id": session}


def test_the_http_rules(server: Server) -> None:
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
    ok = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
    status, _, answer = server.post(discover, ok)
    assert status == 200 and answer["result"]["supportedVersions"][0] == "2026-07-28" and answer["result"]["cacheScope"] == "public"
    # One route; POST only.
    assert server.post(discover, ok, path="/v1/agent")[0] == 404
    for method in ("GET", "DELETE"):
        status, headers, _ = server.post(b"", ok, method=method)
        assert status == 405 and headers["Allow"] == "POST"
    # The checks against web pages, as for --transport http.
    assert server.post(discover, {**ok, "Origin": "http://evil.example"})[0] == 403
    assert server.post(discover, {**ok, "Host": f"evil.example:{server.port}"})[0] == 421
    assert server.post(discover, {**ok, "Content-Type": "text/plain"})[0] == 415
    # The 2026-07-28 checks (the listener's test covers every case).
    status, _, answer = server.post(discover, {**ok, "Mcp-Method": "tools/list"})
    assert status == 400 and answer["id"] == 1 and answer["error"]["code"] == -32020
    init = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2026-07-28", "capabilities": {}, "_meta": META}}
    status, _, answer = server.post(init, {**ok, "Mcp-Method": "initialize"})
    assert status == 404 and answer["id"] == 2 and answer["error"]["code"] == -32601


def test_a_token_guards_it_and_only_loopback_goes_without_one() -> None:
    s = Server("--listen", "127.0.0.1:0", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    try:
        discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
        ok = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
        status, headers, _ = s.post(discover, ok)
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert s.post(discover, {**ok, "Authorization": "Bearer wrong-token-0123456789"})[0] == 401
        status, _, answer = s.post(discover, {**ok, "Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and answer["result"]["cacheScope"] == "private"
        version, listed, _ = sdk(s.url, "auto", {"Authorization": f"Bearer {TOKEN}"})
        assert version == "2026-07-28" and len(listed.tools) == len(TOOLS)
    finally:
        s.stop()
    assert TOKEN not in s.proc.stderr  # the token reaches no log
    refused = Proc(["serve", "--transport", "mcp", "--listen", "0.0.0.0:0"])
    assert refused.wait() == 2 and "only a loopback address may go without a token" in refused.stderr


def test_record_and_a_flag_of_another_transport_are_usage_errors(tmp_path: Any) -> None:
    recorded = Proc(["serve", "--transport", "mcp", "--port", "0", "--record", str(tmp_path / "r.jsonl")])
    assert recorded.wait() == 2 and "--record" in recorded.stderr
    socket = Proc(["serve", "--transport", "mcp", "--socket", str(tmp_path / "s")])
    assert socket.wait() == 2


def test_without_listen_it_is_still_stdio() -> None:
    proc = Proc(["serve", "--transport", "mcp"])
    try:
        proc.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
        assert proc.line()["result"]["resultType"] == "complete"
    finally:
        proc.stop()



def test_a_session_idle_past_session_idle_timeout_is_closed() -> None:
    s = Server("--port", "0", "--session-idle-timeout", "0.5")
    try:
        def call(rpc_id: int, name: str, arguments: dict[str, Any]) -> Any:
            body = {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": name, "arguments": arguments, "_meta": META}}
            status, _, answer = s.post(body, {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name})
            assert status == 200, answer
            return answer["result"]["structuredContent"]

        session = call(1, "agentproto_open", {"agent": "mock", "dir": "/tmp"})["session"]["id"]
        deadline = time.monotonic() + 30
        while f"{session}: idle for 0.5 s" not in s.proc.stderr:  # a request for it would restart the clock
            assert time.monotonic() < deadline, s.proc.stderr[-2000:]
            time.sleep(0.05)
        info = call(2, "agentproto_info", {"session": session})  # closed as a close op would
        assert info["ok"] is False and info["error"]["kind"] == "SessionClosed"
    finally:
        s.stop()


def test_a_protocol_version_header_other_than_metas_is_a_header_mismatch_even_for_an_unknown_version(server: Server) -> None:
    """Found by the conformance kit (server-stateless): the header names 2026-07-28, ``_meta`` an
    unknown version: the mismatch (-32020) is the answer, not -32022 for ``_meta``'s version."""
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "v999.0.0"}
    discover = {"jsonrpc": "2.0", "id": 302, "method": "server/discover", "params": {"_meta": meta}}
    status, _, answer = server.post(discover, {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"})
    assert status == 400 and answer["id"] == 302 and answer["error"]["code"] == -32020, answer
    # The same unknown version in both is still -32022, naming the versions served.
    status, _, answer = server.post(discover, {"MCP-Protocol-Version": "v999.0.0", "Mcp-Method": "server/discover"})
    assert status == 400 and answer["error"]["code"] == -32022 and answer["error"]["data"]["requested"] == "v999.0.0", answer
