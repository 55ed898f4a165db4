"""Codex app-server values mapped to protocol 1, and TOML for Codex's ``-c`` overrides.

Pure functions only (no process, no loop), so each rule is tested on its own with the
shapes the real CLI writes; ``codex.py`` is the driver that uses them.
"""

from __future__ import annotations

import json
import math
import re

from agentproto.core.session_info import select_option
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import tool_update
from agentproto.drivers.base import APP_SERVER
from agentproto.drivers.fields import obj, objects, opt_text, text

if TYPE_CHECKING:
    from typing import Any

    from agentproto.core.wire_types import (
        AuthStatus,
        ConfigChoice,
        ConfigOption,
        FileDiff,
        LoginMethod,
        McpServer,
        PlanEntry,
        ToolInput,
        ToolUpdate,
    )
    from agentproto.drivers.codex.types import (
        AccountReply,
        FileChange,
        McpServerEntry,
        Model,
        SandboxPolicy,
        ThreadItem,
        TurnError,
    )

LOGIN: list[LoginMethod] = [
    {
        "Terminal": {
            "command": ["codex", "login"],
            "env": {},
            "description": "Sign in to Codex with ChatGPT or an API key",
        }
    },
    {"EnvVar": {"name": "OPENAI_API_KEY"}},
    {"EnvVar": {"name": "CODEX_API_KEY"}},
]

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
EFFORTS = ("minimal", "low", "medium", "high", "xhigh")


# -- TOML values (for `-c key=value`) ---------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string holding exactly ``text``.

    TOML strings are Unicode scalar values: a lone surrogate cannot be written, so it is
    refused rather than silently changed.
    """
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"a lone surrogate (U+{code:04X}) cannot be written in TOML")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """One TOML value (inline tables for dicts) for any JSON-like Python value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no TOML form for {type(value).__name__}")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def mcp_config(servers: list[McpServer]) -> tuple[dict[str, McpServerEntry], dict[str, str]]:
    """protocol-1 McpServer entries as Codex's ``mcp_servers`` table, and the variables
    to add to Codex's own environment for it; ValueError for what cannot be passed.

    The table goes on Codex's command line (``-c``), which every local user can read in
    /proc/PID/cmdline, so no env or header value is in it: each value is a variable
    ``AGENTPROTO_MCP_<n>_<m>`` of Codex's environment. A header names its variable in
    ``env_http_headers``. A stdio server's variables are forwarded to it by ``env_vars``
    (Codex passes them under the same names), and ``/bin/sh`` renames them before it execs
    the server: the real names set in Codex's own environment would change Codex itself
    (PATH, OPENAI_*, proxies) and collide between servers.
    """
    table: dict[str, McpServerEntry] = {}
    env: dict[str, str] = {}

    def hide(n: int, m: int, what: str, value: Any) -> str:
        if not isinstance(value, str) or "\0" in value or _unencodable(value):
            raise ValueError(f"{what}: a value must be a string without NUL or lone surrogates")
        var = f"AGENTPROTO_MCP_{n}_{m}"
        env[var] = value
        return var

    for n, server in enumerate(servers):
        name = server["name"]
        connection = server["connection"]
        if "Stdio" in connection:
            stdio = connection["Stdio"]
            command, args = stdio["command"], list(stdio.get("args") or [])
            entry: McpServerEntry = {"command": command, "args": args}
            renames = []
            for m, (key, value) in enumerate((stdio.get("env") or {}).items()):
                if not _ENV_NAME.match(key):
                    raise ValueError(
                        f"{name}: env {key!r}: Codex passes a stdio server's env through a shell, "
                        "so a name is letters, digits and _ (not starting with a digit)"
                    )
                renames.append((key, hide(n, m, f"{name}: env {key}", value)))
            if renames:
                entry = {
                    "command": "/bin/sh",
                    "args": ["-c", _rename_script(renames), command, *args],
                    "env_vars": [var for _key, var in renames],
                }
        else:
            remote = connection["Http"] if "Http" in connection else connection["Sse"]
            entry = {"url": remote["url"]}
            headers = remote.get("headers") or {}
            if headers:
                entry["env_http_headers"] = {
                    key: hide(n, m, f"{name}: header {key}", value) for m, (key, value) in enumerate(headers.items())
                }
        table[name] = entry
    return table, env


def app_server_config(tools_url: str, tool_timeout: float) -> dict[str, str | float]:
    """The app's own tools as the MCP server ``agentproto``: overrides for the thread's
    ``config``.

    They go to Codex in ``thread/start`` (``resume``, ``fork``) over its stdin, never as
    ``-c`` overrides: the URL holds the session's token, and Codex's command line is
    readable by every local user, who could then call the app's tools. The keys are dotted
    paths: a nested ``mcp_servers`` table would replace the app's other servers (given with
    ``-c mcp_servers=...``) instead of joining them. Codex asks before every MCP tool call
    unless the server approves its tools itself: a call of these is the app's decision,
    made when it answers the ToolCall. Codex's own deadline for a call is a little past the
    app's ``tool_timeout``, so the error result of that timeout is what reaches the model.
    """
    prefix = f"mcp_servers.{APP_SERVER}."
    return {
        prefix + "url": tools_url,
        prefix + "default_tools_approval_mode": "approve",
        prefix + "tool_timeout_sec": float(tool_timeout) + 5.0,
    }


