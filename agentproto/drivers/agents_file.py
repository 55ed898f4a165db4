"""The user's own agents: ``$XDG_CONFIG_HOME/agentproto/agents.json`` (``~/.config`` when unset).

A user adds an ACP agent to the catalog without new code by declaring it in this one file:

    {"agents": {"mine": {"command": "my-agent", "args": ["--acp"], "env": {"MY_KEY": "..."}}}}

Each entry: ``command`` (required: a name looked up on ``PATH`` or an absolute path, ``~``
expanded), ``args`` (what makes it speak ACP), ``env`` (variables it needs; the session's
``env`` wins), ``name``, ``install_hint``, ``version_args`` (``[]``: do not ask its version),
``protocol`` (``"acp"``, the only one today). catalog.py reads it here, and only when the
catalog is consulted (``list``/``discover``, ``probe``, ``open`` of a name the built-ins lack):
nothing at start-up.

Rules of this file (SECURITY.md, "The user's agents"):
- One file per user, at that one path: never a file of a project, session or working
  directory. A relative ``$XDG_CONFIG_HOME`` is ignored (the XDG rule: it would name a file
  of the working directory), and so is a relative ``command`` with a ``/`` (``./agent``).
- Read only when the file (after any symlink) is a regular file owned by the user and not
  group- or world-writable, in a directory owned by the user (or root) that is not either
  (the directory holding the link too); otherwise nothing is read and the reason is a
  problem ``list`` shows (``chmod 600 …`` / ``chmod 700 …``). At most ``MAX_BYTES``.
- A declared id never shadows a built-in one: such an entry is ignored, with a problem.
- Every problem is a clear sentence naming the file and the JSON path (``agents.mine.args[1]:
  must be a string``); a bad entry costs that entry only, a bad file every entry. Nothing
  here raises to the caller.
- The ``env`` values are secrets like any session's ``env``: they go to the agent's process
  only (never a command line, a log or a discovery report), and a recording learns them by
  redact.py's rule 3 (engine/runtime.py).
- Parsed once per change of the file (its stat is the cache key), so a sidecar that consults
  the catalog per open pays one ``stat``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, NamedTuple

#: The largest agents.json read, in bytes.
MAX_BYTES = 1 << 20

_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ENTRY_KEYS = ("command", "args", "env", "name", "install_hint", "version_args", "protocol")


class Declared(NamedTuple):
    """One valid entry of the file."""

    id: str
    name: str
    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    install_hint: str
    version_args: tuple[str, ...]


class Loaded(NamedTuple):
    """What the file declares: its path, the valid entries, and every problem found."""

    path: str
    agents: tuple[Declared, ...]
    problems: tuple[str, ...]


def path(environ: Any = None) -> str:
    """The file's path: ``$XDG_CONFIG_HOME/agentproto/agents.json`` when that is absolute,
    else ``~/.config/agentproto/agents.json``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "agentproto", "agents.json")


_cache: dict[str, tuple[Any, Loaded]] = {}


def load(builtin_ids: tuple[str, ...] | list[str], environ: Any = None, uid: int | None = None) -> Loaded:
    """The declared agents (an absent file declares none, silently). ``uid``: whose file
    it must be (default: this process's user; tests name another)."""
    where = path(environ)
    try:
        st = os.stat(where)
    except OSError:
        return Loaded(where, (), ())
    uid = os.getuid() if uid is None else uid
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid, uid, tuple(builtin_ids))
    cached = _cache.get(where)
    if cached is not None and cached[0] == key:
        return cached[1]
    loaded = _read(where, builtin_ids, uid)
    _cache.clear()
    _cache[where] = (key, loaded)
    return loaded


def _unsafe(st: os.stat_result, what: str, where: str, owners: tuple[int, ...], uid: int) -> str | None:
    """Why a file (``what`` "it") or a directory may not be trusted, or None."""
    if st.st_uid not in owners:
        return f"{what} is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & 0o022:
        fix = "chmod 600" if what == "it" else "chmod 700"
        return f"{what} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o}): {fix} {where}"
    return None


