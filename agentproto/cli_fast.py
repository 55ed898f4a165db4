"""The commonest command lines, read without argparse: start-up time.

Importing argparse (with gettext and locale) and building the whole grammar of cli_args.py
(nine parsers, sixty arguments) costs about 4 ms, more than anything else a start does
before its frontend's modules load, for a command line that is most often one of a few
words: ``serve``, ``agent``, ``--single-shot``, ``--version``. ``parse`` reads those
shapes and returns what argparse would; any other command line (``--help``, an error, a
flag not listed here, ``--mock=PATH``, an abbreviation) returns None and argparse reads it.

Rules of this file:
- Exactly argparse's result, or None: the namespace holds every attribute, with the same
  values, that ``cli_args.build_parser`` gives for that command line, and a shape read
  here is never a usage error there. tests/test_cli_fast.py compares the two for every
  shape; a flag added to ``serve`` or ``agent`` in cli_args.py goes in ``_DEFAULTS`` too
  (that test fails until it does).
- Only what cannot go wrong: whole flags, each at most once, with a value that does not
  start with ``-`` (argparse reads those its own way); no type conversion (every flag
  read here is a string, or ``agent``'s ``--single-shot``).
- No import beyond the package root (and ``core/typecheck.py``): this runs before anything
  else of the command line.
"""

from __future__ import annotations

import os
import sys

from agentproto import __version__
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from argparse import Namespace
    from typing import Any, Callable
else:
    from types import SimpleNamespace as Namespace  # the same attributes, without argparse

#: The top-level parser's own attributes, on every command line.
_TOP = {"top_single_shot": False, "top_mock": None, "top_record": None, "top_replay": None, "command": None}
#: What each command's parser adds, in argparse's order (its flags' defaults).
_SESSIONS = {"stall_timeout": 60.0}
_BOUNDS = {
    "tool_connections": 32, "tool_calls": 32, "max_terminals": 16, "record": None, "db": None, "db_keep": None,
    "control": None, "no_control": False,
}  # fmt: skip
_DEFAULTS: dict[str, dict[str, Any]] = {
    "serve": {
        "mock": None, **_SESSIONS, "transport": "stdio", "listen": None, "socket": None, "port": None,
        "auth_token": None, "session_idle_timeout": None, "ring_events": None, **_BOUNDS,
    },
    "agent": {"single_shot": False, "mock": None, **_SESSIONS, **_BOUNDS},
}  # fmt: skip
#: The flags read here, by where they may stand: flag -> (attribute, takes a value).
_FILES = {"--mock": ("mock", True), "--record": ("record", True), "--db": ("db", True), "--control": ("control", True)}
_FLAGS: dict[str | None, dict[str, tuple[str, bool]]] = {
    None: {"--single-shot": ("top_single_shot", False), "--mock": ("top_mock", True), "--record": ("top_record", True)},
    "serve": _FILES,
    "agent": {"--single-shot": ("single_shot", False), **_FILES},
}


def parse(argv: list[str], commands: dict[str, Callable[[Namespace], int]]) -> Namespace | None:
    """What argparse would make of ``argv`` (``commands``: each command's function, argparse's
    ``func``), or None where argparse must read it. ``--version`` alone prints the version
    and raises SystemExit(0), as argparse's action does."""
    if argv == ["--version"]:
        sys.stdout.write(f"agentproto {version_stamp()}\n")
        raise SystemExit(0)
    found: dict[str, Any] = dict(_TOP)
    words = iter(argv)
    first = next(words, None)
    if first in _DEFAULTS and first in commands:
        command: str | None = first
        found.update(command=first, **_DEFAULTS[first], func=commands[first])
    elif first == "--single-shot":
        command, found["top_single_shot"] = None, True
    else:
        return None
    flags, seen = _FLAGS[command], {first}
    for word in words:
        if word not in flags or word in seen:
            return None
        seen.add(word)
        attribute, takes_value = flags[word]
        if not takes_value:
            found[attribute] = True
            continue
        value = next(words, None)
        if value is None or value.startswith("-"):
            return None
        found[attribute] = value
    return Namespace(**found)


def version_stamp() -> str:
    """The version, or the VERSION stamp a copy made by scripts/vendor.py, build_pyz.py or
    install.py carries (``0.1.0+g<commit>``), read through the package's loader (a zipapp's
    too) without importing importlib.resources."""
    import agentproto

    try:
        loader: Any = agentproto.__spec__.loader
        stamp = loader.get_data(os.path.join(os.path.dirname(agentproto.__file__), "VERSION"))
    except (AttributeError, OSError, TypeError):
        return __version__
    text = stamp.decode("utf-8", "replace").strip()
    return text if text.startswith(__version__) else __version__
