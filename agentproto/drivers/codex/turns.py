"""The Codex session's turns: a prompt or a compaction started, steered, cancelled and
ended, the turn's usage, the no-progress watchdog, and the settings each turn carries. A
part of ``CodexDriver`` (drivers/codex/driver.py), which holds the session.

Rules of this file:
- Codex names a turn in ``turn/start``'s answer: a cancel that comes before it is kept
  and sent as ``turn/interrupt`` then.
- A turn that makes no progress for ``AGENTPROTO_CODEX_STALL_SECS`` (default 300 s; an
  unreachable provider makes Codex reconnect forever) is interrupted and ends Failed;
  waiting on the app (an open request) or on a running command is not a stall.
- Settings are not sent when configured: ``turn/start`` carries the model, the effort,
  the sandbox and the collaboration mode (the last two once the app set them).
- A turn's usage is the difference of Codex's thread totals since the turn started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from agentproto.core.errors import AgentError, Kind
from agentproto.core.jsonrpc import OnResponse, RpcError
from agentproto.drivers.codex.mapping import sandbox_policy
from agentproto.drivers.fields import obj, opt_text

if TYPE_CHECKING:
    from agentproto.core.wire_types import StopReason, ToolUpdate, TurnUsage
    from agentproto.drivers.base import Deltas, Host, Launch
    from agentproto.drivers.codex.types import InputItem, RequestParams, TurnStartParams
    from agentproto.loopio.loop import Alarm, Loop

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")


class CodexTurns:
    """The turn half of ``CodexDriver`` (a mixin of it, before ``CodexItems``)."""

    # What it shares with the driver (drivers/codex/driver.py sets each one).
    host: "Host"
    launch: "Launch"
    loop: "Loop"
    deltas: "Deltas"
    thread_id: str | None
    turn_id: str | None
    model: str | None
    effort: str | None
    sandbox: str | None
    mode: str
    stall_secs: float
    _send_sandbox: bool
    _send_mode: bool
    _turn_wanted: bool
    _cancel_wanted: bool
    _ended: set[str]
    _tools: dict[str, ToolUpdate]
    _requests: dict[str, tuple[Any, str, RequestParams]]  # by our id: Codex's id, method, params
    _usage_base: dict[str, int] | None
    _usage_total: dict[str, int]
    _stall_check: "Alarm"
    _last_progress: float

    def _request(self, method: str, params: Any, callback: OnResponse) -> None:
        raise NotImplementedError

    def _input(self, text: str, attachments: list[str]) -> list[InputItem]:
        items: list[InputItem] = [{"type": "text", "text": text, "text_elements": []}]
        others = []
        for path in attachments:
            if path.lower().endswith(IMAGE_SUFFIXES):
                items.append({"type": "localImage", "path": path})
            else:
                others.append(path)
        if others:
            items[0]["text"] = text + "\n\nAttached files:\n" + "\n".join(f"- {p}" for p in others)
        return items

    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        params: TurnStartParams = {"threadId": self.thread_id, "input": self._input(text, attachments)}
        if self.model:
            params["model"] = self.model
        if self.effort:
            params["effort"] = self.effort
        if self._send_sandbox and self.sandbox:
            params["sandboxPolicy"] = sandbox_policy(self.sandbox)
        if self._send_mode:
            params["collaborationMode"] = {
                "mode": self.mode,
                "settings": {
                    "model": self.model or "",
                    "reasoning_effort": self.effort,
                    "developer_instructions": None,
                },
            }
        if self.launch.output_schema is not None:
            params["outputSchema"] = self.launch.output_schema
        self._begin_turn()
        self._request("turn/start", params, self._turn_started)

    def _begin_turn(self) -> None:
        """A turn of ours starts (a prompt, or a compaction): Codex names it later."""
        self._turn_wanted = True
        self._cancel_wanted = False
        self.turn_id = None
        self._usage_base = dict(self._usage_total)
        self._arm_stall()

    def _turn_started(self, result: Any, error: RpcError | None) -> None:
        if not self._turn_wanted:
            return
        if error is not None:
            self._end_turn({"Failed": {"message": f"codex refused the turn: {error.message}"}})
            return
        self.turn_id = opt_text(obj(obj(result).get("turn")).get("id"))
        self.host.turn_acknowledged()
        if self._cancel_wanted:
            self._interrupt()

    def steer(self, text: str, attachments: list[str], done: Callable[[bool], None]) -> None:
        if not self.turn_id or not self._turn_wanted:
            done(False)
            return
        params = {"threadId": self.thread_id, "expectedTurnId": self.turn_id, "input": self._input(text, attachments)}
        self._request("turn/steer", params, lambda result, error: done(error is None))

    def cancel(self) -> None:
        if not self._turn_wanted:
            return
        self._cancel_wanted = True
        if self.turn_id:
            self._interrupt()

    def _interrupt(self) -> None:
        self._request("turn/interrupt", {"threadId": self.thread_id, "turnId": self.turn_id}, lambda r, e: None)

    def compact(self) -> None:
        self._begin_turn()

        def started(result: Any, error: RpcError | None) -> None:
            if error is not None:
                self._end_turn({"Failed": {"message": f"compact: {error.message}"}})

        self._request("thread/compact/start", {"threadId": self.thread_id}, started)

    def _end_turn(self, stop: StopReason, usage: TurnUsage | None = None) -> None:
        self.deltas.flush()
        if self.turn_id:
            self._ended.add(self.turn_id)
        self._turn_wanted = False
        self._cancel_wanted = False
        self.turn_id = None
        self._tools.clear()
        self._stall_check.cancel()
        self.host.end_turn(stop, usage)

    def _turn_usage(self) -> TurnUsage | None:
        if not self._usage_total or self._usage_base is None:
            return None
        base = self._usage_base
        total = self._usage_total

        def delta(key: str) -> int:
            return max(0, total.get(key, 0) - base.get(key, 0))

        return {
            "input_tokens": delta("inputTokens"),
            "cached_input_tokens": delta("cachedInputTokens"),
            "output_tokens": delta("outputTokens"),
        }

    # -- the no-progress watchdog ---------------------------------------------------------

    def _arm_stall(self) -> None:
        self._last_progress = self.loop.time()
        if self.stall_secs > 0:
            self._stall_check.set(self.stall_secs)

    def _progress(self) -> None:
        # Called for every line of a turn: only note the time; the timer re-arms itself.
        self._last_progress = self.loop.time()

    def _stalled(self) -> None:
        if not self._turn_wanted:
            return
        quiet = self.loop.time() - self._last_progress
        if quiet < self.stall_secs:
            self._stall_check.set(self.stall_secs - quiet)
            return
        if self._requests or any(
            t["status"] in ("Pending", "Running") and t["kind"] == "Execute" for t in self._tools.values()
        ):
            self._arm_stall()  # waiting on the app or on a command is not a stall
            return
        if self.turn_id:
            self._interrupt()
        self._end_turn(
            {
                "Failed": {
                    "message": (
                        f"no progress from Codex for {self.stall_secs:g} s: the model provider may be unreachable "
                        "(set AGENTPROTO_CODEX_STALL_SECS to wait longer)"
                    )
                }
            }
        )

    # -- settings -------------------------------------------------------------------------

    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        if option == "model":
            self.model = value
        elif option == "effort":
            self.effort = value
        elif option == "sandbox":
            self.sandbox = value
            self._send_sandbox = True
        elif option == "mode":
            self.mode = value
            self._send_mode = True
        else:
            done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option}: not a Codex option"))
            return
        done(None)  # sent with the next turn/start, which applies it from then on
