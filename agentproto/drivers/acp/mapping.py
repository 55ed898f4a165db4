"""ACP values as protocol 1 values: pure functions, no I/O.

Rules of this file:
- Every function takes what an ACP agent sent (as decoded JSON, possibly malformed: a
  missing or mistyped field never raises) and returns protocol 1 values, so each is
  tested on captured output of real agents.
- ACP has no typed tool input and no tool names; what is guessed from ``rawInput`` is
  guessed here, in one place.
"""

from __future__ import annotations

import json
import os
import re
import sys

from agentproto.core.errors import AgentError, Kind
from agentproto.core.session_info import select_option
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import tool_update
from agentproto.drivers.base import APP_SERVER
from agentproto.drivers.fields import choices, first_text, named, obj, opt_text, text

if TYPE_CHECKING:
    from typing import Any

    from agentproto.core.wire_types import (
        ConfigChoice,
        ConfigKind,
        ConfigOption,
        ContextUsageBody,
        FileDiff,
        LoginMethod,
        McpServer,
        PlanEntry,
        RawTool,
        SlashCommand,
        StopReason,
        ToolInput,
        ToolUpdate,
        TurnUsage,
    )
    from agentproto.drivers.acp.types import (
        AcpToolCall,
        AcpToolFields,
        AcpToolSnapshot,
        McpServerEntry,
        PermissionOption,
        PermissionOutcome,
        UsageUpdate,
    )

TOOL_KINDS = {
    "read": "Read",
    "edit": "Edit",
    "delete": "Delete",
    "move": "Move",
    "search": "Search",
    "execute": "Execute",
    "think": "Think",
    "fetch": "Fetch",
}
TOOL_STATUSES = {"pending": "Pending", "in_progress": "Running", "completed": "Completed", "failed": "Failed"}
FINISHED = ("Completed", "Failed", "Cancelled", "Denied")
PLAN_STATUSES = {"pending": "Pending", "in_progress": "InProgress", "completed": "Completed"}
#: Protocol 1 permission choice -> ACP option kind.
CHOICE_KINDS = {
    "AllowOnce": "allow_once",
    "AllowAlways": "allow_always",
    "DenyOnce": "reject_once",
    "DenyAlways": "reject_always",
}
KIND_CHOICES = {v: k for k, v in CHOICE_KINDS.items()}
#: Session updates that describe the session rather than a turn.
STATE_UPDATES = frozenset(
    ("available_commands_update", "current_mode_update", "config_option_update", "session_info_update")
)
#: ACP config categories whose options take protocol 1's well-known ids.
CATEGORY_IDS = {"model": "model", "mode": "mode", "thought_level": "effort"}


def map_stop_reason(reason: Any) -> tuple[StopReason, str | None]:
    """(StopReason, warning or None) for an ACP ``stopReason``."""
    if reason == "end_turn":
        return {"Completed": {"source": "Protocol"}}, None
    if reason == "cancelled":
        return "Cancelled", None
    if reason == "refusal":
        return "Refused", None
    if reason == "max_tokens":
        return {
            "Completed": {"source": "Protocol"}
        }, "the agent stopped: it reached its output token limit (max_tokens)"
    if reason == "max_turn_requests":
        return {"Completed": {"source": "Protocol"}}, (
            "the agent stopped: it reached its limit of model requests for one turn (max_turn_requests)"
        )
    return {"Completed": {"source": "Protocol"}}, f"the agent ended its turn with an unknown stop reason: {reason!r}"


def map_usage(usage: Any) -> TurnUsage | None:
    """The (unstable) ``PromptResponse.usage`` as a TurnUsage."""
    if not isinstance(usage, dict):
        return None
    try:
        return {
            "input_tokens": int(usage.get("inputTokens") or 0),
            "cached_input_tokens": int(usage.get("cachedReadTokens") or 0),
            "output_tokens": int(usage.get("outputTokens") or 0),
        }
    except (TypeError, ValueError):
        return None


def cost_of(update: UsageUpdate) -> float | None:
    """A ``usage_update``'s cost in USD (the session's so far, the spec says), or None."""
    cost = update.get("cost")
    amount = cost.get("amount") if isinstance(cost, dict) and cost.get("currency") == "USD" else None
    return float(amount) if isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount >= 0 else None


