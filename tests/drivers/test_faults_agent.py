"""Fault injection at the agent transport: an agent that dies, hangs, floods or writes
garbage at every step of its conversation, for every driver.

The script is the captured-wire corpus (fixtures/wire/<agent>/<case>.jsonl, replayed as
tests/commands/test_wire_corpus.py does) for claude, codex and ACP, and a mock script's steps for
the mock. At step N (the agent's Nth read, or its exit) the agent, in-process through the
transport seam and on a virtual clock (a hung agent's minutes of grace pass at once):

- dies: the session ends in the documented sequence (docs/protocol-guide.md, "What agentproto
  guarantees"): a running turn ends ``TurnEnded {Failed}``, then the session error, then
  exactly one ``closed``; an open in flight fails; a close in flight just closes;
- hangs (says nothing more, ignores its input ending and SIGTERM): the session stalls, but
  replies still come, and close ends it (the agent is killed) with one ``closed``;
- floods (its read repeated many times) or writes garbage first: no callback raises, and
  every promise still holds.

In every case the agent is gone at the end (no orphan), nothing raised inside the loop,
and every command got exactly one reply. tests/loopio/test_faults_process.py does the same to a
real agent process.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from agentproto.drivers.mock import load_script
from agentproto.loopio.transport import Spawn
from agentproto.engine.session import EngineSession
from agentproto.core.errors import Kind
from agentproto.engine.flow import HIGH_WATER
from agentproto.loopio.loop import Loop
from agentproto.core.wire import event_kind_name
from faults import AGENT_FAULTS, FaultAgent, Outcome, VirtualLoop, run_for
from scripted import NEVER_RUN, Conversation
from sidecar import SCRIPTS
from tests.commands.test_wire_corpus import covers
from wire_corpus import CORPUS, Case, Names, cases, hook_base_of, load, seen, session_id_of, tools_url_of

#: How long a hung agent is left hanging (on the virtual clock): past every timeout a
#: driver has (ACP's turn timeout is 30 minutes).
HANG = 2 * 3600.0


class FaultConversation(Conversation):
    """A Conversation whose agents are FaultAgents, on a virtual clock."""

    def __init__(self, **runtime_args: Any) -> None:
        super().__init__(loop=VirtualLoop(), **runtime_args)
        self.commands = 0
        self.close_sent = False
        #: While False the app reads nothing: its events wait unwritten (flow control).
        self.reading = True
        self.owed: dict[EngineSession, int] = {}
        self.most_owed = 0

    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        if self.reading:
            super().event(session, event)
            return
        self.out.append(("event", event))
        self.owed[session] = self.owed.get(session, 0) + 1
        self.most_owed = max(self.most_owed, self.owed[session])

    def catch_up(self) -> None:
        self.reading = True
        owed, self.owed = self.owed, {}
        for session, count in owed.items():
            session.delivered(count)
        self.settle()

    def command(self, name: str, **args: Any) -> None:
        self.commands += 1
        self.close_sent = self.close_sent or name == "close"
        super().command(name, **args)

    def _factory(self, loop: Loop, spawn: Spawn, record_wire: str | None) -> FaultAgent:  # type: ignore[override]
        agent = FaultAgent(loop, spawn, record_wire)
        self.transports.append(agent)
        return agent

    @property
    def agent(self) -> FaultAgent:
        transport = self.transport
        assert isinstance(transport, FaultAgent)
        return transport

    def opened(self) -> bool:
        return any(value is not None for value, error in self.replies("open") if error is None)

    def is_closed(self) -> bool:
        return any(o[0] == "closed" for o in self.out)


def agent_steps(case: Case) -> list[int]:
    """The conversation entries where the agent acts: each read, and its exit."""
    return [i for i, entry in enumerate(case.conversation) if "from_agent" in entry or "exit" in entry]


def corpus_params() -> list[Any]:
    params = []
    for path in cases():
        case = load(path)
        name = str(path.relative_to(CORPUS).with_suffix(""))
        for step in range(len(agent_steps(case))):
            for fault in AGENT_FAULTS:
                params.append(pytest.param(path, step, fault, id=f"{name}-{step}-{fault}"))
    return params


def lines_of(body: Any, names: Names) -> list[bytes]:
    lines = body if isinstance(body, list) else [body]
    return [names.fill(line).encode("utf-8", "surrogatepass") for line in lines]


class Fault:
    """What the app saw when the fault struck."""

    def __init__(self, conv: FaultConversation) -> None:
        self.opened = conv.opened()
        self.turn_running = Outcome(conv.out).running_turn()
        self.closing = conv.close_sent or conv.is_closed()
        self.at = len(conv.out)
        self.flood_owed = 0
        self.flood_paused = False
        self.flood_lines = 0


def play(case: Case, directory: str, step: int, fault: str) -> tuple[FaultConversation, Fault | None, Names]:
    """The case's conversation with ``fault`` at the agent's ``step``; then the app's EOF."""
    names = Names()
    names.set("$DIR", directory)
    names.set("$AGENT", NEVER_RUN)
    conv = FaultConversation()
    struck: Fault | None = None
    index = -1
    for entry in case.conversation:
        ((kind, body),) = entry.items()
        if kind == "to_agent":
            continue
        if kind == "app":
            args = json.loads(names.fill(json.dumps(body)))
            name = args.pop("cmd")
            conv.command(name, **args)
            if conv.transports and "$SESSION" not in names.values:
                names.set("$SESSION", session_id_of(conv.transports[0].spawn))
            names.set("$TOOLS_URL", tools_url_of(conv))
            names.set("$HOOK_BASE", hook_base_of(conv))
            continue
        index += 1
        if not conv.transports:
            continue  # the open failed before anything started
        if struck is not None and fault in ("die", "hang"):
            continue  # a dead or hung agent says nothing more
        if index == step:
            struck = Fault(conv)
            if fault == "die":
                conv.agent.die()
                conv.settle()
                continue
            if fault == "hang":
                conv.agent.hang()
                run_for(conv.loop, HANG)
                # Replies still come while the agent hangs.
                before = len(conv.replies("info"))
                conv.command("info")
                assert len(conv.replies("info")) == before + 1, "no reply to info while the agent hangs"
                continue
            if fault == "garbage":
                conv.agent.garbage()
                conv.settle()
            elif fault == "flood" and kind == "from_agent":
                # An app that reads nothing meanwhile: the agent must be paused, not buffered.
                flood = lines_of(body, names)
                conv.reading = False
                conv.agent.flood(flood, reads=2 * HIGH_WATER // len(flood) + 1)
                conv.settle()
                struck.flood_owed = conv.most_owed
                struck.flood_paused = conv.agent.paused
                struck.flood_lines = len(flood)
                conv.catch_up()
        if kind == "from_agent":
            conv.feed(*lines_of(body, names))
        else:
            conv.agent.exit(body.get("status"), names.fill(body.get("stderr", "")))
            conv.settle()
    # The app's input ends: every session closes, whatever state it is in.
    conv.runtime.close_all()
    run_for(conv.loop, HANG, until=lambda: not conv.runtime.sessions)
    return conv, struck, names


def check_common(conv: FaultConversation, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not conv.runtime.sessions, f"sessions left: {list(conv.runtime.sessions)}"
    for transport in conv.transports:
        assert transport.exited, "the agent outlived its session"
    replies = [o for o in conv.out if o[0] == "reply"]
    assert len(replies) == conv.commands, f"{conv.commands} commands, {len(replies)} replies"
    Outcome(conv.out).check(opened=conv.opened())


def check_fault(
    conv: FaultConversation, struck: Fault | None, fault: str, expects: list[dict[str, Any]], names: Names
) -> None:
    outcome = Outcome(conv.out)
    if struck is None:
        return  # the open failed before the step (an earlier fault would have said why)
    after = conv.out[struck.at :]
    if fault == "die" and struck.opened and not struck.closing:
        errors = outcome.errors()
        assert errors, f"the agent died and no session error came: {after!r:.1500}"
        if struck.turn_running:
            ends = [
                o[1]["kind"]["TurnEnded"]["stop"]
                for o in after
                if o[0] == "event" and event_kind_name(o[1]["kind"]) == "TurnEnded"
            ]
            assert ends and "Failed" in ends[0], f"the running turn did not end Failed: {ends}"
    if fault == "die" and not struck.opened and not struck.closing:
        replies = conv.replies("open")
        assert replies and replies[-1][1] is not None, f"the agent died while opening, yet: {replies}"
        assert not any(o[0] in ("event", "error", "closed") for o in conv.out), "a session that never opened spoke"
    if fault == "flood" and struck.flood_owed > HIGH_WATER:
        # Flow control: past HIGH_WATER unwritten events the agent is no longer read (the
        # rest of the read that crossed it is still handled).
        assert struck.flood_paused, f"{struck.flood_owed} events unwritten and the agent still read"
        assert struck.flood_owed <= HIGH_WATER + 64 * struck.flood_lines, f"{struck.flood_owed} events unwritten"
    if fault == "garbage" and not outcome.errors():
        # Garbage costs a diagnostic, nothing else: the app sees what it saw without it.
        want = [strip(e) for e in expects if not is_diagnostic(e)]
        got = [strip(e) for e in names.hide(seen(conv.out)) if not is_diagnostic(e)]
        assert len(got) == len(want) and all(map(covers, want, got)), (
            f"garbage changed what the app saw:\n got {json.dumps(got)[:3000]}\nwant {json.dumps(want)[:3000]}"
        )


def is_diagnostic(expect: dict[str, Any]) -> bool:
    return "event" in expect and event_kind_name(expect["event"]["kind"]) == "Diagnostic"


def strip(expect: dict[str, Any]) -> Any:
    """An expectation without what garbage may shift: sequence numbers."""
    if "event" in expect:
        return {k: v for k, v in expect["event"].items() if k not in ("sequence", "occurred_at")}
    return expect


@pytest.mark.parametrize(("path", "step", "fault"), corpus_params())
def test_corpus_agent_fault(path: Path, step: int, fault: str, tmp_path: Path) -> None:
    case = load(path)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        conv, struck, names = play(case, str(tmp_path), step, fault)
    try:
        check_common(conv, stderr.getvalue())
        check_fault(conv, struck, fault, case.expects, names)
    finally:
        conv.loop.close()


# -- the mock: the fault is a step of its script ------------------------------------------------

MOCK_TURN = json.loads((SCRIPTS / "turn.json").read_text())["turns"][0]
MOCK_END = {"Completed": {"source": "Protocol"}}

#: What each fault is as mock steps. The mock's "garbage" is what a script may say that
#: the engine must refuse: engine-owned kinds (dropped, with a diagnostic).
MOCK_FAULTS: dict[str, list[Any]] = {
    "die": ["Die"],
    "hang": [{"Sleep": 10**12}],
    "flood": [{"Repeat": {"times": 3 * HIGH_WATER, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": "x"}}}]}}],
    "garbage": [
        {"Emit": {"TurnEnded": {"stop": {"Completed": {"source": "Protocol"}}, "background": [], "usage": None}}},
        {"Emit": {"StatusChanged": "Idle"}},
        {"Emit": {"RequestClosed": {"request_id": "r1"}}},
        {"Emit": {"TurnStarted": {"origin": "Agent"}}},
    ],
}


@pytest.mark.parametrize("fault", AGENT_FAULTS)
@pytest.mark.parametrize("step", range(len(MOCK_TURN) + 1))
def test_mock_agent_fault(step: int, fault: str) -> None:
    steps = MOCK_TURN[:step] + MOCK_FAULTS[fault] + MOCK_TURN[step:]
    script = load_script(json.dumps({"turns": [steps]}))
    stderr = io.StringIO()
    conv = FaultConversation(mock_script=script)
    try:
        with contextlib.redirect_stderr(stderr):
            conv.open("mock")
            conv.reading = fault != "flood"
            conv.command("prompt", text="go")  # (settles: the mock plays until it waits or is paused)
            if fault == "flood":
                # No time passes while the app reads nothing (a minute of that is ConsumerLagged).
                paused = conv.most_owed
                conv.catch_up()
            run_for(conv.loop, HANG, until=lambda: bool(conv.events("RequestOpened")) or conv.is_closed())
            if conv.events("RequestOpened"):
                conv.reading = fault != "flood"
                conv.command("answer", request="r1", answer={"Permission": "AllowOnce"})
                if fault == "flood":
                    paused = max(paused, conv.most_owed)
                    conv.catch_up()
            run_for(conv.loop, HANG, until=lambda: bool(conv.events("TurnEnded")) or conv.is_closed())
            conv.command("info")  # replies still come, whatever the agent did
            conv.command("close")
            run_for(conv.loop, HANG, until=conv.is_closed)
        outcome = Outcome(conv.out)
        outcome.check(opened=True)
        assert "Traceback" not in stderr.getvalue(), stderr.getvalue()
        assert len(conv.replies()) == 5 if conv.events("RequestOpened") else 4
        stops = outcome.failed_turns()
        if fault == "die":
            during = step < len(MOCK_TURN)  # or after the turn's End: it died idle
            assert stops == [{"Failed": {"message": "agent exited during the turn"}} if during else MOCK_END]
            assert [e.kind for e in outcome.errors()] == [Kind.PROCESS_EXITED]
        elif fault == "hang":
            assert stops == (["Cancelled"] if step < len(MOCK_TURN) else [MOCK_END]), stops
        elif fault == "flood" and step == len(MOCK_TURN):
            # Text after the turn's end is the agent's own turn, which the close cancels.
            assert stops == [MOCK_END, "Cancelled"] and not outcome.errors()
        else:
            assert stops == [MOCK_END] and not outcome.errors()
        if fault == "flood":
            assert HIGH_WATER <= paused <= HIGH_WATER + 256, paused  # paused within one tick's steps
            assert "".join(d["text"] for d in conv.events("TextDelta")).count("x") == 3 * HIGH_WATER
        if fault == "garbage":
            assert sum("engine-owned" in m for m in conv.diagnostics()) == 4
    finally:
        conv.loop.close()


def test_nothing_but_closed_follows_a_session_error(tmp_path: Path) -> None:
    """Codex dies during a turn: its driver fails the session, then reports the turn's end
    as its exit is handled. That late end used to come out as a Diagnostic between the
    session error and ``closed``; the error is terminal, so only ``closed`` may follow."""
    case = load(CORPUS / "codex" / "command-approval.jsonl")
    with contextlib.redirect_stderr(io.StringIO()):
        conv, struck, _ = play(case, str(tmp_path), 5, "die")
    try:
        assert struck is not None and struck.turn_running
        lines = [o[0] for o in conv.out if o[0] != "reply"]
        assert lines[lines.index("error") :] == ["error", "closed"], conv.out
    finally:
        conv.loop.close()
