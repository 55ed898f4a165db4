"""A line transport wrapped around the child-process one, for the test tools that watch or
break an agent's conversation (the corpus capture, fault injection): the spawn's callbacks
are the wrapper's, everything else is passed through."""

from __future__ import annotations

import copy
from typing import Any, Callable

from agentproto.loopio.transport import Spawn
from agentproto.loopio.loop import Loop


def with_changes(spawn: Spawn, **changes: Any) -> Spawn:
    """A copy of ``spawn`` with ``changes`` (a plain record, not a dataclass: see wire.Record)."""
    changed = copy.copy(spawn)
    for name, value in changes.items():
        setattr(changed, name, value)
    return changed


class Wrapped:
    """Set what the callbacks need, then call this ``__init__`` with them (``on_line=…``)."""

    def __init__(self, loop: Loop, spawn: Spawn, record_wire: Any, make: Callable[..., Any], **callbacks: Any) -> None:
        self.loop = loop
        self.spawn = spawn
        self.inner = make(loop, with_changes(spawn, **callbacks), record_wire)
        self.pid = self.inner.pid
        self.tree = getattr(self.inner, "tree", None)

    def write(self, data: bytes) -> None:
        self.inner.write(data)

    def write_json(self, obj: Any) -> None:
        self.inner.write_json(obj)

    def close_stdin(self) -> None:
        self.inner.close_stdin()

    def shutdown(self, grace: float) -> None:
        self.inner.shutdown(grace)

    def kill(self) -> None:
        self.inner.kill()

    def signal(self, signum: int) -> None:
        self.inner.signal(signum)

    def pause(self) -> None:
        self.inner.pause()

    def resume(self) -> None:
        self.inner.resume()

    @property
    def running(self) -> bool:
        return bool(self.inner.running)

    @property
    def stderr_tail(self) -> str:
        return str(self.inner.stderr_tail)
