"""MCP's and JSON-RPC's messages as mypy types: what core/mcp.py, core/jsonrpc.py, the app's
tools (tools/) and the MCP frontend send and read.

Rules of this file:
- Types only, for mypy: declared under ``if TYPE_CHECKING:`` and imported only under
  ``if TYPE_CHECKING:`` (no start-up cost; nothing here exists at run time).
- Members follow the MCP specification's names (camelCase); what a peer sends us is
  ``total=False`` and still checked where it is read.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypedDict, Union

    from typing_extensions import NotRequired

    from agentproto.core.wire_types import JsonObject

    # -- JSON-RPC 2.0 --------------------------------------------------------------------

    class RpcErrorBody(TypedDict):
        code: int
        message: str
        data: NotRequired[Any]

    class RpcMessage(TypedDict, total=False):
        """A request, notification or response (which members it has says which)."""

        jsonrpc: str
        id: Any  # a number or a string (null in an error that could not read one)
        method: str
        params: Any
        result: Any
        error: RpcErrorBody

    # -- MCP tools -----------------------------------------------------------------------

    class McpTool(TypedDict):
        """One entry of ``tools/list``."""

        name: str
        description: str
        inputSchema: JsonObject  # a JSON Schema
        outputSchema: NotRequired[JsonObject]
        title: NotRequired[str]

    class McpTextContent(TypedDict):
        type: str  # "text"
        text: str

    class McpImageContent(TypedDict):
        type: str  # "image"
        data: str
        mimeType: str

    McpContent = Union[McpTextContent, McpImageContent]

    class CallToolResult(TypedDict):
        content: list[McpContent]
        isError: bool
        structuredContent: NotRequired[JsonObject]

    class ServerInfo(TypedDict):
        name: str
        title: NotRequired[str]
        version: str

    class InitializeResult(TypedDict):
        protocolVersion: str
        capabilities: JsonObject
        serverInfo: ServerInfo
        instructions: NotRequired[str]

    class ProgressParams(TypedDict):
        progressToken: Any
        progress: int
        message: str
        total: NotRequired[float]
