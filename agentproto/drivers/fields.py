"""Typed reads of what an agent wrote: a mapping takes a field only when it has the type
the protocol says, and never turns a wrong one into text ("None", "5").

An agent's JSON is input we do not control: a field may be missing, null, or of another
type in a newer (or broken) agent. These helpers give the mappings one way to say "this
field, if it is a string (a list of objects, ...)", so a wrong value becomes an absent one
rather than an exception or a stringified lie. Pure functions only. What they return from an
agent's JSON is a ``JsonObject`` (core/wire_types.py): its fields are unchecked until read
through these helpers.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Mapping, TypeVar

    from agentproto.core.wire_types import ConfigChoice, JsonObject

    #: A message type of an agent's (drivers/<family>/types.py): every member optional.
    _Message = TypeVar("_Message", bound=Mapping[str, object])


def text(value: Any, default: str = "") -> str:
    """``value`` if it is a string, else ``default``."""
    return value if isinstance(value, str) else default


def opt_text(value: Any) -> str | None:
    """``value`` if it is a string, else None."""
    return value if isinstance(value, str) else None


def first_text(value: Any, *keys: str) -> str | None:
    """The first of ``keys`` whose value in the object ``value`` is a non-empty string."""
    members = obj(value)
    for key in keys:
        found = members.get(key)
        if isinstance(found, str) and found:
            return found
    return None


def obj(value: _Message | None) -> _Message:
    """``value`` if it is a JSON object, else an empty one (``value``'s type: an agent's
    message types have no required member, so ``{}`` is one of them)."""
    return value if isinstance(value, dict) else {}  # type: ignore[return-value]


def objects(value: list[_Message] | str | None) -> list[_Message]:
    """The objects of a JSON array (other entries skipped); [] if it is not an array."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def named(value: Any, key: str) -> list[JsonObject]:
    """The objects of a JSON array whose ``key`` is a string (other entries skipped)."""
    return [v for v in objects(value) if isinstance(v.get(key), str)]


def choices(value: Any, key: str, label: str) -> list[ConfigChoice]:
    """The choices of a Select option, from an agent's array of objects: each one's ``key``
    is the value, its ``label`` (or the value) the label, and its description is kept."""
    return [
        {"value": v[key], "label": str(v.get(label) or v[key]), "description": v.get("description")}
        for v in named(value, key)
    ]


def strings(value: Any) -> list[str]:
    """The strings of a JSON array (other entries skipped); [] if it is not an array."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def integer(value: Any, default: int = 0) -> int:
    """``value`` if it is a JSON integer (not a boolean), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def opt_integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: Any) -> float | None:
    """``value`` as a float if it is a JSON number (not a boolean), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
