"""Claude Code's stream-json messages and control protocol as mypy types (as observed on the
CLI 2.1.x: tests/drivers/claude/ holds captured lines).

Rules of this file:
- Types only, for mypy: declared under ``if TYPE_CHECKING:`` and imported only under
  ``if TYPE_CHECKING:`` (no start-up cost; nothing here exists at run time).
- What the CLI writes is input we do not control: every member is optional (``total=False``)
  and typed as the CLI documents it; the mappings still check each value they read
  (drivers/fields.py) before trusting that type.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypedDict, Union

    from typing_extensions import NotRequired

    from agentproto.core.wire_types import JsonObject

    # -- content blocks ------------------------------------------------------------------

    class Base64Source(TypedDict):
        type: str
        media_type: str | None
        data: str

    class TextBlock(TypedDict):
        type: str  # "text"
        text: str

    class ImageBlock(TypedDict):
        type: str  # "image"
        source: Base64Source

    #: A block of a user message the driver writes.
    InputBlock = Union[TextBlock, ImageBlock]

    class ContentBlock(TypedDict, total=False):
        """A block of a message the CLI writes: text, thinking, tool_use, tool_result, image."""

        type: str
        text: str
        thinking: str
        id: str
        name: str
        input: JsonObject  # a tool's arguments
        tool_use_id: str
        content: str | list[ContentBlock]
        is_error: bool

    class Usage(TypedDict, total=False):
        input_tokens: int
        output_tokens: int
        cache_read_input_tokens: int
        cache_creation_input_tokens: int

    class MessageBody(TypedDict, total=False):
        id: str
        role: str
        content: str | list[ContentBlock]
        usage: Usage

    # -- the messages of the stream ------------------------------------------------------

    class StreamDelta(TypedDict, total=False):
        type: str  # text_delta, thinking_delta, signature_delta, input_json_delta
        text: str
        thinking: str

    class ApiStreamEvent(TypedDict, total=False):
        type: str  # message_start, content_block_start, content_block_delta, message_stop ...
        index: int
        message: MessageBody
        content_block: ContentBlock
        delta: StreamDelta

    class StreamEventMessage(TypedDict, total=False):
        type: str  # "stream_event"
        event: ApiStreamEvent
        parent_tool_use_id: str | None
        session_id: str
        uuid: str

    class AssistantMessage(TypedDict, total=False):
        type: str  # "assistant"
        message: MessageBody
        parent_tool_use_id: str | None
        error: str  # a synthetic message's error: "authentication_failed", ...
        uuid: str
        session_id: str

    class UserMessage(TypedDict, total=False):
        type: str  # "user"
        message: MessageBody
        parent_tool_use_id: str | None
        isReplay: bool
        uuid: str
        session_id: str

    class ModelUsage(TypedDict, total=False):
        contextWindow: int

    class ResultMessage(TypedDict, total=False):
        type: str  # "result"
        subtype: str  # success, error_max_turns, error_during_execution ...
        is_error: bool
        result: str
        errors: list[str]
        stop_reason: str | None
        usage: Usage
        modelUsage: dict[str, ModelUsage]
        total_cost_usd: float
        session_id: str

    class SystemMessage(TypedDict, total=False):
        type: str  # "system"
        subtype: str  # init, api_retry, compact_boundary, status ...
        session_id: str
        error: str
        error_status: int | None
        attempt: int
        max_retries: int
        retry_delay_ms: int
        compact_result: str
        compact_error: str
        permissionMode: str

    # -- what the driver writes ----------------------------------------------------------

    class UserBody(TypedDict):
        role: str
        content: str | list[InputBlock]

    class UserInput(TypedDict):
        """A prompt on the CLI's stdin."""

        type: str  # "user"
        session_id: str
        message: UserBody
        parent_tool_use_id: None

    class McpEntry(TypedDict, total=False):
        """One server of ``--mcp-config``."""

        type: str  # stdio, http, sse
        command: str
        args: list[str]
        env: dict[str, str]
        url: str
        headers: dict[str, str]
        timeout: int
        alwaysLoad: bool

    class McpConfig(TypedDict):
        mcpServers: dict[str, McpEntry]

    class HookMatcher(TypedDict):
        matcher: str | None
        hookCallbackIds: list[str]

    class PermissionRule(TypedDict):
        toolName: str

    class PermissionUpdate(TypedDict, total=False):
        """One of ``updatedPermissions``: the CLI's own suggestions, or a rule of ours."""

        type: str  # addRules, addDirectories
        rules: list[PermissionRule]
        directories: list[str]
        behavior: str
        destination: str

    # -- the control protocol ------------------------------------------------------------

    class ModelInfo(TypedDict, total=False):
        value: str
        displayName: str
        description: str

    class CommandInfo(TypedDict, total=False):
        name: str
        description: str
        argumentHint: str

    class Account(TypedDict, total=False):
        email: str
        subscriptionType: str
        apiProvider: str
        tokenSource: str
        apiKeySource: str

    class InitializeResponse(TypedDict, total=False):
        """The ``response`` of the control request ``initialize``."""

        models: list[ModelInfo]
        commands: list[CommandInfo]
        account: Account

    class AskQuestionOption(TypedDict, total=False):
        label: str
        description: str

    class AskQuestion(TypedDict, total=False):
        question: str
        header: str
        options: list[AskQuestionOption]
        multiSelect: bool

    class AskUserQuestionInput(TypedDict, total=False):
        """The input of the CLI's AskUserQuestion tool."""

        questions: list[AskQuestion]

    class ControlRequestBody(TypedDict, total=False):
        """A control_request's ``request`` from the CLI: can_use_tool or hook_callback."""

        subtype: str
        tool_name: str
        input: Any  # the tool's arguments, or the hook's input, as the CLI gave them
        tool_use_id: str
        permission_suggestions: list[PermissionUpdate]
        description: str
        decision_reason: str
        blocked_path: str
        callback_id: str

    class ControlRequest(TypedDict, total=False):
        type: str  # "control_request"
        request_id: str
        request: ControlRequestBody

    class PendingRequest(TypedDict):
        """One of the CLI's requests the app has yet to answer."""

        request_id: str
        request: ControlRequestBody
        parent: str | None

    class PermissionReply(TypedDict):
        behavior: str  # allow, deny
        message: NotRequired[str]
        updatedInput: NotRequired[JsonObject]
        updatedPermissions: NotRequired[list[PermissionUpdate]]


    class OutgoingRequest(TypedDict, total=False):
        """A control request of ours: initialize, get_binary_version, interrupt, set_model,
        set_permission_mode, apply_flag_settings."""

        subtype: str
        hooks: dict[str, list[HookMatcher]] | None
        model: Any  # the app's value for the option (checked by the engine)
        mode: Any
        settings: JsonObject  # flag settings: {"effortLevel": ...}

    class ControlResponseBody(TypedDict, total=False):
        subtype: str  # success, error
        request_id: str
        response: Any  # its shape is the request's (InitializeResponse, VersionResponse ...)
        error: str

    class ControlResponse(TypedDict, total=False):
        type: str  # "control_response"
        response: ControlResponseBody

    class ControlCancel(TypedDict, total=False):
        type: str  # "control_cancel_request"
        request_id: str

    class VersionResponse(TypedDict, total=False):
        """The ``response`` of get_binary_version."""

        version: str
