"""The token-guarded loopback listener (issue 10), against real peers: a sidecar process, the
official MCP Python SDK client, raw HTTP and http.client, on 127.0.0.1 only.

The app's side is played through protocol 1 frames; the agent's side is an MCP client on
the session's ``tools_url`` (or the mock's own CallTool, which calls it over HTTP too).
"""

from __future__ import annotations

import asyncio
import base64
import json
import select
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from listener_support import AREA, LOOKUP, ROUTED, BlockingMcp, InThread, closed_requests, opened_request, post, raw_request, split, text_result
from mcp import Client
from ops_support import write_script
from sidecar import ROOT, Sidecar, kind_name, kinds, script

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode()


@pytest.fixture
def car() -> Any:
    sidecar = Sidecar(["--mock", script("tools")], reference=False)
    yield sidecar
    sidecar.close()


def open_tools(car: Sidecar, **options: Any) -> dict[str, Any]:
    info: dict[str, Any] = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP, AREA], **options})
    return info


def token_of(url: str) -> str:
    return split(url)[2].split("/")[1]


# -- the official MCP SDK client ---------------------------------------------------------------


@pytest.mark.parametrize("mode, era", [("auto", "2026-07-28"), ("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")])
def test_the_mcp_sdk_client_sees_the_declared_tools_and_gets_the_apps_answers(car: Sidecar, mode: str, era: str) -> None:
    info = open_tools(car)
    url = info["tools_url"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp/agentproto")
    assert len(token_of(url)) >= 22  # >= 128 bits of secrets.token_urlsafe
    assert {"Tools"} <= set(info["details"]["capabilities"]["features"])

    async def agent() -> Any:
        # auto: server/discover first (answered: the client stays 2026-07-28); legacy: initialize.
        async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
            listed = await client.list_tools()
            text = await client.call_tool("lookup", {"word": "agent"})
            shaped = await client.call_tool("area", {"w": 2, "h": 3})
            return client.protocol_version, listed, text, shaped

    calls = InThread(lambda: asyncio.run(agent()))
    first = opened_request(car, info["id"])
    # The session is idle: the call belongs to the session, not to a turn.
    assert first["turn_info"] is None
    assert first["kind"]["RequestOpened"]["ToolCall"] == {"id": "call-1", "tool": "lookup", "arguments": {"word": "agent"}}
    answer = {"ToolResult": {"content": [{"type": "text", "text": "one who acts"}, {"type": "image", "data": PNG, "mime_type": "image/png"}], "is_error": False}}
    assert car.ok({"cmd": "answer", "session": info["id"], "request": "call-1", "answer": answer}) is None
    second = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
    structured = {"ToolResult": {"content": [], "is_error": False, "structured": {"area": 6}}}
    car.ok({"cmd": "answer", "session": info["id"], "request": second["id"], "answer": structured})
    version, listed, text, shaped = calls.result()
    assert version == era
    tools = {tool.name: tool for tool in listed.tools}
    # The declared schemas, verbatim.
    assert tools["lookup"].input_schema == LOOKUP["input_schema"] and tools["lookup"].description == "Look a word up"
    assert tools["area"].input_schema == AREA["input_schema"] and tools["area"].output_schema == AREA["output_schema"]
    assert not text.is_error and text.content[0].text == "one who acts"
    assert text.content[1].data == PNG and text.content[1].mime_type == "image/png"
    assert shaped.structured_content == {"area": 6} and not shaped.is_error
    car.close_stdin()
    lines = car.drain()
    assert closed_requests(car.seen, "call-1") == 1 and closed_requests(car.seen, second["id"]) == 1
    assert token_of(url) not in car.stderr.decode()  # the token reaches no log
    assert lines


# -- the rules of the listener -----------------------------------------------------------------


def test_a_wrong_token_or_path_is_404_with_no_detail(car: Sidecar) -> None:
    url = open_tools(car)["tools_url"]
    host, port, path = split(url)
    token = token_of(url)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}
    assert post(url, init).status == 200
    wrong = "A" * len(token)
    for bad in (
        path.replace(token, wrong),
        path.replace(token, token[:-1]),
        path.replace(f"/{token}", ""),
        f"/{token}/mcp/other",
        f"/{token}/mcp/agentproto/more",
        f"/{token}/hook/PreInvocation",  # a hook the session did not declare
        f"/{token}",
        "/",
    ):
        response = post(f"http://{host}:{port}{bad}", init)
        assert response.status == 404, bad
        assert response.json() == {"error": "not found"}  # nothing tells a guesser which part was wrong


