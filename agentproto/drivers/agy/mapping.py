"""The Antigravity driver's pure mapping: agy's launch line, session plugin and stream-json
values, to and from protocol 1 (seed 003). Nothing here touches a process, a file or the
loop; the driver (``agy.py``) owns those.

What agy takes (seed 003): no flag for a system prompt or MCP servers, so a session hands
them over as a plugin in a directory of its own (``--add-dir``): ``plugin.json``, rules
files, ``mcp_config.json`` and ``hooks.json``. Only ``text`` blocks go in a user message.
What it writes: ``init``, ``step_update`` (by ``step_index``, ``ACTIVE`` then ``DONE``)
and ``result`` lines, each ``{"event": E, E: {...}}``.
"""

from __future__ import annotations

import json
import re

from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import tool_update
from agentproto.drivers.fields import integer, obj, opt_text, text

if TYPE_CHECKING:
    from typing import Any, Mapping

    from agentproto.core.wire_types import (
        AgentDetails,
        Authenticated,
        AuthStatus,
        ConfigChoice,
        ConfigOption,
        ContextUsage,
        JsonObject,
        LoginMethod,
        McpServer,
        StopReason,
        ToolInput,
        ToolKind,
        ToolUpdate,
        TurnUsage,
    )
    from agentproto.drivers.agy.types import (
        HookHandler,
        McpConfig,
        McpEntry,
        ResultBody,
        TextBlock,
        ToolInfo,
        UserLine,
    )

#: The plugin's name: the CLI names its servers ``agentproto_<server>``.
PLUGIN = "agentproto"
#: The CLI cuts each rules file here, silently (front matter included).
RULE_LIMIT = 24_000
#: The hook events a flat ``hooks.json`` handler fits (seed 003); the tool events take
#: matcher groups, which the listener's hook endpoint does not serve.
HOOK_EVENTS = frozenset({"SessionStart", "PreInvocation", "PostInvocation", "Stop"})
FEATURES = ["Images", "Resume", "ContextUsage"]
MCP_TRANSPORTS = ["Stdio", "Http"]
#: Seconds a hook command may run beyond the app's hook_timeout (the app's timeout, which
#: answers ``{}``, must win over agy's, which would only log a warning).
HOOK_MARGIN = 10.0
NOTES_FRONT_MATTER = "---\ntrigger: always_on\n---\n"
SIGN_IN = "Run `agy` once in a terminal and sign in"

_KINDS = {
    "run_command": "Execute",
    "command_status": "Execute",
    "view_file": "Read",
    "write_to_file": "Edit",
    "replace_file_content": "Edit",
    "list_dir": "Search",
    "find_by_name": "Search",
    "grep_search": "Search",
    "read_url_content": "Fetch",
    "search_web": "Fetch",
}
#: The parameter that names a tool's file (or directory), by tool.
_PATHS = {
    "view_file": "AbsolutePath",
    "write_to_file": "TargetFile",
    "replace_file_content": "TargetFile",
    "list_dir": "DirectoryPath",
    "find_by_name": "SearchDirectory",
    "grep_search": "SearchPath",
}


def login_methods(executable: str) -> list[LoginMethod]:
    return [{"Terminal": {"command": [executable], "env": {}, "description": SIGN_IN}}]


# -- launch ------------------------------------------------------------------------------


def build_argv(
    executable: str, session_dir: str, model: str | None, conversation: str | None, args: list[str]
) -> list[str]:
    """Seed 003's launch line, plus ``--disable-slash-commands``: a message starting with
    /settings, /hooks or /usage otherwise ends the CLI (exit 2), and with it the session.
    The app's ``args`` go before ``--print``, which must stay last: a bare ``-p`` would
    take the next flag as its prompt."""
    argv = [
        executable,
        "--input-format", "stream-json",
        "--output-format", "stream-json",
        "--dangerously-skip-permissions",
        "--disable-slash-commands",
        "--add-dir", session_dir,
    ]  # fmt: skip
    if model:
        argv += ["--model", model]
    if conversation:
        argv += ["--conversation", conversation]
    return [*argv, *args, "--print", ""]


