"""Protocol 1's commands: each command's required and optional fields, and their checks. Sans-IO.

Rules of this file:
- A check takes a field's value and returns None when it fits, or what was expected ("a
  string", "one of ...") for wire.py to put in the BadFrame message, naming the field.
- This one table validates both framings (protocol 1 frames in wire.py, ops requests in
  frontends/ops_framing.py, through ``wire.check_fields``), so a field is accepted or refused the same way
  whichever framing carries it.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable, TypeGuard

    Check = Callable[[Any], "str | None"]


def is_uint(value: Any) -> TypeGuard[int]:
    """A u64, as the reference schema types ids and counts."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else "a string"


def _opt_string(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "a string or null"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "a boolean"


def _uint(value: Any) -> str | None:
    return None if is_uint(value) and value <= 100 else "an integer from 0 to 100"


def _uint_min1(value: Any) -> str | None:
    return None if is_uint(value) and value >= 1 else "an integer >= 1"


def _strings(value: Any) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return None
    return "an array of strings"


def _string_map(value: Any) -> str | None:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return None
    return "an object of strings"


def _config_value(value: Any) -> str | None:
    return None if isinstance(value, (str, bool)) else "a string or a boolean"


def _configure_map(value: Any) -> str | None:
    if isinstance(value, dict) and all(isinstance(v, (str, bool)) for v in value.values()):
        return None
    return "an object of strings or booleans"


def _enum(*names: str) -> Check:
    expected = "one of " + ", ".join(f'"{n}"' for n in names)

    def check(value: Any) -> str | None:
        return None if value in names else expected

    check.shows_value = True  # type: ignore[attr-defined]  # a refused name is quoted back
    return check


def _opt(check: Check) -> Check:
    def optional(value: Any) -> str | None:
        if value is None:
            return None
        problem = check(value)
        return None if problem is None else problem + " or null"

    optional.shows_value = getattr(check, "shows_value", False)  # type: ignore[attr-defined]
    return optional


def _agent_ref(value: Any) -> str | None:
    expected = 'a catalog id string, {"id": ID, "path": PATH} or {"acp": {"name", "path", "args"}}'
    if isinstance(value, str):
        return None if value else expected
    if not isinstance(value, dict):
        return expected
    if "acp" in value:
        spec = value["acp"]
        if (
            isinstance(spec, dict)
            and isinstance(spec.get("name"), str)
            and isinstance(spec.get("path"), str)
            and _strings(spec.get("args", [])) is None
        ):
            return None
        return expected
    if isinstance(value.get("id"), str) and isinstance(value.get("path"), str):
        return None
    return expected


def _mcp_servers(value: Any) -> str | None:
    expected = 'an array of {"name", "connection": {"Stdio"|"Http"|"Sse": {…}}}'
    if not isinstance(value, list):
        return expected
    for server in value:
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            return expected
        conn = server.get("connection")
        if not isinstance(conn, dict) or len(conn) != 1:
            return expected
        (tag, body), = conn.items()
        if not isinstance(body, dict):
            return expected
        if tag == "Stdio":
            if not isinstance(body.get("command"), str) or _strings(body.get("args", [])):
                return expected
            if _string_map(body.get("env", {})):
                return expected
        elif tag in ("Http", "Sse"):
            if not isinstance(body.get("url"), str) or _string_map(body.get("headers", {})):
                return expected
        else:
            return expected
    return None


PERMISSION_CHOICES = ("AllowOnce", "AllowAlways", "DenyOnce", "DenyAlways")


def _answer(value: Any) -> str | None:
    expected = (
        '{"Permission": "AllowOnce"|"AllowAlways"|"DenyOnce"|"DenyAlways"}, '
        '{"Question": [{"Choices": [..]}|{"Text": ".."}]}, {"Deny": {"message": ".."}}, '
        '{"ToolResult": {"content", "is_error"?, "structured"?}}, {"HookResult": {..}} or "Cancel"'
    )
    if value == "Cancel":
        return None
    if not isinstance(value, dict) or len(value) != 1:
        return expected
    (tag, body), = value.items()
    if tag in ("ToolResult", "HookResult"):
        # The shape inside is the request's to judge (apptools.py): a result that does not fit
        # its tool is InvalidRequest and the request stays open, never a BadFrame.
        return None if isinstance(body, dict) else expected
    if tag == "Permission":
        return None if body in PERMISSION_CHOICES else expected
    if tag == "Deny":
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return None
        return expected
    if tag == "Question":
        if not isinstance(body, list):
            return expected
        for entry in body:
            if not isinstance(entry, dict) or len(entry) != 1:
                return expected
            (etag, ebody), = entry.items()
            if etag == "Choices" and _strings(ebody) is None:
                continue
            if etag == "Text" and isinstance(ebody, str):
                continue
            return expected
        return None
    return expected


def _json_schema(value: Any) -> str | None:
    return None if isinstance(value, (dict, bool)) else "a JSON Schema (an object or a boolean)"


def _positive_seconds(value: Any) -> str | None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return None if number and 0 < value <= 2**31 else "a number of seconds > 0"


_PERMISSION_MODE = _enum("Ask", "AcceptEdits", "AutoApprove")

#: The launch options that ``open``, ``generate``, ``probe`` and ``plan_usage`` share.
SESSION_OPTIONS: dict[str, Check] = {
    "resume": _opt_string,
    "fork": _opt_string,
    "fork_at": _opt_string,
    "permission_mode": _opt(_PERMISSION_MODE),
    "mcp_servers": _opt(_mcp_servers),
    "configure": _opt(_configure_map),
    "instructions": _opt_string,
    "notes": _opt_string,
    "reminder": _opt_string,
    "output_schema": _opt(_json_schema),
    "env": _opt(_string_map),
    "args": _opt(_strings),
    "config_home": _opt_string,
    "record_wire": _opt_string,
}

#: The app's own tools and hooks (``open`` and ``generate``). Only the types are checked
#: here: each declaration is checked at open (apptools.py), InvalidConfiguration naming it.
TOOL_OPTIONS: dict[str, Check] = {
    "tools": _opt(lambda v: None if isinstance(v, list) else "an array of tools"),
    "tool_timeout": _opt(_positive_seconds),
    "hooks": _opt(lambda v: None if isinstance(v, list) else "an array of hook event names"),
    "hook_timeout": _opt(_positive_seconds),
}

#: The guard rails (``open`` and ``generate``): only the types here; the policy's rules and the
#: budget's bounds are checked at open (engine/guard.py), InvalidConfiguration naming them.
GUARD_OPTIONS: dict[str, Check] = {
    "policy": _opt(lambda v: None if isinstance(v, list) else "an array of rules"),
    "budget": _opt(lambda v: None if isinstance(v, dict) else "an object of bounds"),
    "retry": _opt(lambda v: None if isinstance(v, dict) else 'an object {"max_wait_s": N}'),
}

# name -> (required fields, optional fields)
COMMANDS: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    "discover": ({}, {}),
    "probe": ({"agent": _agent_ref}, {"dir": _opt_string, **SESSION_OPTIONS}),
    "plan_usage": ({"agent": _agent_ref}, {"dir": _opt_string, **SESSION_OPTIONS}),
    # Every discovered agent's plan_usage (engine/oneshots.py); `agent_timeout` bounds each one.
    "plan_usage_all": ({}, {"dir": _opt_string, "agent_timeout": _opt(_positive_seconds)}),
    "open": ({"agent": _agent_ref, "dir": _string}, {**SESSION_OPTIONS, **TOOL_OPTIONS, **GUARD_OPTIONS}),
    "generate": (
        {"agent": _agent_ref, "dir": _string, "prompt": _string},
        {"attachments": _opt(_strings), "output_retries": _opt(_uint), **SESSION_OPTIONS, **TOOL_OPTIONS,
         **GUARD_OPTIONS},  # fmt: skip
    ),
    "prompt": ({"session": _string, "text": _string}, {"attachments": _opt(_strings)}),
    "answer": ({"session": _string, "request": _string, "answer": _answer}, {}),
    "configure": ({"session": _string, "option": _string, "value": _config_value}, {}),
    "cancel": ({"session": _string}, {"clear_queue": _opt(_boolean), "turn": _opt_string}),
    "rollback": (
        {"session": _string, "turns": _uint_min1, "scope": _enum("Conversation", "ConversationAndFiles")},
        {},
    ),
    "dequeue": ({"session": _string, "prompt": _string}, {}),
    "compact": ({"session": _string}, {}),
    "close": ({"session": _string}, {}),
    "info": ({"session": _string}, {}),
}