def _read(where: str, builtin_ids: tuple[str, ...] | list[str], uid: int) -> Loaded:
    def refused(why: str) -> Loaded:
        return Loaded(where, (), (f"{where}: not read: {why}",))
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return refused(exc.strerror or str(exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return refused("not a regular file")
        why = _unsafe(st, "it", where, (uid,), uid)
        real = os.path.realpath(where)
        for directory in dict.fromkeys((os.path.dirname(where), os.path.dirname(real))):
            why = why or _unsafe(os.stat(directory), f"its directory {directory}", directory, (uid, 0), uid)
        if why:
            return refused(why)
        if st.st_size > MAX_BYTES:
            return refused(f"larger than {MAX_BYTES} bytes")
        data = b""
        while len(data) <= MAX_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_BYTES:
            return refused(f"larger than {MAX_BYTES} bytes")
    except OSError as exc:
        return refused(exc.strerror or str(exc))
    finally:
        os.close(fd)
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return refused("not UTF-8")
    except json.JSONDecodeError as exc:
        return refused(f"not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}")
    except RecursionError:
        return refused("nested too deeply")
    return parse(doc, where, builtin_ids)


def parse(doc: Any, where: str, builtin_ids: tuple[str, ...] | list[str]) -> Loaded:
    """The entries of an agents.json document (already JSON), each checked."""
    problems: list[str] = []
    agents: list[Declared] = []
    if not isinstance(doc, dict) or set(doc) - {"agents"}:
        extra = sorted(set(doc) - {"agents"}) if isinstance(doc, dict) else []
        why = f"unknown key {extra[0]!r} (the file holds one object: {{\"agents\": {{ID: {{...}}}}}})" if extra else (
            'must be an object: {"agents": {ID: {"command": ..., "args": [...], "env": {...}}}}'
        )
        return Loaded(where, (), (f"{where}: {why}",))
    entries = doc.get("agents", {})
    if not isinstance(entries, dict):
        return Loaded(where, (), (f"{where}: agents: must be an object of ID: entry",))
    builtins = {b.lower() for b in builtin_ids}
    for agent_id, entry in entries.items():
        at = f"{where}: agents.{agent_id}"
        if not _ID.match(agent_id):
            problems.append(f"{at}: an id is 1-64 of a-z 0-9 . _ - (starting with a letter or digit)")
            continue
        if agent_id in builtins:
            shadows = "a declared agent never shadows one (pick another id)"
            problems.append(f"{at}: {agent_id} is a built-in agent; {shadows}")
            continue
        declared = _entry(agent_id, entry, at, where, problems)
        if declared is not None:
            agents.append(declared)
    return Loaded(where, tuple(agents), tuple(problems))


def _strings(value: Any, at: str, problems: list[str]) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        problems.append(f"{at}: must be an array of strings")
        return None
    for i, item in enumerate(value):
        if not isinstance(item, str) or "\0" in item:
            problems.append(f"{at}[{i}]: must be a string (without NUL)")
            return None
    return tuple(value)


def _entry(agent_id: str, entry: Any, at: str, where: str, problems: list[str]) -> Declared | None:
    if not isinstance(entry, dict):
        problems.append(f"{at}: must be an object with at least \"command\"")
        return None
    before = len(problems)
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        problems.append(f"{at}: unknown key {unknown[0]!r} (known: {', '.join(_ENTRY_KEYS)})")
    if entry.get("protocol", "acp") != "acp":
        problems.append(f"{at}.protocol: must be \"acp\" (the one protocol a declared agent may speak today)")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        problems.append(f"{at}.command: required: the executable's name on PATH or its absolute path")
        command = ""
    else:
        command = os.path.expanduser(command)
        if os.sep in command and not os.path.isabs(command):
            problems.append(f"{at}.command: a relative path is refused (it would depend on the working directory)")
    args = _strings(entry.get("args", []), f"{at}.args", problems)
    version_args = _strings(entry.get("version_args", ["--version"]), f"{at}.version_args", problems)
    env = entry.get("env", {})
    if not isinstance(env, dict):
        problems.append(f"{at}.env: must be an object of NAME: string")
    else:
        for name, value in env.items():
            if not _ENV_NAME.match(name):
                problems.append(f"{at}.env: {name!r} is not a variable name")
            elif not isinstance(value, str) or "\0" in value:
                # The value itself is never quoted: it may be a secret.
                problems.append(f"{at}.env.{name}: must be a string (without NUL)")
    for key in ("name", "install_hint"):
        if key in entry and not isinstance(entry[key], str):
            problems.append(f"{at}.{key}: must be a string")
    if len(problems) > before or args is None or version_args is None:
        return None
    hint = entry.get("install_hint") or f"declared in {where}: install {command} or fix its \"command\""
    return Declared(agent_id, entry.get("name") or agent_id, command, args, dict(env), hint, version_args)
