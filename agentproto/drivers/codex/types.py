"""Codex app-server's messages as mypy types (v2 protocol, as the pinned CLI speaks it:
tests/drivers/codex/ holds captured lines).

Rules of this file:
- Types only, for mypy: declared under ``if TYPE_CHECKING:`` and imported only under
  ``if TYPE_CHECKING:`` (no start-up cost; nothing here exists at run time).
- What the app-server writes is input we do not control: every member is optional
  (``total=False``) and typed as its schema says; the mappings still check each value they
  read (drivers/fields.py) before trusting that type.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypedDict

    from agentproto.core.wire_types import JsonObject

    #: type: add, delete, update
    PatchKind = TypedDict("PatchKind", {"type": str, "move_path": str | None}, total=False)

    FileChange = TypedDict("FileChange", {"path": str, "kind": PatchKind, "diff": str}, total=False)

    ItemError = TypedDict("ItemError", {"message": str}, total=False)

    McpContent = TypedDict("McpContent", {"type": str, "text": str}, total=False)

    McpResult = TypedDict("McpResult", {"content": list[McpContent], "structuredContent": Any}, total=False)

    #: type: search, openPage, ...
    WebSearchAction = TypedDict("WebSearchAction", {"type": str, "url": str, "query": str}, total=False)

    #: One ``item`` of item/started and item/completed (its ``type`` says which members
    #: it has: agentMessage, reasoning, commandExecution, fileChange, mcpToolCall, ...).
    #: status: inProgress, completed, failed, declined
    #: arguments: the tool's arguments, as the model gave them
    #: commandExecution
    #: fileChange
    #: mcpToolCall, dynamicToolCall, collabAgentToolCall
    #: webSearch
    #: imageView
    ThreadItem = TypedDict("ThreadItem", {"type": str, "id": str, "status": str, "text": str, "command": str,
        "cwd": str, "exitCode": int | None, "aggregatedOutput": str | None, "commandActions": list[JsonObject],
        "changes": list[FileChange], "server": str, "tool": str, "arguments": Any, "result": McpResult | None,
        "error": ItemError | None, "prompt": str, "receiverThreadIds": list[str], "query": str,
        "action": WebSearchAction, "path": str}, total=False)

    #: status: pending, inProgress, completed
    PlanStep = TypedDict("PlanStep", {"step": str, "status": str}, total=False)

    ReasoningEffort = TypedDict("ReasoningEffort", {"reasoningEffort": str, "description": str}, total=False)

    #: One entry of ``model/list``.
    Model = TypedDict("Model", {"id": str, "model": str, "displayName": str, "description": str,
        "supportedReasoningEfforts": list[ReasoningEffort], "hidden": bool}, total=False)

    #: type: chatgpt, apiKey, ...
    Account = TypedDict("Account", {"type": str, "email": str, "planType": str}, total=False)

    #: The result of ``account/read``.
    AccountReply = TypedDict("AccountReply", {"account": Account | None, "requiresOpenaiAuth": bool}, total=False)

    #: codexErrorInfo: "unauthorized", or {variant: {"httpStatusCode": ...}}
    TurnError = TypedDict("TurnError", {"message": str, "codexErrorInfo": Any,
        "additionalDetails": str | None}, total=False)

    #: One server of Codex's ``mcp_servers`` table (``-c``).
    McpServerEntry = TypedDict("McpServerEntry", {"command": str, "args": list[str], "env_vars": list[str], "url": str,
        "env_http_headers": dict[str, str]}, total=False)

    #: type: readOnly, workspaceWrite, dangerFullAccess
    SandboxPolicy = TypedDict("SandboxPolicy", {"type": str, "networkAccess": bool, "writableRoots": list[str],
        "excludeTmpdirEnvVar": bool, "excludeSlashTmp": bool}, total=False)

    # -- notifications and requests ------------------------------------------------------

    #: status: completed, interrupted, failed
    TurnInfo = TypedDict("TurnInfo", {"id": str, "status": str, "error": TurnError | None}, total=False)

    TokenCounts = TypedDict("TokenCounts", {"inputTokens": int, "cachedInputTokens": int, "outputTokens": int,
        "totalTokens": int}, total=False)

    TokenUsage = TypedDict("TokenUsage", {"total": TokenCounts, "last": TokenCounts,
        "modelContextWindow": int | None}, total=False)

    #: The ``params`` of the notifications the driver reads: each method has some of
    #: these members (``threadId`` and ``turnId`` most of them).
    #: requestId: serverRequest/resolved: the id of the request Codex settled
    NotificationParams = TypedDict("NotificationParams", {"threadId": str, "turnId": str, "itemId": str,
        "requestId": Any, "turn": TurnInfo, "item": ThreadItem, "message": str, "summary": str, "details": str | None,
        "error": TurnError, "willRetry": bool, "threadName": str, "tokenUsage": TokenUsage, "plan": list[PlanStep],
        "summaryIndex": int, "delta": str, "changes": list[FileChange]}, total=False)

    UserInputOption = TypedDict("UserInputOption", {"label": str, "description": str}, total=False)

    UserInputQuestion = TypedDict("UserInputQuestion", {"id": str, "header": str, "question": str, "isOther": bool,
        "options": list[UserInputOption]}, total=False)

    #: tool_params: the tool's arguments
    ElicitationMeta = TypedDict("ElicitationMeta", {"codex_approval_kind": str, "tool_name": str, "tool_params": Any,
        "persist": list[str]}, total=False)

    #: The ``params`` of the requests the driver answers: approvals (command, file
    #: change, permissions), ``item/tool/requestUserInput`` and MCP elicitations.
    #: permissions: what the agent asks to be granted
    #: availableDecisions: names, or {variant: {...}} objects
    RequestParams = TypedDict("RequestParams", {"threadId": str, "turnId": str, "itemId": str, "command": str,
        "cwd": str, "reason": str | None, "grantRoot": str | None, "permissions": JsonObject | None,
        "availableDecisions": list[Any], "questions": list[UserInputQuestion], "serverName": str, "message": str,
        "_meta": ElicitationMeta}, total=False)

    # -- what the driver sends -----------------------------------------------------------

    #: thread/start, thread/resume and thread/fork's params.
    #: config: dotted config keys (mapping.app_server_config)
    ThreadParams = TypedDict("ThreadParams", {"cwd": str, "approvalPolicy": str, "model": str, "sandbox": str,
        "config": dict[str, str | float], "developerInstructions": str, "threadId": str, "lastTurnId": str,
        "ephemeral": bool}, total=False)

    #: type: text, localImage
    InputItem = TypedDict("InputItem", {"type": str, "text": str, "text_elements": list[Any], "path": str}, total=False)

    CollaborationSettings = TypedDict("CollaborationSettings", {"model": str, "reasoning_effort": str | None,
        "developer_instructions": str | None})

    CollaborationMode = TypedDict("CollaborationMode", {"mode": str, "settings": CollaborationSettings})

    #: outputSchema: the app's JSON Schema, as it gave it
    TurnStartParams = TypedDict("TurnStartParams", {"threadId": str | None, "input": list[InputItem], "model": str,
        "effort": str, "sandboxPolicy": SandboxPolicy, "collaborationMode": CollaborationMode,
        "outputSchema": Any}, total=False)

    QuestionAnswer = TypedDict("QuestionAnswer", {"answers": list[str]})
