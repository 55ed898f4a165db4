"""Antigravity's (``agy``) stream-json lines as mypy types (as the CLI writes them:
tests/drivers/agy/ holds captured lines).

Rules of this file:
- Types only, for mypy: declared under ``if TYPE_CHECKING:`` and imported only under
  ``if TYPE_CHECKING:`` (no start-up cost; nothing here exists at run time).
- A line is ``{"event": E, E: {...}}``: its body sits under the key its event names, so the
  mappings take the body (``body_of``) and these types describe bodies. Every member is
  optional (``total=False``); the mappings still check each value they read.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypedDict, Union

    from agentproto.core.wire_types import JsonObject

    ErrorInfo = TypedDict("ErrorInfo", {"message": str, "type": str}, total=False)

    Usage = TypedDict("Usage", {"input_tokens": int, "output_tokens": int, "thinking_tokens": int,
        "cache_read_tokens": int, "total_tokens": int}, total=False)

    #: The body of a ``result`` line: the end of a turn, or of a start that failed.
    #: status: SUCCESS, ERROR, ...
    ResultBody = TypedDict("ResultBody", {"status": str, "error": Union[str, ErrorInfo, None], "usage": Usage,
        "conversation_id": str}, total=False)

    #: A ``tool`` step's ``tool_info``.
    #: parameters: the tool's arguments, as the model gave them
    ToolInfo = TypedDict("ToolInfo", {"name": str, "parameters": JsonObject, "output": str,
        "error": Union[str, ErrorInfo, None]}, total=False)

    #: The body of a ``step`` line.
    #: step_type: user_input, agent_response, tool, system_message
    #: state: RUNNING, DONE, ERROR
    StepBody = TypedDict("StepBody", {"step_type": str, "step_index": int, "state": str, "text": str, "message": str,
        "text_delta": str, "usage": Usage, "tool_name": str, "tool_info": ToolInfo,
        "conversation_id": str}, total=False)

    # -- what the driver writes ----------------------------------------------------------

    #: type: "text"
    TextBlock = TypedDict("TextBlock", {"type": str, "text": str})

    UserBody = TypedDict("UserBody", {"role": str, "content": list[TextBlock]})

    #: event: "user"
    UserLine = TypedDict("UserLine", {"event": str, "message": UserBody})

    #: One server of ``mcp_config.json``.
    McpEntry = TypedDict("McpEntry", {"command": str, "args": list[str], "env": dict[str, str], "url": str,
        "headers": dict[str, str]}, total=False)

    McpConfig = TypedDict("McpConfig", {"mcpServers": dict[str, McpEntry]})

    #: type: "command"
    HookHandler = TypedDict("HookHandler", {"type": str, "command": str, "timeout": float})