def test_get_and_delete_are_405_allowing_post(car: Sidecar) -> None:
    url = open_tools(car)["tools_url"]
    for method in ("GET", "DELETE"):
        response = post(url, b"", {"Accept": "text/event-stream"}, method=method)
        assert response.status == 405 and response.headers["allow"] == "POST"


def test_web_pages_are_refused_origin_host_and_content_type(car: Sidecar) -> None:
    url = open_tools(car)["tools_url"]
    host, port, _ = split(url)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    assert post(url, init, {"Origin": "http://evil.example"}).status == 403
    assert post(url, init, {"Origin": "null"}).status == 403
    assert post(url, init, {"Origin": f"http://127.0.0.1:{port + 1}"}).status == 403  # another local server's page
    assert post(url, init, {"Origin": f"http://localhost:{port}"}).status == 200
    assert post(url, init, {"Host": f"evil.example:{port}"}).status == 421  # DNS rebinding
    assert post(url, init, {"Content-Type": "text/plain"}).status == 415


def test_a_body_over_4_mib_is_413(car: Sidecar) -> None:
    url = open_tools(car)["tools_url"]
    host, port, path = split(url)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {4 * 1024 * 1024 + 1}\r\n\r\n"
    assert raw_request(port, head.encode()).status == 413
    assert post(url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}).status == 400  # the listener goes on (no session id)


def test_mcp_session_ids_are_issued_and_required(car: Sidecar) -> None:
    url = open_tools(car)["tools_url"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    missing = post(url, listing)
    assert missing.status == 400 and missing.json()["error"]["code"] == -32600
    unknown = post(url, listing, {"Mcp-Session-Id": "0" * 32})
    assert unknown.status == 404 and "Session not found" in unknown.json()["error"]["message"]
    # server/discover is 2026-07-28's: without its _meta, the request is malformed (400).
    discover = post(url, {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}})
    assert discover.status == 400 and discover.json()["id"] == 0 and discover.json()["error"]["code"] == -32602
    client = BlockingMcp(url).initialize()  # initialize gives the id, initialized gets 202
    assert client.rpc("tools/list")["result"]["tools"][0]["name"] == "lookup"
    assert client.rpc("ping")["result"] == {}
    status, _, body = client.send({"jsonrpc": "2.0", "id": 9, "result": {}})  # a response: nobody's
    assert status == 202 and body is None
    version = post(url, listing, {"Mcp-Session-Id": client.session_id or "", "MCP-Protocol-Version": "1999-01-01"})
    assert version.status == 400 and version.json()["id"] == 2
    assert version.json()["error"]["code"] == -32022 and "2025-06-18" in version.json()["error"]["data"]["supported"]
    # Versions are negotiated through the one MCP endpoint.
    for wanted in ("2025-03-26", "2025-06-18", "2025-11-25"):
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": wanted}}
        assert post(url, init).json()["result"]["protocolVersion"] == wanted
    client.close()


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def modern(rpc_id: Any, method: str, params: dict[str, Any] | None = None, meta: Any = MODERN_META) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def modern_headers(method: str, name: str | None = None, version: str = "2026-07-28") -> dict[str, str]:
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method, "Accept": "application/json, text/event-stream"}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def test_mcp_2026_07_28_is_served_statelessly_beside_the_handshake(car: Sidecar) -> None:
    info = open_tools(car)
    url = info["tools_url"]
    discover = post(url, modern("d1", "server/discover"), modern_headers("server/discover"))
    assert discover.status == 200 and "mcp-session-id" not in discover.headers  # no session in 2026-07-28
    result = discover.json()["result"]
    assert result["supportedVersions"][0] == "2026-07-28" and "2025-11-25" in result["supportedVersions"]
    assert result["resultType"] == "complete" and result["cacheScope"] == "private" and result["capabilities"] == {"tools": {}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agentproto"
    # An Mcp-Session-Id (of a session or not) is ignored, and none is given back.
    listing = post(url, modern(2, "tools/list"), {**modern_headers("tools/list"), "Mcp-Session-Id": "0" * 32})
    assert listing.status == 200 and "mcp-session-id" not in listing.headers
    assert [t["name"] for t in listing.json()["result"]["tools"]] == ["lookup", "area"] and listing.json()["result"]["ttlMs"] > 0
    # A tool call goes to the app like any other; its answer comes back with resultType.
    calls = InThread(lambda: post(url, modern(3, "tools/call", {"name": "lookup", "arguments": {"word": "now"}}), modern_headers("tools/call", "lookup")))
    request = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
    assert request["arguments"] == {"word": "now"}
    car.ok({"cmd": "answer", "session": info["id"], "request": request["id"], "answer": text_result("stateless")})
    called = calls.result()
    assert called.status == 200 and called.json()["id"] == 3
    assert called.json()["result"]["content"] == [{"type": "text", "text": "stateless"}] and called.json()["result"]["resultType"] == "complete"
    # A name outside plain ASCII travels base64-encoded: decoded before it is compared.
    unknown = post(url, modern(4, "tools/call", {"name": "é"}), modern_headers("tools/call", "=?base64?w6k=?="))
    assert unknown.status == 400 and unknown.json()["id"] == 4 and unknown.json()["error"]["code"] == -32602
    # The handshake era works on the same URL meanwhile, and a notification is 202.
    client = BlockingMcp(url).initialize()
    assert client.rpc("tools/list")["result"]["tools"][0]["name"] == "lookup"
    client.close()
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "_meta": MODERN_META}}
    assert post(url, note, modern_headers("notifications/cancelled")).status == 202