def _unencodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _rename_script(renames: list[tuple[str, str]]) -> str:
    """``sh -c`` code giving each forwarded value its real name, then exec'ing the server
    (``$0 "$@"``): only names appear in it, never values."""
    exports = " ".join(f'{key}="${var}"' for key, var in renames)
    keys = {key for key, _var in renames}
    stale = " ".join(var for _key, var in renames if var not in keys)
    return f"export {exports}; " + (f"unset {stale}; " if stale else "") + 'exec "$0" "$@"'


# -- mapping Codex items to protocol 1 --------------------------------------------------


def _hunks(diff: str) -> tuple[str, str]:
    """Old and new text of a unified diff's hunks (context lines in both)."""
    old: list[str] = []
    new: list[str] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith(("---", "+++", "@@", "diff ", "index ")):
            continue
        if line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        elif line.startswith(" "):
            old.append(line[1:])
            new.append(line[1:])
        elif line.startswith("\\"):
            continue
        else:
            old.append(line)
            new.append(line)
    return "".join(old), "".join(new)


def file_diffs(changes: list[FileChange] | None) -> list[FileDiff]:
    diffs: list[FileDiff] = []
    for change in objects(changes):
        kind = obj(change.get("kind"))
        diff = text(change.get("diff"))
        path = text(change.get("path"))
        if kind.get("type") == "add":
            diffs.append({"path": path, "old_text": None, "new_text": diff})
        elif kind.get("type") == "delete":
            diffs.append({"path": path, "old_text": diff, "new_text": ""})
        else:
            old, new = _hunks(diff)
            diffs.append({"path": text(kind.get("move_path")) or path, "old_text": old, "new_text": new})
    return diffs


_ITEM_STATUS = {
    "inProgress": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "declined": "Failed",
}


def _mcp_output(item: ThreadItem) -> str | None:
    if item.get("error"):
        return text(obj(item["error"]).get("message"), "the tool call failed")
    result = obj(item.get("result"))
    if not result:
        return None
    texts = [text(c.get("text")) for c in objects(result.get("content")) if c.get("type") == "text"]
    if texts:
        return "\n".join(texts)
    if result.get("structuredContent") is not None:
        return json.dumps(result["structuredContent"])
    return None


def tool_for_item(item: ThreadItem) -> ToolUpdate | None:
    """The ToolUpdate of a Codex tool item, or None for non-tool items."""
    kind = item.get("type")
    item_id = text(item.get("id"))
    status = _ITEM_STATUS.get(text(item.get("status")), "Running")
    if kind == "commandExecution":
        exit_code = item.get("exitCode")
        if status == "Completed" and exit_code not in (None, 0):
            status = "Failed"
        output = opt_text(item.get("aggregatedOutput"))
        if item.get("status") == "declined" and output is None:
            output = "declined"
        command = text(item.get("command"))
        return tool_update(
            item_id,
            "Execute",
            command,
            status,
            {"Command": {"command": command, "cwd": opt_text(item.get("cwd"))}},
            output,
            raw={
                "name": "commandExecution",
                "input": {"command": item.get("command"), "actions": item.get("commandActions")},
            },
        )
    if kind == "fileChange":
        changes = objects(item.get("changes"))
        paths = [text(c.get("path")) for c in changes]
        kinds = {obj(c.get("kind")).get("type") for c in changes}
        tool_kind = "Delete" if kinds == {"delete"} else "Edit"
        output = "declined" if item.get("status") == "declined" else None
        return tool_update(
            item_id,
            tool_kind,
            "Edit " + ", ".join(paths) if paths else "Edit files",
            status,
            {"Path": paths[0]} if len(paths) == 1 else "None",
            output,
            diffs=file_diffs(changes),
            locations=paths,
        )
    if kind == "mcpToolCall":
        server, name = text(item.get("server")), text(item.get("tool"))
        return tool_update(
            item_id,
            {"Mcp": {"server": server, "tool": name}},
            f"{server}: {name}",
            status,
            "None",
            _mcp_output(item),
            raw={"name": name, "input": item.get("arguments")},
        )
    if kind == "dynamicToolCall":
        name = text(item.get("tool"))
        return tool_update(
            item_id, "Other", name, status, "None", None, raw={"name": name, "input": item.get("arguments")}
        )
    if kind == "webSearch":
        action = obj(item.get("action"))
        query = text(item.get("query"))
        url = text(action.get("url"))
        if action.get("type") == "openPage" and url:
            tool_input: ToolInput = {"Url": url}
            title = f"Open {url}"
        else:
            tool_input = {"Query": query}
            title = f"Search the web: {query}"
        done = "Completed" if item.get("status") is None and query else status
        return tool_update(item_id, "Fetch", title, done, tool_input, None, raw={"name": "webSearch", "input": action})
    if kind == "imageView":
        path = text(item.get("path"))
        return tool_update(item_id, "Read", f"View {path}", "Completed", {"Path": path})
    if kind == "collabAgentToolCall":
        name = text(item.get("tool"))
        return tool_update(
            item_id,
            "Subagent",
            name,
            status,
            {"Text": text(item.get("prompt"))},
            None,
            raw={"name": name, "input": {"receivers": item.get("receiverThreadIds")}},
        )
    return None


