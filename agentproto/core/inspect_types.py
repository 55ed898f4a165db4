"""The ``inspect`` op's views as mypy types: schema.json's ``InspectAgents`` and
``InspectCost``, their rows, and a row of the observations database they are read from.

Rules of this file: wire_types.py's. Types only, for mypy, declared and imported under
``if TYPE_CHECKING:`` (nothing here exists at run time); ``InspectAgents``, ``InspectCost`` and
their members follow their schema definitions.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Literal, TypedDict, Union

    from typing_extensions import NotRequired

    from agentproto.core.wire_types import SessionInfo

    class InspectArgs(TypedDict):
        """An ``inspect`` request's members, checked and defaulted."""

        view: str  # agents, cost
        by: str  # agent, model, day, session, db
        format: str  # table, json
        top: int | None
        since: str
        sock: str | None
        db: list[str] | None
        agent: str | None

    class TokenFigures(TypedDict):
        input: int
        output: int
        cached_input: int

    class AgentRow(TypedDict):
        """One live session of ``InspectAgents``."""

        id: str
        agent: str
        model: str | None
        status: str
        turns: int
        tokens: TokenFigures
        cost_usd: float | None
        open_requests: int
        age_s: float
        pid: int | None
        info: NotRequired[SessionInfo]

    class InspectAgents(TypedDict):
        view: Literal["agents"]
        pid: int
        agents: NotRequired[list[AgentRow]]
        agent: NotRequired[AgentRow]
        started_at: NotRequired[str]
        command: NotRequired[str]

    class _Spent(TypedDict):
        input_tokens: int
        output_tokens: int
        cached_input_tokens: int
        cost_usd: float | None
        duration_ms: int

    class CostFigures(_Spent):
        turns: int

    class CostGroup(CostFigures):
        key: str

    class _Turn(_Spent):
        agent: str
        model: str | None
        run: str
        session: str
        turn: str
        stop: str
        db: NotRequired[str]

    class TurnRow(_Turn):
        """One ended turn, a row of the observations database (``ended_at``: epoch seconds)."""

        ended_at: float

    class TopTurn(_Turn):
        """A ``TurnRow`` as ``InspectCost.top`` shows it (``ended_at``: ISO 8601, UTC)."""

        ended_at: str

    class InspectCost(TypedDict):
        view: Literal["cost"]
        db: str | None
        dbs: NotRequired[list[str]]
        since: str
        by: str
        groups: list[CostGroup]
        total: CostFigures
        top: NotRequired[list[TopTurn]]

    InspectView = Union[InspectAgents, InspectCost]
