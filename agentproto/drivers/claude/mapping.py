"""The Claude driver's pure mapping: Claude Code's stream-json values in, protocol 1 out.

Nothing here touches a process or the loop, so every rule is tested on values captured
from the real CLI (tests/drivers/claude/test_claude_mapping.py). The driver (``claude.py``) owns the
process, the control protocol and the turn bookkeeping.
"""

from __future__ import annotations

import base64
import json
import mimetypes

from agentproto.core.session_info import select_option
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import tool_update
from agentproto.drivers.base import APP_SERVER, Launch
from agentproto.drivers.fields import choices, first_text, named
from agentproto.loopio import private

if TYPE_CHECKING:
    from typing import Any

    from agentproto.core.wire_types import (
        AccountInfo,
        Authenticated,
        Choice,
        ConfigChoice,
        ConfigOption,
        FileDiff,
        JsonObject,
        LoginMethod,
        McpServer,
        OpenQuestion,
        Question,
        SlashCommand,
        StopReason,
        ToolInput,
        ToolKind,
        ToolUpdate,
        TurnUsage,
        Unauthenticated,
    )
    from agentproto.drivers.claude.types import (
        AskUserQuestionInput,
        HookMatcher,
        InitializeResponse,
        InputBlock,
        McpConfig,
        McpEntry,
        PermissionUpdate,
        ResultMessage,
        UserInput,
    )

PERMISSION_OPTIONS = ["AllowOnce", "AllowAlways", "DenyOnce", "DenyAlways"]
FEATURES = [
    "Images", "Resume", "Permissions", "Questions", "Fork", "SlashCommands", "Plan", "Subagents", "ContextUsage",
    "Compact",
]  # fmt: skip
MCP_TRANSPORTS = ["Stdio", "Http", "Sse"]
#: The hook events the CLI delivers over the control protocol (``initialize``'s hooks, then
#: ``hook_callback``), as observed on 2.1.197 and 2.1.332 (each fires in
#: tests/drivers/claude/test_claude_app_tools.py). Not offered: SessionEnd runs after the
#: CLI's input ended, when no callback can be answered any more; Notification never fired in
#: stream-json mode (not for a permission left waiting, not for an idle session).
#: SessionStart fires after a compaction (``source: "compact"``).
HOOK_EVENTS = frozenset({
    "PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "SubagentStart", "SubagentStop",
    "PreCompact", "PermissionRequest", "SessionStart",
})  # fmt: skip
#: The model's name of one of the app's tools: mcp__agentproto__<name>.
APP_TOOL_PREFIX = f"mcp__{APP_SERVER}__"
MODES = [
    ("default", "Default", "Ask before edits and commands"),
    ("acceptEdits", "Accept edits", "Edit files without asking"),
    ("plan", "Plan", "Plan first; no edits or commands"),
    ("dontAsk", "Don't ask", "Deny whatever would need asking"),
]
EFFORTS = ["low", "medium", "high", "xhigh", "max"]
IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
MAX_ATTACHMENT = 4 * 1024 * 1024

_KINDS = {
    "Bash": "Execute",
    "BashOutput": "Execute",
    "KillShell": "Execute",
    "Read": "Read",
    "NotebookRead": "Read",
    "Edit": "Edit",
    "Write": "Edit",
    "MultiEdit": "Edit",
    "NotebookEdit": "Edit",
    "Grep": "Search",
    "Glob": "Search",
    "LS": "Search",
    "WebFetch": "Fetch",
    "WebSearch": "Fetch",
    "Task": "Subagent",
    "Agent": "Subagent",
    "TodoWrite": "Think",
}


def tool_kind(name: str) -> ToolKind:
    if name.startswith("mcp__"):
        parts = name.split("__", 2)
        if len(parts) == 3:
            return {"Mcp": {"server": parts[1], "tool": parts[2]}}
    return _KINDS.get(name, "Other")


def _path_of(tool_input: JsonObject) -> str | None:
    return first_text(tool_input, "file_path", "notebook_path", "path")