COMMAND_NAMES = tuple(COMMANDS)


# -- launch text: what may reach an argv, an environment or a path ---------------------

#: The launch fields checked by ``launch_text_problem`` (every string in them, keys too):
#: each may end up in an agent's argv, environment, config file or a path we open.
LAUNCH_TEXT_FIELDS = ("agent", "dir", "attachments", *SESSION_OPTIONS, *TOOL_OPTIONS)
#: The maps whose keys are environment variable names.
_ENV_MAPS = ("env",)


def _shown(key: str) -> str:
    """A key as a problem names it: a plain name is quoted back; anything else is not, since
    an env "name" like ``TOKEN=sk-…`` is a value typed in the wrong place."""
    plain = 0 < len(key) <= 64 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in key)
    return f".{key}" if plain else "[a key]"


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "holds a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (not Unicode text)"
    return None


def _env_name_problem(name: str) -> str | None:
    if not name:
        return "is empty"
    if "=" in name:
        return "holds '='"
    return None


def launch_text_problem(args: dict[str, Any]) -> str | None:
    """The first string of a launch's fields that no process could be given, as "FIELD:
    WHAT", or None. A NUL or a lone surrogate cannot be in an argv, an environment or a
    path, and an environment name cannot be empty or hold ``=``: such an open is refused
    before anything starts (InvalidConfiguration), the same for every driver. Values are
    never quoted back (an env value may be a secret)."""
    for field in LAUNCH_TEXT_FIELDS:
        if field in args:
            problem = _walk(args[field], field, field in _ENV_MAPS)
            if problem is not None:
                return problem
    return None


def _walk(value: Any, path: str, env_names: bool = False) -> str | None:
    # Iterative: a value nested as deep as the JSON decoder allows must not overflow here.
    stack: list[tuple[Any, str, bool]] = [(value, path, env_names)]
    while stack:
        value, path, env_names = stack.pop()
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem is not None:
                return f"{path} {problem}"
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]", False) for index, item in reversed(list(enumerate(value))))
        elif isinstance(value, dict):
            children = []
            for key, item in value.items():
                problem = _text_problem(key) or (_env_name_problem(key) if env_names else None)
                if problem is not None:
                    return f"{path}: a name {problem}"
                # An MCP server's Stdio env holds environment names too.
                children.append((item, path + _shown(key), key == "env" and isinstance(item, dict)))
            stack.extend(reversed(children))
    return None
