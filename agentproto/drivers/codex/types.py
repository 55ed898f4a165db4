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

    class PatchKind(TypedDict, total=False):
        type: str  # add, delete, update
        move_path: str | None

    class FileChange(TypedDict, total=False):
        path: str
        kind: PatchKind
        diff: str

    class ItemError(TypedDict, total=False):
        message: str

    class McpContent(TypedDict, total=False):
        type: str
        text: str

    class McpResult(TypedDict, total=False):
        content: list[McpContent]
        structuredContent: Any

    class WebSearchAction(TypedDict, total=False):
        type: str  # search, openPage, ...
        url: str
        query: str

    class ThreadItem(TypedDict, total=False):
        """One ``item`` of item/started and item/completed (its ``type`` says which members
        it has: agentMessage, reasoning, commandExecution, fileChange, mcpToolCall, ...)."""

        type: str
        id: str
        status: str  # inProgress, completed, failed, declined
        text: str
        # commandExecution
        command: str
        cwd: str
        exitCode: int | None
        aggregatedOutput: str | None
        commandActions: list[JsonObject]
        # fileChange
        changes: list[FileChange]
        # mcpToolCall, dynamicToolCall, collabAgentToolCall
        server: str
        tool: str
        arguments: Any  # the tool's arguments, as the model gave them
        result: McpResult | None
        error: ItemError | None
        prompt: str
        receiverThreadIds: list[str]
        # webSearch
        query: str
        action: WebSearchAction
        # imageView
        path: str

    class PlanStep(TypedDict, total=False):
        step: str
        status: str  # pending, inProgress, completed

    class ReasoningEffort(TypedDict, total=False):
        reasoningEffort: str
        description: str

    class Model(TypedDict, total=False):
        """One entry of ``model/list``."""

        id: str
        model: str
        displayName: str
        description: str
        supportedReasoningEfforts: list[ReasoningEffort]
        hidden: bool

    class Account(TypedDict, total=False):
        type: str  # chatgpt, apiKey, ...
        email: str
        planType: str

    class AccountReply(TypedDict, total=False):
        """The result of ``account/read``."""

        account: Account | None
        requiresOpenaiAuth: bool

    class TurnError(TypedDict, total=False):
        message: str
        codexErrorInfo: Any  # "unauthorized", or {variant: {"httpStatusCode": ...}}
        additionalDetails: str | None

    class McpServerEntry(TypedDict, total=False):
        """One server of Codex's ``mcp_servers`` table (``-c``)."""

        command: str
        args: list[str]
        env_vars: list[str]
        url: str
        env_http_headers: dict[str, str]

    class SandboxPolicy(TypedDict, total=False):
        type: str  # readOnly, workspaceWrite, dangerFullAccess
        networkAccess: bool
        writableRoots: list[str]
        excludeTmpdirEnvVar: bool
        excludeSlashTmp: bool

    # -- notifications and requests ------------------------------------------------------

    class TurnInfo(TypedDict, total=False):
        id: str
        status: str  # completed, interrupted, failed
        error: TurnError | None

    class TokenCounts(TypedDict, total=False):
        inputTokens: int
        cachedInputTokens: int
        outputTokens: int
        totalTokens: int

    class TokenUsage(TypedDict, total=False):
        total: TokenCounts
        last: TokenCounts
        modelContextWindow: int | None

    class NotificationParams(TypedDict, total=False):
        """The ``params`` of the notifications the driver reads: each method has some of
        these members (``threadId`` and ``turnId`` most of them)."""

        threadId: str
        turnId: str
        itemId: str
        requestId: Any  # serverRequest/resolved: the id of the request Codex settled
        turn: TurnInfo
        item: ThreadItem
        message: str
        summary: str
        details: str | None
        error: TurnError
        willRetry: bool
        threadName: str
        tokenUsage: TokenUsage
        plan: list[PlanStep]
        summaryIndex: int
        delta: str
        changes: list[FileChange]

    class UserInputOption(TypedDict, total=False):
        label: str
        description: str

    class UserInputQuestion(TypedDict, total=False):
        id: str
        header: str
        question: str
        isOther: bool
        options: list[UserInputOption]

    class ElicitationMeta(TypedDict, total=False):
        codex_approval_kind: str
        tool_name: str
        tool_params: Any  # the tool's arguments
        persist: list[str]

    class RequestParams(TypedDict, total=False):
        """The ``params`` of the requests the driver answers: approvals (command, file
        change, permissions), ``item/tool/requestUserInput`` and MCP elicitations."""

        threadId: str
        turnId: str
        itemId: str
        command: str
        cwd: str
        reason: str | None
        grantRoot: str | None
        permissions: JsonObject | None  # what the agent asks to be granted
        availableDecisions: list[Any]  # names, or {variant: {...}} objects
        questions: list[UserInputQuestion]
        serverName: str
        message: str
        _meta: ElicitationMeta

    # -- what the driver sends -----------------------------------------------------------

    class ThreadParams(TypedDict, total=False):
        """thread/start, thread/resume and thread/fork's params."""

        cwd: str
        approvalPolicy: str
        model: str
        sandbox: str
        config: dict[str, str | float]  # dotted config keys (mapping.app_server_config)
        developerInstructions: str
        threadId: str
        lastTurnId: str
        ephemeral: bool

    class InputItem(TypedDict, total=False):
        type: str  # text, localImage
        text: str
        text_elements: list[Any]
        path: str

    class CollaborationSettings(TypedDict):
        model: str
        reasoning_effort: str | None
        developer_instructions: str | None

    class CollaborationMode(TypedDict):
        mode: str
        settings: CollaborationSettings

    class TurnStartParams(TypedDict, total=False):
        threadId: str | None
        input: list[InputItem]
        model: str
        effort: str
        sandboxPolicy: SandboxPolicy
        collaborationMode: CollaborationMode
        outputSchema: Any  # the app's JSON Schema, as it gave it

    class QuestionAnswer(TypedDict):
        answers: list[str]