def test_mcp_2026_07_28_refusals_keep_the_id_with_the_specs_codes_and_statuses(car: Sidecar) -> None:
    url = open_tools(car)["tools_url"]
    cap_key, version_key = "io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/protocolVersion"
    cases: list[tuple[str, Any, dict[str, str], int, int]] = [
        # A missing or invalid _meta: -32602, 400.
        ("no _meta", {"jsonrpc": "2.0", "id": 11, "method": "tools/list"}, modern_headers("tools/list"), 400, -32602),
        ("_meta a string", modern(12, "tools/list", meta="2026-07-28"), modern_headers("tools/list"), 400, -32602),
        ("no capabilities", modern(13, "tools/list", meta={version_key: "2026-07-28"}), modern_headers("tools/list"), 400, -32602),
        ("capabilities a list", modern(14, "tools/list", meta={**MODERN_META, cap_key: []}), modern_headers("tools/list"), 400, -32602),
        ("discover bare", {"jsonrpc": "2.0", "id": 15, "method": "server/discover"}, {}, 400, -32602),
        # Headers that disagree with the body, or are missing: -32020, 400.
        ("no version header", modern(21, "tools/list"), {"Mcp-Method": "tools/list"}, 400, -32020),
        ("version header differs", modern(22, "tools/list"), modern_headers("tools/list", version="2025-11-25"), 400, -32020),
        ("no method header", modern(23, "tools/list"), {"MCP-Protocol-Version": "2026-07-28"}, 400, -32020),
        ("method header differs", modern(24, "tools/list"), modern_headers("tools/call"), 400, -32020),
        ("no name header", modern(25, "tools/call", {"name": "lookup"}), modern_headers("tools/call"), 400, -32020),
        ("name header differs", modern(26, "tools/call", {"name": "lookup"}), modern_headers("tools/call", "area"), 400, -32020),
        ("name header bad base64", modern(27, "tools/call", {"name": "lookup"}), modern_headers("tools/call", "=?base64?***?="), 400, -32020),
        # A version not served: -32022 naming those that are, 400.
        ("unknown version", modern(31, "tools/list", meta={**MODERN_META, version_key: "2099-01-01"}), modern_headers("tools/list", version="2099-01-01"), 400, -32022),
        # No handshake, no ping in 2026-07-28: an unknown method, 404.
        ("initialize", modern(41, "initialize", {"protocolVersion": "2026-07-28", "capabilities": {}}), modern_headers("initialize"), 404, -32601),
        ("ping", modern(42, "ping"), modern_headers("ping"), 404, -32601),
        ("resources", modern("r-43", "resources/list"), modern_headers("resources/list"), 404, -32601),
        # One message per POST.
        ("batch", [modern(51, "tools/list")], modern_headers("tools/list"), 400, -32600),
    ]
    for label, body, headers, status, code in cases:
        response = post(url, body, headers)
        answer = response.json()
        assert (response.status, answer["error"]["code"]) == (status, code), (label, response.status, answer)
        expected_id = body["id"] if isinstance(body, dict) else None
        assert answer["id"] == expected_id, label  # the request's id, kept
        assert "mcp-session-id" not in response.headers, label
        if code == -32022:
            assert answer["error"]["data"] == {"supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"], "requested": "2099-01-01"}
    # initialize opened no session: the refusal is the whole answer.
    assert "server/discover" in post(url, *cases[13][1:3]).json()["error"]["message"]
    # A handshake initialize (no 2026-07-28 _meta or header) still starts a session.
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
    started = post(url, init)
    assert started.status == 200 and started.headers["mcp-session-id"] and started.json()["result"]["protocolVersion"] == "2025-11-25"


