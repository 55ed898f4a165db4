"""A session's turns: how each starts and ends, and the commands an open session runs
(runtime.SESSION_COMMANDS): prompt, dequeue, cancel, answer, configure, rollback and compact.
``SessionTurns`` is the base of ``engine.session.EngineSession`` and is nothing on its own: it reads
and writes the session's own state, through ``self``.

Rules of this file:
- A turn opens with TurnStarted and ends with its open messages' MessageEnded, TurnEnded,
  then the next queued prompt's turn or the status change. An agent's turn whose end never
  comes is ended ``Inferred`` after a quiet window (unless its driver's turns end for sure).
- A command answers through its ``done`` exactly once, and before any event it causes
  (a prompt's reply goes out before its turn's TurnStarted, as open's before the first event).
- A prompt during a turn steers it when the agent can (the ``Steer`` feature; one pending
  steer at a time), and is queued otherwise; a steer the agent refuses is queued at the head.
- rollback and compact need their feature and an idle session (no turn, nothing queued).
- While a new agent process starts (restart.py), no turn goes to a driver: a prompt is queued
  (not started, not steered), rollback and compact are refused, and the queue's head starts
  once the new driver opened (even after the turn was cancelled meanwhile).
"""

from __future__ import annotations

from agentproto.core import session_info
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.engine.guard import GUARD_OPTIONS
from agentproto.engine.turns import Prompt, QuietWindow, Turn

if TYPE_CHECKING:
    from collections import deque
    from typing import Any, Protocol

    from agentproto.core.wire_types import SessionInfo, StopReason, TurnUsage
    from agentproto.drivers.base import Driver, Launch
    from agentproto.engine.guard import Guard, Restarting
    from agentproto.engine.observations import Observer
    from agentproto.engine.session_requests import Requests
    from agentproto.engine.turns import Done
    from agentproto.loopio.loop import Loop

    class Observed(Protocol):
        observer: Observer | None


