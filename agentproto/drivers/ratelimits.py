"""Rate limits and overloads, as every driver reports them: one ``Diagnostic`` whose
``extensions.agentproto.rate_limit`` carries ``retry_at`` (Unix seconds, when the agent says
when the limit resets, else null) and the agent's message. The engine keeps the running
turn's last one: with ``retry`` on ``open`` a failed turn that used no tool is sent again
once the limit resets (engine/guard.py). The status stays Working meanwhile.

Rules of this file:
- Recognition is by the agent's own words and codes: HTTP 429 and 529, "rate limit",
  "overloaded", "usage limit" (Claude's ``... usage limit reached|EPOCH`` names its reset),
  Codex's ``usageLimitExceeded``/rate-limit error infos, an ACP error's 429, agy's ERROR
  ``result`` in those words. Anything else is not a rate limit.
- No I/O but the wall clock (``retry_at`` = now + the agent's delay, when it gives one).
"""

from __future__ import annotations

import re
import time

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from agentproto.drivers.base import Host

#: What says a failure is a rate limit or an overload, in any agent's message.
_WORDS = re.compile(r"\b(?:429|529)\b|rate.?limit|overloaded|usage limit|too many requests", re.IGNORECASE)
#: Claude's usage-limit message ends with its reset as Unix seconds.
_EPOCH = re.compile(r"limit reached\|(\d{9,11})")


def is_rate_limit(message: str) -> bool:
    return _WORDS.search(message) is not None


def reset_of(message: str) -> float | None:
    """The reset time a message names itself (Claude's ``...|EPOCH``), or None."""
    match = _EPOCH.search(message)
    return float(match.group(1)) if match else None


def report(host: Host, message: str, retry_at: float | None, level: str = "Warning") -> None:
    """The one Diagnostic a rate limit becomes (``retry_at``: Unix seconds, or None)."""
    shown = message if retry_at is None else f"{message} (resets in {max(0.0, retry_at - time.time()):.0f} s)"
    body = {"retry_at": None if retry_at is None else round(retry_at, 3), "message": message}
    host.emit(
        {"Diagnostic": {"level": level, "message": f"rate limited: {shown}"}}, {"agentproto": {"rate_limit": body}}
    )


def after(seconds: float | None) -> float | None:
    """``retry_at`` for a delay the agent gave (seconds from now), or None."""
    return None if seconds is None else time.time() + max(0.0, seconds)