def test_mcp_2026_07_28_mcp_param_headers_of_a_tools_x_mcp_header_arguments(car: Sidecar) -> None:
    info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [ROUTED]})
    url = info["tools_url"]
    arguments = {"region": "Zürich", "shard": {"n": 42}, "query": "select 1"}
    body = modern(5, "tools/call", {"name": "routed", "arguments": arguments})
    base = modern_headers("tools/call", "routed")
    right = {**base, "Mcp-Param-Region": "=?base64?WsO8cmljaA==?=", "mcp-param-shard": "42.0"}  # numeric compare
    for label, headers in (
        ("no Region", {k: v for k, v in right.items() if k != "Mcp-Param-Region"}),
        ("no Shard", {k: v for k, v in right.items() if k != "mcp-param-shard"}),
        ("Region differs", {**right, "Mcp-Param-Region": "Zurich"}),
        ("Shard differs", {**right, "mcp-param-shard": "43"}),
    ):
        refused = post(url, body, headers)
        assert refused.status == 400 and refused.json()["error"]["code"] == -32020 and refused.json()["id"] == 5, label
    # Without a value in the body, no header is expected.
    calls = InThread(lambda: [post(url, body, right), post(url, modern(6, "tools/call", {"name": "routed", "arguments": {"region": "eu", "query": "q"}}), {**base, "Mcp-Param-Region": "eu"})])
    for _ in range(2):
        request = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
        car.ok({"cmd": "answer", "session": info["id"], "request": request["id"], "answer": text_result("routed")})
    assert [r.status for r in calls.result()] == [200, 200]

    # The SDK's client mirrors them itself, as the spec asks of every client: accepted.
    async def agent() -> Any:
        async with Client(url, mode="2026-07-28") as client:
            await client.list_tools()
            return await client.call_tool("routed", {"region": "Zürich", "shard": {"n": -7}, "query": "q"})

    sdk_call = InThread(lambda: asyncio.run(agent()))
    request = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
    assert request["arguments"]["shard"] == {"n": -7}
    car.ok({"cmd": "answer", "session": info["id"], "request": request["id"], "answer": text_result("by the sdk")})
    assert sdk_call.result().content[0].text == "by the sdk"


def test_the_token_is_dead_once_the_session_closes(car: Sidecar) -> None:
    info = open_tools(car)
    url = info["tools_url"]
    client = BlockingMcp(url).initialize()
    waiting = InThread(lambda: client.call("lookup", {"word": "late"}))
    request = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]
    car.ok({"cmd": "close", "session": info["id"]})
    # The call waiting for the app got an error result as the session closed...
    result = waiting.result()
    assert result["isError"] is True and "the session closed" in result["content"][0]["text"]
    assert closed_requests(car.seen, request["id"]) == 1
    # ...and the token is dead: every path with it is a 404.
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    assert post(url, init).status == 404
    client.close()


