"""The synchronous Python client ``agentproto.client`` against real ``serve`` processes.

Each test starts ``python -m agentproto serve`` (over a mock script) through
``Runtime.start`` and checks one rule of anyagent's "Writing a wrapper": the hello check,
registration inside the reader, live ``info``/``status``, a session error raising then
ending the iterator, process death failing every pending call and iterator with
``ProcessExited``, graceful idempotent close, the 4096-event queue cap, errors keeping
their fields. Timeouts here are hang guards only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from sidecar import base_env, script

from agentproto import __version__
from agentproto.client import QUEUE_CAP, AgentProtoError, Runtime, Session, kind_of

GUARD = 20.0  # seconds: a hang guard, never a timing assertion
END = {"End": {"Completed": {"source": "Protocol"}}}


def text(t: str, message: str = "m1") -> dict[str, Any]:
    return {"Emit": {"TextDelta": {"message_id": message, "text": t}}}


@pytest.fixture
def start() -> Iterator[Callable[..., Runtime]]:
    """``start(script_name_or_path=None, **kwargs)``: a Runtime closed at the end of the test."""
    started: list[Runtime] = []

    def _start(mock: str | dict[str, Any] | None = None, **kwargs: Any) -> Runtime:
        if isinstance(mock, str) and not os.path.isabs(mock):
            mock = script(mock)
        kwargs.setdefault("env", base_env())
        rt = Runtime.start(mock=mock, **kwargs)
        started.append(rt)
        return rt

    yield _start
    for rt in started:
        rt.close()
        assert rt.proc.poll() is not None


def write_script(tmp_path: Path, body: dict[str, Any], name: str = "script.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


def executable(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def until(session: Session, kind: str, match: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
    """This session's events up to and including the first of ``kind`` (matching ``match``)."""
    out = []
    for event in session.events(timeout=GUARD):
        out.append(event)
        if kind_of(event) == kind and (match is None or match(event)):
            return out
    raise AssertionError(f"the session ended before {kind}: {[kind_of(e) for e in out]}")


def body(event: dict[str, Any]) -> Any:
    return event["kind"][kind_of(event)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.01)


# -- start and the hello -------------------------------------------------------------------


def test_start_checks_the_hello(start: Callable[..., Runtime]) -> None:
    rt = start()
    assert rt.hello["protocol"] == 1 and rt.hello["agentproto"] == __version__
    assert rt.proc.poll() is None


@pytest.mark.parametrize("first_line", ["garbage, not a frame", '{"hello": {"protocol": 2}}', "[1, 2]"])
def test_a_bad_hello_fails_start_and_leaves_no_process(tmp_path: Path, first_line: str) -> None:
    pidfile = tmp_path / "pid"
    bin = executable(tmp_path, "not-agentproto", f"#!/bin/sh\necho $$ > {pidfile}\necho '{first_line}'\nexec sleep 60\n")
    with pytest.raises(AgentProtoError) as caught:
        Runtime.start(bin=bin, start_timeout=GUARD)
    assert caught.value.kind == "ProtocolFailed"
    assert first_line[:20] in caught.value.message
    assert gone(int(pidfile.read_text()))


def test_cat_is_not_a_sidecar() -> None:
    """cat exits at once, saying why on stderr: that is the error's message."""
    cat = shutil.which("cat")
    assert cat is not None
    with pytest.raises(AgentProtoError) as caught:
        Runtime.start(bin=cat, start_timeout=GUARD)
    assert caught.value.kind == "ProcessExited" and caught.value.status == "1"
    assert caught.value.message == f"the sidecar exited (status 1) before its hello: {cat}: serve: No such file or directory"


def test_a_sidecar_that_cannot_start_says_why(tmp_path: Path) -> None:
    """Its own one-line reason (``cannot read mock script``), not "first line was (nothing)"."""
    with pytest.raises(AgentProtoError) as caught:
        Runtime.start(mock=str(tmp_path / "missing.json"), start_timeout=GUARD)
    assert caught.value.kind == "ProcessExited" and caught.value.status == "1"
    assert caught.value.message.endswith(f"cannot read mock script {tmp_path / 'missing.json'}: No such file or directory")
    assert "cannot read mock script" in caught.value.stderr


