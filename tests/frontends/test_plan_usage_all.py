"""``plan_usage_all`` on every framing that has ``plan_usage``: protocol 1 on stdio and on a
Unix socket, the ops framing (single-shot, HTTP), JSON-RPC, the MCP server's tool, and the
Python client. One row per discovered agent, in discover's order: its AgentInstallation and
its PlanUsage (a mock script's ``plan_usage``), or the typed error of why it has none.

The wire shape is agentproto's reading of anyagent HEAD's API (its schema could not be
fetched); every line is still checked against agentproto/schema.json.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from ops_support import ROOT, Proc, done_of, result_of, single_shot
from sidecar import _REFERENCE, _SCHEMA, Sidecar, base_env

import fake_openai as fo
from agentproto.client import Runtime

USAGE = {
    "plan": "max",
    "windows": [
        {"label": "Session", "used_percent": 12, "resets_at": {"secs_since_epoch": 1796500000, "nanos_since_epoch": 0}},
        {"label": "Week", "used_percent": 40, "resets_at": None},
    ],
    "reset_credits": {"available": 1, "next_expires_at": None},
}


def check(definition: str, value: Any, schema: dict[str, Any] = _SCHEMA) -> None:
    validator = jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]})
    errors = list(validator.iter_errors(value))
    assert not errors, (definition, errors[0].message, value)


def check_rows(rows: Any) -> None:
    """Rows as the schema says, each PlanUsage a reference one too."""
    jsonschema.Draft7Validator({**_SCHEMA["properties"]["plan_usage_all"], "definitions": _SCHEMA["definitions"]}).validate(rows)
    for row in rows:
        assert ("plan_usage" in row) != ("error" in row), row
        if "plan_usage" in row:
            check("PlanUsage", row["plan_usage"], _REFERENCE)


def check_mock_row(row: dict[str, Any]) -> None:
    assert row["agent"]["id"] == "mock" and row["agent"]["version"] == "mock"
    usage = row["plan_usage"]
    assert {k: usage[k] for k in USAGE} == USAGE
    assert usage["fetched_at"]["secs_since_epoch"] > 0  # the mock's clock filled it in


@pytest.fixture
def plan_script(tmp_path: Path) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"plan_usage": USAGE}))
    return str(path)


# -- protocol 1 ------------------------------------------------------------------------------


def test_protocol_1_stdio_rows_follow_discover(plan_script: str, tmp_path: Path) -> None:
    with Sidecar(["--mock", plan_script]) as sc:
        agents = sc.ok({"cmd": "discover"})["agents"]
        rows = sc.ok({"cmd": "plan_usage_all"})
        check_rows(rows)
        assert [row["agent"] for row in rows] == agents
        check_mock_row(rows[0])
        assert sc.ok({"cmd": "plan_usage_all", "dir": str(tmp_path), "agent_timeout": 5})[0]["plan_usage"]["plan"] == "max"
        # The bad ones are refused as a whole, never half-answered.
        assert sc.error({"cmd": "plan_usage_all", "agent_timeout": 0})["kind"] == "BadFrame"
        assert sc.error({"cmd": "plan_usage_all", "dir": 5})["kind"] == "BadFrame"
        missing = sc.error({"cmd": "plan_usage_all", "dir": str(tmp_path / "gone")})
        assert missing["kind"] == "InvalidConfiguration" and "dir is not a directory" in missing["message"]
        # The mock with a plan says so in its features.
        assert "PlanUsage" in sc.ok({"cmd": "probe", "agent": "mock"})["capabilities"]["features"]


def test_anyagents_mock_has_no_plan_usage_and_says_why(tmp_path: Path) -> None:
    with Sidecar(["--mock", str(ROOT / "fixtures" / "mock-scripts" / "turn.json")]) as sc:
        rows = sc.ok({"cmd": "plan_usage_all"})
        check_rows(rows)
        assert [(r["agent"]["id"], r["error"]["kind"]) for r in rows] == [("mock", "UnsupportedFeature")]
        assert "PlanUsage" not in sc.ok({"cmd": "probe", "agent": "mock"})["capabilities"]["features"]


@pytest.mark.not_core("the pinned Codex CLI (npm)")
def test_every_discovered_agent_gets_a_row_with_its_typed_reason(tmp_path: Path) -> None:
    """A plain serve: the mock (echo), the pinned Codex and an agent of the user's agents.json,
    in discover's order, each with its typed reason: the echo mock and the declared agent
    read no plan (UnsupportedFeature); Codex does, but under an empty HOME it is not logged
    in (AuthRequired: tests/drivers/codex/test_codex_plan_usage.py reads a real plan)."""
    config = tmp_path / "config"
    (config / "agentproto").mkdir(parents=True)
    os.chmod(config / "agentproto", 0o700)
    declared = config / "agentproto" / "agents.json"
    declared.write_text(json.dumps({"agents": {"mine": {"command": "/bin/true", "version_args": []}}}))
    os.chmod(declared, 0o600)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(config), "AGENTPROTO_CODEX_BIN": fo.pinned_codex()}
    with Sidecar(env=env) as sc:
        agents = sc.ok({"cmd": "discover"}, timeout=30)["agents"]
        rows = sc.ok({"cmd": "plan_usage_all"}, timeout=30)
        check_rows(rows)
        assert [row["agent"] for row in rows] == agents
        ids = [row["agent"]["id"] for row in rows]
        assert ids[0] == "mock" and "codex" in ids and ids[-1] == "mine"
        kinds = {row["agent"]["id"]: row["error"]["kind"] for row in rows}
        assert kinds.pop("codex") == "AuthRequired", rows
        assert set(kinds.values()) == {"UnsupportedFeature"}, rows
        assert sc.close() == 0


def test_protocol_1_on_a_unix_socket(plan_script: str, tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    server = Proc(["serve", "--transport", "unix", "--listen", path, "--mock", plan_script])
    try:
        server.banner(f"listening on {path}")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(15)
            conn.connect(path)
            lines = conn.makefile("rb")
            assert "hello" in json.loads(lines.readline())
            conn.sendall(b'{"id": 7, "cmd": "plan_usage_all"}\n')
            reply = json.loads(lines.readline())
            assert reply["id"] == 7
            check_rows(reply["ok"])
            check_mock_row(reply["ok"][0])
    finally:
        server.stop()


# -- the ops framing, JSON-RPC, MCP ---------------------------------------------------------


def test_single_shot(plan_script: str) -> None:
    code, lines = single_shot('{"op": "plan_usage_all"}', "--mock", plan_script)
    assert code == 0 and done_of(lines) == 0
    result = result_of(lines)
    assert result["op"] == "plan_usage_all" and result["ok"] is True
    check_rows(result["plan_usage_all"])
    check_mock_row(result["plan_usage_all"][0])
    code, lines = single_shot('{"op": "plan_usage_all", "agent_timeout": -1}', "--mock", plan_script)
    assert code == 2 and "invalid `agent_timeout`" in lines[0]["message"]


def test_http(plan_script: str) -> None:
    import http.client

    server = Proc(["serve", "--transport", "http", "--port", "0", "--mock", plan_script])
    try:
        match = server.banner(r"listening on http://([\d.]+):(\d+)/")
        conn = http.client.HTTPConnection(match.group(1), int(match.group(2)), timeout=20)
        conn.request("POST", "/v1/agent", body=b'{"op": "plan_usage_all"}')
        response = conn.getresponse()
        assert response.status == 200
        lines = [json.loads(line) for line in response.read().splitlines()]
        conn.close()
        result = result_of(lines)
        check("OpsResult", result)
        check_mock_row(result["plan_usage_all"][0])
    finally:
        server.stop()


def test_jsonrpc(plan_script: str) -> None:
    rpc = Proc(["serve", "--transport", "jsonrpc", "--mock", plan_script])
    try:
        for rpc_id, method, params in ((1, "plan_usage_all", {}), (2, "request", {"op": "plan_usage_all"})):
            rpc.send({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params})
            line = rpc.line()
            assert line["id"] == rpc_id, line
            check("OpsResult", {"kind": "result", **line["result"]})
            check_mock_row(line["result"]["plan_usage_all"][0])
    finally:
        rpc.stop()


def test_mcp_tool(plan_script: str) -> None:
    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentproto", "serve", "--transport", "mcp", "--mock", plan_script],
            env=base_env(),
            cwd=str(ROOT),
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                with anyio.fail_after(60):
                    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
                    called = await session.call_tool("agentproto_plan_usage_all", {})
                    return tools, called

    tools, called = anyio.run(main)
    schema = tools["agentproto_plan_usage_all"].input_schema
    assert set(schema["properties"]) == {"dir", "agent_timeout"} and not schema.get("required")
    assert called.is_error is False
    rows = called.structured_content["plan_usage_all"]
    check_rows(rows)
    check_mock_row(rows[0])
    assert json.loads(called.content[0].text)["plan_usage_all"] == rows


# -- the Python client ----------------------------------------------------------------------


def test_python_client() -> None:
    with Runtime.start(mock={"plan_usage": USAGE}) as rt:
        rows = rt.plan_usage_all()
        check_rows(rows)
        check_mock_row(rows[0])
        assert [row["agent"] for row in rows] == rt.discover()["agents"]
        assert rt.plan_usage_all(agent_timeout=5.0)[0]["plan_usage"]["plan"] == "max"
        with pytest.raises(TypeError, match="agent_timeout"):
            rt.plan_usage_all(agent_timout=5)
    with Runtime.start(mock={"turns": []}) as rt:
        assert [row["error"]["kind"] for row in rt.plan_usage_all()] == ["UnsupportedFeature"]


def test_a_bad_plan_usage_in_a_script_is_refused_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"plan_usage": {"windows": [{"label": "Session", "used_percent": "most"}]}}))
    import subprocess

    done = subprocess.run([sys.executable, "-m", "agentproto", "serve", "--mock", str(bad)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert "plan_usage: not a valid PlanUsage: $.windows[0].used_percent: expected integer" in done.stderr, done.stderr
