"""Secrets out of every record: what a recording must never hold, and how it is scrubbed.

A record (``--record``, ``record_wire``) holds whole requests and every line exchanged
with an agent, so it would hold the app's API keys, the MCP servers' headers and the
listener's tokens. Before any record is written, the recorder scrubs it here: every
known secret value, wherever it appears, becomes ``"[redacted]"``.

What is a secret (learned from requests, launches and URLs as they pass):
- in an ``env`` object, the value of a key that looks secret: it ends in ``_KEY``,
  ``_TOKEN``, ``_SECRET`` or ``_PASSWORD``, or is ``password`` (any case);
- in ``mcp_servers``, every ``headers`` and every ``env`` value (a server's config is
  all secret to us: we cannot tell a key from a name);
- an ``Authorization`` value anywhere, and the token of any ``Bearer TOKEN`` string;
- the token in a loopback listener URL (``http://127.0.0.1:PORT/TOKEN/...``, the
  session's ``tools_url``), learned from any text scrubbed;
- what a frontend registers itself (the HTTP transport's ``--auth-token``);
- the values of this process's own environment whose key looks secret (the agents
  inherit it), learned when a recording starts.

Rules of this file:
- Once learned, a value is scrubbed from every later record of this process, in any
  record field, at any depth of JSON escaping (a key an agent echoes inside a JSON line
  inside a record is still caught), so a record never needs the request it came from.
- A value shorter than ``MIN_ECHO`` characters is scrubbed only where it is a whole JSON
  string (``"x"``): scrubbing every occurrence of a two-letter value would garble the
  record, and no real key is that short.
- Sans-IO and cheap when nothing is known: scrubbing is one compiled pattern per record.
"""

from __future__ import annotations

import json
import re

from agentproto.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Mapping

REDACTED = "[redacted]"
#: Shorter values are scrubbed only as whole JSON strings.
MIN_ECHO = 6
_SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
#: A loopback listener URL's first path segment is its secret token (tools_url, hook URLs).
_LISTENER_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\]):\d+/([A-Za-z0-9_\-]{16,})")
_URL_HINTS = ("://127.0.0.1:", "://localhost:", "://[::1]:")


def secret_key(key: str) -> bool:
    """Whether an ``env`` key names a secret."""
    upper = key.upper()
    return upper == "PASSWORD" or upper.endswith(_SECRET_SUFFIXES)


def _escaped(value: str, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)[1:-1]


def _forms(value: str) -> set[str]:
    """How ``value`` can appear in a record's text: as it is, and JSON-escaped up to three
    times (a record's field holding a JSON line holding a JSON string holding it)."""
    forms = {value}
    level = {value}
    for _ in range(3):
        level = {_escaped(v, a) for v in level for a in (True, False)}
        forms |= level
    return forms


class Secrets:
    """The secret values known so far, and the scrubber built from them."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._dirty = False

    # -- learning ------------------------------------------------------------------------
    def add(self, value: Any) -> None:
        if isinstance(value, str) and value and value != REDACTED and value not in self.values:
            self.values.add(value)
            self._dirty = True

    def learn(self, obj: Any) -> None:
        """Every secret in a request (or any JSON value): see the module's rules."""
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key == "mcp_servers" and isinstance(value, list):
                    for server in value:
                        self._learn_server(server)
                elif key == "env" and isinstance(value, dict):
                    self.learn_env(value)
                elif isinstance(key, str) and key.lower() == "authorization" and isinstance(value, str):
                    self._learn_authorization(value)
                else:
                    self.learn(value)
        elif isinstance(obj, list):
            for item in obj:
                self.learn(item)
        elif isinstance(obj, str) and obj[:7].lower() == "bearer ":
            self._learn_authorization(obj)

    def learn_env(self, env: dict[str, Any]) -> None:
        for key, value in env.items():
            if isinstance(key, str) and secret_key(key):
                self.add(value)

    def learn_environment(self, environ: Mapping[str, str]) -> None:
        """The secrets of this process's own environment, which every agent inherits (one
        may echo them). Only values of at least ``MIN_ECHO`` characters: a short one here
        (``SOME_KEY=1``) is a setting, and scrubbing ``"1"`` wherever it stands would
        garble the record."""
        for key, value in environ.items():
            if secret_key(key) and len(value) >= MIN_ECHO:
                self.add(value)

    def _learn_authorization(self, value: str) -> None:
        self.add(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() == "bearer":
            self.add(token.strip())

    def _learn_server(self, server: Any) -> None:
        if not isinstance(server, dict):
            return
        connection = server.get("connection")
        bodies = list(connection.values()) if isinstance(connection, dict) else []
        bodies.append(server)  # a flat shape, as some agents' configs have it
        for body in bodies:
            if not isinstance(body, dict):
                continue
            for member in ("headers", "env"):
                values = body.get(member)
                if isinstance(values, dict):
                    for name, value in values.items():
                        self.add(value)
                        if isinstance(name, str) and name.lower() == "authorization" and isinstance(value, str):
                            self._learn_authorization(value)
                elif isinstance(values, list):  # [{"name", "value"}], ACP's shape
                    for entry in values:
                        if isinstance(entry, dict):
                            self.add(entry.get("value"))

    def learn_url(self, text: str) -> None:
        """The tokens of loopback listener URLs in ``text``."""
        for match in _LISTENER_URL.finditer(text):
            self.add(match.group(1))

    # -- scrubbing -----------------------------------------------------------------------
    def _compile(self) -> re.Pattern[str] | None:
        alternatives: set[str] = set()
        for value in self.values:
            if len(value) >= MIN_ECHO:
                alternatives |= _forms(value)
            else:
                # Only a whole JSON string: the quotes, escaped at each level, around it.
                alternatives |= {f"{q}{form}{q}" for form in _forms(value) for q in ('"', '\\"', '\\\\\\"')}
        self._dirty = False
        if not alternatives:
            return None
        ordered = sorted(alternatives, key=len, reverse=True)  # the longest form wins
        return re.compile("|".join(map(re.escape, ordered)))

    def scrub(self, text: str) -> str:
        """``text`` with every known secret replaced by ``[redacted]``."""
        if "://" in text and any(hint in text for hint in _URL_HINTS):
            self.learn_url(text)
        if self._dirty:
            self._pattern = self._compile()
        pattern = self._pattern
        if pattern is None:
            return text
        return pattern.sub(_replacement, text)


def _replacement(match: re.Match[str]) -> str:
    found = match.group(0)
    # A short secret's whole-string form keeps its quotes (at their escaping level).
    for quote in ('\\\\\\"', '\\"', '"'):
        if found.startswith(quote) and found.endswith(quote) and len(found) > 2 * len(quote):
            return f"{quote}{REDACTED}{quote}"
    return REDACTED


#: This process's secrets: every recorder scrubs with them, every frontend teaches them.
SECRETS = Secrets()


def scrub(text: str) -> str:
    return SECRETS.scrub(text)


def learn(obj: Any) -> None:
    SECRETS.learn(obj)
