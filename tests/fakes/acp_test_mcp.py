"""The ACP test agent's MCP client (tests/fakes/acp_test_agent.py): it calls a tool of an MCP
server the client gave at ``session/new`` the way a real agent does, with the official MCP
SDK's client, over the entry's own transport: ``http`` (Streamable HTTP to its URL) or
stdio (the entry's command, args and env, as a child process of the agent)."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client, StdioServerParameters


def entry_named(servers: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((s for s in servers if s.get("name") == name), None)


def transport_of(entry: dict[str, Any]) -> str:
    return "http" if entry.get("type") == "http" else "stdio"


def _target(entry: dict[str, Any], cwd: str) -> Any:
    if transport_of(entry) == "http":
        return entry["url"]
    env = {pair["name"]: pair["value"] for pair in entry.get("env") or []}
    return StdioServerParameters(command=entry["command"], args=list(entry.get("args") or []), env=env, cwd=cwd)


async def call_tool(entry: dict[str, Any], cwd: str, tool: str, arguments: dict[str, Any]) -> tuple[list[str], str, bool]:
    """(the server's tool names, the result's text, whether it is an error)."""
    async with Client(_target(entry, cwd)) as client:
        listed = await client.list_tools()
        result = await client.call_tool(tool, arguments)
    text = "\n".join(getattr(part, "text", "") for part in result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content)
    return [t.name for t in listed.tools], text, bool(result.is_error)