def test_a_silent_bin_fails_start_after_the_timeout(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    bin = executable(tmp_path, "silent", f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    with pytest.raises(AgentProtoError) as caught:
        Runtime.start(bin=bin, start_timeout=0.5)
    assert caught.value.kind == "ProtocolFailed"
    assert gone(int(pidfile.read_text()))


def test_a_missing_bin_is_spawn_failed(tmp_path: Path) -> None:
    with pytest.raises(AgentProtoError) as caught:
        Runtime.start(bin=str(tmp_path / "nowhere"))
    assert caught.value.kind == "SpawnFailed"


# -- a turn --------------------------------------------------------------------------------


def test_open_prompt_events_answer(start: Callable[..., Runtime]) -> None:
    rt = start("turn")
    session = rt.open("mock", dir=".")
    assert session.id and session.status == "Idle" and session.info["agent"]["id"] == "mock"
    delivery = session.prompt("run the tests")
    assert kind_of(delivery) == "Started"
    events = until(session, "RequestOpened")
    request = body(events[-1])["Permission"]
    assert request["id"] == "r1" and request["tool"]["title"] == "cargo test"
    with pytest.raises(AgentProtoError) as caught:
        session.answer("r1", {"Permission": "AllowAlways"})  # not offered
    assert caught.value.kind == "InvalidRequest"
    session.answer("r1", {"Permission": "AllowOnce"})
    events += until(session, "StatusChanged", lambda e: body(e) == "Idle")
    names = [kind_of(e) for e in events]
    assert names[0] == "TurnStarted"
    assert [body(e)["text"] for e in events if kind_of(e) == "TextDelta"] == ["Let me check. ", "Done."]
    assert names.index("RequestOpened") < names.index("RequestClosed") < names.index("TurnEnded")
    ended = body(events[names.index("TurnEnded")])
    assert ended["stop"] == {"Completed": {"source": "Protocol"}}
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert session.status == "Idle"
    session.close()


def test_info_and_status_stay_live(start: Callable[..., Runtime]) -> None:
    rt = start("configure")
    session = rt.open("mock", dir=".")
    assert session.info["configuration"]["options"] == {"model": "sonnet"}
    session.configure("model", "opus")
    until(session, "SessionUpdated")
    assert session.info["configuration"]["options"] == {"model": "opus"}
    assert session.info["details"]["config_options"][0]["current"] == "opus"
    assert session.refresh()["configuration"] == session.info["configuration"]
    with pytest.raises(AgentProtoError) as caught:
        session.configure("model", "gpt")
    assert caught.value.kind == "InvalidConfiguration"
    session.prompt("one")
    until(session, "StatusChanged", lambda e: body(e) == "Idle")
    assert session.status == "Idle"
    # The script has one turn: the second never ends by itself, so Working stays current.
    session.prompt("two")
    until(session, "StatusChanged", lambda e: body(e) == "Working")
    assert session.status == "Working"
    session.cancel()
    events = until(session, "StatusChanged", lambda e: body(e) == "Idle")
    assert {"TurnEnded": {"stop": "Cancelled", "background": [], "usage": None}} in [e["kind"] for e in events]
    assert session.status == "Idle"


# -- errors, closed, death -----------------------------------------------------------------


def test_a_session_error_raises_then_the_iterator_ends(start: Callable[..., Runtime]) -> None:
    rt = start("die")
    session = rt.open("mock", dir=".")
    session.prompt("hi")
    seen = []
    iterator = session.events(timeout=GUARD)
    with pytest.raises(AgentProtoError) as caught:
        for event in iterator:
            seen.append(event)
    error = caught.value
    assert error.kind == "ProcessExited" and error.status == "9" and error.stderr == "mock died"
    assert error.body == {"kind": "ProcessExited", "message": error.message, "status": "9", "stderr": "mock died"}
    ended = [body(e) for e in seen if kind_of(e) == "TurnEnded"]
    assert len(ended) == 1 and "Failed" in ended[0]["stop"]
    with pytest.raises(StopIteration):
        next(iterator)
    assert list(session.events(timeout=GUARD)) == []
    session.close()
    session.close()
    with pytest.raises(AgentProtoError) as caught:
        session.prompt("again")
    assert caught.value.kind in ("SessionClosed", "UnknownSession")


def test_closed_ends_the_iterator_and_close_is_idempotent(start: Callable[..., Runtime]) -> None:
    rt = start("turn")
    session = rt.open("mock", dir=".")
    other = rt.open("mock", dir=".")
    session.close()
    assert list(session.events(timeout=GUARD)) == []
    session.close()
    session.close()
    with pytest.raises(AgentProtoError) as caught:
        session.prompt("x")
    assert caught.value.kind == "SessionClosed" and caught.value.detail == session.id
    other.prompt("still here")  # the runtime and its other sessions go on
    assert kind_of(until(other, "RequestOpened")[-1]) == "RequestOpened"


def test_process_death_fails_every_pending_call_and_iterator(start: Callable[..., Runtime], tmp_path: Path) -> None:
    # steer without an ack: a prompt during the turn stays pending until the sidecar dies.
    path = write_script(tmp_path, {"steer": True, "steer_ack": False, "turns": [[text("working"), "AwaitAnswer", END]]})
    rt = start(path)
    busy = rt.open("mock", dir=".")
    idle = rt.open("mock", dir=".")
    busy.prompt("first")
    until(busy, "TextDelta")

    outcomes: dict[str, Any] = {}

    def run(name: str, fn: Callable[[], Any]) -> threading.Thread:
        def target() -> None:
            try:
                outcomes[name] = fn()
            except BaseException as exc:  # noqa: BLE001 - the outcome is what the test checks
                outcomes[name] = exc

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    threads = [
        run("steer", lambda: busy.prompt("second")),
        run("busy events", lambda: list(busy.events())),
        run("idle events", lambda: list(idle.events())),
    ]
    wait_until(lambda: len(rt._calls) == 1, "the steer is pending")
    os.kill(rt.proc.pid, signal.SIGKILL)
    for thread in threads:
        thread.join(GUARD)
        assert not thread.is_alive(), "hang guard"
    for name in ("steer", "busy events", "idle events"):
        error = outcomes[name]
        assert isinstance(error, AgentProtoError) and error.kind == "ProcessExited", (name, error)
        assert error.status == str(-signal.SIGKILL) and isinstance(error.stderr, str)
    # Later calls fail the same way, at once; closing is still quiet.
    with pytest.raises(AgentProtoError) as caught:
        rt.discover()
    assert caught.value.kind == "ProcessExited"
    with pytest.raises(AgentProtoError):
        idle.prompt("x")
    assert list(busy.events(timeout=GUARD)) == []
    busy.close()
    assert rt.close() == -signal.SIGKILL
    assert rt.close() == -signal.SIGKILL


def test_process_exited_carries_the_status_and_the_last_stderr(tmp_path: Path) -> None:
    bin = executable(
        tmp_path,
        "crashing",
        f"#!{sys.executable}\nimport sys\nprint('{{\"hello\": {{\"protocol\": 1}}}}', flush=True)\n"
        "sys.stdin.readline()\nsys.stderr.write('Traceback: boom\\n')\nsys.exit(3)\n",
    )
    rt = Runtime.start(bin=bin, start_timeout=GUARD)
    with pytest.raises(AgentProtoError) as caught:
        rt.discover()
    assert caught.value.kind == "ProcessExited" and caught.value.status == "3"
    assert "Traceback: boom" in caught.value.stderr
    assert rt.close() == 3


def test_runtime_close_is_graceful_and_idempotent(start: Callable[..., Runtime]) -> None:
    rt = start("turn")
    session = rt.open("mock", dir=".")
    session.prompt("x")
    until(session, "RequestOpened")
    seen: list[Any] = []
    reader = threading.Thread(target=lambda: seen.extend(session.events()), daemon=True)
    reader.start()
    assert rt.close() == 0  # EOF: the sidecar closes its sessions and exits 0
    reader.join(GUARD)
    assert not reader.is_alive()
    assert all(isinstance(e, dict) for e in seen)  # ended by `closed`, no error
    assert rt.close() == 0
    session.close()
    with pytest.raises(AgentProtoError) as caught:
        rt.discover()
    assert caught.value.kind == "ProcessExited"


def test_runtime_close_kills_a_sidecar_that_ignores_eof(tmp_path: Path) -> None:
    bin = executable(
        tmp_path,
        "stubborn",
        f"#!{sys.executable}\nimport signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        'print(\'{"hello": {"protocol": 1}}\', flush=True)\nsys.stdin.read()\ntime.sleep(60)\n',
    )
    rt = Runtime.start(bin=bin, start_timeout=GUARD)
    assert rt.close(timeout=0.5) == -signal.SIGKILL
    assert rt.close() == -signal.SIGKILL


# -- the queue cap -------------------------------------------------------------------------


def test_a_lagging_consumer_loses_its_session_not_the_others(start: Callable[..., Runtime]) -> None:
    rt = start("flood")  # 20,000 TextDeltas, paced
    lagging = rt.open("mock", dir=".")
    working = rt.open("mock", dir=".")
    lagging.prompt("flood, unread")
    working.prompt("flood, read")
    deltas = 0
    for event in working.events(timeout=GUARD):
        if kind_of(event) == "TextDelta":
            deltas += 1
        if kind_of(event) == "TurnEnded":
            assert body(event)["stop"] == {"Completed": {"source": "Protocol"}}
            break
    assert deltas == 20_000
    delivered = 0
    with pytest.raises(AgentProtoError) as caught:
        for _event in lagging.events(timeout=GUARD):
            delivered += 1
    assert caught.value.kind == "ConsumerLagged" and caught.value.session == lagging.id
    assert delivered == QUEUE_CAP == 4096
    assert list(lagging.events(timeout=GUARD)) == []
    lagging.close()  # the client closed it already: quiet
    with pytest.raises(AgentProtoError) as closed:
        lagging.prompt("x")
    assert closed.value.kind in ("SessionClosed", "UnknownSession")
    assert working.refresh()["status"] == "Idle"


# -- errors keep their fields --------------------------------------------------------------


def test_errors_keep_kind_message_and_every_field(start: Callable[..., Runtime], tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    rt = start(env=base_env({"PATH": str(empty), "HOME": str(tmp_path)}))
    with pytest.raises(AgentProtoError) as caught:
        rt.open("claude", dir=".")
    error = caught.value
    assert error.kind == "NotInstalled" and error.agent == "claude" and error.fields == {"agent": "claude"}
    assert "npm install" in error.message
    assert error.body == {"kind": "NotInstalled", "message": error.message, "agent": "claude"}
    with pytest.raises(AgentProtoError) as caught:
        Session(rt, {"id": "s999"}).prompt("x")
    assert caught.value.kind == "UnknownSession" and caught.value.session == "s999"
    assert caught.value.body == {"kind": "UnknownSession", "message": caught.value.message, "session": "s999"}
    with pytest.raises(AttributeError):
        caught.value.no_such_field  # noqa: B018


# -- the runtime's own commands --------------------------------------------------------------


def test_generate_probe_discover_plan_usage(start: Callable[..., Runtime], tmp_path: Path) -> None:
    rt = start(write_script(tmp_path, {"options": json.loads(Path(script("configure")).read_text())["options"],
                                       "turns": [[text("A "), text("title"), END]]}))
    assert rt.generate("mock", "name this diff") == "A title"
    details = rt.probe("mock")
    assert details["version"] == "mock" and details["config_options"][0]["id"] == "model"
    report = rt.discover()
    assert [a["id"] for a in report["agents"]] == ["mock"] and report["missing"] == []
    with pytest.raises(AgentProtoError) as caught:
        rt.plan_usage("mock")
    assert caught.value.kind == "UnsupportedFeature" and caught.value.detail == "plan usage"
    with pytest.raises(AgentProtoError) as caught:
        rt.probe("no-such-agent")
    assert caught.value.kind == "NotInstalled" and caught.value.agent == "no-such-agent"
    echo = start()  # the built-in echo agent
    assert echo.generate("mock", "title for this diff") == "title for this diff"


# -- registration inside the reader --------------------------------------------------------


def test_events_right_after_the_open_reply_are_never_lost(tmp_path: Path) -> None:
    """A sidecar that writes the open reply and the session's first events in one write:
    the session is registered before the reader reads the next line."""
    fake = executable(
        tmp_path,
        "eager",
        f"#!{sys.executable}\nimport json, sys\n"
        'print(json.dumps({"hello": {"protocol": 1}}), flush=True)\n'
        "for line in sys.stdin:\n"
        "    cmd = json.loads(line)\n"
        '    if cmd["cmd"] != "open":\n'
        '        print(json.dumps({"id": cmd["id"], "ok": None}), flush=True)\n'
        "        continue\n"
        '    info = {"id": "s1", "status": "Idle"}\n'
        '    out = [{"id": cmd["id"], "ok": info}]\n'
        "    for n in range(1, 4):\n"
        '        out.append({"event": {"sequence": n, "session_id": "s1", "turn_info": None,\n'
        '                              "kind": {"Diagnostic": {"level": "Info", "message": str(n)}}, "extensions": {}}})\n'
        '    out.append({"closed": "s1"})\n'
        '    sys.stdout.write("".join(json.dumps(o) + "\\n" for o in out))\n'
        "    sys.stdout.flush()\n",
    )
    rt = Runtime.start(bin=fake, start_timeout=GUARD)
    try:
        session = rt.open("mock", dir=".")
        assert [body(e)["message"] for e in session.events(timeout=GUARD)] == ["1", "2", "3"]
    finally:
        assert rt.close() == 0


def test_an_agent_that_speaks_first_loses_nothing(start: Callable[..., Runtime], tmp_path: Path) -> None:
    """The prompted turn ends at once and the agent opens a turn of its own."""
    path = write_script(tmp_path, {
        "stale_before_ack": {"Diagnostic": {"level": "Info", "message": "late note"}},
        "turns": [[END, text("I speak first", "m2"), END]],
    })
    rt = start(path)
    session = rt.open("mock", dir=".")
    session.prompt("go")
    events = until(session, "TurnEnded")
    events += until(session, "TurnEnded")
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    started = [body(e)["origin"] for e in events if kind_of(e) == "TurnStarted"]
    assert len(started) == 2 and "Prompt" in started[0] and started[1] == "Agent"
    assert {"Diagnostic": {"level": "Info", "message": "late note"}} in [e["kind"] for e in events]
    assert [body(e)["text"] for e in events if kind_of(e) == "TextDelta"] == ["I speak first"]


# -- kind_of and timeouts ------------------------------------------------------------------


def test_kind_of_string_and_object_kinds(start: Callable[..., Runtime], tmp_path: Path) -> None:
    assert kind_of({"kind": "ContextCompacted"}) == "ContextCompacted"
    assert kind_of({"kind": {"TextDelta": {"message_id": "m", "text": "t"}}}) == "TextDelta"
    assert kind_of("ContextCompacted") == "ContextCompacted"
    assert kind_of({"StatusChanged": "Idle"}) == "StatusChanged"
    rt = start(write_script(tmp_path, {"compact": True, "turns": []}))
    session = rt.open("mock", dir=".")
    session.compact()
    events = until(session, "TurnEnded")
    compacted = [e for e in events if kind_of(e) == "ContextCompacted"]
    assert len(compacted) == 1 and compacted[0]["kind"] == "ContextCompacted"


def test_events_timeout_raises_timeout_error(start: Callable[..., Runtime]) -> None:
    rt = start("configure")
    session = rt.open("mock", dir=".")
    with pytest.raises(TimeoutError):
        next(session.events(timeout=0.2))
    session.prompt("now")  # a new iterator after a timeout reads on
    assert [body(e)["text"] for e in until(session, "TurnEnded") if kind_of(e) == "TextDelta"] == ["hi"]


def test_answer_tool_builds_the_tool_result(start: Callable[..., Runtime]) -> None:
    rt = start("tools")
    lookup = {"name": "lookup", "description": "", "input_schema": {"type": "object"}}
    session = rt.open("mock", dir=str(Path.cwd()), tools=[lookup])
    assert session.tools_url is not None and session.tools_url.endswith("/mcp/agentproto")
    session.prompt("go")
    for event in session.events(timeout=GUARD):
        kind = kind_of(event)
        if kind == "RequestOpened":
            call = event["kind"]["RequestOpened"]["ToolCall"]
            with pytest.raises(AgentProtoError) as refused:  # a non-object structured: refused, still open
                session.answer(call["id"], {"ToolResult": {"content": [], "is_error": False, "structured": [1]}})
            assert refused.value.kind == "InvalidRequest"
            session.answer_tool(call["id"], "ok", content=[{"type": "text", "text": "more"}], is_error=True, structured={"n": 1})
        elif kind == "ToolUpdated" and event["kind"]["ToolUpdated"]["status"] != "Running":
            assert event["kind"]["ToolUpdated"]["status"] == "Failed"  # is_error
            assert event["kind"]["ToolUpdated"]["output"] == "ok\nmore"
        elif kind == "TurnEnded":
            break


def test_a_misspelt_keyword_is_a_type_error_naming_it_and_the_valid_ones(start: Callable[..., Runtime]) -> None:
    rt = start()
    with pytest.raises(TypeError) as caught:
        rt.open("mock", dir=".", permision_mode="Ask")
    message = str(caught.value)
    assert message.startswith("open() got an unexpected keyword argument 'permision_mode' (did you mean 'permission_mode'?)")
    assert "permission_mode, policy, record_wire" in message and "tools" in message
    for call in (
        lambda: rt.generate("mock", "x", dir=".", promt="y"),
        lambda: rt.probe("mock", enviroment={}),
        lambda: rt.plan_usage("mock", nonsense=1),
    ):
        with pytest.raises(TypeError):
            call()
    # Nothing was sent: the sidecar has no session, and the spelt-right call works.
    session = rt.open("mock", dir=".", permission_mode="Ask")
    assert session.id == "s1"


def test_mock_may_be_the_script_itself(start: Callable[..., Runtime]) -> None:
    rt = start({"turns": [[text("scripted"), END]]})
    assert rt.generate("mock", "anything", dir=".") == "scripted"
    where = rt._script_dir
    assert where is not None and os.path.exists(where) and stat_mode(where) == 0o700
    rt.close()
    assert not os.path.exists(where)


def stat_mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777
