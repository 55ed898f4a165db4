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

    Base64Source = TypedDict("Base64Source", {"type": str, "media_type": str | None, "data": str})

    #: type: "text"
    TextBlock = TypedDict("TextBlock", {"type": str, "text": str})

    #: type: "image"
    ImageBlock = TypedDict("ImageBlock", {"type": str, "source": Base64Source})

    #: A block of a user message the driver writes.
    InputBlock = Union[TextBlock, ImageBlock]

    #: A block of a message the CLI writes: text, thinking, tool_use, tool_result, image.
    #: input: a tool's arguments
    ContentBlock = TypedDict("ContentBlock", {"type": str, "text": str, "thinking": str, "id": str, "name": str,
        "input": JsonObject, "tool_use_id": str, "content": str | list["ContentBlock"], "is_error": bool}, total=False)

    Usage = TypedDict("Usage", {"input_tokens": int, "output_tokens": int, "cache_read_input_tokens": int,
        "cache_creation_input_tokens": int}, total=False)

    MessageBody = TypedDict("MessageBody", {"id": str, "role": str, "content": str | list["ContentBlock"],
        "usage": Usage}, total=False)

    # -- the messages of the stream ------------------------------------------------------

    #: type: text_delta, thinking_delta, signature_delta, input_json_delta
    StreamDelta = TypedDict("StreamDelta", {"type": str, "text": str, "thinking": str}, total=False)

    #: type: message_start, content_block_start, content_block_delta, message_stop ...
    ApiStreamEvent = TypedDict("ApiStreamEvent", {"type": str, "index": int, "message": MessageBody,
        "content_block": ContentBlock, "delta": StreamDelta}, total=False)

    #: type: "stream_event"
    StreamEventMessage = TypedDict("StreamEventMessage", {"type": str, "event": ApiStreamEvent,
        "parent_tool_use_id": str | None, "session_id": str, "uuid": str}, total=False)

    #: type: "assistant"
    #: error: a synthetic message's error: "authentication_failed", ...
    AssistantMessage = TypedDict("AssistantMessage", {"type": str, "message": MessageBody,
        "parent_tool_use_id": str | None, "error": str, "uuid": str, "session_id": str}, total=False)

    #: type: "user"
    UserMessage = TypedDict("UserMessage", {"type": str, "message": MessageBody, "parent_tool_use_id": str | None,
        "isReplay": bool, "uuid": str, "session_id": str}, total=False)

    ModelUsage = TypedDict("ModelUsage", {"contextWindow": int}, total=False)

    #: type: "result"
    #: subtype: success, error_max_turns, error_during_execution ...
    ResultMessage = TypedDict("ResultMessage", {"type": str, "subtype": str, "is_error": bool, "result": str,
        "errors": list[str], "stop_reason": str | None, "usage": Usage, "modelUsage": dict[str, ModelUsage],
        "total_cost_usd": float, "session_id": str}, total=False)

    #: type: "system"
    #: subtype: init, api_retry, compact_boundary, status ...
    SystemMessage = TypedDict("SystemMessage", {"type": str, "subtype": str, "session_id": str, "error": str,
        "error_status": int | None, "attempt": int, "max_retries": int, "retry_delay_ms": int, "compact_result": str,
        "compact_error": str, "permissionMode": str}, total=False)

    # -- what the driver writes ----------------------------------------------------------

    UserBody = TypedDict("UserBody", {"role": str, "content": str | list[InputBlock]})

    #: A prompt on the CLI's stdin.
    #: type: "user"
    UserInput = TypedDict("UserInput", {"type": str, "session_id": str, "message": UserBody,
        "parent_tool_use_id": None})

    #: One server of ``--mcp-config``.
    #: type: stdio, http, sse
    McpEntry = TypedDict("McpEntry", {"type": str, "command": str, "args": list[str], "env": dict[str, str], "url": str,
        "headers": dict[str, str], "timeout": int, "alwaysLoad": bool}, total=False)

    McpConfig = TypedDict("McpConfig", {"mcpServers": dict[str, McpEntry]})

    HookMatcher = TypedDict("HookMatcher", {"matcher": str | None, "hookCallbackIds": list[str]})

    PermissionRule = TypedDict("PermissionRule", {"toolName": str})

    #: One of ``updatedPermissions``: the CLI's own suggestions, or a rule of ours.
    #: type: addRules, addDirectories
    PermissionUpdate = TypedDict("PermissionUpdate", {"type": str, "rules": list[PermissionRule],
        "directories": list[str], "behavior": str, "destination": str}, total=False)

    # -- the control protocol ------------------------------------------------------------

    ModelInfo = TypedDict("ModelInfo", {"value": str, "displayName": str, "description": str}, total=False)

    CommandInfo = TypedDict("CommandInfo", {"name": str, "description": str, "argumentHint": str}, total=False)

    Account = TypedDict("Account", {"email": str, "subscriptionType": str, "apiProvider": str, "tokenSource": str,
        "apiKeySource": str}, total=False)

    #: The ``response`` of the control request ``initialize``.
    InitializeResponse = TypedDict("InitializeResponse", {"models": list[ModelInfo], "commands": list[CommandInfo],
        "account": Account}, total=False)

    AskQuestionOption = TypedDict("AskQuestionOption", {"label": str, "description": str}, total=False)

    AskQuestion = TypedDict("AskQuestion", {"question": str, "header": str, "options": list[AskQuestionOption],
        "multiSelect": bool}, total=False)

    #: The input of the CLI's AskUserQuestion tool.
    AskUserQuestionInput = TypedDict("AskUserQuestionInput", {"questions": list[AskQuestion]}, total=False)

    #: A control_request's ``request`` from the CLI: can_use_tool or hook_callback.
    #: input: the tool's arguments, or the hook's input, as the CLI gave them
    ControlRequestBody = TypedDict("ControlRequestBody", {"subtype": str, "tool_name": str, "input": Any,
        "tool_use_id": str, "permission_suggestions": list[PermissionUpdate], "description": str,
        "decision_reason": str, "blocked_path": str, "callback_id": str}, total=False)

    #: type: "control_request"
    ControlRequest = TypedDict("ControlRequest", {"type": str, "request_id": str,
        "request": ControlRequestBody}, total=False)

    #: One of the CLI's requests the app has yet to answer.
    PendingRequest = TypedDict("PendingRequest", {"request_id": str, "request": ControlRequestBody,
        "parent": str | None})

    #: behavior: allow, deny
    PermissionReply = TypedDict("PermissionReply", {"behavior": str, "message": NotRequired[str],
        "updatedInput": NotRequired[JsonObject], "updatedPermissions": NotRequired[list[PermissionUpdate]]})


    #: A control request of ours: initialize, get_binary_version, interrupt, set_model,
    #: set_permission_mode, apply_flag_settings.
    #: model: the app's value for the option (checked by the engine)
    #: settings: flag settings: {"effortLevel": ...}
    OutgoingRequest = TypedDict("OutgoingRequest", {"subtype": str, "hooks": dict[str, list[HookMatcher]] | None,
        "model": Any, "mode": Any, "settings": JsonObject}, total=False)

    #: subtype: success, error
    #: response: its shape is the request's (InitializeResponse, VersionResponse ...)
    ControlResponseBody = TypedDict("ControlResponseBody", {"subtype": str, "request_id": str, "response": Any,
        "error": str}, total=False)

    #: type: "control_response"
    ControlResponse = TypedDict("ControlResponse", {"type": str, "response": ControlResponseBody}, total=False)

    #: type: "control_cancel_request"
    ControlCancel = TypedDict("ControlCancel", {"type": str, "request_id": str}, total=False)

    #: The ``response`` of get_binary_version.
    VersionResponse = TypedDict("VersionResponse", {"version": str}, total=False)