def tool_input_of(name: str, tool_input: JsonObject) -> ToolInput:
    """The ToolInput variant for a Claude tool call."""
    if name == "Bash" and isinstance(tool_input.get("command"), str):
        return {"Command": {"command": tool_input["command"], "cwd": None}}
    if name in ("Grep", "Glob") and isinstance(tool_input.get("pattern"), str):
        return {"Pattern": tool_input["pattern"]}
    if name == "WebFetch" and isinstance(tool_input.get("url"), str):
        return {"Url": tool_input["url"]}
    if name == "WebSearch" and isinstance(tool_input.get("query"), str):
        return {"Query": tool_input["query"]}
    if name in ("Task", "Agent") and isinstance(tool_input.get("prompt"), str):
        return {"Text": tool_input["prompt"]}
    path = _path_of(tool_input)
    if path is not None and _KINDS.get(name) in ("Read", "Edit", "Search"):
        return {"Path": path}
    return "None"


def tool_title(name: str, tool_input: JsonObject) -> str:
    detail = None
    if name == "Bash":
        detail = tool_input.get("description") or tool_input.get("command")
    elif name in ("Task", "Agent"):
        detail = tool_input.get("description")
    elif name in ("Grep", "Glob"):
        detail = tool_input.get("pattern")
    elif name == "WebFetch":
        detail = tool_input.get("url")
    elif name == "WebSearch":
        detail = tool_input.get("query")
    else:
        detail = _path_of(tool_input)
    return f"{name}: {detail}" if isinstance(detail, str) and detail else name


def tool_diffs(name: str, tool_input: JsonObject) -> list[FileDiff]:
    path = _path_of(tool_input)
    if path is None:
        return []
    if name == "Edit" and isinstance(tool_input.get("new_string"), str):
        return [
            {
                "path": path,
                "old_text": tool_input.get("old_string"),
                "new_text": tool_input["new_string"],
            }
        ]
    if name == "MultiEdit" and isinstance(tool_input.get("edits"), list):
        return [
            {"path": path, "old_text": e.get("old_string"), "new_text": e["new_string"]}
            for e in tool_input["edits"]
            if isinstance(e, dict) and isinstance(e.get("new_string"), str)
        ]
    if name == "Write" and isinstance(tool_input.get("content"), str):
        return [{"path": path, "old_text": None, "new_text": tool_input["content"]}]
    return []


def tool_snapshot(
    tool_id: str, name: str, tool_input: Any, status: str = "Pending"
) -> ToolUpdate:
    """A ToolUpdate for one ``tool_use`` block."""
    args = tool_input if isinstance(tool_input, dict) else {}
    path = _path_of(args)
    return tool_update(
        tool_id,
        kind=tool_kind(name),
        title=tool_title(name, args),
        status=status,
        input=tool_input_of(name, args),
        diffs=tool_diffs(name, args),
        locations=[path] if path else [],
        raw={"name": name, "input": tool_input},
    )


def result_text(content: Any) -> str:
    """The text of a ``tool_result`` block's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict) and block.get("type") == "image":
                parts.append("[image]")
        return "\n".join(parts)
    return "" if content is None else json.dumps(content)


def login_methods(executable: str) -> list[LoginMethod]:
    return [
        {
            "Terminal": {
                "command": [executable, "/login"],
                "env": {},
                "description": "Log in to Claude Code with a Claude account or an Anthropic Console API key",
            }
        },
        {"EnvVar": {"name": "ANTHROPIC_API_KEY"}},
    ]


def auth_status(account: Any, executable: str) -> Authenticated | Unauthenticated:
    """AuthStatus from the ``account`` member of the CLI's initialize response."""
    if not isinstance(account, dict):
        return {"Unauthenticated": {"login": login_methods(executable)}}
    info: AccountInfo | None = None
    if account.get("email") or account.get("subscriptionType"):
        info = {"email": account.get("email"), "plan": account.get("subscriptionType")}
    provider = account.get("apiProvider")
    if provider and provider != "firstParty":
        return {"Authenticated": {"kind": "CloudProvider", "account": info}}
    token = account.get("tokenSource")
    if isinstance(token, str) and token not in ("", "none"):
        subscription = "claude.ai" in token or "OAUTH" in token.upper()
        return {
            "Authenticated": {
                "kind": "Subscription" if subscription else "ApiKey",
                "account": info,
            }
        }
    key = account.get("apiKeySource")
    if isinstance(key, str) and key not in ("", "none"):
        return {"Authenticated": {"kind": "ApiKey", "account": info}}
    return {"Unauthenticated": {"login": login_methods(executable)}}