def test_at_the_connection_limit_new_clients_close_the_oldest_idle_ones_and_serving_goes_on(car: Sidecar) -> None:
    info = open_tools(car)
    url = info["tools_url"]
    _, port, _ = split(url)
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(256)]
    extra = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
    try:
        # Idle connections cannot lock new clients out: each connection past the limit
        # closes the oldest idle one, without an answer (the crowded ones that stay silent
        # are cut sooner, with a 408: they may be seen meanwhile).
        oldest = set(held[:20])
        deadline = time.monotonic() + 20
        closed: set[socket.socket] = set()
        while not oldest <= closed and time.monotonic() < deadline:
            readable, _, _ = select.select([s for s in held + extra if s not in closed], [], [], 0.5)
            for sock in readable:
                try:
                    data = sock.recv(16)
                except ConnectionResetError:
                    data = b""
                assert data == b"" if sock in oldest else data.startswith(b"HTTP/1.1 408 "), (sock in oldest, data)
                closed.add(sock)
        assert oldest <= closed
        assert car.ok({"cmd": "info", "session": info["id"]})["id"] == info["id"]  # the sidecar goes on
        # A new client is served while every slot is taken (it closes the oldest idle one).
        response = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert response.status == 200
    finally:
        for sock in held + extra:
            sock.close()
    # Once the held connections are gone, new ones are served as ever.
    deadline = time.monotonic() + 20
    while True:
        try:
            response = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
            if response.status == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the listener did not recover"
        time.sleep(0.1)


# -- every ending of a ToolCall closes it exactly once -----------------------------------------


def _turn_script(tmp_path: Path) -> str:
    # Turns that take a while, so that a call can arrive while one runs.
    turn = [{"Emit": {"TextDelta": {"message_id": "m", "text": "busy"}}}, {"Sleep": 4000}, {"End": {"Completed": {"source": "Protocol"}}}]
    return write_script(tmp_path, "slow", [turn, turn, turn])


@pytest.mark.parametrize("ending", ["answer", "cancel", "turn end", "close", "timeout"])
def test_request_closed_follows_every_tool_call_exactly_once(tmp_path: Path, ending: str) -> None:
    with Sidecar(["--mock", _turn_script(tmp_path)], reference=False) as car:
        info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP], "tool_timeout": 1.5 if ending == "timeout" else 600})
        session = info["id"]
        car.ok({"cmd": "prompt", "session": session, "text": "go"})
        client = BlockingMcp(info["tools_url"]).initialize()
        call = InThread(lambda: client.call("lookup", {"word": "x"}))
        opened = opened_request(car, session)
        request_id = opened["kind"]["RequestOpened"]["ToolCall"]["id"]
        assert opened["turn_info"]["id"] == "t1"  # the running turn's
        status = car.wait_for(lambda l: "event" in l and l["event"]["kind"] == {"StatusChanged": "NeedsInput"})
        assert status["event"]["turn_info"]["id"] == "t1"
        expected = {
            "answer": "the app's answer",
            "cancel": "cancelled: the turn was cancelled",
            "turn end": "the turn ended before the app answered",
            "close": "the session closed",
            "timeout": "timed out: the app did not answer within 1.5 s",
        }[ending]
        if ending == "answer":
            car.ok({"cmd": "answer", "session": session, "request": request_id, "answer": text_result(expected)})
        elif ending == "cancel":
            car.ok({"cmd": "cancel", "session": session})
        elif ending == "close":
            car.ok({"cmd": "close", "session": session})
        result = call.result()
        assert result["content"][0]["text"] == expected
        assert result["isError"] is (ending != "answer")
        if ending != "close":
            # Answering what is closed is refused, and the session goes on.
            late = car.error({"cmd": "answer", "session": session, "request": request_id, "answer": text_result("late")})
            assert late["kind"] == "InvalidRequest"
            car.events(session, until="TurnEnded", timeout=20)
        client.close()
        car.close_stdin()
        car.drain(timeout=20)
        assert closed_requests(car.seen, request_id) == 1
        # The close comes before the turn's end (cancel, turn end) and before `closed`.
        names = [(kind_name(l["event"]["kind"]), l["event"]["kind"]) for l in car.seen if "event" in l]
        closing = names.index(("RequestClosed", {"RequestClosed": {"request_id": request_id}}))
        assert closing < [n for n, _ in names].index("TurnEnded")


