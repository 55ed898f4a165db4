"""anyagent's published Python client (anyagent-py 0.0.4) against `agentproto serve --mock`.

agentproto must be a drop-in for `anyagent serve`, so the client runs unchanged: ANYAGENT_BIN
points at a shim that execs `python -m agentproto`. The scenarios are the S1–S11 subprocess
cases every anyagent wrapper runs (ticket 13), the "T3 port" cases the shared mock scripts
exist for (queued, question, resume, plan, plan-exit, rollback-refused), and the one-shot
calls (discover, probe, plan_usage, generate). Raw-wire tests pin the guarantees the client
relies on but cannot see.

The client is not vendored: .ci/run installs it into .cache/anyagent-py. Nothing is skipped;
without it every test fails with the install command.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from anyagent_harness import (
    PIDS_VAR,
    Runtime,
    Wire,
    alive,
    body,
    drain,
    frame_kind,
    kind_of,
    kinds,
    of,
    reap_leftovers,
    rejects,
    require_client,
    run,
    runtime,
    script,
    started_pids,
    statuses,
    texts,
    until,
    write_fake,
    write_shim,
)

COMPLETED = {"Completed": {"source": "Protocol"}}
ALLOW = {"Permission": "AllowOnce"}


@pytest.fixture(autouse=True)
def shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """ANYAGENT_BIN → agentproto; fails (never skips) without the client."""
    require_client()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = write_shim(bin_dir)
    pid_file = tmp_path / "pids"
    monkeypatch.setenv("ANYAGENT_BIN", str(shim))
    monkeypatch.setenv(PIDS_VAR, str(pid_file))
    yield shim
    reap_leftovers(pid_file)


@pytest.fixture
def pid_file(tmp_path: Path) -> Path:
    return tmp_path / "pids"


@pytest.fixture
def dir(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    return str(work)


@pytest.fixture
def wire(shim: Path) -> Any:
    started: list[Wire] = []

    def start(name: str | None) -> Wire:
        w = Wire(shim, script(name) if name else None)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def assert_numbered(events: list[dict[str, Any]], session_id: str) -> None:
    """Every event of the session, numbered 1, 2, 3, … with nothing lost in between."""
    assert all(ev["session_id"] == session_id for ev in events), events
    seqs = [ev["sequence"] for ev in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    for ev in events:
        assert isinstance(ev["extensions"], dict), ev


# -- S1–S11: the wrapper cases ----------------------------------------------------------


def test_s1_turn_with_the_permission_answered(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            session = await rt.open("mock", dir=dir)
            assert session.id == session.info["id"]
            assert session.status == "Idle"
            assert session.info["agent"]["id"] == "mock"

            delivery = await session.prompt("hi")
            assert delivery == {"prompt_id": "p1", "kind": {"Started": {"turn_id": "t1"}}}

            opened = await until(session, "RequestOpened")
            request = body(opened[-1])["Permission"]
            assert request["id"] == "r1"
            assert request["tool"]["id"] == "tool-1"
            assert request["tool"]["kind"] == "Execute"
            assert request["tool"]["input"] == {"Command": {"command": "cargo test", "cwd": None}}
            assert request["options"] == ["AllowOnce", "DenyOnce"]
            assert session.status == "NeedsInput"

            assert await session.answer("r1", ALLOW) is None
            rest = await until(session, "TurnEnded")
            assert texts(rest) == ["Done."]
            assert of(rest, "RequestClosed") == [{"request_id": "r1"}]
            ended = of(rest, "TurnEnded")[0]
            assert ended["stop"] == COMPLETED
            assert ended["background"] == []

            after = await until(session, "StatusChanged")
            assert statuses(after) == ["Idle"]
            assert session.status == "Idle"

            events = opened + rest + after
            assert_numbered(events, session.id)
            core = [k for k in kinds(events) if k not in ("StatusChanged", "MessageEnded")]
            assert core == [
                "TurnStarted", "TextDelta", "RequestOpened", "RequestClosed", "TextDelta", "TurnEnded",
            ]
            assert statuses(events) == ["Working", "NeedsInput", "Working", "Idle"]
            assert texts(events) == ["Let me check. ", "Done."]
            assert all(body(e)["message_id"] == "m1" for e in events if kind_of(e) == "TextDelta")
            assert of(events, "TurnStarted") == [{"origin": {"Prompt": "p1"}}]
            for ev in events:
                if kind_of(ev) in ("TurnStarted", "TextDelta", "RequestOpened", "TurnEnded"):
                    assert ev["turn_info"]["id"] == "t1", ev

            assert await session.close() is None
            assert await drain(session) == [], "no events after closed"

    run(scenario())


def test_s2_events_buffered_before_iteration_are_all_delivered(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("hi")
            await asyncio.sleep(0.2)
            seen = await until(session, "RequestOpened")
            assert texts(seen) == ["Let me check. "]
            assert "TurnStarted" in kinds(seen)

    run(scenario())


def test_s3_a_prompt_after_close_is_session_closed(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            session = await rt.open("mock", dir=dir)
            await session.close()
            await rejects(session.prompt("x"), "SessionClosed")
            assert await drain(session) == []
            # The runtime is unharmed.
            assert (await rt.discover())["agents"][0]["id"] == "mock"

    run(scenario())


def test_s4_two_sessions_see_only_their_own_events_in_order_over_two_turns(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("chatter") as rt:
            a, b = await asyncio.gather(rt.open("mock", dir=dir), rt.open("mock", dir=dir))
            assert a.id != b.id
            await asyncio.gather(a.prompt("x"), b.prompt("y"))
            ea, eb = await asyncio.gather(until(a, "TurnEnded"), until(b, "TurnEnded"))
            for session, events in ((a, ea), (b, eb)):
                assert_numbered(events, session.id)
                assert texts(events) == ["one", "two", "three"]
                assert {body(e)["message_id"] for e in events if kind_of(e) == "TextDelta"} == {"m1"}
                assert of(events, "TurnEnded")[0]["stop"] == COMPLETED

            # The second turn plays the script's second list, on m2.
            delivery = await a.prompt("again")
            assert delivery == {"prompt_id": "p2", "kind": {"Started": {"turn_id": "t2"}}}
            second = await until(a, "TurnEnded")
            assert texts(second) == ["one", "two", "three"]
            assert {body(e)["message_id"] for e in second if kind_of(e) == "TextDelta"} == {"m2"}
            assert of(second, "TurnStarted") == [{"origin": {"Prompt": "p2"}}]
            assert all(e["turn_info"]["id"] == "t2" for e in second if kind_of(e) == "TextDelta")
            seqs = [e["sequence"] for e in ea + second]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    run(scenario())


def test_s5_bad_frames_get_bad_frame_and_the_runtime_goes_on(dir: str, wire: Any) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            # A frame with a readable id but no such command: the error comes back on that id.
            e = await rejects(rt.call({"cmd": "no_such_command"}), "BadFrame")
            assert e.message
            e = await rejects(rt.call({"cmd": "open", "agent": "mock"}), "BadFrame")  # no dir
            report = await rt.discover()
            assert report["agents"][0]["id"] == "mock"

    run(scenario())

    # A line that is not JSON at all: `id: null`, and the loop carries on.
    w = wire("turn")
    w.next("hello")
    w.send_raw("not json")
    bad = w.next("bad frame")
    assert bad["id"] is None, bad
    assert bad["error"]["kind"] == "BadFrame", bad
    assert isinstance(bad["error"]["message"], str)
    w.send({"id": 1, "cmd": "discover"})
    assert w.reply(1)["ok"]["agents"][0]["id"] == "mock"


def test_s6_process_death_rejects_pending_calls_iterators_and_later_calls(
    dir: str, pid_file: Path
) -> None:
    async def scenario() -> None:
        rt = await Runtime.start(mock=script("turn"))
        try:
            session = await rt.open("mock", dir=dir)
            [pid] = started_pids(pid_file)
            os.kill(pid, 9)
            for pending in (rt.discover(), rt.open("mock", dir=dir)):
                await rejects(pending, "ProcessExited")
            await rejects(drain(session), "ProcessExited")
            await rejects(rt.discover(), "ProcessExited")
        finally:
            assert await rt.close() == -9

    run(scenario())


def test_s7_the_agent_dying_mid_turn(dir: str) -> None:
    """The turn fails, then the stream raises ProcessExited (status 9), then ends."""

    async def scenario() -> None:
        async with runtime("die") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("go")
            events = await until(session, "TurnEnded")
            assert texts(events) == ["hi"]
            assert of(events, "TurnEnded")[0]["stop"] == {
                "Failed": {"message": "agent exited during the turn"}
            }
            e = await rejects(drain(session), "ProcessExited")
            assert e.data["status"] == "9"
            assert e.data["stderr"] == "mock died"
            assert await drain(session) == [], "stream restarted"
            await rejects(session.prompt("again"), "SessionClosed")
            assert (await rt.discover())["agents"][0]["id"] == "mock"

    run(scenario())


def test_s8a_a_20000_event_flood_arrives_whole_and_in_order(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("flood") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("go")
            deltas = 0
            last = 0
            async for ev in session.events():
                assert ev["sequence"] == last + 1, (last, ev["sequence"])
                last = ev["sequence"]
                if kind_of(ev) == "TextDelta":
                    assert body(ev) == {"message_id": "m1", "text": "x"}
                    deltas += 1
                if kind_of(ev) == "TurnEnded":
                    assert body(ev)["stop"] == COMPLETED
                    break
            assert deltas == 20_000

    run(scenario(), timeout=120)


def test_s8b_a_consumer_that_stops_reading_gets_consumer_lagged(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("flood") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("go")
            n = 0
            async for _ in session.events():
                n += 1
                if n == 10:
                    break
            await asyncio.sleep(2.5)  # 4096 events arrive in ~0.8 s at the flood's pace
            await rejects(until(session, "TurnEnded"), "ConsumerLagged")
            # The client closed the lagging session itself; the sidecar stays usable.
            assert (await rt.discover())["agents"][0]["id"] == "mock"
            other = await rt.open("mock", dir=dir)
            assert other.id != session.id

    run(scenario(), timeout=60)


def test_s9_closing_the_runtime_with_a_session_open(dir: str, pid_file: Path) -> None:
    """`closed` arrives, the process exits 0 within the client's 5 s, and is gone."""

    async def scenario() -> None:
        rt = await Runtime.start(mock=script("turn"))
        session = await rt.open("mock", dir=dir)
        [pid] = started_pids(pid_file)
        assert await rt.close() == 0
        assert await drain(session) == [], "closed should end the stream"
        assert not alive(pid)
        assert await rt.close() == 0  # idempotent

    run(scenario())