def map_context_usage(update: UsageUpdate) -> ContextUsageBody | None:
    used = update.get("used")
    if not isinstance(used, int) or used < 0:
        return None
    size = update.get("size")
    window = size if isinstance(size, int) and size >= 0 else None
    return {"used_tokens": used, "window_tokens": window, "cost_usd": cost_of(update)}


def map_plan(entries: Any) -> list[PlanEntry]:
    out: list[PlanEntry] = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            status = PLAN_STATUSES.get(text(entry.get("status")), "Pending")
            out.append({"text": text(entry.get("content")), "status": status})
    return out


def map_commands(commands: Any) -> list[SlashCommand]:
    return [
        {
            "name": command["name"],
            "description": text(command.get("description")),
            "input_hint": opt_text(obj(command.get("input")).get("hint")),
        }
        for command in named(commands, "name")
    ]


def block_text(block: Any) -> str:
    """The text of one ACP content block ("" for kinds without text)."""
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return text(block.get("text"))
    if kind == "resource_link":
        uri = text(block.get("uri"))
        return f"[{text(block.get('name')) or uri}]({uri})"
    if kind == "resource":
        return text(obj(block.get("resource")).get("text"))
    return ""


def tool_input(kind: str, raw: Any, locations: list[str]) -> ToolInput:
    """A ToolInput guessed from ACP's tool kind and raw input (ACP has no typed input)."""
    if kind == "Execute":
        command = raw.get("command") if isinstance(raw, dict) else raw if isinstance(raw, str) else None
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        if isinstance(command, str) and command:
            return {"Command": {"command": command, "cwd": first_text(raw, "cwd", "workdir")}}
    elif kind in ("Read", "Edit", "Delete", "Move"):
        path = first_text(raw, "path", "file_path", "filePath", "abs_path", "notebook_path") or (
            locations[0] if locations else None
        )
        if path:
            return {"Path": path}
    elif kind == "Search":
        pattern = first_text(raw, "pattern", "query", "regex", "glob")
        if pattern:
            return {"Pattern": pattern}
    elif kind == "Fetch":
        url = first_text(raw, "url", "uri")
        if url:
            return {"Url": url}
        query = first_text(raw, "query")
        if query:
            return {"Query": query}
    return "None"


def merge_tool_call(snapshot: AcpToolSnapshot | None, acp: AcpToolCall) -> AcpToolSnapshot:
    """Fold an ACP ``tool_call``/``tool_call_update`` into the cumulative ToolUpdate.

    The ACP fields seen so far are kept under ``_acp`` so that a partial update (every
    field but the id is optional) only changes what it carries.
    """
    fields: AcpToolFields = {**snapshot["_acp"]} if snapshot else {}
    for key in ("title", "kind", "status", "content", "locations", "rawInput", "rawOutput", "_meta"):
        if key in acp and acp[key] is not None:
            fields[key] = acp[key]
    kind = TOOL_KINDS.get(str(fields.get("kind")), "Other")
    status = TOOL_STATUSES.get(str(fields.get("status")), "Pending")
    if snapshot and snapshot["status"] in ("Cancelled", "Denied") and "status" not in acp:
        status = snapshot["status"]
    locations = [str(loc["path"]) for loc in fields.get("locations") or [] if isinstance(loc, dict) and loc.get("path")]
    texts: list[str] = []
    diffs: list[FileDiff] = []
    terminals: list[str] = []
    for item in fields.get("content") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "content":
            text = block_text(item.get("content"))
            if text:
                texts.append(text)
        elif item.get("type") == "diff" and isinstance(item.get("path"), str):
            diffs.append(
                {"path": item["path"], "old_text": item.get("oldText"), "new_text": str(item.get("newText", ""))}
            )
        elif item.get("type") == "terminal" and isinstance(item.get("terminalId"), str):
            terminals.append(item["terminalId"])
    raw_output = fields.get("rawOutput")
    output: str | None = "\n".join(texts) if texts else None
    if output is None and raw_output is not None:
        output = raw_output if isinstance(raw_output, str) else first_text(raw_output, "output", "stdout")
        if output is None:
            output = json.dumps(raw_output, ensure_ascii=False)
    raw: RawTool | None = None
    if "rawInput" in fields or "rawOutput" in fields:
        meta = fields.get("_meta")
        name = None
        if isinstance(meta, dict):
            for value in meta.values():
                name = first_text(value, "toolName") or name
        raw = {
            "name": name or str(fields.get("title") or fields.get("kind") or "tool"),
            "input": fields.get("rawInput"),
        }
        if "rawOutput" in fields:
            raw["output"] = raw_output  # type: ignore[typeddict-unknown-key]  # (RawTool's extra member)
    update = tool_update(
        str(acp.get("toolCallId", snapshot["id"] if snapshot else "")),
        kind=kind,
        title=str(fields.get("title") or ""),
        status=status,
        input=tool_input(kind, fields.get("rawInput"), locations),
        output=output,
        diffs=diffs,
        locations=locations,
        raw=raw,
    )
    return {**update, "_acp": fields, "_terminals": terminals}