def config_options(
    init: InitializeResponse, model: str | None, mode: str, effort: str | None
) -> list[ConfigOption]:
    models = choices(init.get("models"), "value", "displayName")
    modes: list[ConfigChoice] = [{"value": v, "label": label, "description": d} for v, label, d in MODES]
    efforts: list[ConfigChoice] = [{"value": e, "label": e.capitalize()} for e in EFFORTS]
    return [
        select_option("model", "Model", models, model or "default", "model"),
        select_option("mode", "Mode", modes, mode, "mode"),
        select_option("effort", "Effort", efforts, effort, "thought_level"),
    ]


def slash_commands(init: InitializeResponse) -> list[SlashCommand]:
    return [
        {
            "name": entry["name"],
            "description": str(entry.get("description") or ""),
            "input_hint": entry.get("argumentHint") or None,
        }
        for entry in named(init.get("commands"), "name")
    ]


def turn_usage(result: ResultMessage) -> TurnUsage | None:
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and value > 0 else 0

    cached = count("cache_read_input_tokens")
    return {
        "input_tokens": count("input_tokens")
        + cached
        + count("cache_creation_input_tokens"),
        "cached_input_tokens": cached,
        "output_tokens": count("output_tokens"),
    }


def stop_reason(result: ResultMessage, cancelling: bool) -> StopReason:
    """The StopReason of a ``result`` message."""
    if cancelling:
        return "Cancelled"
    if result.get("stop_reason") == "refusal":
        return "Refused"
    if result.get("is_error") or result.get("subtype") not in (None, "success"):
        message = result.get("result")
        if not isinstance(message, str) or not message:
            errors = result.get("errors")
            if isinstance(errors, list) and errors:
                message = "; ".join(str(e) for e in errors)
            else:
                message = (
                    f"claude ended the turn with {result.get('subtype') or 'an error'}"
                )
        return {"Failed": {"message": message}}
    return {"Completed": {"source": "Protocol"}}


def question_request(request_id: str, tool_input: AskUserQuestionInput) -> OpenQuestion:
    questions: list[Question] = []
    for i, q in enumerate(tool_input.get("questions") or []):
        if not isinstance(q, dict):
            continue
        options: list[Choice] = [
            {"id": option["label"], "label": option["label"], "description": option.get("description")}
            for option in named(q.get("options"), "label")
        ]
        questions.append(
            {
                "id": f"q{i}",
                "text": str(q.get("question") or ""),
                "header": q.get("header"),
                "choices": options,
                "multi_select": bool(q.get("multiSelect")),
                "allows_free_text": True,
            }
        )
    return {"Question": {"id": request_id, "questions": questions}}


def question_answers(request: OpenQuestion, entries: list[Any]) -> dict[str, str]:
    """The CLI's ``answers`` map (question text -> answer) from protocol answers."""
    answers: dict[str, str] = {}
    for question, entry in zip(request["Question"]["questions"], entries):
        if "Choices" in entry:
            answers[question["text"]] = ", ".join(entry["Choices"])
        elif "Text" in entry:
            answers[question["text"]] = entry["Text"]
    return answers


def always_rules(tool_name: str, suggestions: list[PermissionUpdate] | None) -> list[PermissionUpdate]:
    """``updatedPermissions`` for AllowAlways: the CLI's own suggestions, kept for the session.

    The CLI suggests writing rules to the project's ``.claude/settings.local.json``, which
    it then ignores in a workspace nobody marked trusted; "always" is this session's.
    """
    rules: list[PermissionUpdate] = [
        {**s, "destination": "session"}
        for s in suggestions or []
        # A setMode suggestion would widen "always this" to "every edit": not ours to take.
        if isinstance(s, dict) and s.get("type") in ("addRules", "addDirectories")
    ]
    return rules or [
        {
            "type": "addRules",
            "rules": [{"toolName": tool_name}],
            "behavior": "allow",
            "destination": "session",
        }
    ]


def hook_callback_id(event: str) -> str:
    return f"agentproto_{event}"


def hooks_config(events: list[str]) -> dict[str, list[HookMatcher]] | None:
    """``initialize``'s ``hooks``: one callback per event the app answers, for every tool
    (no matcher); None when it answers none."""
    if not events:
        return None
    return {event: [{"matcher": None, "hookCallbackIds": [hook_callback_id(event)]}] for event in events}


