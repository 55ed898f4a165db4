"""The permission policy, sans-IO: an ordered list of rules that answers an agent's permission
requests without the app (``open``'s, ``generate``'s and ``configure``'s ``policy``).

A rule is ``{"action": "allow" | "deny" | "ask", "kind"?: [ToolKind names], "command"?:
[patterns], "path"?: [globs], "tool"?: [globs over "server/tool"], "reason"?: "..."}``.

Rules of this file:
- The first rule whose every given field matches decides; a field the request lacks (a
  ``command`` rule against an edit) does not match; no rule matching decides nothing (the
  permission mode, then the app). ``check`` refuses a malformed policy naming the rule and the
  field (``policy[2].command: ...``), before anything runs.
- Commands: a pattern is shell words (shlex), each an fnmatch glob over one argv token; a
  last word ``**`` takes any further tokens. Only a simple command can match an ``allow``: a
  line holding ``;``, ``&``, ``|``, a backtick, ``$(``, a redirection or a newline, or one
  that does not split, matches ``deny``/``ask`` rules only (on any of its commands' words). A
  command wrapped in a shell (``bash -lc 'git status'``) is matched on its inner line.
- Paths: the realpath of each target (of its nearest existing parent for a new file),
  relative to the realpath of the session's ``dir``; ``*`` stays within a path segment, ``**``
  crosses segments. A path outside ``dir`` never matches an ``allow`` (a ``deny``/``ask`` glob
  may match it, as its absolute path). Every path must match an ``allow``; one is enough for
  ``deny``/``ask``.
- Tools: an MCP tool is ``server/tool`` (every driver reports ``{"Mcp": {server, tool}}``).
- Pure: values in, values out; reading the file system is ``os.path.realpath`` alone.
"""

from __future__ import annotations

import os
import re
import shlex
from fnmatch import fnmatchcase

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from agentproto.core.wire_types import Answer, PermissionRequest

ACTIONS = ("allow", "deny", "ask")
#: The ToolKind names a rule's ``kind`` may list (``Mcp`` for any MCP tool).
KINDS = ("Read", "Edit", "Delete", "Move", "Search", "Execute", "Fetch", "Think", "Other", "Subagent", "Mcp")
FIELDS = ("action", "kind", "command", "path", "tool", "reason")
#: What makes a command line more than one simple command.
_COMPOUND = re.compile(r"[;&|`\n<>]|\$\(")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
#: Bounds: a policy is configuration, not data.
MAX_RULES = 256
MAX_ENTRIES = 256


class PolicyError(ValueError):
    """A malformed policy: the message names the rule and field."""


def check(value: Any) -> list[dict[str, Any]]:
    """The policy's rules, checked (PolicyError naming ``policy[i].field`` when not)."""
    if not isinstance(value, list):
        raise PolicyError("policy: expected an array of rules")
    if len(value) > MAX_RULES:
        raise PolicyError(f"policy: at most {MAX_RULES} rules")
    rules = []
    for i, rule in enumerate(value):
        at = f"policy[{i}]"
        if not isinstance(rule, dict):
            raise PolicyError(f"{at}: expected an object")
        unknown = sorted(set(rule) - set(FIELDS))
        if unknown:
            raise PolicyError(f"{at}.{unknown[0]}: unknown field; expected {', '.join(FIELDS)}")
        if rule.get("action") not in ACTIONS:
            raise PolicyError(f'{at}.action: expected one of "allow", "deny", "ask"')
        for field in ("kind", "command", "path", "tool"):
            if field not in rule:
                continue
            entries = rule[field]
            if not isinstance(entries, list) or not entries or len(entries) > MAX_ENTRIES:
                raise PolicyError(f"{at}.{field}: expected a non-empty array of strings")
            for entry in entries:
                if not isinstance(entry, str) or not entry:
                    raise PolicyError(f"{at}.{field}: expected a non-empty array of strings")
                if field == "kind" and entry not in KINDS:
                    raise PolicyError(f"{at}.kind: {entry!r} is not a tool kind (one of {', '.join(KINDS)})")
                if field == "command" and _words(entry) is None:
                    raise PolicyError(f"{at}.command: {entry!r} does not split into shell words")
        if "reason" in rule and not isinstance(rule["reason"], str):
            raise PolicyError(f"{at}.reason: expected a string")
        rules.append(dict(rule))
    return rules


def has_asking_rules(rules: list[dict[str, Any]]) -> bool:
    """Whether the policy needs an agent that asks (a ``deny`` or an ``ask`` rule)."""
    return any(rule["action"] != "allow" for rule in rules)


# -- facts of a request --------------------------------------------------------------------


#: What shlex reads differently from a plain split on whitespace.
_SHELL_SYNTAX = re.compile(r"""['"\\]""")
_PATTERNS: dict[str, list[str]] = {}


def _words(line: str) -> list[str] | None:
    if _SHELL_SYNTAX.search(line) is None:
        return line.split()  # no quote, no escape: shlex's answer, without its cost
    try:
        return shlex.split(line)
    except ValueError:
        return None


def command_words(line: str) -> tuple[list[list[str]], bool]:
    """The argv of each simple command a line runs (a shell's ``-c`` line unwrapped), and
    whether it is exactly one simple command."""
    words = _words(line)
    for _ in range(4):  # bash -lc "sh -c '...'" unwraps too, within reason
        if words is None or not (
            len(words) == 3
            and os.path.basename(words[0]) in _SHELLS
            and words[1].startswith("-")
            and not words[1].startswith("--")
            and "c" in words[1]
        ):
            break
        line = words[2]
        words = _words(line)
    if words is not None and _COMPOUND.search(line) is None:
        return ([words] if words else []), bool(words)
    return [w for part in _COMPOUND.split(line) if (w := _words(part))], False


