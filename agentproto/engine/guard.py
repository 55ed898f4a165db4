"""A session's guard rails: its permission policy (core/policy.py decides, this applies), its
budget, and the ``configure`` options that replace them mid-session (``policy``, ``budget``).

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
  without one record byte-identically).
"""

from __future__ import annotations

import json

from agentproto.core import session_info
from agentproto.core.answers import request_id_of
from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import AgentRequest
    from agentproto.engine.session import EngineSession

GUARD_OPTIONS = frozenset({"policy"})


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
    """One session's policy (and budget): what the engine asks before showing a request."""

    __slots__ = ("session", "rules")

    def __init__(self, session: EngineSession) -> None:
        self.session = session
        self.rules: list[dict[str, Any]] = list(session.launch.policy)
        if self.rules:
            session.info["policy"] = json.loads(json.dumps(self.rules))  # type: ignore[typeddict-unknown-key]

    def open_problem(self) -> AgentError | None:
        """Once the agent's details are known: a policy this agent cannot honour."""
        if "Permissions" in session_info.features(self.session.info):
            return None
        return cannot_ask(self.rules, self.session.launch.agent_id)

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
        """``configure`` of ``policy``: a JSON string, replacing the rules in force."""
        session = self.session
        try:
            parsed = json.loads(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None and value != "null":
            done(None, AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option_id}: expected a JSON string"))
            return
        try:
            rules = checked_policy(parsed)
        except AgentError as error:
            done(None, error)
            return
        refusal = None if "Permissions" in session_info.features(session.info) else cannot_ask(rules, session.launch.agent_id)
        if refusal is not None:
            done(None, refusal)
            return
        self.rules = rules
        if rules:
            session.info["policy"] = json.loads(json.dumps(rules))  # type: ignore[typeddict-unknown-key]
        else:
            session.info.pop("policy", None)  # type: ignore[misc]
        session.send({"SessionUpdated": session.snapshot()})
        done(None, None)
