"""Protocol 1 as the Python client (agentproto/client.py) reads it: an ErrorBody as the
exception the client raises, an event's kind by name, and the command table's keywords.
Sans-IO: the client's threads and its sidecar process stay in client.py.

Rules of this file:
- ``AgentProtoError`` keeps every field of the ErrorBody (``kind``, ``message`` and each
  extra one, readable as an attribute); the client raises nothing else for a sidecar error.
- A keyword a command does not take is a ``TypeError``, as Python's own: a misspelt option
  must not be dropped on the floor.
- Imports nothing at start-up but errors.py (the command table only when a keyword is
  checked): ``import agentproto.client`` stays cheap.
"""

from __future__ import annotations

import json
from typing import Any

from agentproto.core.errors import Kind


class AgentProtoError(Exception):
    """An ErrorBody from the sidecar (or a client-side one): kind, message, extra fields."""

    def __init__(self, kind: str, message: str, **fields: Any) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.fields = fields

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "AgentProtoError":
        extra = {k: v for k, v in body.items() if k not in ("kind", "message")}
        return cls(str(body.get("kind", Kind.PROTOCOL_FAILED)), str(body.get("message", "")), **extra)

    @property
    def body(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **self.fields}

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(name)


def kind_of(event: Any) -> str:
    """The variant name of an event's kind, for both the object and the string form.

    Takes an event (``{"kind": ...}``) or a kind itself (``"ContextCompacted"``,
    ``{"TextDelta": {...}}``).
    """
    kind = event.get("kind", event) if isinstance(event, dict) and "kind" in event else event
    if isinstance(kind, str):
        return kind
    if isinstance(kind, dict) and kind:
        name: str = next(iter(kind))
        return name
    return ""


def check_options(command: str, options: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> None:
    """A keyword the command does not take is a ``TypeError`` naming it and the valid ones,
    as Python's own is: a misspelt ``permision_mode`` must not be dropped on the floor.
    ``tools`` (a keyword of its own: the app's tools) join ``options`` when given."""
    from agentproto.core.commands import COMMANDS

    required, optional = COMMANDS[command]
    valid = sorted({*required, *optional} - {"agent"})
    unknown = [key for key in options if key not in valid]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"{command}() got an unexpected keyword argument {unknown[0]!r}{hint}; it takes: {', '.join(valid)}"
        )
    if tools is not None:
        options["tools"] = tools


def hello_of(line: bytes) -> dict[str, Any] | None:
    """The hello of a sidecar's first line; None when it is not a protocol 1 hello."""
    try:
        hello = json.loads(line)["hello"]
    except (ValueError, KeyError, TypeError):
        return None
    return hello if isinstance(hello, dict) and hello.get("protocol") == 1 else None


def not_a_sidecar(line: bytes) -> AgentProtoError:
    """ProtocolFailed for a first line that is no protocol 1 hello, quoting it."""
    shown = line[:200].decode("utf-8", "replace") if line else "(nothing)"
    return AgentProtoError(Kind.PROTOCOL_FAILED, f"not a protocol 1 sidecar: first line was {shown!r}", detail=shown)


def exited_before_hello(status: int, stderr: str) -> AgentProtoError:
    """ProcessExited for a sidecar gone before its hello: its own last words on stderr
    (``cannot read mock script …``) say why."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    why = f"the sidecar exited (status {status}) before its hello"
    if said:
        why += f": {said[-1].removeprefix('agentproto: ')}"
    return AgentProtoError(Kind.PROCESS_EXITED, why, status=str(status), stderr=stderr)


def lagged(session_id: str, cap: int) -> AgentProtoError:
    """ConsumerLagged for a session whose queue of unconsumed events is full."""
    return AgentProtoError(
        Kind.CONSUMER_LAGGED, f"more than {cap} events of session {session_id} were not consumed", session=session_id
    )