def rules_file(field: str, body: str, front_matter: str = "") -> bytes:
    """A rules file's bytes; InvalidConfiguration naming ``field`` past the CLI's limit."""
    data = (front_matter + body).encode("utf-8", "surrogatepass")
    if len(data) > RULE_LIMIT:
        extra = f" ({len(front_matter)} of them front matter)" if front_matter else ""
        why = (
            f"{field}: {len(data):,} bytes as agy's rules file{extra}; agy reads at most {RULE_LIMIT:,} bytes of "
            "a rules file (it would cut the rest silently)"
        )
        raise AgentError.detail(Kind.INVALID_CONFIGURATION, why)
    return data


def mcp_config(servers: list[McpServer], tools_url: str | None) -> McpConfig:
    """``mcp_config.json``: the app's tools at the listener, then each ``mcp_servers`` entry
    (Http as its url and headers, Stdio as command, args and env). Secrets: a 0600 file."""
    config: dict[str, McpEntry] = {}
    if tools_url is not None:
        config[PLUGIN] = {"url": tools_url}
    for index, server in enumerate(servers):
        connection = server["connection"]
        name = server["name"]
        if "Stdio" in connection:
            stdio = connection["Stdio"]
            entry: McpEntry = {"command": stdio["command"], "args": list(stdio.get("args") or [])}
            if stdio.get("env"):
                entry["env"] = dict(stdio["env"])
        elif "Http" in connection:
            http = connection["Http"]
            entry = {"url": http["url"]}
            if http.get("headers"):
                entry["headers"] = dict(http["headers"])
        else:
            (tag,) = connection
            why = f"mcp_servers[{index}] ({name}): agy takes Stdio and Http (Streamable HTTP) servers, not {tag}"
            raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)
        config[name] = entry
    return {"mcpServers": config}


def curl_config(url: str, timeout: float) -> str:
    """A curl config (``curl -K FILE``) that posts stdin to ``url`` and prints the reply.
    The URL holds the session's token, so it lives in this 0600 file, never on curl's
    command line (which every local user can read)."""
    return (
        f'url = "{url}"\n'
        'request = "POST"\n'
        'header = "Content-Type: application/json"\n'
        'data-binary = "@-"\n'
        'noproxy = "*"\n'  # the listener is on loopback; an http_proxy in the env must not carry it
        f"max-time = {timeout:g}\n"
        "silent\nshow-error\nfail\n"
    )


def hooks_config(commands: dict[str, str], timeout: float) -> dict[str, list[HookHandler]]:
    """``hooks.json``: one flat command handler per event."""
    return {event: [{"type": "command", "command": command, "timeout": timeout}] for event, command in commands.items()}


def shell_quote(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"


# -- messages ----------------------------------------------------------------------------


def user_message(prompt: str, reminder: str | None, extra: list[str]) -> UserLine:
    """One turn's input line: the reminder first, the prompt, then a block per attachment."""
    blocks: list[TextBlock] = []
    if reminder:
        blocks.append({"type": "text", "text": f"<system-reminder>\n{reminder}\n</system-reminder>"})
    blocks.append({"type": "text", "text": prompt})
    blocks += [{"type": "text", "text": note} for note in extra]
    return {"event": "user", "message": {"role": "user", "content": blocks}}


def image_note(original: str, saved: str) -> str:
    return f"[Attached image {original}: saved as {saved}; view it with view_file]"


def file_note(path: str) -> str:
    return f"[Attached file: {path}]"


def unreadable_note(path: str, why: str) -> str:
    return f"[Attachment {path} could not be attached: {why}]"


def parse_models(output: str) -> list[ConfigChoice]:
    """``agy --output-format json models``: ``{"models": [{"id", "name"}]}``, a list of those
    or of ids; else ``id<TAB>name`` lines. Choices for the ``model`` option."""
    try:
        data: Any = json.loads(output)
    except ValueError:
        data = [line.split("\t", 1) for line in output.splitlines() if line.strip()]
        data = [{"id": parts[0].strip(), "name": parts[-1].strip()} for parts in data]
    if isinstance(data, dict):
        data = data.get("models")
    choices: list[ConfigChoice] = []
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, str):
            entry = {"id": entry}
        model = text(entry.get("id") or entry.get("model")) if isinstance(entry, dict) else ""
        if model:
            label = text(entry.get("name") or entry.get("display_name")) or model
            choices.append({"value": model, "label": label})
    return choices


