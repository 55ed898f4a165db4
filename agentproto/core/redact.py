"""Secrets out of every record: what a recording must never hold, and how it is scrubbed.

A record (``--record``, ``record_wire``) holds whole requests and every line exchanged
with an agent, so it would hold the app's API keys, database URLs, the MCP servers'
headers and the listener's tokens. Before any record is written, the recorder scrubs it
here: every secret becomes ``"[redacted]"``. Three rules, in this order:

1. **In place, by position in JSON** (``redact_json``, ``redact_value``), in every JSON
   text a record holds (a request, a response, an agent's line, a note's fields; a JSON
   text inside a JSON string too, at any depth):
   - every value of an ``env`` or ``headers`` object, at any depth of any request, line
     or answer (``open``, ``generate``, ``probe``, ``plan_usage``, ``discover``,
     ``mcp_servers[]``, an agent's ``session/new``...), whatever its name: ``HOME`` and
     ``DATABASE_URL`` alike; in ACP's ``[{"name", "value"}]`` shape every ``value`` (the
     ``name`` stays);
   - every string or number under a key that ``secret_key`` accepts (THE key rule, stated
     in secret_keys.py: ``GITHUB_TOKEN``, ``password``, ``DB_SECRET``, ``apiKey``,
     ``GITHUB_PAT``...), at any depth below it; booleans and nulls stay (``"refreshToken": false``).
2. **In any string, by shape** (``scrub``): a URL's userinfo password
   (``scheme://user:PASSWORD@host``, the user stays; up to the last ``@`` before the
   host), the value of a query parameter that ``secret_param`` accepts (``?key=``,
   ``&token=``, ``?api_key=``, ``?sig=``...), the token of ``Bearer TOKEN`` (8 characters
   or more), the token of a loopback listener URL (``http://127.0.0.1:PORT/TOKEN/...``,
   the session's ``tools_url``).
3. **Carried over** (``scrub``): a value secret by key (rule 1's key rule, an env or
   header member whose name it accepts, ``Authorization``) or by shape (rule 2) and of at
   least ``MIN_ECHO`` (8) characters is learned, and every later occurrence of it is
   scrubbed from every record of this process, in any field, at any depth of JSON
   escaping (an agent echoing a key). Not every env value: ``HOME``, ``PATH`` or ``1``
   carried over would blank the record. The sidecar's own environment is learned by the
   same rule when a recording starts (every agent inherits it). What a frontend registers
   itself (the HTTP ``--auth-token``) is carried over whatever its length; a value under
   8 characters is then scrubbed only where it is a whole JSON string.

Rules of this file:
- Never raises, whatever the text (a malformed line is scrubbed as far as it parses);
  consistent: redacting a redacted text changes nothing, so replay applies the same rules
  to both sides of a comparison (core/recording.py) and a redacted recording replays.
- Sans-IO and cheap when nothing matches: one compiled pattern decides whether a JSON text
  may hold a member to redact (only then is it parsed), each shape is looked for only
  where its telling character is, and the carried-over values are one compiled pattern.
  A member name written with ``\\u`` escapes (``"\\u0074oken"``) is not seen: no JSON
  encoder we know of escapes letters.
"""

from __future__ import annotations

import json
import re

from agentproto.core.secret_keys import container_key

# The key rule is secret_keys.py; these names stay importable from here.
from agentproto.core.secret_keys import secret_key as secret_key
from agentproto.core.secret_keys import secret_param as secret_param
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable, Mapping

REDACTED = "[redacted]"
_REDACTED_JSON = '"[redacted]"'
#: A value learned for carry-over has at least this many characters.
MIN_ECHO = 8

# -- rule 1 on JSON values --------------------------------------------------------------
#: A JSON text holds nothing for rule 1 unless a member's name ends like one the rules
#: accept: a cheap superset, checked before any parse. It is matched on the text lowered
#: and reversed, so that it starts with a literal (``:``) the regex engine skips to: 2 us
#: a line instead of 36 for the same search forwards (``"\\*`` allows escaped JSON).
_ENDINGS = ("token", "secret", "secrets", "password", "passwd", "passphrase", "pat", "credential",
            "credentials", "apikey", "authorization", "cookie", "key", "env", "headers")  # fmt: skip