def test_a_result_breaking_the_output_schema_is_refused_and_the_call_stays_open(car: Sidecar) -> None:
    info = open_tools(car)
    client = BlockingMcp(info["tools_url"]).initialize()
    call = InThread(lambda: client.call("area", {"w": 1, "h": 2}))
    request_id = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]["id"]
    bad = {"ToolResult": {"content": [], "is_error": False, "structured": {"area": "two"}}}
    error = car.error({"cmd": "answer", "session": info["id"], "request": request_id, "answer": bad})
    assert error["kind"] == "InvalidRequest" and "output_schema" in error["message"] and "$.area" in error["message"]
    error = car.error({"cmd": "answer", "session": info["id"], "request": request_id, "answer": text_result("no structured")})
    assert error["kind"] == "InvalidRequest" and "structured" in error["message"]
    malformed = {"ToolResult": {"content": [{"type": "text", "text": 5}], "is_error": False}}
    assert car.error({"cmd": "answer", "session": info["id"], "request": request_id, "answer": malformed})["kind"] == "InvalidRequest"
    assert not call.thread.join(0.3) and call.thread.is_alive()  # nothing half-formed went to the agent
    good = {"ToolResult": {"content": [], "is_error": False, "structured": {"area": 2}}}
    car.ok({"cmd": "answer", "session": info["id"], "request": request_id, "answer": good})
    assert call.result()["structuredContent"] == {"area": 2}
    client.close()


def test_deny_gives_the_agent_an_error_result_with_its_message(car: Sidecar) -> None:
    info = open_tools(car)
    client = BlockingMcp(info["tools_url"]).initialize()
    call = InThread(lambda: client.call("lookup", {"word": "secret"}))
    request_id = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]["id"]
    car.ok({"cmd": "answer", "session": info["id"], "request": request_id, "answer": {"Deny": {"message": "not that word"}}})
    assert call.result() == {"content": [{"type": "text", "text": "not that word"}], "isError": True}
    client.close()


def test_auto_approve_never_answers_a_tool_call(tmp_path: Path) -> None:
    with Sidecar(["--mock", _turn_script(tmp_path)], reference=False) as car:
        info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP], "permission_mode": "AutoApprove"})
        car.ok({"cmd": "prompt", "session": info["id"], "text": "go"})
        client = BlockingMcp(info["tools_url"]).initialize()
        call = InThread(lambda: client.call("lookup", {"word": "x"}))
        request_id = opened_request(car, info["id"])["kind"]["RequestOpened"]["ToolCall"]["id"]
        time.sleep(0.5)
        assert call.thread.is_alive() and closed_requests(car.seen, request_id) == 0
        car.ok({"cmd": "answer", "session": info["id"], "request": request_id, "answer": text_result("the app's")})
        assert call.result()["content"][0]["text"] == "the app's"
        client.close()


# -- the mock's CallTool: a real agent's call, over HTTP ---------------------------------------


def test_the_mocks_call_tool_step_calls_the_tool_through_the_listener(car: Sidecar) -> None:
    info = open_tools(car)
    session = info["id"]
    car.ok({"cmd": "prompt", "session": session, "text": "look it up"})
    opened = opened_request(car, session)
    assert opened["kind"]["RequestOpened"]["ToolCall"]["arguments"] == {"word": "agent"}
    request_id = opened["kind"]["RequestOpened"]["ToolCall"]["id"]
    car.ok({"cmd": "answer", "session": session, "request": request_id, "answer": text_result("one who acts")})
    events = car.events(session)
    tools = [e["kind"]["ToolUpdated"] for e in events if kind_name(e["kind"]) == "ToolUpdated"]
    assert tools[-1]["status"] == "Completed" and tools[-1]["output"] == "one who acts"
    assert tools[-1]["kind"] == {"Mcp": {"server": "agentproto", "tool": "lookup"}}
    assert kinds(events)[-1] == "TurnEnded" and events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}


def test_call_tool_without_tools_fails_the_tool_not_the_turn(car: Sidecar) -> None:
    session = car.open()
    car.ok({"cmd": "prompt", "session": session, "text": "look it up"})
    events = car.events(session)
    failed = [e["kind"]["ToolUpdated"] for e in events if kind_name(e["kind"]) == "ToolUpdated"][-1]
    assert failed["status"] == "Failed" and failed["output"] == "the session has no tools"
    assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}


# -- hooks, through the listener's hook endpoint ----------------------------------------------