def public_tool(snapshot: AcpToolSnapshot) -> ToolUpdate:
    public: ToolUpdate = {k: v for k, v in snapshot.items() if not k.startswith("_")}  # type: ignore[assignment]
    return public


def map_config_options(
    config_options: Any, modes: Any = None, models: Any = None
) -> list[tuple[ConfigOption, str, str]]:
    """``[(ConfigOption, how, acp id)]``; ``how`` is "config", "mode" or "model".

    ``configOptions`` win; the older ``modes`` (and the unstable ``models``) only fill in
    a ``mode`` (``model``) option the agent did not already give as a config option.
    """
    out: list[tuple[ConfigOption, str, str]] = []
    taken: set[str] = set()
    for opt in named(config_options, "id"):
        kind: ConfigKind
        if opt.get("type") == "boolean":
            kind = "Boolean"
            current = opt.get("currentValue") if isinstance(opt.get("currentValue"), bool) else None
        elif opt.get("type") == "select":
            entries: list[ConfigChoice] = []
            for item in opt.get("options") or []:
                group = item.get("options") if isinstance(item, dict) and "group" in item else [item]
                entries += choices(group, "value", "name")
            kind = {"Select": {"choices": entries}}
            current = opt.get("currentValue") if isinstance(opt.get("currentValue"), str) else None
        else:
            continue  # an option type this client does not know: the agent keeps its default
        category = opt.get("category") if isinstance(opt.get("category"), str) else None
        public_id = str(CATEGORY_IDS.get(category or "", opt["id"]))
        if public_id in taken:
            public_id = opt["id"]
        if public_id in taken:
            continue
        taken.add(public_id)
        option: ConfigOption = {
            "id": public_id,
            "name": str(opt.get("name") or opt["id"]),
            "category": category,
            "kind": kind,
            "current": current,
            "live": True,
        }
        out.append((option, "config", opt["id"]))
    # The older session-level lists, for agents without config options for them.
    for state, oid, name, listed, key, current in (
        (modes, "mode", "Mode", "availableModes", "id", "currentModeId"),
        (models, "model", "Model", "availableModels", "modelId", "currentModelId"),
    ):
        if isinstance(state, dict) and oid not in taken and isinstance(state.get(listed), list):
            option = select_option(oid, name, choices(state[listed], key, "name"), state.get(current), oid)
            out.append((option, oid, oid))
            taken.add(oid)
    return out