_TRIGGER_REVERSED = re.compile(
    r':\s*"\\*[0-9_\-]*(?:' + "|".join(w[::-1] for w in sorted(_ENDINGS, key=len, reverse=True)) + ")"
)


def _triggered(text: str) -> bool:
    """Whether ``text`` may hold a member rule 1 redacts."""
    return ":" in text and _TRIGGER_REVERSED.search(text.lower()[::-1]) is not None


def _scalar(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))


class _Walk:
    """Rule 1 over a decoded JSON value (``redact_value``): the same rule as
    ``_redact_json``, on objects; ``learn(value, by_key)`` is told each value redacted."""

    def __init__(self, learn: Callable[[str, bool], None]) -> None:
        self.learn = learn

    def value(self, value: Any, schema: bool = False) -> Any:
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, member in value.items():
                named = isinstance(key, str)
                if schema:  # a property's schema: only a scalar under a secret name is data
                    secret = named and (secret_key(key) or container_key(key)) and _scalar(member)
                    out[key] = self.secret(member, True) if secret else self.value(member)
                elif named and secret_key(key):
                    out[key] = self.secret(member, True)
                elif named and container_key(key):
                    out[key] = self.container(member)
                else:
                    out[key] = self.value(member, named and key in _SCHEMA_KEYS)
            return out
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def text(self, value: str) -> str:
        """A string that is itself a JSON text (a line inside a record, a tool call's
        arguments) gets the same rule."""
        if value.lstrip()[:1] in ("{", "[") and _triggered(value):
            return _redact_json(value, self.learn)
        return value

    def secret(self, value: Any, by_key: bool) -> Any:
        if isinstance(value, dict):
            return {k: self.secret(v, by_key) for k, v in value.items()}
        if isinstance(value, list):
            return [self.secret(v, by_key) for v in value]
        if _scalar(value):
            if isinstance(value, str) and value != REDACTED:
                self.learn(value, by_key)
            return REDACTED
        return value

    def container(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.secret(v, isinstance(k, str) and secret_key(k)) for k, v in value.items()}
        if isinstance(value, list):
            out: list[Any] = []
            for entry in value:
                if isinstance(entry, dict):  # ACP's {"name", "value"}: the name stays
                    name = entry.get("name")
                    by_key = isinstance(name, str) and secret_key(name)
                    out.append({k: (v if k == "name" else self.secret(v, by_key)) for k, v in entry.items()})
                else:
                    out.append(self.secret(entry, False))
            return out
        return self.secret(value, False)


# -- rule 1 on JSON texts, in place ------------------------------------------------------
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.S)
_PLAIN, _SECRET, _SECRET_LEARN, _CONTAINER, _ENTRY, _SCHEMA, _SCALAR_SECRET = range(7)
#: A JSON Schema's ``properties`` names fields, it holds none: under a secret name only a
#: scalar is redacted (``"apiKey": {"type": "string"}`` stays readable).
_SCHEMA_KEYS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
#: The mode of an array's elements, by the array's mode where it differs.
_ARRAY_OF = {_CONTAINER: _ENTRY, _ENTRY: _SECRET, _SCHEMA: _PLAIN}


def _decode(token: str) -> str | None:
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return token not in ("nan", "inf", "-inf") and token[:1] in "-0123456789"