def _command_matches(pattern: str, words: list[str]) -> bool:
    tokens = _PATTERNS.get(pattern)
    if tokens is None:
        tokens = _words(pattern) or []
        if len(_PATTERNS) < 4096:
            _PATTERNS[pattern] = tokens
    if tokens and tokens[-1] == "**":
        head = tokens[:-1]
        if len(words) < len(head):
            return False
        words = words[: len(head)]
        tokens = head
    return len(tokens) == len(words) and all(fnmatchcase(w, t) for t, w in zip(tokens, words))


_GLOBS: dict[str, re.Pattern[str]] = {}


def glob_matches(glob: str, path: str) -> bool:
    """``*`` within one ``/``-segment, ``**`` across segments (``**/`` also matches none)."""
    compiled = _GLOBS.get(glob)
    if compiled is None:
        out, i = [], 0
        while i < len(glob):
            if glob.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            elif glob.startswith("**", i):
                out.append(".*")
                i += 2
            elif glob[i] == "*":
                out.append("[^/]*")
                i += 1
            elif glob[i] == "?":
                out.append("[^/]")
                i += 1
            else:
                out.append(re.escape(glob[i]))
                i += 1
        compiled = re.compile("".join(out) + r"\Z", re.DOTALL)
        if len(_GLOBS) < 4096:
            _GLOBS[glob] = compiled
    return compiled.match(path) is not None


def _real(path: str) -> str:
    """The realpath of ``path``, or of its nearest existing parent joined with the rest."""
    head, rest = path, ""
    while head and not os.path.lexists(head):
        parent = os.path.dirname(head)
        if parent == head:
            break
        rest = os.path.join(os.path.basename(head), rest) if rest else os.path.basename(head)
        head = parent
    real = os.path.realpath(head)
    return os.path.normpath(os.path.join(real, rest)) if rest else real


def target_paths(body: PermissionRequest, session_dir: str) -> list[tuple[str | None, str]]:
    """Each target of a request: (its path relative to the real ``session_dir``, or None
    outside it; its real absolute path)."""
    tool = body.get("tool") or {}
    found: list[str] = []
    tool_input: Any = tool.get("input")
    if isinstance(tool_input, dict) and isinstance(tool_input.get("Path"), str):
        found.append(tool_input["Path"])
    found += [d["path"] for d in tool.get("diffs") or [] if isinstance(d.get("path"), str)]
    found += [p for p in tool.get("locations") or [] if isinstance(p, str)]
    root = os.path.realpath(session_dir)
    paths, seen = [], set()
    for path in found:
        if not path or "\x00" in path:
            continue
        real = _real(os.path.join(session_dir, path))
        if real in seen:
            continue
        seen.add(real)
        inside = real == root or real.startswith(root.rstrip(os.sep) + os.sep)
        paths.append((os.path.relpath(real, root) if inside else None, real))
    return paths


# -- deciding --------------------------------------------------------------------------------


def decide(rules: list[dict[str, Any]], body: PermissionRequest, session_dir: str) -> int | None:
    """The index of the first rule that matches a Permission request's body, or None."""
    tool = body.get("tool") or {}
    kind = tool.get("kind")
    mcp = kind.get("Mcp") if isinstance(kind, dict) else None
    kind_name = "Mcp" if mcp is not None else kind
    tool_input: Any = tool.get("input")
    line = None
    if isinstance(tool_input, dict) and isinstance(tool_input.get("Command"), dict):
        line = tool_input["Command"].get("command")
    commands, simple = command_words(line) if isinstance(line, str) else ([], False)
    paths: list[tuple[str | None, str]] | None = None
    for index, rule in enumerate(rules):
        allow = rule["action"] == "allow"
        if "kind" in rule and kind_name not in rule["kind"]:
            continue
        if "tool" in rule:
            if mcp is None or not any(glob_matches(g, f"{mcp.get('server')}/{mcp.get('tool')}") for g in rule["tool"]):
                continue
        if "command" in rule:
            if not commands or (allow and not simple):
                continue
            if not any(_command_matches(p, words) for p in rule["command"] for words in commands):
                continue
        if "path" in rule:
            if paths is None:
                paths = target_paths(body, session_dir)
            if not paths:
                continue
            if allow:
                if not all(rel is not None and any(glob_matches(g, rel) for g in rule["path"]) for rel, _ in paths):
                    continue
            elif not any(
                any(glob_matches(g, rel if rel is not None else real) for g in rule["path"]) for rel, real in paths
            ):
                continue
        return index
    return None


def answer(rule: dict[str, Any], index: int, body: PermissionRequest) -> Answer | None:
    """The answer a matched ``allow`` or ``deny`` rule gives (None for ``ask``: the app's)."""
    options = body.get("options") or []
    if rule["action"] == "allow":
        if not options or "AllowOnce" in options:
            return {"Permission": "AllowOnce"}
        allowed = [o for o in options if o.startswith("Allow")]
        return {"Permission": allowed[0]} if allowed else None
    if rule["action"] == "deny":
        reason = rule.get("reason") or f"denied by the session's policy (rule {index})"
        if not options or any(o.startswith("Deny") for o in options):
            return {"Deny": {"message": reason}}
        return "Cancel"
    return None