class SessionTurns:
    """A session's turns and commands, as the base of ``EngineSession`` (which defines what is
    declared here)."""

    if TYPE_CHECKING:
        CANCEL_GRACE: float
        QUIET_PROMPTED: float
        QUIET_AGENT: float
        id: str
        state: str
        launch: Launch
        #: The session's Context (engine/session.py): only its observer is read here.
        context: Observed
        loop: Loop
        info: SessionInfo
        driver: Driver
        requests: Requests
        guard: Guard
        restart: Restarting | None
        turn: Turn | None
        turn_counter: int
        prompt_counter: int
        queue: deque[Prompt]
        pending_steer: Prompt | None

        def refresh_status(self) -> None: ...

        def diagnostic(self, level: str, message: str) -> None: ...

        def _session_updated(self) -> None: ...

        def send(
            self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None
        ) -> None: ...

    # -- a turn's start and end ---------------------------------------------------------

    def _start_turn(self, origin: Any, acked: bool) -> Turn:
        self.turn_counter += 1
        turn = Turn(f"t{self.turn_counter}", origin, acked, self.loop.time())
        self.turn = turn
        self.send({"TurnStarted": {"origin": origin}})
        self.guard.turn_started(turn)
        self.refresh_status()
        if not self.driver.deterministic(origin):
            window = self.QUIET_AGENT if origin == "Agent" else self.QUIET_PROMPTED
            turn.quiet = QuietWindow(self.loop, window, turn, lambda: self._inferred_end(turn))
        return turn

    def _inferred_end(self, turn: Turn) -> None:
        if self.turn is turn:
            self._finish_turn({"Completed": {"source": "Inferred"}}, None)

    def _begin_prompt(self, prompt: Prompt) -> None:
        turn = self._start_turn({"Prompt": prompt.id}, acked=False)
        turn.prompt = prompt
        self.driver.start_turn(turn.id, prompt.text, prompt.attachments)

    def _finish_turn(self, stop: StopReason, usage: TurnUsage | None, start_next: bool = True) -> None:
        turn = self.turn
        assert turn is not None
        if turn.failure is not None:  # the engine cancelled it (a budget): it failed
            stop = {"Failed": {"message": turn.failure}}
        turn.stop_timers()
        self.requests.close_turn(turn, "the turn ended before the app answered")
        for message_id in turn.messages:
            self.send({"MessageEnded": {"message_id": message_id}})
        self.send({"TurnEnded": {"stop": stop, "background": list(turn.tools), "usage": usage}})
        self.turn = None
        self.guard.turn_ended(turn, usage)
        if self.context.observer is not None:
            self.context.observer.turn_ended(self, turn, stop, usage)
        steer, self.pending_steer = self.pending_steer, None
        if steer is not None:
            self.queue.appendleft(steer)
            if steer.done is not None:
                steer.done({"prompt_id": steer.id, "kind": {"Queued": {"position": 0}}}, None)
                steer.done = None
        if start_next:
            self.start_queued()
        self.refresh_status()

    def _restarting(self) -> bool:
        """A new agent process is starting (restart.py): no driver takes a turn until it opened."""
        return self.restart is not None and self.restart.active

    def start_queued(self) -> None:
        """Start the queue's head when no turn runs and a driver can take it."""
        if self.turn is None and self.queue and self.state == "open" and not self._restarting():
            self._begin_prompt(self.queue.popleft())

    def _drop_queue(self) -> None:
        self.queue.clear()
        steer, self.pending_steer = self.pending_steer, None
        if steer is not None and steer.done is not None:
            steer.done(None, AgentError.session_closed(self.id))

    # -- the commands -------------------------------------------------------------------

    def prompt(self, text: str, attachments: list[str], done: Done) -> None:
        refusal = self.guard.refusal()  # a budget's bound reached (guard.py)
        if refusal is not None:
            done(None, refusal)
            return
        self.prompt_counter += 1
        prompt = Prompt(f"p{self.prompt_counter}", text, attachments, None)
        turn = self.turn
        if turn is None and not self.queue and not self._restarting():
            # The reply goes out before the turn's first event, as for open.
            done({"prompt_id": prompt.id, "kind": {"Started": {"turn_id": f"t{self.turn_counter + 1}"}}}, None)
            self._begin_prompt(prompt)
            return
        steerable = turn is not None and "Steer" in session_info.features(self.info) and self.pending_steer is None
        if steerable and not self._restarting():  # no agent yet (restart.py)
            prompt.done = done
            self.pending_steer = prompt

            def steered(accepted: bool) -> None:
                if self.pending_steer is not prompt:
                    return  # the turn ended first; it was queued at the head then
                self.pending_steer = None
                prompt.done = None
                if accepted and self.turn is not None:
                    done({"prompt_id": prompt.id, "kind": {"Steered": {"turn_id": self.turn.id}}}, None)
                else:
                    self.queue.appendleft(prompt)
                    done({"prompt_id": prompt.id, "kind": {"Queued": {"position": 0}}}, None)
                    self.refresh_status()

            self.driver.steer(text, attachments, steered)
            return
        self.queue.append(prompt)
        done({"prompt_id": prompt.id, "kind": {"Queued": {"position": len(self.queue) - 1}}}, None)
        self.refresh_status()

    def dequeue(self, prompt_id: str, done: Done) -> None:
        for prompt in self.queue:
            if prompt.id == prompt_id:
                self.queue.remove(prompt)
                done(None, None)
                self.refresh_status()
                return
        done(None, AgentError.detail(Kind.INVALID_REQUEST, f"no queued prompt {prompt_id}"))

    def cancel(self, clear_queue: bool, turn_id: str | None, done: Done) -> None:
        turn = self.turn
        if turn_id is not None and (turn is None or turn.id != turn_id):
            done(None, None)
            return
        if clear_queue:
            self.queue.clear()
        if turn is not None and turn.retry_timer is not None:
            self._finish_turn("Cancelled", None)  # waiting out a rate limit: nothing runs
        elif turn is not None:
            self.requests.close_turn(turn, "cancelled: the turn was cancelled")
            self.driver.cancel()
            if turn.cancel_timer is None:
                turn.cancel_timer = self.loop.call_later(self.CANCEL_GRACE, lambda: self._cancel_expired(turn))
        self.refresh_status()
        done(None, None)

    def _cancel_expired(self, turn: Turn) -> None:
        if self.turn is turn:
            self.diagnostic("Warning", f"the agent did not end the turn within {self.CANCEL_GRACE:g} s of cancel")
            self._finish_turn("Cancelled", None)

    def answer(self, request_id: str, answer: Any, done: Done) -> None:
        self.requests.answer(request_id, answer, done)

    def configure(self, option_id: str, value: Any, done: Done) -> None:
        if option_id in GUARD_OPTIONS:  # agentproto's own, not the agent's (guard.py)
            self.guard.configure(option_id, value, done)
            return
        problem = session_info.option_problem(self.info, option_id, value, self.driver.validate_config, live=True)
        if problem is not None:
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, problem))
            return
        if self.restart is not None and self.restart.active:
            done(None, AgentError.detail(Kind.SESSION_BUSY, "a new agent process is starting"))
            return

        def configured(error: AgentError | None) -> None:
            if error is not None:
                done(None, error)
                return
            session_info.set_option(self.info, option_id, value)
            self.launch.configure[option_id] = value  # a new agent process gets it too (restart.py)
            self._session_updated()
            done(None, None)

        self.driver.configure(option_id, value, configured)

    def _refusal(self, what: str, needs: dict[str, str]) -> AgentError | None:
        """Why rollback or compact cannot run now: a missing feature (``needs``: feature ->
        its name in the error), or a busy session."""
        for feature, name in needs.items():
            if feature not in session_info.features(self.info):
                return AgentError.detail(Kind.UNSUPPORTED_FEATURE, name)
        if self.turn is not None or self.queue:
            return AgentError.detail(Kind.SESSION_BUSY, f"{what} needs an idle session")
        if self._restarting():
            return AgentError.detail(Kind.SESSION_BUSY, "a new agent process is starting")
        return None

    def rollback(self, turns: int, scope: str, done: Done) -> None:
        needs = {"Rollback": "rollback"}
        if scope == "ConversationAndFiles":
            needs["RollbackFiles"] = "file rollback"
        refusal = self._refusal("rollback", needs)
        if refusal is not None:
            done(None, refusal)
            return

        def rolled(error: AgentError | None, refusal: str | None) -> None:
            if error is not None:
                done(None, error)
            elif refusal is not None:
                done(None, AgentError.detail(Kind.INVALID_REQUEST, refusal))
            else:
                self._session_updated()
                done(None, None)

        self.driver.rollback(turns, scope, rolled)

    def compact(self, done: Done) -> None:
        refusal = self._refusal("compact", {"Compact": "compact"})
        if refusal is not None:
            done(None, refusal)
            return
        self._start_turn("Agent", acked=True)
        self.driver.compact()
        done(None, None)