def test_s10_configure_a_live_model_updates_info(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("configure") as rt:
            session = await rt.open("mock", dir=dir)
            assert session.info["configuration"]["options"] == {"model": "sonnet"}
            option = session.info["details"]["config_options"][0]
            assert (option["id"], option["current"], option["live"]) == ("model", "sonnet", True)

            assert await session.configure("model", "opus") is None
            updated = (await until(session, "SessionUpdated"))[-1]
            assert body(updated)["id"] == session.id
            assert session.info["configuration"]["options"]["model"] == "opus"
            assert session.info["details"]["config_options"][0]["current"] == "opus"

            await rejects(session.configure("model", "gpt-4"), "InvalidConfiguration")
            await rejects(session.configure("effort", "high"), "InvalidConfiguration")
            await rejects(session.configure("model", True), "InvalidConfiguration")
            assert session.info["configuration"]["options"]["model"] == "opus"

            # The session still runs its turn.
            await session.prompt("hi")
            assert texts(await until(session, "TurnEnded")) == ["hi"]

    run(scenario())


def test_s11_a_binary_that_does_not_speak_protocol_1_fails_start(tmp_path: Path) -> None:
    """The client's own hello check, i.e. what agentproto's first line must pass."""

    async def scenario() -> None:
        not_json = write_fake(tmp_path, "nope", "nope")
        await rejects(Runtime.start(bin=str(not_json)), "ProtocolFailed")
        other = write_fake(tmp_path, "v99", '{"hello": {"protocol": 99, "anyagent": "x"}}')
        await rejects(Runtime.start(bin=str(other)), "ProtocolFailed")

    run(scenario())


# -- T3 ports: the other shared scripts -------------------------------------------------


def test_a_prompt_queued_during_a_turn_runs_after_it(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("queued") as rt:
            session = await rt.open("mock", dir=dir)
            assert (await session.prompt("first"))["kind"] == {"Started": {"turn_id": "t1"}}
            first = await until(session, "RequestOpened")
            queued = await session.prompt("second")
            assert queued == {"prompt_id": "p2", "kind": {"Queued": {"position": 0}}}
            third = await session.prompt("third")
            assert third == {"prompt_id": "p3", "kind": {"Queued": {"position": 1}}}
            await session.dequeue("p3")
            await rejects(session.dequeue("p3"), "InvalidRequest")

            await session.answer("r1", ALLOW)
            turn1 = await until(session, "TurnEnded")
            turn2 = await until(session, "TurnEnded")
            tail = await until(session, "StatusChanged")
            assert texts(turn1) == ["Done."]
            assert of(turn2, "TurnStarted") == [{"origin": {"Prompt": "p2"}}]
            assert texts(turn2) == ["second"]
            assert all(e["turn_info"]["id"] == "t2" for e in turn2 if kind_of(e) == "TextDelta")
            assert of(turn2, "TurnEnded")[0]["stop"] == COMPLETED
            # Working the whole way through the promotion: never a flash of Idle.
            assert "Idle" not in statuses(turn1 + turn2)
            assert statuses(tail) == ["Idle"]
            assert_numbered(first + turn1 + turn2 + tail, session.id)

    run(scenario())


def test_a_question_answer_is_validated_then_accepted(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("question") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("ask me")
            opened = await until(session, "RequestOpened")
            question = body(opened[-1])["Question"]
            assert question["id"] == "q1"
            assert [q["id"] for q in question["questions"]] == ["color", "name"]
            assert [c["id"] for c in question["questions"][0]["choices"]] == ["c-red", "c-blue"]
            assert session.status == "NeedsInput"

            for wrong in (
                [{"Choices": ["c-red"]}],  # one answer for two questions
                [{"Text": "red"}, {"Text": "Bob"}],  # free text where it is not allowed
                [{"Choices": ["c-green"]}, {"Text": "Bob"}],  # not offered
                [{"Choices": ["c-red", "c-blue"]}, {"Text": "Bob"}],  # two on a single-select
                [{"Choices": []}, {"Text": "Bob"}],  # no choice
            ):
                await rejects(session.answer("q1", {"Question": wrong}), "InvalidRequest")
            await rejects(session.answer("q1", ALLOW), "InvalidRequest")  # wrong answer type
            await rejects(session.answer("q9", {"Question": []}), "InvalidRequest")  # not open

            await session.answer("q1", {"Question": [{"Choices": ["c-blue"]}, {"Text": "Bob"}]})
            rest = await until(session, "TurnEnded")
            assert of(rest, "RequestClosed") == [{"request_id": "q1"}], "the request stayed open"
            assert of(rest, "TurnEnded")[0]["stop"] == COMPLETED
            await rejects(session.answer("q1", {"Question": []}), "InvalidRequest")

    run(scenario())


def test_resume_token_is_advertised_and_resuming_the_mock_fails(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("resume") as rt:
            session = await rt.open("mock", dir=dir)
            assert session.info["resume_token"] == "mock-token"
            assert "Resume" in session.info["details"]["capabilities"]["features"]
            e = await rejects(rt.open("mock", dir=dir, resume="mock-token"), "ResumeFailed")
            assert "no history" in e.message
            await rejects(rt.generate("mock", "x", dir=dir, resume="mock-token"), "InvalidConfiguration")
            await session.prompt("hi")
            assert texts(await until(session, "TurnEnded")) == ["hi"]

    run(scenario())


def test_plan_mode_is_a_live_option_and_a_plan_is_proposed(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("plan") as rt:
            session = await rt.open("mock", dir=dir)
            assert session.info["configuration"]["options"] == {"mode": "default"}
            await session.configure("mode", "plan")
            await until(session, "SessionUpdated")
            assert session.info["configuration"]["options"]["mode"] == "plan"

            await session.prompt("plan a readme")
            turn1 = await until(session, "TurnEnded")
            assert of(turn1, "PlanProposed") == [{"markdown": "1. Add a README"}]
            assert of(turn1, "TurnEnded")[0]["stop"] == COMPLETED

            await session.configure("mode", "default")
            await until(session, "SessionUpdated")
            assert session.info["configuration"]["options"]["mode"] == "default"
            assert session.info["details"]["config_options"][0]["current"] == "default"
            await session.prompt("do it")
            assert texts(await until(session, "TurnEnded")) == ["Done."]
            await rejects(session.configure("mode", "yolo"), "InvalidConfiguration")

    run(scenario())


def test_plan_exit_and_an_ordinary_permission_both_reach_the_app(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("plan-exit") as rt:
            session = await rt.open("mock", dir=dir)
            assert session.info["configuration"]["options"] == {"mode": "plan"}
            await session.prompt("plan")
            opened = await until(session, "RequestOpened")
            assert of(opened, "PlanProposed") == [{"markdown": "1. Add a README"}]
            exit_request = body(opened[-1])["Permission"]
            assert exit_request["id"] == "exit-1"
            assert exit_request["tool"]["title"] == "ExitPlanMode"
            assert exit_request["tool"]["raw"] == {
                "name": "ExitPlanMode", "input": {"plan": "1. Add a README"},
            }
            await session.answer("exit-1", ALLOW)
            assert texts(await until(session, "TurnEnded")) == ["Kept the plan."]

            await session.prompt("go")
            opened = await until(session, "RequestOpened")
            assert body(opened[-1])["Permission"]["id"] == "r2"
            await rejects(session.answer("r2", {"Permission": "AllowAlways"}), "InvalidRequest")
            await session.answer("r2", {"Permission": "DenyOnce"})
            assert texts(await until(session, "TurnEnded")) == ["Done."]

    run(scenario())


def test_a_refused_rollback_is_an_invalid_request_reply(dir: str) -> None:
    """The newest crate's mock answers a rollback with `RolledBack(Err(reason))` and the engine
    replies `InvalidRequest(reason)` (src/session.rs: "a refusal is `InvalidRequest(reason)`").
    So `session.rollback` raises; it does not resolve and report a Diagnostic."""

    async def scenario() -> None:
        async with runtime("turn") as rt:
            plain = await rt.open("mock", dir=dir)
            await rejects(plain.rollback(1, "Conversation"), "UnsupportedFeature")

        async with runtime("rollback-refused") as rt:
            session = await rt.open("mock", dir=dir)
            assert "Rollback" in session.info["details"]["capabilities"]["features"]
            await session.prompt("hi")
            await until(session, "TurnEnded")
            await until(session, "StatusChanged")
            assert session.status == "Idle"
            e = await rejects(session.rollback(1, "Conversation"), "InvalidRequest")
            assert "nothing to rewind past the compaction" in e.message, e.message
            await rejects(session.rollback(1, "ConversationAndFiles"), "UnsupportedFeature")
            # Refused, not broken: the session still takes a prompt and closes cleanly.
            delivery = await session.prompt("again")
            assert delivery["kind"] == {"Started": {"turn_id": "t2"}}
            await session.close()
            left = await drain(session)
            assert of(left, "TurnEnded") == [] or of(left, "TurnEnded")[0]["stop"] == "Cancelled"

    run(scenario())


# -- close, cancel, EOF -----------------------------------------------------------------


def test_cancel_closes_the_request_and_ends_the_turn_cancelled(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("hi")
            await until(session, "RequestOpened")
            assert await session.cancel() is None
            rest = await until(session, "TurnEnded")
            assert of(rest, "RequestClosed") == [{"request_id": "r1"}]
            assert of(rest, "TurnEnded")[0]["stop"] == "Cancelled"
            assert statuses(await until(session, "StatusChanged")) == ["Idle"]
            await rejects(session.answer("r1", ALLOW), "InvalidRequest")
            assert await session.cancel() is None  # idempotent when idle

    run(scenario())


def test_close_during_a_turn_ends_it_cancelled_then_closed(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("chatter") as rt:
            session = await rt.open("mock", dir=dir)
            for _ in range(2):
                await session.prompt("x")
                await until(session, "TurnEnded")
            # The script is used up: this turn starts and never ends by itself.
            await session.prompt("x")
            await until(session, "TurnStarted")
            await session.close()
            left = await drain(session)
            assert of(left, "TurnEnded")[0]["stop"] == "Cancelled", kinds(left)
            await rejects(session.close(), "SessionClosed")

    run(scenario())


def test_eof_closes_every_session_even_an_open_in_flight(dir: str) -> None:
    async def scenario() -> None:
        rt = await Runtime.start(mock=script("turn"))
        first = await rt.open("mock", dir=dir)
        await first.prompt("hi")
        await until(first, "RequestOpened")
        in_flight = asyncio.ensure_future(rt.open("mock", dir=dir))
        await asyncio.sleep(0)  # the open line is written; stdin closes right behind it
        assert await rt.close() == 0
        left = await drain(first)
        assert of(left, "TurnEnded")[0]["stop"] == "Cancelled", kinds(left)
        second = await in_flight
        assert second.id != first.id
        assert await drain(second) == []

    run(scenario())


# -- one-shot calls ---------------------------------------------------------------------


def test_discover_probe_and_plan_usage(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("configure") as rt:
            report = await rt.discover()
            assert [a["id"] for a in report["agents"]] == ["mock"]
            mock = report["agents"][0]
            assert (mock["name"], mock["executable_path"], mock["source"]) == ("Mock", "mock", "Pinned")
            assert report["missing"] == []
            assert isinstance(report["diagnostics"], list)

            details = await rt.probe("mock")
            assert details["version"] == "mock"
            assert details["auth"] == {"Authenticated": {"kind": "ApiKey", "account": None}}
            features = details["capabilities"]["features"]
            assert {"Questions", "Permissions"} <= set(features)
            assert not {"Steer", "Compact", "Resume", "Rollback"} & set(features)
            assert isinstance(details["capabilities"]["mcp_transports"], list)
            assert [o["id"] for o in details["config_options"]] == ["model"]
            assert details["commands"] == []

            e = await rejects(rt.plan_usage("mock"), "UnsupportedFeature")
            assert "plan usage" in e.message
            e = await rejects(rt.open("nope", dir=dir), "NotInstalled")
            assert e.data["agent"] == "nope"
            await rejects(rt.probe("nope"), "NotInstalled")

    run(scenario())


def test_plan_usage_all_through_the_raw_call(tmp_path: Path) -> None:
    """anyagent HEAD's plan_usage_all (agentproto's reading of it), sent through 0.0.4's raw
    `call`: a row per discovered agent, with its PlanUsage or the typed reason it has none."""
    usage = {"plan": "max", "windows": [{"label": "Session", "used_percent": 12, "resets_at": None}]}
    with_plan = tmp_path / "plan.json"
    with_plan.write_text(json.dumps({"plan_usage": usage}))

    async def scenario() -> None:
        rt = await Runtime.start(mock=str(with_plan))
        try:
            report = await rt.discover()
            rows = await rt.call({"cmd": "plan_usage_all"})
            assert [row["agent"] for row in rows] == report["agents"]
            assert rows[0]["plan_usage"]["plan"] == "max"
            assert rows[0]["plan_usage"]["windows"] == usage["windows"]
            assert set(rows[0]["plan_usage"]["fetched_at"]) == {"secs_since_epoch", "nanos_since_epoch"}
            assert (await rt.plan_usage("mock"))["windows"] == usage["windows"]  # the one-agent call agrees
            assert "PlanUsage" in (await rt.probe("mock"))["capabilities"]["features"]
            await rejects(rt.call({"cmd": "plan_usage_all", "dir": str(tmp_path / "nope")}), "InvalidConfiguration")
        finally:
            await rt.close()
        async with runtime("turn") as plain:  # anyagent's mock: no plan usage
            rows = await plain.call({"cmd": "plan_usage_all"})
            assert [(row["agent"]["id"], row["error"]["kind"]) for row in rows] == [("mock", "UnsupportedFeature")]
            assert "plan_usage" not in rows[0]

    run(scenario())


def test_output_schema_capability_parses_and_the_client_works_on(tmp_path: Path, dir: str) -> None:
    """A Codex session given an output_schema lists OutputSchema (a Capability 0.0.4's types
    lack): probe and open return it, and the client goes on with the session."""
    import fake_openai as fo
    from sidecar import base_env

    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    world = fo.CodexWorld(str(tmp_path / "codex"))
    world.api.script(fo.text('{"title": "Done"}'))

    async def scenario() -> None:
        rt = await Runtime.start(env=base_env(world.env))
        try:
            ref = {"id": "codex", "path": fo.pinned_codex()}
            details = await rt.call({"cmd": "probe", "agent": ref, "dir": world.work, "output_schema": schema})
            assert "OutputSchema" in details["capabilities"]["features"]
            assert "OutputSchema" not in (await rt.probe(ref))["capabilities"]["features"]
            session = await rt.open(ref, dir=world.work, output_schema=schema)  # type: ignore[call-arg]
            assert "OutputSchema" in session.info["details"]["capabilities"]["features"]
            await session.prompt("name it")
            seen = await until(session, "TurnEnded")
            assert "".join(texts(seen)) == '{"title": "Done"}'
            assert body(seen[-1])["stop"] == COMPLETED
            await session.close()
            await drain(session)  # the stream ends once closed
        finally:
            await rt.close()

    try:
        run(scenario(), timeout=120)
        turn = [r for r in world.api.response_requests() if r.user_texts()][-1]
        assert turn.body["text"]["format"]["schema"] == schema
        assert world.wait_no_codex() == []
    finally:
        world.close()


def test_generate_returns_the_text_and_declines_the_permission(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            assert await rt.generate("mock", "title this", dir=dir) == "Let me check. Done."
            # Hands-off even when asked to auto-approve.
            text = await rt.generate("mock", "again", dir=dir, permission_mode="AutoApprove")
            assert text == "Let me check. Done."
            # The throwaway sessions left nothing behind, and a real one replays turn 1.
            session = await rt.open("mock", dir=dir)
            await session.prompt("hi")
            assert texts(await until(session, "RequestOpened")) == ["Let me check. "]

        async with runtime("chatter") as rt:
            assert await rt.generate("mock", "count", dir=dir) == "onetwothree"

        async with runtime("question") as rt:
            # A single-select question cannot be declined without choosing: generate fails.
            await rejects(rt.generate("mock", "ask", dir=dir), "ProtocolFailed")

    run(scenario())


def test_compact_without_the_capability_is_unsupported(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("turn") as rt:
            session = await rt.open("mock", dir=dir)
            await rejects(session.compact(), "UnsupportedFeature")

    run(scenario())


def test_newer_event_kinds_pass_through_unchanged(dir: str) -> None:
    async def scenario() -> None:
        async with runtime("live-events") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("search")
            events = await until(session, "TurnEnded")
            assert of(events, "ToolProgress") == [
                {"tool_id": "tool-1", "message": "searching", "elapsed_ms": 1500}
            ]
            assert of(events, "TurnDiff") == [
                {"unified": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old\n+new\n"}
            ]
            assert of(events, "ModelRerouted") == [
                {"from": "gpt-5.5", "to": "gpt-5.5-mini", "reason": "highRiskCyberActivity"}
            ]
            tools = of(events, "ToolUpdated")
            assert [t["status"] for t in tools] == ["Running", "Completed"]
            assert tools[0]["kind"] == {"Mcp": {"server": "docs", "tool": "search"}}
            assert tools[1]["output"] == "3 hits"

        async with runtime("subagent") as rt:
            session = await rt.open("mock", dir=dir)
            await session.prompt("explore")
            events = await until(session, "TurnEnded")
            tools = of(events, "ToolUpdated")
            assert [t["subagent"]["summary"] for t in tools] == ["Reading src", "Done"]
            [nested] = [e for e in events if kind_of(e) == "ToolProgress"]
            assert nested["turn_info"]["parent_tool_id"] == "task-1"
            assert body(nested) == {"tool_id": "tool-9", "message": "ls src", "elapsed_ms": 200}

    run(scenario())


# -- the raw wire: what the client relies on without seeing it -------------------------


def test_hello_is_the_first_line(wire: Any) -> None:
    w = wire("turn")
    hello = w.next("hello")
    assert set(hello) == {"hello"}, hello
    assert hello["hello"]["protocol"] == 1 and type(hello["hello"]["protocol"]) is int
    assert isinstance(hello["hello"]["anyagent"], str), "schema Hello requires `anyagent`"
    w.send({"id": 7, "cmd": "discover"})
    reply = w.next("discover reply")  # nothing unasked-for comes in between
    assert reply["id"] == 7 and type(reply["id"]) is int
    assert reply["ok"]["agents"][0]["id"] == "mock"


def test_null_results_carry_ok_null_and_errors_keep_their_fields(wire: Any, dir: str) -> None:
    w = wire("turn")
    w.next("hello")
    s = w.open(1, dir)
    w.send({"id": 2, "cmd": "prompt", "session": s, "text": "hi", "attachments": []})
    assert w.reply(2)["ok"]["kind"] == {"Started": {"turn_id": "t1"}}
    w.until("request", lambda f: frame_kind(f) == "RequestOpened")
    w.send({"id": 3, "cmd": "answer", "session": s, "request": "r1", "answer": ALLOW})
    reply = w.reply(3)
    assert reply == {"id": 3, "ok": None}, reply  # `ok` present even when null

    w.send({"id": 4, "cmd": "prompt", "session": "ghost", "text": "x"})
    ghost = w.reply(4)
    assert set(ghost) == {"id", "error"}, ghost  # no top-level `session`: it is a reply
    assert ghost["error"]["kind"] == "UnknownSession"
    assert ghost["error"]["session"] == "ghost"
    assert isinstance(ghost["error"]["message"], str)

    w.send({"id": 5, "cmd": "info", "session": s})
    info = w.reply(5)["ok"]
    assert info["id"] == s and info["agent"]["id"] == "mock"

    w.send({"id": 6, "cmd": "close", "session": s})
    before, closed = w.until("closed", lambda f: f.get("closed") == s)
    replies = [f for f in before if f.get("id") == 6]
    if not replies:
        replies = [w.reply(6)]
    assert replies == [{"id": 6, "ok": None}], replies
    w.send({"id": 8, "cmd": "prompt", "session": s, "text": "x"})
    late = w.reply(8)
    assert late["error"]["kind"] == "SessionClosed", late
    w.hang_up()
    rest = w.rest()
    assert not any(f.get("closed") == s for f in rest), "closed is written exactly once"
    assert w.wait() == 0


def test_a_dying_agent_is_turn_end_then_session_error_then_closed(wire: Any, dir: str) -> None:
    w = wire("die")
    w.next("hello")
    s = w.open(1, dir)
    w.send({"id": 2, "cmd": "prompt", "session": s, "text": "go"})
    before, error = w.until("session error", lambda f: "session" in f and "error" in f)
    assert error["session"] == s
    assert error["error"]["kind"] == "ProcessExited"
    assert (error["error"]["status"], error["error"]["stderr"]) == ("9", "mock died")
    assert isinstance(error["error"]["message"], str)
    ended = [f for f in before if frame_kind(f) == "TurnEnded"]
    assert ended and "Failed" in ended[-1]["event"]["kind"]["TurnEnded"]["stop"], before
    trailing, closed = w.until("closed", lambda f: "closed" in f)
    assert closed == {"closed": s}
    assert all("event" in f for f in trailing), trailing  # only bookkeeping events between
    w.hang_up()
    assert not any(f.get("closed") == s for f in w.rest())
    assert w.wait() == 0


def test_eof_closes_every_open_session_and_exits_0(wire: Any, dir: str) -> None:
    w = wire("turn")
    w.next("hello")
    a = w.open(1, dir)
    b = w.open(2, dir)
    w.send({"id": 3, "cmd": "prompt", "session": a, "text": "hi"})
    w.reply(3)
    w.send({"id": 4, "cmd": "open", "agent": "mock", "dir": dir})
    w.hang_up()
    frames = w.rest(timeout=8)
    opened = [f["ok"]["id"] for f in frames if f.get("id") == 4 and "ok" in f]
    closed = [f["closed"] for f in frames if "closed" in f]
    # The open still in flight at EOF is answered, then closed like the others.
    assert len(opened) == 1, frames
    assert sorted(closed) == sorted([a, b, *opened]), frames
    for sid in closed:  # nothing for a session after its closed
        at = next(i for i, f in enumerate(frames) if f.get("closed") == sid)
        assert not any(
            f.get("event", {}).get("session_id") == sid for f in frames[at + 1:]
        ), frames
    assert w.wait(5) == 0
