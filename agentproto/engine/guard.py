"""A session's guard rails: its permission policy (core/policy.py decides, this applies), its
budget, its rate-limit retry, and the ``configure`` options that replace the first two
mid-session (``policy``, ``budget``: JSON strings).

Rules of this file:
- Precedence: the app's own tools (the drivers allow them, never asked), then the policy,
  then the permission mode, then the app. A request the policy answers still reaches the app
  as ``RequestOpened`` then ``RequestClosed``, sent back to back, both with
  ``extensions.agentproto.answered_by`` (``{"policy": RULE_INDEX, "action"}``); the agent gets
  the answer on the loop's next pass, as the permission mode's. An ``ask`` rule goes to the app
  even under AcceptEdits/AutoApprove.
- A policy with a ``deny`` or ``ask`` rule needs an agent that asks (the ``Permissions``
  feature): without it the open (or the configure) is UnsupportedFeature, never a silent allow.
- The policy module (shlex, fnmatch) is imported by the first session with a policy.
- ``SessionInfo.policy`` shows the rules in force (absent without a policy, so sessions
  without one record byte-identically); ``SessionInfo.budget`` the bounds, spent and left.
- Budgets count the agent's own reports: the running turn's (``Host.spent``, cumulative for
  the turn) until it ends, then its final usage (or its last report). Cost is the agent's
  figure, else tokens at core/prices.py's table. Crossing a bound mid-turn cancels the turn
  (it ends Failed, with the bound named), drops the queue and refuses later prompts with
  BudgetExceeded until ``configure budget``; ``turns`` refuses the prompt past it; ``wall_s``
  has a timer, since a turn may report nothing. 80 % of a bound warns once.
- Rate limits: the running turn keeps the agent's last rate-limit report (a Diagnostic's
  ``extensions.agentproto.rate_limit``, drivers/ratelimits.py). With ``retry``, a turn that
  then fails having used no tool is sent again to the driver, the same turn, once
  ``retry_at`` passes (DEFAULT_WAIT when unknown) within ``max_wait_s``, at most MAX_RETRIES
  times; a replay does not wait. A cancel during the wait ends the turn at once. When the
  agent process ends meanwhile, restart.py starts a new one resumed; the re-send waits for
  it to open.
"""

from __future__ import annotations

import json

from agentproto.core import session_info
from agentproto.core.answers import request_id_of
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import AgentRequest, SessionInfo, TurnUsage
    from agentproto.drivers.base import Driver, Launch
    from agentproto.engine.turns import Done, Turn
    from agentproto.loopio.loop import Loop, Timer


class Replaying(Protocol):
    replaying: bool


class Restarting(Protocol):
    """What of a session's restarts (engine/restart.py) the guard and the commands see."""

    active: bool
    resend: Callable[[], None] | None


class Guarded(Protocol):
    """What of its EngineSession (engine/session.py) the guard uses."""

    loop: "Loop"
    launch: "Launch"
    info: "SessionInfo"
    turn: "Turn | None"
    driver: "Driver"
    driver_gone: bool
    state: str

    @property
    def context(self) -> Replaying: ...

    @property
    def restart(self) -> Restarting | None: ...

    def send(self, kind: Any, extensions: dict[str, Any] | None = None, parent_tool_id: str | None = None) -> None:
        """Number one event and hand it to the session's sink."""

    def snapshot(self) -> "SessionInfo": ...

    def cancel(self, clear_queue: bool, turn_id: str | None, done: "Done") -> None: ...

GUARD_OPTIONS = frozenset({"policy", "budget"})
BOUNDS = ("usd", "input_tokens", "output_tokens", "turns", "wall_s")
#: The share of a bound at which a Diagnostic warns, once per bound.
WARN_AT = 0.8
#: A rate limit without a reset time is waited out this long; a turn is re-sent at most
#: MAX_RETRIES times.
DEFAULT_WAIT = 5.0
MAX_RETRIES = 5