def app_server_entry(tools_url: str, tool_timeout: float) -> McpEntry:
    """The app's own tools as the ``http`` server ``agentproto``: always in the model's
    prompt (the app declared them for it: never deferred behind the CLI's tool search),
    and the CLI's deadline for a call a little past the app's ``tool_timeout``, so the
    error result of that timeout is what reaches the model (in ms, at most the 2^31 - 1
    a JavaScript timer takes)."""
    timeout_ms = min(int(tool_timeout * 1000) + 5000, 2**31 - 1)
    return {"type": "http", "url": tools_url, "timeout": timeout_ms, "alwaysLoad": True}


def mcp_config(
    servers: list[McpServer], tools_url: str | None = None, tool_timeout: float = 600.0
) -> McpConfig:
    """``--mcp-config`` JSON for protocol McpServer entries, and the app's own tools at
    ``tools_url`` (secrets: it goes in a file)."""
    config: dict[str, McpEntry] = {}
    if tools_url is not None:
        config[APP_SERVER] = app_server_entry(tools_url, tool_timeout)
    for server in servers:
        connection = server["connection"]
        if "Stdio" in connection:
            stdio = connection["Stdio"]
            entry: McpEntry = {
                "type": "stdio",
                "command": stdio["command"],
                "args": list(stdio.get("args", [])),
            }
            if stdio.get("env"):
                entry["env"] = dict(stdio["env"])
        else:
            remote = connection["Http"] if "Http" in connection else connection["Sse"]
            entry = {"type": "http" if "Http" in connection else "sse", "url": remote["url"]}
            if remote.get("headers"):
                entry["headers"] = dict(remote["headers"])
        config[server["name"]] = entry
    return {"mcpServers": config}


def build_argv(launch: Launch, session_id: str | None, mcp_config_path: str | None = None) -> list[str]:
    argv = [
        launch.executable,
        "--output-format", "stream-json",
        "--input-format", "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool", "stdio",
    ]  # fmt: skip
    configure = launch.configure
    if isinstance(configure.get("model"), str):
        argv += ["--model", configure["model"]]
    mode = initial_mode(launch)
    if mode != "default":
        argv += ["--permission-mode", mode]
    if isinstance(configure.get("effort"), str):
        argv += ["--effort", configure["effort"]]
    if launch.resume or launch.fork:
        argv.append(f"--resume={launch.fork or launch.resume}")
    if launch.fork:
        argv.append("--fork-session")
    if launch.fork_at:
        argv.append(f"--resume-session-at={launch.fork_at}")
    if session_id:
        argv.append(f"--session-id={session_id}")
    if launch.instructions:
        argv += ["--append-system-prompt", launch.instructions]
    if mcp_config_path:
        argv += ["--mcp-config", mcp_config_path]  # a file: never the values themselves
    if launch.tools_disabled:
        argv += ["--tools", ""]
    return argv + list(launch.args)


def initial_mode(launch: Launch) -> str:
    mode = launch.configure.get("mode")
    if isinstance(mode, str):
        return mode
    return "acceptEdits" if launch.permission_mode == "AcceptEdits" else "default"


def user_message(text: str, attachments: list[str]) -> UserInput:
    content: str | list[InputBlock] = text
    if attachments:
        blocks: list[InputBlock] = []
        for path in attachments:
            blocks.append(attachment_block(path))
        blocks.append({"type": "text", "text": text})
        content = blocks
    return {
        "type": "user",
        "session_id": "",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": None,
    }


def attachment_block(path: str) -> InputBlock:
    media, _ = mimetypes.guess_type(path)
    try:
        private.check_confined(path, "attachment")  # replay reads nothing outside its own
        with open(path, "rb") as f:
            data = f.read(MAX_ATTACHMENT + 1)
    except OSError as exc:
        return {
            "type": "text",
            "text": f"(attachment {path} could not be read: {exc.strerror})",
        }
    if media in IMAGE_TYPES and len(data) <= MAX_ATTACHMENT:
        return {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": media,
                "data": base64.b64encode(data).decode(),
            },
        }
    body = data[:MAX_ATTACHMENT].decode("utf-8", "replace")
    return {
        "type": "text",
        "text": f'<attachment path="{path}">\n{body}\n</attachment>',
    }
