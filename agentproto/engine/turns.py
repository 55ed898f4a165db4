"""One turn's bookkeeping and one queued prompt, sans-IO.

A turn remembers what the agent left open in it: messages not yet ended, tools still
pending or running, requests the app has not answered. When the turn ends, however the
agent ended it, the engine closes each of those in order (RequestClosed, MessageEnded)
before TurnEnded, so an app never waits on something that cannot arrive any more.
"""

from __future__ import annotations

from collections import OrderedDict

from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.errors import AgentError
    from agentproto.core.wire_types import Request
    from agentproto.loopio.loop import Loop, Timer

#: Kinds that open an agent-initiated turn when no turn is running (and that are stale
#: when they arrive before the agent acknowledged a new turn).
CONTENT = frozenset({"TextDelta", "ReasoningDelta", "UserMessage", "RequestOpened", "ToolUpdated"})
MESSAGE_KINDS = frozenset({"TextDelta", "ReasoningDelta", "UserMessage"})
ACTIVE_TOOL = frozenset({"Pending", "Running"})

if TYPE_CHECKING:
    Done = Callable[[Any, "AgentError | None"], None]


class Turn:
    __slots__ = (
        "id", "origin", "acked", "messages", "tools", "requests", "cancel_timer", "quiet", "started", "failure",
        "prompt", "used_tools", "rate_limit", "retry_timer", "retries",
    )  # fmt: skip

    def __init__(self, turn_id: str, origin: Any, acked: bool, started: float = 0.0) -> None:
        self.id = turn_id
        self.origin = origin
        #: When it started, by the loop's clock (its duration goes to the observations).
        self.started = started
        #: The agent accepted this turn; content reported before that is the last turn's.
        self.acked = acked
        #: Messages not yet ended (the engine adds and ends them itself: the hot path).
        self.messages: OrderedDict[str, None] = OrderedDict()
        self.tools: OrderedDict[str, None] = OrderedDict()
        self.requests: dict[str, Request] = {}
        self.cancel_timer: Timer | None = None
        #: For an agent that may never report the end of this turn.
        self.quiet: QuietWindow | None = None
        #: Why the engine cancelled it (a budget's bound): it ends Failed with this message.
        self.failure: str | None = None
        #: For a rate limit's retry (engine/guard.py): the prompt it runs (None for the agent's
        #: own turns), whether it used a tool, the agent's last rate-limit report (its
        #: Diagnostic's ``extensions.agentproto.rate_limit``), the wait before it is re-sent,
        #: and how many times it was.
        self.prompt: Prompt | None = None
        self.used_tools = False
        self.rate_limit: dict[str, Any] | None = None
        self.retry_timer: Timer | None = None
        self.retries = 0

    @staticmethod
    def starts_one(name: str, body: Any) -> bool:
        """Whether content arriving with no turn running opens an agent turn (a finished
        tool's late result belongs to the turn that ended, not to a new one)."""
        return name != "ToolUpdated" or body.get("status") in ACTIVE_TOOL

    def tool_updated(self, tool: dict[str, Any]) -> None:
        """A ToolUpdated of this turn: the tool is running, or done with."""
        self.used_tools = True
        if tool.get("status") in ACTIVE_TOOL:
            self.tools[tool["id"]] = None
        else:
            self.tools.pop(tool["id"], None)

    def take_requests(self) -> list[str]:
        """The ids of the requests still open, forgotten (the engine closes them)."""
        ids = list(self.requests)
        self.requests.clear()
        return ids

    def stop_timers(self) -> None:
        if self.cancel_timer is not None:
            self.cancel_timer.cancel()
        if self.retry_timer is not None:
            self.retry_timer.cancel()
        if self.quiet is not None:
            self.quiet.cancel()


class QuietWindow(Alarm):
    """The end of a turn whose agent may never report one: ``ended`` runs once the turn has
    been quiet for ``window`` seconds. Every event of the turn starts the wait over, and an
    open request or a running tool holds it open (the agent is waiting, not done)."""

    __slots__ = ("window", "turn", "ended")

    def __init__(self, loop: Loop, window: float, turn: Turn, ended: Callable[[], None]) -> None:
        super().__init__(loop, self._quiet)
        self.window = window
        self.turn = turn
        self.ended = ended
        self.restart()

    def restart(self) -> None:
        self.set(self.window)

    def _quiet(self) -> None:
        if self.turn.requests or self.turn.tools:
            self.restart()
        else:
            self.ended()


class Prompt:
    __slots__ = ("id", "text", "attachments", "done")

    def __init__(self, prompt_id: str, text: str, attachments: list[str], done: Done | None) -> None:
        self.id = prompt_id
        self.text = text
        self.attachments = attachments
        #: A steer's reply, until the agent says whether it took the prompt.
        self.done = done