def _redact_json(text: str, learn: Callable[[str, bool], None]) -> str:
    """Rule 1 on a JSON text (one value, or several: a response's lines), by position: only
    the redacted values' tokens change, every other byte stays as it was (so redacting the
    live side of a replay yields the recorded side's bytes). Best effort on a text that is
    not JSON; never raises but RecursionError (a JSON string in a JSON string, 1,000 deep)."""
    out: list[str] = []
    last = 0
    # One frame per open object or array: [is_object, its mode, expecting a member's
    # name, the mode of its next value, the member's name, the ACP entry's name].
    stack: list[list[Any]] = []
    for match in _TOKENS.finditer(text):
        token = match.group(0)
        frame = stack[-1] if stack else None
        mode = frame[3] if frame is not None else _PLAIN
        if mode == _SCALAR_SECRET and token in ("{", "["):
            mode = _PLAIN
        if token == "{":
            stack.append([True, mode, True, _PLAIN, None, None])
            continue
        if token == "[":
            # An env/headers array holds entries; an array in an entry is all secret; an
            # array is no JSON Schema's ``properties`` (an object), so no exemption in it.
            element = _ARRAY_OF.get(mode, mode)
            stack.append([False, element, False, element, None, None])
            continue
        if token in ("}", "]"):
            if stack:
                stack.pop()
            continue
        if token in (",", ":"):
            if token == "," and frame is not None and frame[0]:
                frame[2] = True
            continue
        if frame is not None and frame[0] and frame[2]:  # a member's name
            frame[2] = False
            key = _decode(token) if token[:1] == '"' else None
            frame[4] = key
            frame[3] = _value_mode(frame[1], key, frame[5])
            continue
        # A scalar value.
        replacement: str | None = None
        if mode not in (_PLAIN, _SCHEMA):
            if token[:1] == '"':
                value = _decode(token)
                if value is not None and value != REDACTED:
                    learn(value, mode in (_SECRET_LEARN, _SCALAR_SECRET))
                    replacement = _REDACTED_JSON
            elif _is_number(token):
                replacement = _REDACTED_JSON
        elif token[:1] == '"' and len(token) > 2:
            value = _decode(token)
            if frame is not None and frame[1] == _ENTRY and frame[4] == "name":
                frame[5] = value  # an entry's name: it says whether its value is learned
            elif value is not None and value.lstrip()[:1] in ("{", "[") and _triggered(value):
                inner = _redact_json(value, learn)
                if inner != value:
                    replacement = json.dumps(inner, ensure_ascii=token.isascii())
        if replacement is not None:
            out.append(text[last : match.start()])
            out.append(replacement)
            last = match.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _value_mode(mode: int, key: str | None, entry_name: str | None) -> int:
    """The mode of an object member's value, from its object's mode and the member's name."""
    if mode in (_SECRET, _SECRET_LEARN):
        return mode
    if mode == _CONTAINER:  # a member of env/headers: secret; learned if its name says so
        return _SECRET_LEARN if key is not None and secret_key(key) else _SECRET
    if mode == _ENTRY:  # ACP's {"name", "value"}: the name stays, the rest is secret
        if key == "name":
            return _PLAIN
        return _SECRET_LEARN if isinstance(entry_name, str) and secret_key(entry_name) else _SECRET
    if key is None:
        return _PLAIN
    if mode == _SCHEMA:  # a property's schema: only a scalar under a secret name is data
        return _SCALAR_SECRET if secret_key(key) or container_key(key) else _PLAIN
    if secret_key(key):
        return _SECRET_LEARN
    if container_key(key):
        return _CONTAINER
    if key in _SCHEMA_KEYS:
        return _SCHEMA
    return _PLAIN