DELTAS = {
    "item/agentMessage/delta": "TextDelta",
    "item/reasoning/summaryTextDelta": "ReasoningDelta",
    "item/reasoning/textDelta": "ReasoningDelta",
}

_PLAN_STATUS = {"pending": "Pending", "inProgress": "InProgress", "completed": "Completed"}


def plan_entries(plan: Any) -> list[PlanEntry]:
    return [
        {"text": text(s.get("step")), "status": _PLAN_STATUS.get(text(s.get("status")), "Pending")}
        for s in objects(plan)
    ]


def auth_status(account_reply: AccountReply, env: dict[str, str]) -> AuthStatus:
    account = account_reply.get("account")
    if isinstance(account, dict):
        kind = account.get("type")
        if kind == "chatgpt":
            return {
                "Authenticated": {
                    "kind": "Subscription",
                    "account": {"email": account.get("email"), "plan": account.get("planType")},
                }
            }
        if kind == "apiKey":
            return {"Authenticated": {"kind": "ApiKey", "account": None}}
        return {"Authenticated": {"kind": "CloudProvider", "account": None}}
    if account_reply.get("requiresOpenaiAuth"):
        if env.get("OPENAI_API_KEY") or env.get("CODEX_API_KEY"):
            return {"Authenticated": {"kind": "ApiKey", "account": None}}
        return {"Unauthenticated": {"login": LOGIN}}
    return "Unknown"  # a custom provider: its key is checked on the first request


def is_auth_error(error: TurnError | None) -> bool:
    if not error:
        return False
    info = error.get("codexErrorInfo")
    if info == "unauthorized":
        return True
    if isinstance(info, dict):
        for body in info.values():
            if isinstance(body, dict) and body.get("httpStatusCode") == 401:
                return True
    return "401 Unauthorized" in text(error.get("message"))


def sandbox_policy(mode: str) -> SandboxPolicy:
    if mode == "read-only":
        return {"type": "readOnly", "networkAccess": False}
    if mode == "danger-full-access":
        return {"type": "dangerFullAccess"}
    return {
        "type": "workspaceWrite",
        "writableRoots": [],
        "networkAccess": False,
        "excludeTmpdirEnvVar": False,
        "excludeSlashTmp": False,
    }


SANDBOX_NAMES = {"readOnly": "read-only", "workspaceWrite": "workspace-write", "dangerFullAccess": "danger-full-access"}


def config_options(
    models: list[Model], model: str | None, effort: str | None, sandbox: str | None, mode: str
) -> list[ConfigOption]:
    choices: list[ConfigChoice] = []
    efforts: list[str] = []
    for m in objects(models):
        value = m.get("model") or m.get("id")
        if not isinstance(value, str):
            continue
        choices.append(
            {
                "value": value,
                "label": text(m.get("displayName")) or value,
                "description": opt_text(m.get("description")),
            }
        )
        for e in objects(m.get("supportedReasoningEfforts")):
            name = e.get("reasoningEffort")
            if isinstance(name, str) and name not in efforts:
                efforts.append(name)
    if model and all(c["value"] != model for c in choices):
        choices.insert(0, {"value": model, "label": model, "description": None})
    for known in EFFORTS:
        if known not in efforts:
            efforts.append(known)
    effort_choices: list[ConfigChoice] = [{"value": e, "label": e} for e in efforts]
    modes: list[ConfigChoice] = [{"value": "default", "label": "Default"}, {"value": "plan", "label": "Plan"}]
    return [
        select_option("model", "Model", choices, model, "model"),
        select_option("effort", "Reasoning effort", effort_choices, effort, "thought_level"),
        select_option("sandbox", "Sandbox", [{"value": s, "label": s} for s in SANDBOXES], sandbox),
        select_option("mode", "Mode", modes, mode, "mode"),
    ]


def version_of(user_agent: str) -> str | None:
    match = re.search(r"/(\d+\.\d+\.\d+[^\s(]*)", user_agent or "")
    return match.group(1) if match else None