def login_steps(
    auth_methods: Any, launch_argv: list[str], hints: dict[str, LoginMethod] | None = None
) -> list[LoginMethod]:
    """ACP ``authMethods`` as protocol 1 LoginMethods.

    A ``terminal`` method reruns the agent's own launch line with the method's args and
    env (the spec's terminal authentication); ``env_var`` methods name their variables;
    ``agent`` methods (login inside the agent) only become a step when the catalog knows
    the command that performs them (``hints``: method id -> LoginMethod).
    """
    hints = hints or {}
    steps: list[LoginMethod] = []
    for method in auth_methods if isinstance(auth_methods, list) else []:
        if not isinstance(method, dict):
            continue
        description = str(method.get("description") or method.get("name") or method.get("id") or "log in")
        kind = method.get("type")
        if kind == "terminal":
            args = [str(a) for a in method.get("args") or []]
            env = {str(k): str(v) for k, v in (method.get("env") or {}).items()}
            steps.append({"Terminal": {"command": [*launch_argv, *args], "env": env, "description": description}})
        elif kind == "env_var":
            steps += ({"EnvVar": {"name": var["name"]}} for var in named(method.get("vars"), "name"))
        elif method.get("id") in hints:
            steps.append(hints[method["id"]])
    return steps


def auth_message(message: str, auth_methods: Any) -> str:
    names = [str(m.get("name") or m.get("id")) for m in auth_methods or [] if isinstance(m, dict)]
    text = f"authentication required: {message}"
    if names:
        text += "; log in with one of: " + ", ".join(names)
    return text


def mcp_servers(servers: list[McpServer], http: bool, sse: bool) -> list[McpServerEntry]:
    """SessionOptions.mcp_servers as ACP ``mcpServers``; AgentError if a transport is missing."""
    out: list[McpServerEntry] = []
    for server in servers:
        connection = server["connection"]
        if "Stdio" in connection:
            stdio = connection["Stdio"]
            out.append(
                {
                    "name": server["name"],
                    "command": stdio["command"],
                    "args": list(stdio.get("args", [])),
                    "env": [{"name": k, "value": v} for k, v in stdio.get("env", {}).items()],
                }
            )
            continue
        tag, body = ("Http", connection["Http"]) if "Http" in connection else ("Sse", connection["Sse"])
        if (tag == "Http" and not http) or (tag == "Sse" and not sse):
            raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, f"MCP over {tag.upper()} (server {server['name']})")
        out.append(
            {
                "type": tag.lower(),
                "name": server["name"],
                "url": body["url"],
                "headers": [{"name": k, "value": v} for k, v in body.get("headers", {}).items()],
            }
        )
    return out


#: Where ``mcp-bridge`` finds the session's tools URL (mcp_bridge.TOOLS_URL): its
#: environment, which only the same user can read, never its command line.
BRIDGE_URL_ENV = "AGENTPROTO_TOOLS_URL"
#: The bridge runs this agentproto (the sidecar's own copy: a checkout, an installed
#: package, a zipapp), isolated (-I: no PYTHON* variables, no user site, not the
#: agent's working directory on sys.path, where any ``agentproto`` could be found).
_BRIDGE_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from agentproto.cli import main; sys.exit(main(['mcp-bridge']))"
)


def app_server_entry(tools_url: str, http: bool) -> McpServerEntry:
    """``session/new``'s ``mcpServers`` entry of the app's own tools (the server
    ``agentproto``): the listener's URL itself for an agent that speaks MCP over HTTP,
    otherwise a stdio server, ``agentproto mcp-bridge``, relaying to it. The URL holds the
    session's token: the bridge gets it in its environment, not on its command line."""
    if http:
        return {"type": "http", "name": APP_SERVER, "url": tools_url, "headers": []}
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return {
        "name": APP_SERVER,
        "command": sys.executable,
        "args": ["-I", "-c", _BRIDGE_BOOT, package_root],
        "env": [{"name": BRIDGE_URL_ENV, "value": tools_url}],
    }


_TOOL_NAME = "[A-Za-z0-9_-]{1,64}"
#: Claude (and the Claude ACP adapter): ``mcp__agentproto__<tool>``, in the title or _meta.
_CLAUDE_NAME = re.compile(rf"mcp__{APP_SERVER}__({_TOOL_NAME})\Z")
#: Gemini CLI: the title ``<tool> (agentproto MCP Server)``, the name ``mcp_agentproto_<tool>``.
_GEMINI_TITLE = re.compile(rf"({_TOOL_NAME}) \({APP_SERVER} MCP Server\)\Z")
_GEMINI_NAME = re.compile(rf"mcp_{APP_SERVER}_({_TOOL_NAME})\Z")
#: codex-acp: the title ``Tool: agentproto/<tool>`` (``rawInput.server_name`` says the server).
_CODEX_TITLE = re.compile(rf"Tool: {APP_SERVER}/({_TOOL_NAME})\Z")
#: opencode: the title ``agentproto_<tool>``, kind ``other``.
_OPENCODE_TITLE = re.compile(rf"{APP_SERVER}_({_TOOL_NAME})\Z")


