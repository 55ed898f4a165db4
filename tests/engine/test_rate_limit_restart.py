"""A rate-limited turn outlives its agent process (issue 24), on the mock: with ``retry``, an
agent that ends while its turn waits out a rate limit (``RateLimit`` with ``exit``), or ends
right after reporting one before any tool call (``end: false`` then ``Die``), is started
again resumed by its token (the mock's ``resumable``) and the same turn is sent again, its
events in order after one Diagnostic; a recording of it replays with no drift. Without a
token, or an agent that cannot resume, the session fails with ProcessExited as before. The
ended driver's late reports never reach the session's state (engine/restart.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from sidecar import ROOT, Sidecar, base_env, kind_name

from agentproto.core.errors import AgentError
from agentproto.drivers.mock import MockDriver
from agentproto.drivers.mock_script import load_script
from agentproto.engine import session as engine_session
from agentproto.engine.guard import MAX_RETRIES
from agentproto.engine.runtime import Engine, Scope
from agentproto.loopio.loop import Loop

END = {"End": {"Completed": {"source": "Protocol"}}}
THINKING = {"Emit": {"TextDelta": {"message_id": "m1", "text": "thinking"}}}
ANSWER = [{"Emit": {"TextDelta": {"message_id": "m2", "text": "the answer"}}}, END]
#: The 429 fails the turn, then the process ends during the wait; or it ends right after the 429.
EXITS_WHILE_WAITING = [THINKING, {"RateLimit": {"retry_after_ms": 300, "exit": True}}]
EXITS_ON_THE_LIMIT = [THINKING, {"RateLimit": {"retry_after_ms": 300, "end": False}}, "Die"]


def mock(tmp_path: Path, *turns: list[Any], **fields: Any) -> str:
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"turns": list(turns), **fields}))
    return str(path)


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e for e in events if kind_name(e["kind"]) == name]


def replay(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**base_env(), "AGENTPROTO_DB": "off"}
    cmd = [sys.executable, "-m", "agentproto", "replay", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)


@pytest.mark.parametrize("first", [EXITS_WHILE_WAITING, EXITS_ON_THE_LIMIT], ids=["while-waiting", "on-the-limit"])
def test_an_agent_that_ends_during_a_rate_limited_turn_is_resumed_and_the_turn_sent_again(
    tmp_path: Path, first: list[Any]
) -> None:
    record = tmp_path / "restart.ndjson"
    with Sidecar(["--mock", mock(tmp_path, first, ANSWER, resumable=True), "--record", str(record)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 10})
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
        assert len(of(events, "TurnStarted")) == 1 and {e["turn_info"]["id"] for e in events} == {"t1"}
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        restarts = [e for e in of(events, "Diagnostic") if "restart" in e["extensions"].get("agentproto", {})]
        assert len(restarts) == 1, restarts
        assert restarts[0]["extensions"]["agentproto"]["restart"] == {
            "status": "9", "process": 2, "resume_token": f"mock-{sid}"}  # fmt: skip
        assert [e["kind"]["TextDelta"]["text"] for e in of(events, "TextDelta")] == ["thinking", "the answer"]
        assert events.index(restarts[0]) < events.index(of(events, "TextDelta")[1])  # said before the new output
        statuses = [e["kind"]["StatusChanged"] for e in of(events, "StatusChanged")]
        assert statuses == ["Working"], statuses  # Working throughout
        # The session goes on, on the new process.
        assert sc.ok({"cmd": "info", "session": sid})["status"] == "Idle"
        sc.close_stdin()
        sc.drain()
    assert [json.loads(line)["process"] for line in record.read_text().splitlines() if '"restart"' in line[:60]] == [2]
    done = replay(record)
    assert done.returncode == 0 and "every response matched" in done.stderr, done.stderr


@pytest.mark.parametrize("fields", [{}, {"resume": True}], ids=["no-token", "cannot-resume"])
def test_without_a_token_or_an_agent_that_can_resume_the_session_fails_with_process_exited(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    # The mock's anyagent ``resume`` gives a token but refuses every resume (ResumeFailed).
    with Sidecar(["--mock", mock(tmp_path, EXITS_WHILE_WAITING, ANSWER, **fields)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 10})
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Failed": {"message": "agent exited during the turn"}}
        line = sc.wait_for(lambda line: line.get("session") == sid and "error" in line, 10)
        assert line["error"]["kind"] == "ProcessExited", line
        sc.wait_for(lambda line: line.get("closed") == sid, 10)
        assert "the answer" not in json.dumps(events)
        warnings = [e["kind"]["Diagnostic"]["message"] for e in of(events, "Diagnostic")]
        resumed = [w for w in warnings if "could not be resumed" in w]
        assert resumed == ([] if not fields else
                           ["the agent process ended and could not be resumed: resume failed: the mock keeps no history"])  # fmt: skip


def test_a_cancel_while_the_resumed_turn_waits_out_its_limit_ends_the_turn_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    # The restart Diagnostic comes once the new process opened: the cancel comes during the
    # limit's wait, on the new process (the restart itself: the test after the next).
    slow = [THINKING, {"RateLimit": {"retry_after_ms": 20000, "exit": True}}]
    with Sidecar(["--mock", mock(tmp_path, slow, ANSWER, ANSWER, resumable=True)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 60})
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        sc.wait_for(lambda line: "restart" in json.dumps(line.get("event", {}).get("extensions", {})), 10)
        sc.ok({"cmd": "cancel", "session": sid})
        events = sc.events(sid, "TurnEnded", timeout=5)  # at once: not after the limit's 20 s
        assert events[-1]["kind"]["TurnEnded"]["stop"] == "Cancelled"
        sc.ok({"cmd": "prompt", "session": sid, "text": "again"})
        events = sc.events(sid, "TurnEnded", timeout=10)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}


def test_a_request_the_ended_process_left_open_is_closed_before_the_turn_goes_on(tmp_path: Path) -> None:
    tool = {"id": "tool-1", "kind": "Execute", "title": "make", "status": "Pending",
            "input": {"Command": {"command": "make", "cwd": None}}, "output": None, "diffs": [], "locations": [],
            "raw": None}  # fmt: skip
    asks = {"Emit": {"RequestOpened": {"Permission": {"id": "r1", "tool": tool, "options": ["AllowOnce"],
                                                      "detail": None}}}}  # fmt: skip
    first = [asks, {"RateLimit": {"retry_after_ms": 200, "end": False}}, "Die"]
    with Sidecar(["--mock", mock(tmp_path, first, ANSWER, resumable=True)]) as sc:
        sid = sc.open(dir=str(tmp_path), retry={"max_wait_s": 10})
        sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
        events = sc.events(sid, "TurnEnded", timeout=30)
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}, events[-1]
        (closed,) = of(events, "RequestClosed")
        assert closed["kind"]["RequestClosed"]["request_id"] == "r1"
        restart = next(e for e in of(events, "Diagnostic") if "restart" in e["extensions"].get("agentproto", {}))
        assert events.index(closed) < events.index(restart)
        statuses = [e["kind"]["StatusChanged"] for e in of(events, "StatusChanged")]
        assert statuses == ["Working", "NeedsInput", "Working"], statuses
        # The app's late answer finds no request: nothing reaches the new process.
        refused = sc.error({"cmd": "answer", "session": sid, "request": "r1", "answer": {"Permission": "AllowOnce"}})
        assert refused["kind"] == "InvalidRequest", refused


class Collect:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.errors: list[Any] = []

    def event(self, session: Any, event: Any) -> None:
        self.events.append(event)

    def session_error(self, session: Any, error: Any) -> None:
        self.errors.append(error)

    def session_closed(self, session: Any) -> None: ...


def in_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    turns: tuple[list[Any], ...] = (EXITS_WHILE_WAITING, ANSWER),
    **fields: Any,
) -> tuple[Loop, list[MockDriver], Any, Collect, Any]:
    """An engine in this process playing ``turns`` (EXITS_WHILE_WAITING then ANSWER; the mock
    script's other ``fields``), its session prompted; the mock drivers it builds, in order."""
    drivers: list[MockDriver] = []
    real_init = MockDriver.__init__

    def init(self: MockDriver, host: Any, launch: Any) -> None:
        real_init(self, host, launch)
        drivers.append(self)

    monkeypatch.setattr(MockDriver, "__init__", init)
    loop = Loop()

    def run(until: Any) -> None:  # bounded: a session that never gets there fails the test
        deadline = loop.time() + 20
        loop.call_later(20, lambda: None)
        loop.run(until=lambda: until() or loop.time() > deadline)
        assert until(), "the session never got there"

    script = load_script(Path(mock(tmp_path, *turns, resumable=True, **fields)).read_text())
    runtime = Engine(loop, mock_script=script)
    scope = Scope(runtime, shared=True)
    sink = Collect()
    answers: list[Any] = []
    open_args = {"agent": "mock", "dir": str(tmp_path), "retry": {"max_wait_s": 10}}
    runtime.execute("open", open_args, sink, scope, lambda v, e: answers.append((v, e)))
    run(lambda: bool(answers))
    session = scope.lookup("s1")
    session.prompt("go", [], lambda v, e: answers.append((v, e)))
    return loop, drivers, runtime, sink, run


def test_the_ended_drivers_late_reports_never_reach_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop, drivers, runtime, sink, run = in_process(tmp_path, monkeypatch)
    try:
        session = runtime.sessions["s1"]
        run(lambda: len(drivers) == 2)
        old, new = drivers
        assert session.driver is new and old.host is not new.host
        # What the ended driver still says: its events, its turn's end, its exit again.
        old.host.emit({"TextDelta": {"message_id": "late", "text": "stale"}})
        old.host.end_turn({"Failed": {"message": "late end"}})
        old.host.update(title="stale title")
        old.host.fail(AgentError.process_exited("9", "late"))
        old.host.closed()
        old.host.diagnostic("Warning", "a late stderr line")
        run(lambda: any(kind_name(e["kind"]) == "TurnEnded" for e in sink.events))
        texts = [e["kind"]["TextDelta"]["text"] for e in sink.events if kind_name(e["kind"]) == "TextDelta"]
        assert texts == ["thinking", "the answer"]
        (ended,) = [e for e in sink.events if kind_name(e["kind"]) == "TurnEnded"]
        assert ended["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        messages = [e["kind"]["Diagnostic"]["message"] for e in sink.events if kind_name(e["kind"]) == "Diagnostic"]
        assert "(the ended agent process) a late stderr line" in messages
        assert sink.errors == [] and session.state == "open" and session.info["title"] is None
        runtime.close_all()
        run(lambda: not runtime.sessions)
    finally:
        loop.close()



def test_a_driver_that_reports_its_exit_by_closed_alone_is_restarted_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A driver's exit may come as ``closed`` with no ``fail`` first: the session's own
    # ProcessExited then starts the new process (it is not waited for a ``closed`` again).
    real_stop = MockDriver._stop
    monkeypatch.setattr(MockDriver, "_stop", lambda self, event, failure=None: real_stop(self, event, None))
    loop, drivers, runtime, sink, run = in_process(tmp_path, monkeypatch)
    try:
        run(lambda: any(kind_name(e["kind"]) == "TurnEnded" for e in sink.events))
        (ended,) = [e for e in sink.events if kind_name(e["kind"]) == "TurnEnded"]
        assert ended["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        assert len(drivers) == 2 and sink.errors == []
        restart = [e for e in sink.events if "restart" in e["extensions"].get("agentproto", {})]
        assert restart[0]["extensions"]["agentproto"]["restart"]["status"] is None  # no status was said
        messages = [e["kind"]["Diagnostic"]["message"] for e in sink.events if kind_name(e["kind"]) == "Diagnostic"]
        assert not [m for m in messages if "did not go away" in m]  # not given up on
        runtime.close_all()
        run(lambda: not runtime.sessions)
    finally:
        loop.close()


def after_each_restart_began(monkeypatch: pytest.MonkeyPatch, then: Callable[[Any], None]) -> None:
    """Call ``then(session)`` as each restart begins: the old process ended, the new one is
    not open yet (``restart.active``)."""
    real_begin = engine_session.begin

    def begin(session: Any, error: AgentError) -> bool:
        began = real_begin(session, error)
        if began:
            then(session)
        return began

    monkeypatch.setattr(engine_session, "begin", begin)


def kinds(sink: Collect, name: str) -> list[Any]:
    return [e["kind"][name] for e in sink.events if kind_name(e["kind"]) == name]


def test_a_cancel_during_the_restart_itself_ends_the_turn_and_a_new_prompt_waits_for_the_new_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app cancels, prompts again, asks compact and rollback before the new process
    # opened: the prompt is queued and goes to the new process once it opened (it went to the
    # ended driver and never ran), compact and rollback are refused (busy).
    loop, drivers, runtime, sink, run = in_process(
        tmp_path, monkeypatch, (EXITS_WHILE_WAITING, ANSWER, ANSWER), compact=True, rollback=True
    )
    answers: dict[str, Any] = {}
    restarting: list[bool] = []

    def app(session: Any) -> None:
        def commands() -> None:
            restarting.append(session.restart.active)
            session.cancel(False, None, lambda v, e: answers.setdefault("cancel", (v, e)))
            session.prompt("again", [], lambda v, e: answers.setdefault("prompt", (v, e)))
            session.compact(lambda v, e: answers.setdefault("compact", (v, e)))
            session.rollback(1, "Conversation", lambda v, e: answers.setdefault("rollback", (v, e)))

        session.loop.call_soon(commands)

    after_each_restart_began(monkeypatch, app)
    try:
        session = runtime.sessions["s1"]
        run(lambda: len(kinds(sink, "TurnEnded")) == 2)
        assert restarting == [True], restarting  # the commands came during the restart
        assert answers["cancel"] == (None, None)
        assert answers["prompt"] == ({"prompt_id": "p2", "kind": {"Queued": {"position": 0}}}, None)
        assert [answers[c][1].kind for c in ("compact", "rollback")] == ["SessionBusy", "SessionBusy"]
        first, second = kinds(sink, "TurnEnded")
        assert first["stop"] == "Cancelled" and second["stop"] == {"Completed": {"source": "Protocol"}}
        assert [s["origin"] for s in kinds(sink, "TurnStarted")] == [{"Prompt": "p1"}, {"Prompt": "p2"}]
        restart = [e for e in sink.events if "restart" in e["extensions"].get("agentproto", {})]
        assert len(restart) == 1 and sink.events.index(restart[0]) < [
            i for i, e in enumerate(sink.events) if kind_name(e["kind"]) == "TurnStarted"][1]  # fmt: skip
        assert [d["text"] for d in kinds(sink, "TextDelta")] == ["thinking", "the answer"]
        assert len(drivers) == 2 and session.driver is drivers[1] and sink.errors == []
        assert session.info["status"] == "Idle"
        runtime.close_all()
        run(lambda: not runtime.sessions)
    finally:
        loop.close()


def test_restarts_while_the_turn_waits_are_its_retries_at_most_max_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every new process dies as soon as it opened, while the turn still waits out its limit:
    # the 429 was the turn's first retry, each restart one more, then the session fails (it
    # restarted in a loop for the whole wait, no retry counted).
    slow = [THINKING, {"RateLimit": {"retry_after_ms": 3000, "exit": True}}]
    loop, drivers, runtime, sink, run = in_process(tmp_path, monkeypatch, (slow, ANSWER))
    relay = sink.event

    def event(session: Any, event: dict[str, Any]) -> None:
        relay(session, event)
        if "restart" in event["extensions"].get("agentproto", {}):
            new = drivers[-1]
            # 50 ms: an unbounded loop of restarts (the bug) stays a few dozen in the wait.
            loop.call_later(0.05, lambda: new._stop("die", AgentError.process_exited("9", "dies again")))

    sink.event = event  # type: ignore[method-assign]
    try:
        run(lambda: bool(sink.errors))
        restarts = [e for e in sink.events if "restart" in e["extensions"].get("agentproto", {})]
        assert len(restarts) == MAX_RETRIES - 1 and len(drivers) == MAX_RETRIES, (len(restarts), len(drivers))
        assert [e.kind for e in sink.errors] == ["ProcessExited"]
        assert kinds(sink, "TurnEnded")[-1]["stop"] == {"Failed": {"message": "agent exited during the turn"}}
        run(lambda: not runtime.sessions)
    finally:
        loop.close()


def test_a_turn_the_app_cancelled_is_not_restarted_when_its_agent_then_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent reported a 429 and goes on; the app cancels; the agent's interrupt is still
    # in flight (as Claude Code's control request) when its process dies: the cancelled turn
    # is not sent again to a new process (it was, and ran), the session fails as without retry.
    monkeypatch.setattr(MockDriver, "cancel", lambda self: None)
    limited = [THINKING, {"RateLimit": {"retry_after_ms": 200, "end": False}}, {"Sleep": 30000}]
    ran = [{"Emit": {"TextDelta": {"message_id": "m2", "text": "RE-SENT CANCELLED TURN RAN"}}}, END]
    loop, drivers, runtime, sink, run = in_process(tmp_path, monkeypatch, (limited, ran))
    relay = sink.event

    def event(session: Any, event: dict[str, Any]) -> None:
        relay(session, event)
        if "rate_limit" in event["extensions"].get("agentproto", {}):

            def app_cancels_then_the_agent_dies() -> None:
                session.cancel(False, None, lambda v, e: None)
                drivers[-1]._stop("die", AgentError.process_exited("9", "died on interrupt"))

            loop.call_soon(app_cancels_then_the_agent_dies)

    sink.event = event  # type: ignore[method-assign]
    try:
        run(lambda: bool(kinds(sink, "TurnEnded")))
        (ended,) = kinds(sink, "TurnEnded")
        assert ended["stop"] == {"Failed": {"message": "agent exited during the turn"}}, ended
        assert [d["text"] for d in kinds(sink, "TextDelta")] == ["thinking"]
        assert len(drivers) == 1 and [e.kind for e in sink.errors] == ["ProcessExited"]
        assert not [e for e in sink.events if "restart" in e["extensions"].get("agentproto", {})]
        run(lambda: not runtime.sessions)
    finally:
        loop.close()


def test_a_close_during_a_restart_whose_old_process_never_goes_gets_no_session_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app closes while the ended driver has not said ``closed`` (and never does): close's
    # own timers end the session; the restart's give-up (KILL_GRACE twice, before close's
    # CLOSE_GRACE + KILL_GRACE) sent a ProcessExited session error and a Warning.
    monkeypatch.setattr(engine_session.EngineSession, "KILL_GRACE", 0.2)
    monkeypatch.setattr(engine_session.EngineSession, "CLOSE_GRACE", 0.5)
    closes: list[Any] = []

    def app(session: Any) -> None:
        session.restart.old.closed = lambda: None  # the old driver never says it is gone
        session.loop.call_soon(lambda: session.close(lambda v, e: closes.append((v, e))))

    after_each_restart_began(monkeypatch, app)
    loop, drivers, runtime, sink, run = in_process(tmp_path, monkeypatch)
    try:
        session = runtime.sessions["s1"]
        run(lambda: not runtime.sessions)
        assert closes == [(None, None)] and session.state == "closed"
        assert sink.errors == [], sink.errors
        messages = [d["message"] for d in kinds(sink, "Diagnostic")]
        assert not [m for m in messages if "did not go away" in m], messages
        assert len(drivers) == 1  # no new process beside the old one
    finally:
        loop.close()


def test_a_close_while_the_new_process_fails_to_resume_gets_no_session_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app closes while the new driver opens; the resume then fails: close ends the
    # session as asked, with no ProcessExited session error or resume Warning.
    real_open = MockDriver.open
    closes: list[Any] = []

    def open_(self: MockDriver) -> None:
        if self.launch.resume is None:
            real_open(self)
            return
        host, loop = self.host, self.host.loop
        loop.call_soon(lambda: host.session.close(lambda v, e: closes.append((v, e))))
        loop.call_soon(lambda: host.open_failed(AgentError.detail("ResumeFailed", "no such session")))
        loop.call_soon(host.closed)

    monkeypatch.setattr(MockDriver, "open", open_)
    loop, drivers, runtime, sink, run = in_process(tmp_path, monkeypatch, ignore_close=True)
    try:
        run(lambda: not runtime.sessions)
        assert closes == [(None, None)] and len(drivers) == 2
        assert sink.errors == [], sink.errors
        messages = [d["message"] for d in kinds(sink, "Diagnostic")]
        assert not [m for m in messages if "could not be resumed" in m], messages
    finally:
        loop.close()
