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

    from typing_extensions import NotRequired

    from agentproto.core.wire_types import JsonObject, ToolUpdate

    ToolLocation = TypedDict("ToolLocation", {"path": str, "line": int | None}, total=False)

    #: One ``content`` item of a tool call: ``content``, ``diff`` or ``terminal``.
    #: content: a content block
    ToolCallContent = TypedDict("ToolCallContent", {"type": str, "content": Any, "path": str, "oldText": str | None,
        "newText": str, "terminalId": str}, total=False)

    #: The members of ``tool_call`` / ``tool_call_update`` the driver folds together.
    #: rawInput: the tool's input, as the agent gave it
    #: _meta: per-agent extensions ({"claudeCode": {"toolName": ...}})
    AcpToolFields = TypedDict("AcpToolFields", {"title": str, "kind": str, "status": str,
        "content": list[ToolCallContent], "locations": list[ToolLocation], "rawInput": Any, "rawOutput": Any,
        "_meta": JsonObject | None}, total=False)

    class AcpToolCall(AcpToolFields, total=False):
        """A ``tool_call`` or ``tool_call_update`` (with its ``sessionUpdate`` tag)."""

        toolCallId: str
        sessionUpdate: str

    class AcpToolSnapshot(ToolUpdate):
        """A ToolUpdate as the driver keeps it: the ACP fields seen so far, and the
        terminals its content embeds (both stripped by ``public_tool``)."""

        _acp: AcpToolFields
        _terminals: list[str]

    Cost = TypedDict("Cost", {"amount": float, "currency": str}, total=False)

    #: ``session/update``'s ``usage_update``.
    UsageUpdate = TypedDict("UsageUpdate", {"sessionUpdate": str, "used": int, "size": int | None,
        "cost": Cost | None}, total=False)

    CommandInput = TypedDict("CommandInput", {"hint": str}, total=False)

    AvailableCommand = TypedDict("AvailableCommand", {"name": str, "description": str,
        "input": CommandInput | None}, total=False)

    PlanItem = TypedDict("PlanItem", {"content": str, "priority": str, "status": str}, total=False)

    #: kind: allow_once, allow_always, reject_once, reject_always
    PermissionOption = TypedDict("PermissionOption", {"optionId": str, "name": str, "kind": str}, total=False)

    #: outcome: "selected"
    Selected = TypedDict("Selected", {"outcome": str, "optionId": str})

    #: outcome: "cancelled"
    Cancelled = TypedDict("Cancelled", {"outcome": str})

    PermissionOutcome = Union[Selected, Cancelled]

    EnvVariable = TypedDict("EnvVariable", {"name": str, "value": str})

    StdioMcpServer = TypedDict("StdioMcpServer", {"name": str, "command": str, "args": list[str],
        "env": list[EnvVariable]})

    #: type: http, sse
    HttpMcpServer = TypedDict("HttpMcpServer", {"type": str, "name": str, "url": str, "headers": list[EnvVariable]})

    McpServerEntry = Union[StdioMcpServer, HttpMcpServer]

    # -- session/update payloads (by their ``sessionUpdate``) ------------------------------

    #: ``agent_message_chunk``, ``agent_thought_chunk``, ``user_message_chunk``.
    #: content: a content block: text, image, resource_link, resource ...
    ContentChunk = TypedDict("ContentChunk", {"sessionUpdate": str, "content": Any,
        "messageId": str | None}, total=False)

    PlanUpdate = TypedDict("PlanUpdate", {"sessionUpdate": str, "entries": list[PlanItem]}, total=False)

    CommandsUpdate = TypedDict("CommandsUpdate", {"sessionUpdate": str,
        "availableCommands": list[AvailableCommand]}, total=False)

    #: modeId: older agents' name of it
    ModeUpdate = TypedDict("ModeUpdate", {"sessionUpdate": str, "currentModeId": str, "modeId": str}, total=False)

    #: configOptions: ACP SessionConfigOption: mapped by map_config_options
    ConfigOptionsUpdate = TypedDict("ConfigOptionsUpdate", {"sessionUpdate": str,
        "configOptions": list[JsonObject]}, total=False)

    SessionInfoUpdate = TypedDict("SessionInfoUpdate", {"sessionUpdate": str, "title": str | None}, total=False)

    #: ``session/request_permission``'s params.
    PermissionParams = TypedDict("PermissionParams", {"sessionId": str, "toolCall": AcpToolCall,
        "options": list[PermissionOption]}, total=False)

    # -- what the client serves: fs/* and terminal/* answers -------------------------------

    ExitStatus = TypedDict("ExitStatus", {"exitCode": int | None, "signal": str | None})

    CreatedTerminal = TypedDict("CreatedTerminal", {"terminalId": str})

    #: exitStatus: once the command has exited
    TerminalOutput = TypedDict(
        "TerminalOutput", {"output": str, "truncated": bool, "exitStatus": NotRequired[ExitStatus]}
    )

    ReadTextFile = TypedDict("ReadTextFile", {"content": str})
