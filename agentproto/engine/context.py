"""What a session is handed and hands back: the ``Context`` every session of one runtime
shares, the ``Sink`` its output goes to, and the ``Holder`` (a frontend's scope) that keeps
it until it closes.

Rules of this file:
- These are the engine's seams with the runtime and the frontends: the engine never imports
  the runtime (engine/runtime.py hands each session a Context) nor a frontend (a frontend is
  a Sink and a Holder to it).
- Sink and Holder are interfaces for mypy (``Protocol`` is ``object`` at run time).
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.errors import AgentError
    from agentproto.engine.observations import Observer
    from agentproto.engine.session import Session
    from agentproto.loopio.loop import Loop
    from agentproto.loopio.transport import TransportFactory
    from agentproto.tools.apptools import Listen


class Sink(Protocol):
    """Where a session's output goes: a frontend connection, or an internal collector."""

    def event(self, session: "Session", event: dict[str, Any]) -> None: ...

    def session_error(self, session: "Session", error: AgentError) -> None: ...

    def session_closed(self, session: "Session") -> None: ...


class Holder(Protocol):
    """Something that holds a session until it closes (a frontend's scope)."""

    def discard(self, session: "Session") -> None: ...


class Context:
    """What every session of one runtime shares, handed to each: the engine never imports the
    runtime. (Not a dataclass: defining one costs more start-up time than this module's rest.)"""

    __slots__ = ("loop", "stall_timeout", "forget", "transport_factory", "listen", "observer")

    def __init__(
        self,
        loop: Loop,
        stall_timeout: float,
        forget: Callable[[Session], None],
        transport_factory: TransportFactory,
        listen: Listen | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.loop = loop
        #: Seconds a session may have events waiting unwritten before it fails ConsumerLagged.
        self.stall_timeout = stall_timeout
        #: The session has closed (or failed to open): its owner drops it.
        self.forget = forget
        #: How sessions start their agents (drivers/transport.py; replay and fault injection
        #: put their own in).
        self.transport_factory = transport_factory
        #: Serves a session's tools and hooks on the loopback listener (opened on first use).
        self.listen = listen
        #: Told of every ended turn and ContextUsage report (observations.py: inspect's figures).
        self.observer = observer