def _unambiguous(spelled: str, tool: str, servers: tuple[str, ...], prefix: str) -> str | None:
    """``tool`` unless another server's ``<prefix><server>_<its tool>`` could read the same."""
    for server in servers:
        if server != APP_SERVER and spelled.startswith(f"{prefix}{server}_"):
            return None
    return tool


def app_tool_called(
    tool_call: AcpToolCall, earlier: AcpToolFields | None = None, servers: tuple[str, ...] = ()
) -> str | None:
    """The name of the app's tool a permission request is about, or None. The caller still
    checks that the app declared exactly that name.

    ACP names no tool's MCP server, so each agent's own spelling is read (``earlier``: the
    fields of the same ``toolCallId`` seen before the request):
    - Claude: ``mcp__agentproto__<tool>`` in the title or in ``_meta`` (``claudeCode.toolName``);
    - Gemini CLI: the title ``<tool> (agentproto MCP Server)``; its name
      ``mcp_agentproto_<tool>`` is ambiguous (a server ``agentproto_x`` with a tool ``y`` is
      ``mcp_agentproto_x_y`` too), so it counts only when no title says otherwise;
    - codex-acp: ``rawInput.server_name == "agentproto"``, the tool named by the title
      ``Tool: agentproto/<tool>`` of this request or of an earlier update;
    - opencode: the title ``agentproto_<tool>`` (kind ``other``).
    The underscore spellings (Gemini's name, opencode's title) count only when no other
    declared MCP server (``servers``, the session's) could spell the same string.
    """
    fields: AcpToolFields = {**(earlier or {}), **{k: v for k, v in tool_call.items() if v is not None}}  # type: ignore[typeddict-item]
    title = fields.get("title")
    titles = [t for t in (tool_call.get("title"), (earlier or {}).get("title")) if isinstance(t, str)]
    names: list[object] = [title]
    for value in obj(fields.get("_meta")).values():
        if isinstance(value, dict):
            names.append(value.get("toolName"))
    for name in names:
        match = _CLAUDE_NAME.match(name) if isinstance(name, str) else None
        if match:
            return match.group(1)
    for candidate in titles:
        match = _GEMINI_TITLE.match(candidate)
        if match:
            return match.group(1)
    raw_input = fields.get("rawInput")
    if isinstance(raw_input, dict) and raw_input.get("server_name") == APP_SERVER:
        for candidate in titles:
            match = _CODEX_TITLE.match(candidate)
            if match:
                return match.group(1)
        return None
    if not titles:
        for name in (tool_call.get("toolCallId"), *names):
            match = _GEMINI_NAME.match(name) if isinstance(name, str) else None
            if match:
                return _unambiguous(match.group(0), match.group(1), servers, "mcp_")
    if fields.get("kind") in (None, "other"):
        for candidate in titles:
            match = _OPENCODE_TITLE.match(candidate)
            if match:
                return _unambiguous(candidate, match.group(1), servers, "")
    return None


def permission_outcome(options: list[PermissionOption], answer: Any) -> PermissionOutcome:
    """The ACP outcome for a protocol 1 answer: the option whose kind matches."""
    if isinstance(answer, dict) and "Permission" in answer:
        wanted = [CHOICE_KINDS.get(answer["Permission"])]
        if answer["Permission"] == "DenyAlways":
            wanted.append("reject_once")
        elif answer["Permission"] == "DenyOnce":
            wanted.append("reject_always")
    elif isinstance(answer, dict) and "Deny" in answer:
        wanted = ["reject_once", "reject_always"]
    else:
        return {"outcome": "cancelled"}
    for kind in wanted:
        for option in options:
            if option.get("kind") == kind:
                return {"outcome": "selected", "optionId": option["optionId"]}
    return {"outcome": "cancelled"}
