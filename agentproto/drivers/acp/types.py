"""The Agent Client Protocol's messages as mypy types: what the ACP driver reads from an
agent (``session/update`` payloads, tool calls, config options, auth methods) and writes
(``mcpServers`` entries, permission outcomes), named as the ACP schema names them.

Rules of this file:
- Types only, for mypy: declared under ``if TYPE_CHECKING:`` and imported only under
  ``if TYPE_CHECKING:`` (no start-up cost; nothing here exists at run time).
- What an agent writes is input we do not control: every member is optional
  (``total=False``) and typed as the spec says; the mappings still check each value they
  read (drivers/fields.py) before trusting that type.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypedDict, Union

    from agentproto.core.wire_types import JsonObject, ToolUpdate

    class ToolLocation(TypedDict, total=False):
        path: str
        line: int | None

    class ToolCallContent(TypedDict, total=False):
        """One ``content`` item of a tool call: ``content``, ``diff`` or ``terminal``."""

        type: str
        content: Any  # a content block
        path: str
        oldText: str | None
        newText: str
        terminalId: str

    class AcpToolFields(TypedDict, total=False):
        """The members of ``tool_call`` / ``tool_call_update`` the driver folds together."""

        title: str
        kind: str
        status: str
        content: list[ToolCallContent]
        locations: list[ToolLocation]
        rawInput: Any  # the tool's input, as the agent gave it
        rawOutput: Any
        _meta: JsonObject | None  # per-agent extensions ({"claudeCode": {"toolName": ...}})

    class AcpToolCall(AcpToolFields, total=False):
        """A ``tool_call`` or ``tool_call_update`` (with its ``sessionUpdate`` tag)."""

        toolCallId: str
        sessionUpdate: str

    class AcpToolSnapshot(ToolUpdate):
        """A ToolUpdate as the driver keeps it: the ACP fields seen so far, and the
        terminals its content embeds (both stripped by ``public_tool``)."""

        _acp: AcpToolFields
        _terminals: list[str]

    class Cost(TypedDict, total=False):
        amount: float
        currency: str

    class UsageUpdate(TypedDict, total=False):
        """``session/update``'s ``usage_update``."""

        sessionUpdate: str
        used: int
        size: int | None
        cost: Cost | None

    class CommandInput(TypedDict, total=False):
        hint: str

    class AvailableCommand(TypedDict, total=False):
        name: str
        description: str
        input: CommandInput | None

    class PlanItem(TypedDict, total=False):
        content: str
        priority: str
        status: str

    class PermissionOption(TypedDict, total=False):
        optionId: str
        name: str
        kind: str  # allow_once, allow_always, reject_once, reject_always

    class Selected(TypedDict):
        outcome: str  # "selected"
        optionId: str

    class Cancelled(TypedDict):
        outcome: str  # "cancelled"

    PermissionOutcome = Union[Selected, Cancelled]

    class EnvVariable(TypedDict):
        name: str
        value: str

    class StdioMcpServer(TypedDict):
        name: str
        command: str
        args: list[str]
        env: list[EnvVariable]

    class HttpMcpServer(TypedDict):
        type: str  # http, sse
        name: str
        url: str
        headers: list[EnvVariable]

    McpServerEntry = Union[StdioMcpServer, HttpMcpServer]

    # -- session/update payloads (by their ``sessionUpdate``) ------------------------------

    class ContentChunk(TypedDict, total=False):
        """``agent_message_chunk``, ``agent_thought_chunk``, ``user_message_chunk``."""

        sessionUpdate: str
        content: Any  # a content block: text, image, resource_link, resource ...
        messageId: str | None

    class PlanUpdate(TypedDict, total=False):
        sessionUpdate: str
        entries: list[PlanItem]

    class CommandsUpdate(TypedDict, total=False):
        sessionUpdate: str
        availableCommands: list[AvailableCommand]

    class ModeUpdate(TypedDict, total=False):
        sessionUpdate: str
        currentModeId: str
        modeId: str  # older agents' name of it

    class ConfigOptionsUpdate(TypedDict, total=False):
        sessionUpdate: str
        configOptions: list[JsonObject]  # ACP SessionConfigOption: mapped by map_config_options

    class SessionInfoUpdate(TypedDict, total=False):
        sessionUpdate: str
        title: str | None

    class PermissionParams(TypedDict, total=False):
        """``session/request_permission``'s params."""

        sessionId: str
        toolCall: AcpToolCall
        options: list[PermissionOption]