# -- rule 2: shapes in any text ----------------------------------------------------------
#: ``scheme://user:PASSWORD@``; the scheme's slashes may be JSON-escaped (``:\/\/``).
#: The password runs to the authority's last ``@`` (``u:p@ss@host``: ``p@ss``).
_USERINFO = re.compile(
    r"((?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*:(?:\\*/){2}[^\s/?#@:\"\\]*:)([^\s/?#\"\\]+)(?=@)"
)
#: ``?NAME=VALUE`` and ``&NAME=VALUE``: the value up to ``&``, ``#``, a quote or a space.
_PARAM = re.compile(r"([?&]([A-Za-z0-9_.\-]+)=)([^&#\s\"'\\<>]+)")
_BEARER = re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/\-]{8,}=*)")
#: A loopback listener URL's first path segment is its secret token (tools_url, hook URLs).
_LISTENER_URL = re.compile(r"https?:(?:\\*/){2}(?:127\.0\.0\.1|localhost|\[::1\]):\d+(?:\\*/)([A-Za-z0-9_\-]{16,})")


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
        """Carry ``value`` over whatever its length (what a frontend registers itself)."""
        if isinstance(value, str) and value and value != REDACTED and value not in self.values:
            self.values.add(value)
            self._dirty = True

    def learn_value(self, value: Any) -> None:
        """Carry ``value`` over if it is long enough (rule 3)."""
        if isinstance(value, str) and len(value) >= MIN_ECHO and REDACTED not in value:
            self.add(value)

    def _found(self, value: str, by_key: bool) -> None:
        """A value rule 1 redacts: carried over if secret by key, and its secret shapes
        (an env's ``DATABASE_URL`` password) in any case."""
        if by_key:
            self.learn_value(value)
        self._shapes(value)

    def learn(self, obj: Any) -> None:
        """Every secret of a request (or any JSON value) by rules 1 and 2, for carry-over."""
        try:
            _Walk(self._found).value(obj)
            self._shapes(obj if isinstance(obj, str) else json.dumps(obj))
        except (RecursionError, TypeError, ValueError):
            pass

    def learn_env(self, env: Mapping[str, Any]) -> None:
        """An environment's secrets by rule 3: values of secret keys, and secret shapes in
        any value (``DATABASE_URL=postgres://u:PASSWORD@h/db``), of 8 characters or more."""
        for key, value in env.items():
            if isinstance(value, str):
                if isinstance(key, str) and secret_key(key):
                    self.learn_value(value)
                self._shapes(value)

    def learn_environment(self, environ: Mapping[str, str]) -> None:
        """The secrets of this process's own environment, which every agent inherits (one
        may echo them), by the same rule as a request's ``env``."""
        self.learn_env(environ)

    def learn_url(self, text: str) -> None:
        """The tokens of loopback listener URLs in ``text``."""
        for match in _LISTENER_URL.finditer(text):
            self.add(match.group(1))

    # -- scrubbing -----------------------------------------------------------------------
    def redact_json(self, text: str, lines: bool = False) -> str:
        """Rule 1 on a JSON text (see ``_redact_json``), learning what rule 3 carries.
        ``lines``: the text is one JSON value a line (an ops response), taken line by line,
        and only the lines that may hold a member to redact are parsed (the same result on
        such a text, at a cost that grows with those lines only). A request may be pretty
        printed: it is parsed whole."""
        if not _triggered(text):
            return text
        if lines and "\n" in text:
            return "\n".join(self._redact_line(line) if _triggered(line) else line for line in text.split("\n"))
        return self._redact_line(text)

    def _redact_line(self, text: str) -> str:
        try:
            return _redact_json(text, self._found)
        except RecursionError:
            return text

    def redact_value(self, value: Any) -> Any:
        """Rule 1 on a decoded JSON value (a note's fields): a redacted copy."""
        try:
            return _Walk(self._found).value(value)
        except RecursionError:
            return value

    def _shapes(self, text: str) -> str:
        """Rule 2 on ``text``: secret shapes redacted in place and learned."""
        # Each rule only where its one telling character or word is (a relayed record
        # pays a few substring searches: one-character ones are memchr).
        if "@" in text:
            text = _USERINFO.sub(self._shape_replaced(2), text)
        if "://" in text and any(hint in text for hint in ("://127.0.0.1:", "://localhost:", "://[::1]:")):
            self.learn_url(text)
        if "=" in text and ("?" in text or "&" in text):
            text = _PARAM.sub(self._param_replaced, text)
        if "earer" in text or "EARER" in text:
            text = _BEARER.sub(self._shape_replaced(2), text)
        return text

    def _shape_replaced(self, group: int) -> Callable[[re.Match[str]], str]:
        def replaced(match: re.Match[str]) -> str:
            value = match.group(group)
            if value == REDACTED:
                return match.group(0)
            self.learn_value(value)
            return match.group(0)[: match.start(group) - match.start(0)] + REDACTED

        return replaced

    def _param_replaced(self, match: re.Match[str]) -> str:
        value = match.group(3)
        if value == REDACTED or value.startswith("%5Bredacted%5D") or not secret_param(match.group(2)):
            return match.group(0)
        self.learn_value(value)
        return match.group(1) + REDACTED

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
        """``text`` with rule 2's shapes and every carried-over secret replaced by
        ``[redacted]`` (rule 1 is ``redact_json``'s: it needs the JSON structure)."""
        text = self._shapes(text)
        if self._dirty:
            self._pattern = self._compile()
        pattern = self._pattern
        if pattern is None:
            return text
        return pattern.sub(_replacement, text)

    def clean(self, text: str) -> str:
        """All three rules on a JSON text (or any text): what a record's field becomes."""
        return self.scrub(self.redact_json(text))


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


def clean(text: str) -> str:
    return SECRETS.clean(text)


def learn(obj: Any) -> None:
    SECRETS.learn(obj)
