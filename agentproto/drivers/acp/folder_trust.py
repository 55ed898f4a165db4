"""Gemini CLI's folder trust, read (never written) before a session that needs MCP servers.

Rules of this file:
- Gemini CLI loads no MCP server in a folder its user has not trusted: the app's tools
  (and declared ``mcp_servers``) would silently never reach the model. agentproto reads
  the same settings Gemini reads and refuses such a session at ``open`` with
  ``UnsupportedFeature`` naming the fix, before any process starts.
- agentproto never writes the trusted-folders file nor sets the trust variable: folder
  trust is Gemini's defence against hostile repositories, the user's to grant.
- Gemini's rules (0.61.0): ``GEMINI_RESTRICTED_MODE=true`` or
  ``GEMINI_CLI_TRUST_WORKSPACE=false`` distrust, ``GEMINI_CLI_TRUST_WORKSPACE=true``
  trusts; ``security.folderTrust.enabled: false`` in the user's settings trusts all;
  otherwise the longest rule of ``~/.gemini/trustedFolders.json`` (or
  ``GEMINI_CLI_TRUSTED_FOLDERS_PATH``) containing the folder decides (``TRUST_FOLDER``,
  ``TRUST_PARENT``: its parent, ``DO_NOT_TRUST``), and no rule means not trusted.
- A file that cannot be read or parsed is no trust: never raises.
"""

from __future__ import annotations

import json
import os
import re

from agentproto.core.errors import AgentError, Kind


def _load(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        # Gemini allows comments in its JSON files: drop whole-line // comments and retry.
        try:
            return json.loads(re.sub(r"(?m)^\s*//.*$", "", text))
        except ValueError:
            return None


def _inside(folder: str, root: str) -> bool:
    return folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)


def trusted_folders_file(env: dict[str, str]) -> str:
    home = env.get("HOME") or os.path.expanduser("~")
    return env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or os.path.join(home, ".gemini", "trustedFolders.json")


def gemini_trusts(folder: str, env: dict[str, str]) -> bool:
    """Whether Gemini CLI, started with ``env``, trusts ``folder`` (and so loads MCP servers)."""
    if env.get("GEMINI_RESTRICTED_MODE") == "true" or env.get("GEMINI_CLI_TRUST_WORKSPACE") == "false":
        return False
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return True
    home = env.get("HOME") or os.path.expanduser("~")
    settings = _load(os.path.join(home, ".gemini", "settings.json"))
    security = settings.get("security") if isinstance(settings, dict) else None
    trust = security.get("folderTrust") if isinstance(security, dict) else None
    if isinstance(trust, dict) and trust.get("enabled") is False:
        return True
    rules = _load(trusted_folders_file(env))
    if not isinstance(rules, dict):
        return False
    where = os.path.realpath(folder)
    best, verdict = -1, False
    for path, level in rules.items():
        if level not in ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST"):
            return False  # Gemini refuses to start on an invalid file
        root = os.path.dirname(path) if level == "TRUST_PARENT" else path
        if _inside(where, os.path.realpath(root)) and len(path) > best:
            best, verdict = len(path), level != "DO_NOT_TRUST"
    return verdict


def untrusted_message(folder: str, env: dict[str, str]) -> str:
    return (
        f"MCP servers (the app's tools, mcp_servers) in {folder}: Gemini CLI loads none in a folder it does"
        " not trust. Trust the folder in Gemini (run `gemini` there once and accept, or add"
        f' "{os.path.realpath(folder)}": "TRUST_FOLDER" to {trusted_folders_file(env)}), or give the session'
        " GEMINI_CLI_TRUST_WORKSPACE=true in its env; agentproto never trusts a folder for you"
    )


def refuse_untrusted(directory: str, env: dict[str, str]) -> None:
    """UnsupportedFeature, before any process starts, when Gemini would drop the session's
    MCP servers (the app's tools) in ``directory`` because its user has not trusted it."""
    if not gemini_trusts(directory, env):
        raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, untrusted_message(directory, env))
