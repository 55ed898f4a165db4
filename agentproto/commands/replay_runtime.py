"""The runtime of a replay (replay.py): its agents are the recording's.

A session whose agent wire was recorded resolves to the recorded installation (nothing
needs to be installed), gets the ids its driver made up then, and talks to the replay
transport (loopio/replay_transport.py), which plays the recorded wire: no agent runs.

Rules of this file (SECURITY.md, "Replaying a recording"):
- Any other session may only be the built-in mock's: another agent is refused (SpawnFailed,
  and the refusal is kept: the replay exits 2).
- The transport factory never makes a child process: a session without a recorded wire
  (a version probe, a session resolved past the checks) gets ``NO_PROCESS``.
- What a driver serves its agent (ACP fs/*, terminal/*) is the recording's answer, and a
  replay writes nothing the recording names (``record_wire`` is dropped).
"""

from __future__ import annotations

import errno
import sys
from typing import Any

from agentproto.commands.replay_checker import Checker
from agentproto.core.errors import AgentError, Kind
from agentproto.core.recording import Timeline, describe_agent
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers import catalog
from agentproto.drivers.base import Launch
from agentproto.drivers.catalog import AgentSpec
from agentproto.engine.observations import Observer
from agentproto.engine.runtime import Engine
from agentproto.loopio.loop import Loop
from agentproto.loopio.record import Wire
from agentproto.loopio.replay_transport import ReplayTransport
from agentproto.loopio.transport import LineTransport, Spawn

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentInstallation

#: What start_tree says while a replay runs.
NO_PROCESS = "replay starts no process (a recording may come from anyone)"


class ReplayEngine(Engine):
    """A runtime whose agents are the recording's: sessions with a recorded wire resolve to
    the recorded installation (nothing needs to be installed) and get the recorded ids;
    any other session may only be the built-in mock's (see the module's rules)."""

    def __init__(self, loop: Loop, timeline: Timeline, checker: "Checker", **kwargs: Any) -> None:
        self.timeline = timeline
        self.transports: dict[str, ReplayTransport] = {}
        #: Why a session was refused (no recorded wire, not the mock): exit 2.
        self.refused: list[str] = []
        observer = Observer(loop, None)  # a replay adds no rows to anyone's database
        super().__init__(loop, transport_factory=self._transport, recorder=checker, observer=observer, **kwargs)
        self.context.replaying = True  # a rate limit's wait is not waited out in real time

    def resolve(self, agent: Any, session_id: str | None) -> tuple[AgentSpec, AgentInstallation]:
        recorded = self.timeline.installations.get(session_id or "")
        if recorded is None or session_id not in self.timeline.wired:
            if not _is_mock_ref(agent):
                who = f"session {session_id}" if session_id else "a request"
                why = (f"{who} has no recorded agent wire and its agent is {describe_agent(agent)}, "
                       "not the built-in mock: replay starts no agent")  # fmt: skip
                self.refused.append(why)
                raise AgentError.detail(Kind.SPAWN_FAILED, why)
            return super().resolve(agent, session_id)
        # The spec from the reference, at a path that surely exists; the installation as
        # it was recorded (the executable need not exist here: it never runs).
        if isinstance(agent, dict) and "acp" in agent:
            here: Any = {"acp": {**agent["acp"], "path": sys.executable}}
        else:
            agent_id = agent["id"] if isinstance(agent, dict) else agent
            here = {"id": agent_id, "path": sys.executable}
            acp_args = recorded.get("acp_args")
            if catalog.spec_for(agent_id) is None and acp_args is not None:
                # An ACP agent the recording machine's agents.json declared and this one
                # does not: the recorded installation says all replay needs.
                here = {"acp": {"name": agent_id, "path": sys.executable, "args": list(acp_args)}}
        spec, _ = catalog.resolve_ref(here)
        return spec, {**recorded}

    def launch(
        self, args: dict[str, Any], throwaway: bool = False, tools_disabled: bool = False, session_id: str | None = None
    ) -> tuple[AgentSpec, Launch]:
        spec, launch = super().launch(args, throwaway, tools_disabled, session_id)
        launch.record_wire = None  # a replay writes nothing the recording names
        # What the driver serves its agent (ACP fs/*, terminal/*) is the recording's answer.
        session = session_id or ""
        launch.recorded_answer = lambda rpc_id: self.timeline.recorded_answer(session, rpc_id)
        return spec, launch

    def made_up(self, session_id: str, purpose: str) -> str:
        recorded = self.timeline.ids.get((session_id, purpose))
        return recorded.pop(0) if recorded else super().made_up(session_id, purpose)

    def _transport(self, loop: Loop, spawn: Spawn, wire: Wire | None) -> LineTransport:
        if wire is not None and wire.session in self.timeline.wired:
            transport = ReplayTransport(loop, spawn, wire)
            self.transports[wire.session] = transport
            return transport
        # No recorded wire (a version probe, a session resolved past the checks): nothing
        # runs in its place either.
        raise PermissionError(errno.EPERM, NO_PROCESS)


def _is_mock_ref(agent: Any) -> bool:
    """Whether an AgentRef names the built-in mock (by its id, never an ACP agent)."""
    if isinstance(agent, dict):
        return "acp" not in agent and agent.get("id") == "mock"
    return bool(agent == "mock")
