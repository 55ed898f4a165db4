"""Flow control of one session: bounded memory without dropping an event.

The session hands every event to its sink at once and counts it (``unwritten``) until the
sink says it was written (``delivered``). Past ``HIGH_WATER`` waiting events the session stops
reading its agent (``pause``: the OS pipe then throttles the agent); at ``LOW_WATER`` it
reads again (``resume``). Only when events have waited and none could be written for
``stall_timeout`` seconds of the loop's clock is the app declared gone (``stalled``, with
the ConsumerLagged error to fail the session with).
"""

from __future__ import annotations

from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio.loop import Alarm

if TYPE_CHECKING:
    from typing import Callable

    from agentproto.loopio.loop import Loop

HIGH_WATER = 1024
LOW_WATER = 512


class Flow:
    __slots__ = ("loop", "stall_timeout", "pause", "resume", "stalled", "unwritten", "paused", "last_progress", "alarm")

    def __init__(
        self,
        loop: "Loop",
        stall_timeout: float,
        pause: Callable[[], None],
        resume: Callable[[], None],
        stalled: Callable[[AgentError], None],
    ) -> None:
        self.loop = loop
        self.stall_timeout = stall_timeout
        self.pause = pause
        self.resume = resume
        self.stalled = stalled
        self.unwritten = 0
        self.paused = False
        self.last_progress = loop.time()
        self.alarm = Alarm(loop, self._check)

    def grew(self) -> None:
        """The session counted one more event waiting (``unwritten += 1``, inline there: it
        runs for every event) and the count is now 1 (a new backlog) or ``HIGH_WATER``
        (reached on the way up: it grows by one, so past it there is nothing to call for)."""
        if self.unwritten == 1:
            self.last_progress = self.loop.time()
            if not self.alarm.armed:
                self.alarm.set(self.stall_timeout)
        elif self.unwritten >= HIGH_WATER and not self.paused:
            self.paused = True
            self.pause()

    def delivered(self, count: int) -> None:
        """The sink wrote ``count`` events."""
        self.unwritten -= count
        self.last_progress = self.loop.time()
        if self.paused and self.unwritten <= LOW_WATER:
            self.paused = False
            self.resume()

    def stop(self) -> None:
        self.alarm.cancel()

    def _check(self) -> None:
        if self.unwritten <= 0:
            return
        idle = self.loop.time() - self.last_progress
        if idle >= self.stall_timeout:
            # The app's fault, not the agent's: it stopped reading this session's events.
            self.stalled(
                AgentError.detail(
                    Kind.CONSUMER_LAGGED,
                    f"the app wrote no event of this session for {self.stall_timeout:g} s",
                    "the app stopped reading this session's events; the session was closed",
                )
            )
        else:
            self.alarm.set(self.stall_timeout - idle)
