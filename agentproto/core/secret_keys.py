"""The key rule: whether a name (a JSON member, an env or header name, a URL's query
parameter) says its value is a secret. Sans-IO, and cheap: one regex split per name.

Rules of this file:
- The rule reads the name only, never the value, and is stated once, in ``secret_key``'s
  docstring (SECURITY.md and README quote it); redact.py applies it to every record.
- It errs towards secret for credentials' own words and away from it for counts and ids
  (``max_tokens``, ``resume_token``): a rule that blanks a record's figures would be turned
  off, a rule that misses a key leaks it.
"""

from __future__ import annotations

import re

#: A key's words: runs of capitals (an acronym: ``API`` in ``APIKey``), a capitalized or
#: lowercase word, runs of digits. Everything else separates words.
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORDS = frozenset({
    "token", "secret", "secrets", "password", "passwd", "passphrase", "pat",
    "credential", "credentials", "apikey", "authorization", "cookie",
})  # fmt: skip
_SECRET_ENDINGS = ("token", "secret", "password", "apikey")
#: ``token`` after these is an id or a cursor, not a credential (protocol 1's
#: ``resume_token`` is the agent's session id).
_NOT_CREDENTIAL = frozenset({"resume", "page", "continuation"})
#: A query parameter is secret by the key rule, or when its last word is one of these.
_PARAM_WORDS = frozenset({"key", "sig", "signature", "auth", "pwd"})


def _words(key: str) -> list[str]:
    words = [w.lower() for w in _WORDS.findall(key)]
    while words and words[-1].isdigit():
        words.pop()  # API_KEY_2 is API_KEY's sibling
    return words


def secret_key(key: str) -> bool:
    """Whether the values under ``key`` (a JSON object's member, an env or header name)
    are secret. The rule, case-insensitive:

    Split ``key`` into words at every character that is not an ASCII letter or digit and at
    camelCase boundaries (``clientSecret``: client, secret; ``APIKey``: api, key), and drop
    trailing numbers (``API_KEY_2``). The key is secret when its LAST word

    - is one of ``token``, ``secret``, ``secrets``, ``password``, ``passwd``,
      ``passphrase``, ``pat``, ``credential``, ``credentials``, ``apikey``,
      ``authorization``, ``cookie``;
    - or ends in ``token``, ``secret``, ``password`` or ``apikey`` (one run-together word:
      ``GITHUBTOKEN``, ``XAPIKEY``);
    - or is ``key`` after another word (``API_KEY``, ``apiKey``, ``x-api-key``,
      ``private_key``; never ``key`` alone, a usage group's name);

    except ``token`` right after ``resume``, ``page`` or ``continuation`` (``resume_token``,
    protocol 1's session id; ``next_page_token``, a cursor).

    Secret: ``TOKEN``, ``GITHUB_TOKEN``, ``accessToken``, ``SECRET``, ``DB_SECRET``,
    ``clientSecret``, ``password``, ``APIKEY``, ``ANTHROPIC_API_KEY``, ``GITHUB_PAT``,
    ``MY_PAT``, ``GCP_CREDENTIALS``, ``Authorization``. Not secret: ``tokens``,
    ``input_tokens``, ``max_tokens``, ``token_count``, ``tokenUsage``, ``apiKeySource``,
    ``key``, ``KEYBOARD``, ``PASSWORD_HINT``, ``PATH``, ``path``, ``resume_token``.
    """
    words = _words(key)
    if not words:
        return False
    last = words[-1]
    if last == "key":
        return len(words) > 1
    if last == "token" and len(words) > 1 and words[-2] in _NOT_CREDENTIAL:
        return False
    return last in _SECRET_WORDS or last.endswith(_SECRET_ENDINGS)


def secret_param(name: str) -> bool:
    """Whether a URL query parameter's value is secret: ``secret_key(name)``, or its last
    word is ``key``, ``sig``, ``signature``, ``auth`` or ``pwd`` (``?key=``, ``?sig=``,
    ``X-Amz-Signature``)."""
    if secret_key(name):
        return True
    words = _words(name)
    return bool(words) and words[-1] in _PARAM_WORDS


def container_key(key: str) -> bool:
    """``env`` and ``headers``: every member's value is redacted (rule 1)."""
    return key.lower() in ("env", "headers")