def checked_budget(value: Any) -> dict[str, float]:
    """``budget`` as open gives it, checked (InvalidConfiguration naming the bound)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AgentError.detail(Kind.INVALID_CONFIGURATION, "budget: expected an object of bounds")
    for key, bound in value.items():
        if key not in BOUNDS:
            raise AgentError.detail(
                Kind.INVALID_CONFIGURATION, f"budget.{key}: unknown bound; expected {', '.join(BOUNDS)}"
            )
        number = isinstance(bound, (int, float)) and not isinstance(bound, bool)
        if not number or not 0 < bound < 2**53:
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"budget.{key}: expected a number > 0")
        if key in ("input_tokens", "output_tokens", "turns") and bound != int(bound):
            raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"budget.{key}: expected a whole number")
    return {key: value[key] for key in BOUNDS if key in value}


def checked_retry(value: Any) -> dict[str, float] | None:
    """``retry`` as open gives it: ``{"max_wait_s": N}`` (InvalidConfiguration otherwise)."""
    if value is None:
        return None
    wait = value.get("max_wait_s") if isinstance(value, dict) and set(value) == {"max_wait_s"} else None
    if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 < wait <= 86400:
        raise AgentError.detail(
            Kind.INVALID_CONFIGURATION, 'retry: expected {"max_wait_s": seconds > 0, at most 86400}'
        )
    return {"max_wait_s": float(wait)}


def amount(bound: str, value: float) -> float:
    """A figure as SessionInfo.budget shows it: whole numbers of tokens and turns."""
    return int(value) if bound in ("input_tokens", "output_tokens", "turns") else round(value, 6)


def shown(bound: str, amount: float) -> str:
    if bound == "usd":
        return f"${amount:,.4f}"
    if bound == "wall_s":
        return f"{amount:,.1f} s"
    return f"{int(amount):,}"


def checked_policy(value: Any) -> list[dict[str, Any]]:
    """``policy`` as open gives it, checked (InvalidConfiguration naming rule and field)."""
    if value is None:
        return []
    from agentproto.core import policy as rules_of  # only a session with a policy needs it

    try:
        return rules_of.check(value)
    except rules_of.PolicyError as exc:
        raise AgentError.detail(Kind.INVALID_CONFIGURATION, str(exc)) from None


def cannot_ask(rules: list[dict[str, Any]], agent: str) -> AgentError | None:
    """The refusal of a policy that needs asking, for an agent that cannot ask."""
    if all(rule["action"] == "allow" for rule in rules):
        return None
    why = f"policy: {agent} cannot ask before using a tool, so a deny or ask rule would never apply"
    return AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)


class Guard:
    """One session's policy and budget: what the engine asks before showing a request, and
    what it counts as the agent reports its usage."""

    __slots__ = ("session", "rules", "limits", "spent", "running", "warned", "exceeded", "wall_timer")

    def __init__(self, session: Guarded) -> None:
        self.session = session
        self.rules: list[dict[str, Any]] = list(session.launch.policy)
        if self.rules:
            session.info["policy"] = json.loads(json.dumps(self.rules))
        #: The bounds, what the ended turns spent, and the running turn's last report.
        self.limits: dict[str, float] = dict(session.launch.budget or {})
        self.spent: dict[str, float] = {"usd": 0.0, "input_tokens": 0, "output_tokens": 0, "turns": 0, "wall_s": 0.0}
        self.running: dict[str, float] = {}
        self.warned: set[str] = set()
        #: While a bound is crossed: the BudgetExceeded message prompts are refused with.
        self.exceeded: str | None = None
        self.wall_timer: Timer | None = None
        if self.limits:
            self.show(self.totals())

    def open_problem(self) -> AgentError | None:
        """Once the agent's details are known: a policy or a budget this agent cannot honour."""
        session = self.session
        if "usd" in self.limits and not session.driver.usage_reports:
            why = f"budget.usd: {session.launch.agent_id} reports neither its cost nor its tokens"
            return AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)
        if "Permissions" in session_info.features(session.info):
            return None
        return cannot_ask(self.rules, session.launch.agent_id)

    # -- the budget ------------------------------------------------------------------------

    def price(self) -> tuple[str, tuple[float, float, float]] | None:
        from agentproto.core import prices

        model = self.session.info["configuration"]["options"].get("model")
        return prices.price(self.session.launch.agent_id, model if isinstance(model, str) else None)

    def usd_of(self, usage: TurnUsage, cost_usd: float | None) -> float:
        """A usage's cost: the agent's own figure, else its tokens at the price table's."""
        if cost_usd is not None:
            return float(cost_usd)
        found = self.price()
        if found is None:
            return 0.0
        from agentproto.core import prices

        return prices.cost(found[1], usage["input_tokens"], usage["cached_input_tokens"], usage["output_tokens"])

    def totals(self) -> dict[str, float]:
        """What the session spent: the ended turns' and the running turn's so far."""
        totals = dict(self.spent)
        for key in ("input_tokens", "output_tokens", "usd"):
            totals[key] += self.running.get(key, 0)
        turn = self.session.turn
        if turn is not None:
            totals["wall_s"] += self.session.loop.time() - turn.started
        return totals

    def show(self, totals: dict[str, float]) -> None:
        """``SessionInfo.budget``: the bounds, what was spent, what is left, the price table."""
        from agentproto.core import prices

        found = self.price()
        self.session.info["budget"] = {
            "limits": dict(self.limits),
            "spent": {key: amount(key, value) for key, value in totals.items()},
            "left": {key: amount(key, max(0, limit - totals[key])) for key, limit in self.limits.items()},
            "prices": {"version": prices.VERSION, "model": None if found is None else found[0]},
        }

    def spent_so_far(self, usage: TurnUsage, cost_usd: float | None) -> None:
        """The running turn's usage so far (the driver's report, cumulative for the turn)."""
        if not self.limits:
            return
        self.running = {
            "input_tokens": usage["input_tokens"],
            "output_tokens": usage["output_tokens"],
            "usd": self.usd_of(usage, cost_usd),
        }
        self.check()

    def turn_started(self, turn: Turn) -> None:
        if not self.limits:
            return
        self.spent["turns"] += 1
        self.running = {}
        self.arm_wall(turn)

    def arm_wall(self, turn: Turn) -> None:
        if "wall_s" not in self.limits or self.exceeded is not None:
            return
        left = self.limits["wall_s"] - self.totals()["wall_s"]
        if self.wall_timer is not None:
            self.wall_timer.cancel()
        self.wall_timer = self.session.loop.call_later(max(0.01, left + 0.001), lambda: self.wall_due(turn))

    def wall_due(self, turn: Turn) -> None:
        self.wall_timer = None
        if self.session.turn is turn:
            self.check()
            self.arm_wall(turn)

    def turn_ended(self, turn: Turn, usage: TurnUsage | None) -> None:
        """The turn ended (``session.turn`` is None already): count it, from its final usage
        when the agent gave one, else from its last report."""
        if not self.limits:
            return
        if self.wall_timer is not None:
            self.wall_timer.cancel()
            self.wall_timer = None
        running, self.running = self.running, {}
        if usage is not None:
            running = {
                "input_tokens": usage["input_tokens"],
                "output_tokens": usage["output_tokens"],
                "usd": self.usd_of(usage, None)
                if "usd" not in running
                else max(running["usd"], self.usd_of(usage, None)),
            }
        for key in ("input_tokens", "output_tokens", "usd"):
            self.spent[key] += running.get(key, 0)
        self.spent["wall_s"] += self.session.loop.time() - turn.started
        self.check()

    def check(self) -> None:
        """Warn at WARN_AT of a bound (once), and stop at a crossed one."""
        totals = self.totals()
        self.show(totals)
        for bound, limit in self.limits.items():
            amount = totals[bound]
            if bound != "turns" and amount > limit:
                self.exceed(bound, limit, amount)
                return
            if amount >= WARN_AT * limit and bound not in self.warned:
                self.warned.add(bound)
                message = (
                    f"budget: {amount / limit:.0%} of {bound} spent ({shown(bound, amount)} of {shown(bound, limit)})"
                )
                extensions = {"agentproto": {"budget": {"bound": bound, "limit": limit, "spent": amount}}}
                self.session.send({"Diagnostic": {"level": "Warning", "message": message}}, extensions)

    def exceed(self, bound: str, limit: float, amount: float) -> None:
        """A bound is crossed: say so (once), cancel the running turn (it ends Failed) and
        drop the queued prompts; later prompts are refused until ``configure budget``."""
        if self.exceeded is not None:
            return
        over = amount - limit
        message = (
            f"budget exceeded: {bound} {shown(bound, amount)} of {shown(bound, limit)} (over by {shown(bound, over)})"
        )
        self.exceeded = message
        session = self.session
        body = {"bound": bound, "limit": limit, "spent": amount, "over": over}
        extensions = {"agentproto": {"error": {"kind": Kind.BUDGET_EXCEEDED, "message": message}, "budget": body}}
        session.send({"Diagnostic": {"level": "Error", "message": message}}, extensions)
        turn = session.turn
        if turn is not None and turn.failure is None:
            turn.failure = message
            session.cancel(True, turn.id, lambda _value, _error: None)

    def refusal(self) -> AgentError | None:
        """Why a prompt cannot start a turn now (BudgetExceeded), or None."""
        if self.exceeded is not None:
            return AgentError.detail(Kind.BUDGET_EXCEEDED, self.exceeded)
        limit = self.limits.get("turns")
        if limit is not None and self.spent["turns"] >= limit:
            return AgentError.detail(
                Kind.BUDGET_EXCEEDED, f"budget exceeded: turns {self.spent['turns']:,.0f} of {limit:,.0f}"
            )
        return None

    # -- rate limits -----------------------------------------------------------------------

    def retrying(self, turn: Turn, stop: Any) -> bool:
        """The turn failed: re-send it once its rate limit resets (True), when ``retry`` was
        asked, the agent reported a rate limit this turn, the turn used no tool (a re-sent
        turn would repeat side effects) and the reset is within ``max_wait_s``."""
        retry = self.session.launch.retry
        limit, turn.rate_limit = turn.rate_limit, None
        failed = isinstance(stop, dict) and "Failed" in stop
        if retry is None or limit is None or not failed or turn.used_tools or turn.prompt is None:
            return False
        if turn.failure is not None or turn.retries >= MAX_RETRIES or self.session.state != "open":
            return False
        import time  # only a rate-limited turn with retry needs the wall clock

        retry_at = limit.get("retry_at")
        wait = DEFAULT_WAIT if not isinstance(retry_at, (int, float)) else max(0.0, retry_at - time.time())
        if wait > retry["max_wait_s"]:
            return False  # it fails, with the agent's diagnostic
        turn.retries += 1
        turn.acked = False  # what the agent says before it takes the turn again is stale
        session = self.session
        message = f"rate limited: the turn is sent again in {wait:.1f} s (retry {turn.retries})"
        extensions = {"agentproto": {"retry": {"wait_s": round(wait, 3), "attempt": turn.retries}}}
        session.send({"Diagnostic": {"level": "Info", "message": message}}, extensions)
        prompt = turn.prompt

        def resend() -> None:
            restart = session.restart
            if restart is not None and restart.active:
                restart.resend = resend  # a new agent process is not open yet (restart.py)
                return
            turn.retry_timer = None
            if session.turn is turn and session.state == "open" and not session.driver_gone:
                session.driver.start_turn(turn.id, prompt.text, prompt.attachments)

        # A replay answers from the recording at once: it never waits in real time.
        turn.retry_timer = session.loop.call_later(0.0 if session.context.replaying else wait, resend)
        return True

    # -- the policy ------------------------------------------------------------------------

    def verdict(self, request: AgentRequest) -> str | None:
        """What the policy does with a request the agent opened: ``"answered"`` (shown and
        closed; the agent is answered next pass), ``"ask"`` (the app's, whatever the
        permission mode), or None (no rule: the permission mode's, then the app's)."""
        if not self.rules or "Permission" not in request:
            return None
        from agentproto.core import policy as rules_of

        body = request["Permission"]
        index = rules_of.decide(self.rules, body, self.session.launch.dir)
        if index is None:
            return None
        rule = self.rules[index]
        answer = rules_of.answer(rule, index, body)
        if answer is None:
            return "ask"  # an ask rule, or an allow the request offers no way to give
        session = self.session
        by = {"agentproto": {"answered_by": {"policy": index, "action": rule["action"]}}}
        session.send({"RequestOpened": request}, by)
        session.send({"RequestClosed": {"request_id": request_id_of(request)}}, by)

        def give() -> None:
            if not session.driver_gone:
                session.driver.answer(request, answer)

        session.loop.call_soon(give)
        return "answered"

    def configure(self, option_id: str, value: Any, done: Callable[[Any, AgentError | None], None]) -> None:
        """``configure`` of ``policy`` or ``budget``: a JSON string, replacing what is in force."""
        session = self.session
        try:
            parsed = json.loads(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None and value != "null":
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option_id}: expected a JSON string"))
            return
        try:
            if option_id == "budget":
                limits = checked_budget(parsed)
            else:
                rules = checked_policy(parsed)
        except AgentError as error:
            done(None, error)
            return
        if option_id == "budget":
            if "usd" in limits and not session.driver.usage_reports:
                done(
                    None,
                    AgentError.detail(
                        Kind.UNSUPPORTED_FEATURE, f"budget.usd: {session.launch.agent_id} reports no usage"
                    ),
                )
                return
            self.limits, self.exceeded, self.warned = limits, None, set()
            if limits:
                self.check()
                if session.turn is not None:
                    self.arm_wall(session.turn)
            else:
                session.info.pop("budget", None)
        else:
            refusal = (
                None
                if "Permissions" in session_info.features(session.info)
                else cannot_ask(rules, session.launch.agent_id)
            )
            if refusal is not None:
                done(None, refusal)
                return
            self.rules = rules
            if rules:
                session.info["policy"] = json.loads(json.dumps(rules))
            else:
                session.info.pop("policy", None)
        session.send({"SessionUpdated": session.snapshot()})
        done(None, None)
