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

    class ErrorInfo(TypedDict, total=False):
        message: str
        type: str

    class Usage(TypedDict, total=False):
        input_tokens: int
        output_tokens: int
        thinking_tokens: int
        cache_read_tokens: int
        total_tokens: int

    class ResultBody(TypedDict, total=False):
        """The body of a ``result`` line: the end of a turn, or of a start that failed."""

        status: str  # SUCCESS, ERROR, ...
        error: Union[str, ErrorInfo, None]
        usage: Usage
        conversation_id: str

    class ToolInfo(TypedDict, total=False):
        """A ``tool`` step's ``tool_info``."""

        name: str
        parameters: JsonObject  # the tool's arguments, as the model gave them
        output: str
        error: Union[str, ErrorInfo, None]

    class StepBody(TypedDict, total=False):
        """The body of a ``step`` line."""

        step_type: str  # user_input, agent_response, tool, system_message
        step_index: int
        state: str  # RUNNING, DONE, ERROR
        text: str
        message: str
        text_delta: str
        usage: Usage
        tool_name: str
        tool_info: ToolInfo
        conversation_id: str

    # -- what the driver writes ----------------------------------------------------------

    class TextBlock(TypedDict):
        type: str  # "text"
        text: str

    class UserBody(TypedDict):
        role: str
        content: list[TextBlock]

    class UserLine(TypedDict):
        event: str  # "user"
        message: UserBody

    class McpEntry(TypedDict, total=False):
        """One server of ``mcp_config.json``."""

        command: str
        args: list[str]
        env: dict[str, str]
        url: str
        headers: dict[str, str]

    class McpConfig(TypedDict):
        mcpServers: dict[str, McpEntry]

    class HookHandler(TypedDict):
        type: str  # "command"
        command: str
        timeout: float