def test_hooks_are_asked_of_the_app_and_their_output_passed_through(car: Sidecar) -> None:
    info = open_tools(car, hooks=["PreInvocation", "Stop"], hook_timeout=1)
    assert {"Tools", "Hooks"} <= set(info["details"]["capabilities"]["features"])
    hook_url = info["tools_url"].replace("/mcp/agentproto", "/hook/PreInvocation")
    hook_input = {"invocationNum": 0, "initialNumSteps": 3}
    posted = InThread(lambda: post(hook_url, hook_input))
    opened = opened_request(car, info["id"], "Hook")
    assert opened["turn_info"] is None  # outside any turn: the session's
    hook = opened["kind"]["RequestOpened"]["Hook"]
    assert hook == {"id": hook["id"], "event": "PreInvocation", "input": hook_input}
    output = {"injectSteps": [{"userMessage": "remember the tests"}]}
    car.ok({"cmd": "answer", "session": info["id"], "request": hook["id"], "answer": {"HookResult": output}})
    response = posted.result()
    assert response.status == 200 and response.json() == output
    # Cancel is the neutral {}; so is no answer within hook_timeout.
    stop_url = info["tools_url"].replace("/mcp/agentproto", "/hook/Stop")
    posted = InThread(lambda: post(stop_url, {}))
    cancelled = opened_request(car, info["id"], "Hook")["kind"]["RequestOpened"]["Hook"]["id"]
    car.ok({"cmd": "answer", "session": info["id"], "request": cancelled, "answer": "Cancel"})
    assert posted.result().json() == {}
    started = time.monotonic()
    timed_out = post(stop_url, {})
    assert timed_out.status == 200 and timed_out.json() == {} and time.monotonic() - started >= 1
    wrong = car.error({"cmd": "answer", "session": info["id"], "request": "hook-3", "answer": text_result("x")})
    assert wrong["kind"] == "InvalidRequest"
    assert post(stop_url, b"not json").status == 400
    car.close_stdin()
    car.drain()
    for request_id in (hook["id"], cancelled, "hook-3"):
        assert closed_requests(car.seen, request_id) == 1


def test_a_hook_the_agent_does_not_have_is_unsupported_naming_it(car: Sidecar) -> None:
    error = car.error({"cmd": "open", "agent": "mock", "dir": str(ROOT), "hooks": ["PreToolUse"]})
    assert error["kind"] == "UnsupportedFeature" and "mock has no hook PreToolUse" in error["message"]


# -- the ops framing -----------------------------------------------------------------------------


def test_the_ops_framing_waits_on_a_tool_call_and_answers_it() -> None:
    from ops_support import Proc, result_of

    proc = Proc(["agent", "--mock", script("tools")])
    try:
        opened = result_of(proc.request({"op": "open", "agent": "mock", "dir": str(ROOT), "tools": [LOOKUP]}))
        assert opened["ok"] and opened["session"]["tools_url"]
        waiting = result_of(proc.request({"op": "prompt", "text": "go"}))
        call = waiting["waiting"]["ToolCall"]
        assert call["tool"] == "lookup" and call["arguments"] == {"word": "agent"}
        done = result_of(proc.request({"op": "answer", "request": call["id"], "answer": text_result("found")}))
        assert done["ok"] and done["stop"] == {"Completed": {"source": "Protocol"}}
        # A call outside any turn: any request on the session streams it; its answer has no
        # turn to stream and ends at once.
        client = BlockingMcp(opened["session"]["tools_url"]).initialize()
        outside = InThread(lambda: client.call("lookup", {"word": "idle"}))
        deadline = time.monotonic() + 20
        request_id = None
        while request_id is None:
            assert time.monotonic() < deadline, "the call was never streamed"
            for line in proc.request({"op": "info"}):
                if line["kind"] == "event" and kind_name(line["event"]["kind"]) == "RequestOpened":
                    assert line["event"]["turn_info"] is None
                    request_id = line["event"]["kind"]["RequestOpened"]["ToolCall"]["id"]
            time.sleep(0.05)
        answered = result_of(proc.request({"op": "answer", "request": request_id, "answer": text_result("idle")}))
        assert answered["ok"] and "stop" not in answered and "turn_id" not in answered
        assert outside.result()["content"][0]["text"] == "idle"
        client.close()
    finally:
        proc.stop()