def model_option(current: str | None, choices: list[ConfigChoice]) -> ConfigOption:
    if current and all(choice["value"] != current for choice in choices):
        choices = [{"value": current, "label": current}, *choices]
    return {
        "id": "model",
        "name": "Model",
        "category": "model",
        "kind": {"Select": {"choices": choices}},
        "current": current,
        "live": True,  # a new process on the same conversation (drivers/agy/driver.py)
    }


def details(version: str | None, auth: AuthStatus, model: str | None, choices: list[ConfigChoice]) -> AgentDetails:
    return {
        "version": version,
        "auth": auth,
        "capabilities": {"features": list(FEATURES), "mcp_transports": list(MCP_TRANSPORTS)},
        "config_options": [model_option(model, choices)],
        "commands": [],
    }


SIGNED_IN: Authenticated = {"Authenticated": {"kind": {"Other": "Google account"}, "account": None}}


#: What agy says when it is signed out, in any of its spellings: "Please sign in",
#: "authentication failed", "Unauthenticated", "not logged in", "sign-in required", "login".
_SIGNED_OUT = re.compile(r"authenticat|\bsign(?:ed)?[\s-]*(?:in|out)\b|\blog(?:ged)?[\s-]*(?:in|out)\b", re.IGNORECASE)


def signed_out(output: str) -> bool:
    return _SIGNED_OUT.search(output) is not None


def not_signed_in(said: str, executable: str) -> AgentError:
    """AuthRequired with the login step, quoting what agy said."""
    message = f"Antigravity is not signed in: {SIGN_IN[0].lower()}{SIGN_IN[1:]} (agy: {said.strip()[-500:]})"
    return AgentError.auth_required(message, login_methods(executable))


def result_error(result: ResultBody) -> str:
    """A ``result``'s error as text: a string, or an object's ``message`` (else its ``type``)."""
    error = result.get("error")
    if isinstance(error, dict):
        return text(error.get("message")) or text(error.get("type"))
    return text(error)


def startup_error(error: str, executable: str, model: str | None, conversation: str | None) -> AgentError:
    """What an ERROR ``result`` before ``init`` (agy could not start the conversation) is."""
    lowered = error.lower()
    if signed_out(error):
        return not_signed_in(error, executable)
    if conversation and "conversation" in lowered:
        return AgentError.detail(Kind.RESUME_FAILED, f"agy: {error}")
    if model and "model" in lowered:
        return AgentError.detail(Kind.INVALID_CONFIGURATION, f"model: agy: {error}")
    return AgentError.detail(Kind.SPAWN_FAILED, f"agy: {error}")


def early_exit(status: str | None, stderr: str, executable: str) -> AgentError:
    """agy exited before ``init`` with no ERROR ``result``: AuthRequired when its stderr says
    it is signed out (it may say so there only), else SpawnFailed quoting the stderr."""
    tail = stderr.strip()[-2000:]
    if signed_out(tail):
        return not_signed_in(tail, executable)
    early = f"agy exited (status {status}) before it was ready" + (f": {tail}" if tail else "")
    return AgentError.detail(Kind.SPAWN_FAILED, early)


# -- the stream --------------------------------------------------------------------------


def body_of(message: Mapping[str, Any]) -> Any:
    """``{"event": E, E: {...}}``'s body (an empty one when it is missing or not an object):
    its shape is the event's (drivers/agy/types.py)."""
    return obj(message.get(message["event"]))


def conversation_of(message: Mapping[str, Any]) -> str | None:
    """The conversation id: beside ``init``'s body, inside the others' (either is read)."""
    return text(message.get("conversation_id")) or text(body_of(message).get("conversation_id"))


def tool_kind(name: str, params: JsonObject, servers: dict[str, str]) -> ToolKind:
    if name == "call_mcp_tool":
        server, tool = text(params.get("ServerName")), text(params.get("ToolName"))
        if server and tool:
            return {"Mcp": {"server": servers.get(server, server), "tool": tool}}
    return _KINDS.get(name, "Other")


def server_names(names: list[str]) -> dict[str, str]:
    """agy's names of the plugin's servers (``agentproto_<name>``) -> the app's names."""
    return {f"{PLUGIN}_{name}": name for name in names}


def tool_input(name: str, params: JsonObject) -> ToolInput:
    if name == "run_command" and text(params.get("CommandLine")):
        return {"Command": {"command": params["CommandLine"], "cwd": opt_text(params.get("Cwd")) or None}}
    if name in ("grep_search", "find_by_name") and text(params.get("Query") or params.get("Pattern")):
        return {"Pattern": text(params.get("Query") or params.get("Pattern"))}
    if name == "read_url_content" and text(params.get("Url")):
        return {"Url": params["Url"]}
    if name == "search_web" and text(params.get("query") or params.get("Query")):
        return {"Query": text(params.get("query") or params.get("Query"))}
    path = text(params.get(_PATHS.get(name, "")))
    return {"Path": path} if path else "None"


def tool_title(name: str, params: JsonObject) -> str:
    if name == "run_command":
        detail = text(params.get("CommandLine"))
    elif name == "call_mcp_tool":
        server, tool = text(params.get("ServerName")), text(params.get("ToolName"))
        detail = f"{server}/{tool}" if server and tool else ""
    else:
        detail = text(params.get(_PATHS.get(name, "")))
    return f"{name}: {detail}" if detail else name


def tool_snapshot(tool_id: str, name: str, info: ToolInfo, servers: dict[str, str]) -> ToolUpdate:
    """A Running ToolUpdate from a ``tool`` step's name and ``tool_info``."""
    params = obj(info.get("parameters"))
    path = text(params.get(_PATHS.get(name, "")))
    return tool_update(
        tool_id,
        kind=tool_kind(name, params, servers),
        title=tool_title(name, params),
        status="Running",
        input=tool_input(name, params),
        locations=[path] if path else [],
        raw={"name": name, "input": params},
    )


def tool_error(info: ToolInfo) -> str:
    error = info.get("error")
    if isinstance(error, dict):
        return text(error.get("message")) or text(error.get("type")) or "the tool failed"
    return text(error) or "the tool failed"


USAGE_KEYS = ("input_tokens", "output_tokens", "thinking_tokens", "cache_read_tokens", "total_tokens")


def add_usage(total: dict[str, int], usage: Any) -> None:
    """Add one model call's ``usage`` (an agent_response DONE) to a turn's sums."""
    for key in USAGE_KEYS:
        total[key] = total.get(key, 0) + integer(obj(usage).get(key))


def turn_usage(total: dict[str, int]) -> TurnUsage | None:
    """TurnUsage from a turn's sums (agy counts thinking inside output_tokens)."""
    if not total:
        return None
    return {
        "input_tokens": total.get("input_tokens", 0),
        "cached_input_tokens": total.get("cache_read_tokens", 0),
        "output_tokens": total.get("output_tokens", 0),
    }


def context_usage(result: ResultBody) -> ContextUsage | None:
    """The conversation's totals (every process's, earlier ones included) as ContextUsage."""
    usage = obj(result.get("usage"))
    if not usage:
        return None
    used = integer(usage.get("total_tokens"))
    if not used:
        used = integer(usage.get("input_tokens")) + integer(usage.get("output_tokens"))
    if not used:
        return None  # nothing spent yet (a turn interrupted before its first model call)
    return {"ContextUsage": {"used_tokens": used, "window_tokens": None, "cost_usd": None}}


def stop_reason(result: ResultBody) -> StopReason:
    status = result.get("status")
    if status == "SUCCESS":
        return {"Completed": {"source": "Protocol"}}
    error = text(result.get("error")) or f"agy ended the turn with status {json.dumps(status)}"
    if error == "interrupted":
        return "Cancelled"
    return {"Failed": {"message": error}}
