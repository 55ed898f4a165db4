"""``python -m agentproto serve`` end to end, in raw frames (tests/fakes/sidecar.py).

Every guarantee of protocol 1 (issue 2) has a test here. Besides each test's own
assertions, ``finish()`` closes stdin, reads every remaining line, requires exit 0, and
checks the whole transcript against the ordering rules that hold for every session:
hello first; the ``ok`` reply to ``open`` before the session's first event; ``sequence``
from 1 with no gap; each turn opens with TurnStarted and ends with TurnEnded followed by
StatusChanged "Idle" or the next TurnStarted; events inside a turn carry its id; a session
error comes with no turn running and only bookkeeping after it; exactly one ``closed``,
last. Every line is also validated against agentproto/schema.json and the reference
``Line`` by the helper (sampled for floods).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sidecar import (
    ROOT,
    SCRIPTS,
    Sidecar,
    base_env,
    check_line,
    kind_name,
    kinds,
    script,
)

from agentproto import __version__
from agentproto.drivers.mock import MockDriver

REFERENCE = json.loads((ROOT / "fixtures" / "anyagent-schema.json").read_text())
OURS = json.loads((ROOT / "agentproto" / "schema.json").read_text())


def reference_type(definition: str, schema: dict[str, Any] = REFERENCE) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]})


def assert_is(definition: str, value: Any) -> None:
    errors = list(reference_type(definition).iter_errors(value))
    assert not errors, f"not a reference {definition}: {errors[0].message}\n{json.dumps(value)[:1000]}"


BOOKKEEPING = {"StatusChanged", "SessionUpdated", "RequestClosed", "MessageEnded", "Diagnostic"}
DIR = str(ROOT)


# -- the harness ------------------------------------------------------------------------


class Serve(Sidecar):
    """The helper's Sidecar, remembering every command sent (to find the ``open`` replies),
    and optionally validating only a sample of TextDelta lines (floods)."""

    def __init__(self, args: Iterable[str] = (), sample: int | None = None, **kwargs: Any) -> None:
        self.sent: dict[int, dict[str, Any]] = {}
        self.sample = sample
        self._deltas = 0
        if sample is not None:
            kwargs["validate"] = False
        super().__init__(args, **kwargs)

    def send(self, cmd: dict[str, Any]) -> int:
        frame_id = super().send(cmd)
        self.sent[frame_id] = cmd
        return frame_id

    def next_line(self, timeout: float = 10.0) -> Any:
        fresh = not self.backlog
        line = super().next_line(timeout)
        if fresh and self.sample is not None:
            delta = "event" in line and kind_name(line["event"]["kind"]) == "TextDelta"
            if delta:
                self._deltas += 1
            if not delta or self._deltas % self.sample == 0:
                check_line(line, self.reference)
        return line

    def prompt(self, session: str, text: str = "go") -> dict[str, Any]:
        return self.ok({"cmd": "prompt", "session": session, "text": text})

    def answer(self, session: str, request: str, answer: Any) -> Any:
        return self.reply(self.send({"cmd": "answer", "session": session, "request": request, "answer": answer}))


def write_script(tmp_path: Path, body: dict[str, Any], name: str = "script") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(body))
    return str(path)


def load(name: str) -> dict[str, Any]:
    return json.loads((SCRIPTS / f"{name}.json").read_text())


def events_of(lines: list[Any], session: str) -> list[dict[str, Any]]:
    return [l["event"] for l in lines if "event" in l and l["event"]["session_id"] == session]


def body(event: dict[str, Any]) -> Any:
    kind = event["kind"]
    return kind[kind_name(kind)] if isinstance(kind, dict) else None


def index_of(lines: list[Any], match: Callable[[Any], bool]) -> int:
    for i, line in enumerate(lines):
        if match(line):
            return i
    raise AssertionError("no such line")


def check_transcript(sc: Serve, ended: bool = True, unopened: Iterable[str] = ()) -> None:
    """The ordering rules that hold for every session, over everything the sidecar wrote."""
    lines = sc.seen
    assert "hello" in lines[0], "the hello line comes first"
    assert not any("hello" in l for l in lines[1:])
    opened: dict[str, int] = {}
    for i, line in enumerate(lines):
        if "ok" in line and sc.sent.get(line["id"], {}).get("cmd") == "open":
            assert line["ok"]["id"] not in opened, "session ids are unique"
            opened[line["ok"]["id"]] = i
    mentioned = {l["event"]["session_id"] for l in lines if "event" in l}
    mentioned |= {l["closed"] for l in lines if "closed" in l}
    mentioned |= {l["session"] for l in lines if "session" in l and "error" in l}
    assert mentioned <= set(opened) | set(unopened), f"frames for sessions never opened: {mentioned - set(opened)}"
    for session in set(opened) | (mentioned & set(unopened)):
        start = opened.get(session, 0)
        own = [(i, l) for i, l in enumerate(lines) if
               ("event" in l and l["event"]["session_id"] == session)
               or l.get("closed") == session
               or ("error" in l and l.get("session") == session)]
        closed = [i for i, l in own if "closed" in l]
        errors = [i for i, l in own if "error" in l]
        assert len(closed) == (1 if ended else len(closed)) and len(closed) <= 1, f"{session}: closed {len(closed)} times"
        assert len(errors) <= 1, f"{session}: more than one session error"
        if closed:
            assert own[-1][0] == closed[0], f"{session}: frames after closed"
        events = [(i, l["event"]) for i, l in own if "event" in l]
        assert all(i > start for i, _ in events), f"{session}: an event before the open reply"
        assert [e["sequence"] for _, e in events] == list(range(1, len(events) + 1)), f"{session}: sequence gap"
        current: str | None = None
        for n, (i, event) in enumerate(events):
            name = kind_name(event["kind"])
            info = event["turn_info"]
            if errors and i > errors[0]:
                assert name in BOOKKEEPING, f"{session}: {name} after the session error"
            if name == "TurnStarted":
                assert current is None, f"{session}: TurnStarted inside turn {current}"
                assert info is not None
                current = info["id"]
            elif current is not None:
                assert info is not None and info["id"] == current, f"{session}: {name} outside its turn"
            else:
                assert info is None, f"{session}: {name} carries a turn when none runs"
            if name == "TurnEnded":
                current = None
                if n + 1 < len(events):
                    after = events[n + 1][1]["kind"]
                    assert after == {"StatusChanged": "Idle"} or kind_name(after) == "TurnStarted", (
                        f"{session}: TurnEnded followed by {after}"
                    )
                else:
                    assert not ended, f"{session}: the last TurnEnded is not followed by a status"
        if errors:
            at_error = [e for i, e in events if i < errors[0]]
            running = None
            for e in at_error:
                name = kind_name(e["kind"])
                running = e["turn_info"]["id"] if name == "TurnStarted" else (None if name == "TurnEnded" else running)
            assert running is None, f"{session}: the session error came while turn {running} ran"
        if ended:
            assert current is None, f"{session}: closed with turn {current} still running"


def finish(sc: Serve, unopened: Iterable[str] = (), timeout: float = 20.0) -> list[Any]:
    """EOF, every remaining line, exit 0, and the transcript rules."""
    sc.close_stdin()
    rest = sc.drain(timeout)
    assert sc.proc.wait(timeout) == 0, sc.stderr
    check_transcript(sc, ended=True, unopened=unopened)
    return rest


# -- hello, every command ---------------------------------------------------------------


def test_hello_is_the_first_line() -> None:
    with Serve() as sc:
        assert sc.hello == {"hello": {"protocol": 1, "agentproto": __version__, "anyagent": sc.hello["hello"]["anyagent"]}}
        assert sc.seen[0] is sc.hello
        finish(sc)


def test_every_command_on_the_builtin_echo_agent() -> None:
    with Serve() as sc:
        report = sc.ok({"cmd": "discover"})
        assert_is("DiscoveryReport", report)
        details = sc.ok({"cmd": "probe", "agent": "mock"})
        assert_is("AgentDetails", details)
        assert details["version"] == "mock"
        assert sc.error({"cmd": "plan_usage", "agent": "mock"})["kind"] == "UnsupportedFeature"
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": DIR})
        assert_is("SessionInfo", info)
        s = info["id"]
        assert info["agent"]["id"] == "mock" and info["status"] == "Idle"
        delivery = sc.prompt(s, "hello big world")
        assert_is("Delivery", delivery)
        assert "Started" in delivery["kind"]
        events = sc.events(s)
        text = "".join(body(e)["text"] for e in events if kind_name(e["kind"]) == "TextDelta")
        assert text == "hello big world"
        assert body(events[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        assert sc.events(s, "StatusChanged")[-1]["kind"] == {"StatusChanged": "Idle"}
        assert_is("SessionInfo", sc.ok({"cmd": "info", "session": s}))
        assert sc.error({"cmd": "configure", "session": s, "option": "model", "value": "x"})["kind"] == "InvalidConfiguration"
        assert sc.ok({"cmd": "cancel", "session": s}) is None
        assert sc.error({"cmd": "rollback", "session": s, "turns": 1, "scope": "Conversation"})["kind"] == "UnsupportedFeature"
        assert sc.error({"cmd": "dequeue", "session": s, "prompt": "p9"})["kind"] == "InvalidRequest"
        assert sc.error({"cmd": "compact", "session": s})["kind"] == "UnsupportedFeature"
        error = sc.error({"cmd": "answer", "session": s, "request": "r9", "answer": {"Permission": "AllowOnce"}})
        assert error["kind"] == "InvalidRequest"
        assert sc.ok({"cmd": "generate", "agent": "mock", "dir": DIR, "prompt": "a short title"}) == "a short title"
        assert sc.ok({"cmd": "close", "session": s}) is None
        assert sc.wait_for(lambda l: l.get("closed") == s)
        finish(sc)
        assert not any("event" in l and l["event"]["session_id"] != s for l in sc.seen), "throwaway sessions stay hidden"
        assert [l["closed"] for l in sc.seen if "closed" in l] == [s]


def test_agent_references_and_launch_errors(tmp_path: Path) -> None:
    with Serve() as sc:
        error = sc.error({"cmd": "open", "agent": "no-such-agent", "dir": DIR})
        assert error["kind"] == "NotInstalled" and error["agent"] == "no-such-agent"
        error = sc.error({"cmd": "open", "agent": {"id": "claude", "path": str(tmp_path / "missing")}, "dir": DIR})
        assert error["kind"] == "NotInstalled" and error["agent"] == "claude"
        error = sc.error({"cmd": "open", "agent": {"acp": {"name": "x", "path": str(tmp_path / "nope"), "args": []}}, "dir": DIR})
        assert error["kind"] == "NotInstalled"
        error = sc.error({"cmd": "open", "agent": "mock", "dir": str(tmp_path / "not-a-dir")})
        assert error["kind"] == "InvalidConfiguration"
        # the newer SessionOptions members are accepted
        s = sc.open(instructions="be brief", env={"A": "b"}, args=["--x"], config_home=str(tmp_path),
                    record_wire=str(tmp_path / "wire.jsonl"), permission_mode="AcceptEdits", output_schema={"type": "object"})
        assert sc.ok({"cmd": "probe", "agent": "mock"})["version"] == "mock"  # dir defaults to a temp dir
        assert sc.ok({"cmd": "info", "session": s})["id"] == s
        finish(sc)


# -- ordering and concurrency -------------------------------------------------------------


def test_sessions_interleave_and_one_waiting_turn_stalls_nothing() -> None:
    """A turn waiting for an answer holds up neither another session nor the app's commands."""
    with Serve(["--mock", script("turn")]) as sc:
        a, b = sc.open(), sc.open()
        sc.prompt(a)
        sc.events(a, "RequestOpened")
        sc.prompt(b)
        sc.events(b, "RequestOpened")
        sc.answer(b, "r1", {"Permission": "AllowOnce"})
        ended_b = sc.events(b)
        assert kinds(ended_b)[-1] == "TurnEnded"
        assert sc.ok({"cmd": "info", "session": a})["status"] == "NeedsInput"
        sc.answer(a, "r1", {"Permission": "DenyOnce"})
        sc.events(a)
        lines = finish(sc)
        assert lines is not None
        ia = index_of(sc.seen, lambda l: "event" in l and l["event"]["session_id"] == a and kind_name(l["event"]["kind"]) == "TurnEnded")
        ib = index_of(sc.seen, lambda l: "event" in l and l["event"]["session_id"] == b and kind_name(l["event"]["kind"]) == "TurnEnded")
        assert ib < ia


def test_many_sessions_pipelined() -> None:
    """Commands are pipelined without waiting for replies; each stream stays whole and ordered."""
    with Serve(["--mock", script("chatter")]) as sc:
        opens = [sc.send({"cmd": "open", "agent": "mock", "dir": DIR}) for _ in range(12)]
        sessions = [sc.reply(i)["ok"]["id"] for i in opens]
        assert len(set(sessions)) == 12
        prompts = [sc.send({"cmd": "prompt", "session": s, "text": "go"}) for s in sessions]
        for i in prompts:
            assert "Started" in sc.reply(i)["ok"]["kind"]
        for s in sessions:
            texts = [body(e)["text"] for e in sc.events(s) if kind_name(e["kind"]) == "TextDelta"]
            assert texts == ["one", "two", "three"]
        finish(sc)


def test_slow_commands_do_not_stall_others(tmp_path: Path) -> None:
    """An agent that ignores close makes close and probe take the 5 s grace; meanwhile another
    session's prompt is answered and its turn runs to the end."""
    path = write_script(tmp_path, {"ignore_close": True, "turns": [[
        {"Emit": {"TextDelta": {"message_id": "m1", "text": "hi"}}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]]})
    with Serve(["--mock", path]) as sc:
        a, b = sc.open(), sc.open()
        close_a = sc.send({"cmd": "close", "session": a})
        probe = sc.send({"cmd": "probe", "agent": "mock"})
        prompt_b = sc.send({"cmd": "prompt", "session": b, "text": "go"})
        sc.reply(prompt_b)
        sc.events(b)
        info_b = sc.ok({"cmd": "info", "session": b})
        assert info_b["id"] == b
        assert not any(l.get("id") in (close_a, probe) for l in sc.seen), "the slow replies came first"
        close_b = sc.send({"cmd": "close", "session": b})  # also slow: overlaps with the others
        assert sc.reply(close_a, timeout=20)["ok"] is None
        assert sc.reply(probe, timeout=20)["ok"]["version"] == "mock"
        i_close = index_of(sc.seen, lambda l: l.get("id") == close_a)
        i_turn = index_of(sc.seen, lambda l: "event" in l and l["event"]["session_id"] == b and kind_name(l["event"]["kind"]) == "TurnEnded")
        assert i_turn < i_close, "replies come out of order"
        assert sc.reply(close_b, timeout=20)["ok"] is None
        assert sc.wait_for(lambda l: l.get("closed") == a)
        finish(sc, timeout=30)


# -- session errors, closing, EOF, signals ------------------------------------------------


def test_die_session_error_after_failed_turn_then_one_closed() -> None:
    with Serve(["--mock", script("die")]) as sc:
        s = sc.open()
        sc.prompt(s)
        events = sc.events(s)
        assert [body(e)["text"] for e in events if kind_name(e["kind"]) == "TextDelta"] == ["hi"]
        assert "Failed" in body(events[-1])["stop"]
        error = sc.wait_for(lambda l: l.get("session") == s and "error" in l)["error"]
        assert error["kind"] == "ProcessExited" and error["status"] == "9" and error["stderr"] == "mock died"
        sc.wait_for(lambda l: l.get("closed") == s)
        i_end = index_of(sc.seen, lambda l: "event" in l and kind_name(l["event"]["kind"]) == "TurnEnded")
        i_err = index_of(sc.seen, lambda l: l.get("session") == s)
        i_closed = index_of(sc.seen, lambda l: l.get("closed") == s)
        assert i_end < i_err < i_closed
        for cmd in ({"cmd": "prompt", "session": s, "text": "x"}, {"cmd": "info", "session": s}, {"cmd": "close", "session": s}):
            assert sc.error(cmd)["kind"] == "SessionClosed"
        other = sc.open()  # the sidecar and other sessions live on
        sc.prompt(other)
        assert "Failed" in body(sc.events(other)[-1])["stop"]
        finish(sc)


def test_unknown_session_and_session_closed() -> None:
    session_commands = [
        {"cmd": "prompt", "text": "x"},
        {"cmd": "answer", "request": "r1", "answer": "Cancel"},
        {"cmd": "configure", "option": "model", "value": "opus"},
        {"cmd": "cancel"},
        {"cmd": "rollback", "turns": 1, "scope": "Conversation"},
        {"cmd": "dequeue", "prompt": "p1"},
        {"cmd": "compact"},
        {"cmd": "info"},
        {"cmd": "close"},
    ]
    with Serve(["--mock", script("turn")]) as sc:
        for cmd in session_commands:
            error = sc.error({**cmd, "session": "s999"})
            assert error["kind"] == "UnknownSession" and error["session"] == "s999"
        s = sc.open()
        assert sc.ok({"cmd": "close", "session": s}) is None
        for cmd in session_commands:
            error = sc.error({**cmd, "session": s})
            assert error["kind"] == "SessionClosed", (cmd, error)
        finish(sc)
        assert [l["closed"] for l in sc.seen if "closed" in l] == [s]


def test_closed_exactly_once_per_opened_session() -> None:
    with Serve(["--mock", script("turn")]) as sc:
        sessions = [sc.open() for _ in range(5)]
        sc.prompt(sessions[0])
        sc.events(sessions[0], "RequestOpened")
        first = sc.send({"cmd": "close", "session": sessions[1]})
        second = sc.send({"cmd": "close", "session": sessions[1]})  # while the first is in flight
        replies = [sc.reply(first), sc.reply(second)]
        assert replies[0]["ok"] is None
        assert "ok" in replies[1] or replies[1]["error"]["kind"] == "SessionClosed"
        assert sc.error({"cmd": "open", "agent": "mock", "dir": DIR, "resume": "x", "configure": {"nope": "1"}})["kind"] \
            == "InvalidConfiguration"  # a failed open gets no closed
        finish(sc)
        closed = [l["closed"] for l in sc.seen if "closed" in l]
        assert sorted(closed) == sorted(sessions)
        first_turn = events_of(sc.seen, sessions[0])
        assert body(first_turn[-2])["stop"] == "Cancelled", "closing ends the running turn Cancelled"


def test_eof_closes_every_session_even_one_opening(tmp_path: Path) -> None:
    """EOF closes every session, including an ACP one whose handshake never answers."""
    silent = tmp_path / "silent-agent"
    silent.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    silent.chmod(0o755)
    with Serve(["--mock", script("turn")]) as sc:
        a, b = sc.open(), sc.open()
        sc.prompt(a)
        sc.events(a, "RequestOpened")
        pending = sc.send({"cmd": "open", "agent": {"acp": {"name": "silent", "path": str(silent), "args": []}}, "dir": DIR})
        sc.ok({"cmd": "info", "session": b})  # the open is in flight: it does not block other commands
        assert not any(l.get("id") == pending for l in sc.seen)
        sc.close_stdin()
        sc.drain()
        assert sc.proc.wait(10) == 0
        reply = next(l for l in sc.seen if l.get("id") == pending)
        opening = reply["ok"]["id"] if "ok" in reply else reply["error"]["detail"]
        closed = [l["closed"] for l in sc.seen if "closed" in l]
        assert sorted(closed) == sorted([a, b, opening])
        assert body(events_of(sc.seen, a)[-2])["stop"] == "Cancelled"
        check_transcript(sc, unopened=[opening])


def test_sigterm_closes_sessions_and_exits() -> None:
    with Serve(["--mock", script("turn")]) as sc:
        a, b = sc.open(), sc.open()
        sc.prompt(a)
        sc.events(a, "RequestOpened")
        sc.proc.send_signal(signal.SIGTERM)
        sc.drain()
        assert sc.proc.wait(10) == 0
        assert sorted(l["closed"] for l in sc.seen if "closed" in l) == sorted([a, b])
        check_transcript(sc)


# -- bad input ------------------------------------------------------------------------


def test_bad_frames_are_answered_and_the_loop_continues() -> None:
    with Serve(["--mock", script("turn")]) as sc:
        s = sc.open()
        sc.prompt(s)
        sc.events(s, "RequestOpened")
        cases = [
            (b"this is not json\n", None, "not JSON"),
            (b"[1, 2, 3]\n", None, "JSON object"),
            (b'{"cmd": "discover"}\n', None, "`id`"),
            (b'{"id": 71}\n', 71, "discover"),
            (b'{"id": 72, "cmd": "launch"}\n', 72, "close"),
            (b'{"id": 73, "cmd": "prompt", "session": "' + s.encode() + b'", "text": 5}\n', 73, "`text`"),
            (b'{"id": 74, "cmd": "prompt", "session": "s1", "text": "\xff"}\n', 74, "UTF-8"),
            (b'{"id": 75, "cmd": "open", "agent": "mock"\n', 75, "not JSON"),
        ]
        for raw, frame_id, word in cases:
            sc.write_raw(raw)
            line = sc.wait_for(lambda l: "error" in l and "session" not in l and l["error"]["kind"] == "BadFrame")
            assert line["id"] == frame_id and word in line["error"]["message"], (raw, line)
        sc.write_raw(b"\n   \n")  # blank lines are ignored
        # an over-long line (the bound is 8 MiB): discarded as it streams, answered with its id
        sc.write_raw(b'{"id": 76, "cmd": "prompt", "session": "s1", "text": "' + b"x" * (9 * 1024 * 1024) + b'"}\n')
        line = sc.wait_for(lambda l: l.get("id") == 76, timeout=30)
        assert line["error"]["kind"] == "BadFrame" and "too long" in line["error"]["message"]
        # the session was not disturbed
        sc.answer(s, "r1", {"Permission": "AllowOnce"})
        assert body(sc.events(s)[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        assert "agents" in sc.ok({"cmd": "discover"})
        finish(sc)


def test_junk_never_crashes_the_sidecar_or_disturbs_a_session() -> None:
    """Hundreds of random lines: each gets exactly one BadFrame, and a waiting turn carries on."""
    import random

    rng = random.Random(2)
    junk = []
    for n in range(400):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b" ")
        if n % 4 == 0:  # near-frames: a readable id, then garbage
            raw = b'{"id": %d, "cmd": ' % (5000 + n) + raw
        junk.append(raw)
    expected = [raw for raw in junk if raw.strip()]
    with Serve(["--mock", script("turn")]) as sc:
        s = sc.open()
        sc.prompt(s)
        sc.events(s, "RequestOpened")
        sc.write_raw(b"\n".join(junk) + b"\n")
        marker = sc.ok({"cmd": "info", "session": s})
        assert marker["status"] == "NeedsInput"
        bad = [l for l in sc.seen if "error" in l and "session" not in l and l["error"]["kind"] == "BadFrame"]
        assert len(bad) == len(expected)
        near = {5000 + n for n in range(0, 400, 4)}
        assert {l["id"] for l in bad if l["id"] is not None} == near, "every readable id is carried back"
        sc.answer(s, "r1", {"Permission": "AllowOnce"})
        assert body(sc.events(s)[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        finish(sc)


def test_stdout_closed_by_the_app_ends_serve() -> None:
    """A stdout that stops accepting writes ends serve (status 1) instead of hanging it."""
    proc = subprocess.Popen([sys.executable, "-m", "agentproto", "serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(), cwd=str(ROOT))
    try:
        assert b"hello" in proc.stdout.readline()  # type: ignore[union-attr]
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stdin.write(b'{"id": 1, "cmd": "open", "agent": "mock", "dir": "."}\n')  # type: ignore[union-attr]
        proc.stdin.write(b'{"id": 2, "cmd": "prompt", "session": "s1", "text": "a b c"}\n')  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert proc.wait(20) == 1
        # Its reader went away: it ends quietly, as a Unix tool in a closed pipe ends.
        err = proc.stderr.read()  # type: ignore[union-attr]
        assert b"Traceback" not in err and b"stdout" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- command semantics over the mock scripts ----------------------------------------------


def test_configure(tmp_path: Path) -> None:
    with Serve(["--mock", script("configure")]) as sc:
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": DIR})
        s = info["id"]
        assert info["configuration"]["options"] == {"model": "sonnet"}
        assert sc.ok({"cmd": "configure", "session": s, "option": "model", "value": "opus"}) is None
        updated = body(sc.events(s, "SessionUpdated")[-1])
        assert updated["configuration"]["options"]["model"] == "opus"
        assert updated["details"]["config_options"][0]["current"] == "opus"
        assert sc.ok({"cmd": "info", "session": s})["configuration"]["options"]["model"] == "opus"
        for option, value in (("temperature", "1"), ("model", "gpt-9"), ("model", True)):
            error = sc.error({"cmd": "configure", "session": s, "option": option, "value": value})
            assert error["kind"] == "InvalidConfiguration" and option in error["message"]
        assert sc.ok({"cmd": "info", "session": s})["configuration"]["options"]["model"] == "opus"
        # configure at open
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": DIR, "configure": {"model": "opus"}})
        assert info["configuration"]["options"]["model"] == "opus"
        for bad in ({"model": "gpt-9"}, {"effort": "high"}):
            assert sc.error({"cmd": "open", "agent": "mock", "dir": DIR, "configure": bad})["kind"] == "InvalidConfiguration"
        sc.prompt(s)
        assert kinds(sc.events(s))[-1] == "TurnEnded"
        finish(sc)


def test_queued_prompt_runs_after_the_turn() -> None:
    with Serve(["--mock", script("queued")]) as sc:
        s = sc.open()
        assert sc.prompt(s, "first")["kind"] == {"Started": {"turn_id": "t1"}}
        sc.events(s, "RequestOpened")
        second = sc.prompt(s, "second")
        assert second["kind"] == {"Queued": {"position": 0}}
        assert sc.ok({"cmd": "info", "session": s})["status"] == "NeedsInput"
        sc.answer(s, "r1", {"Permission": "AllowOnce"})
        first_turn = sc.events(s)
        assert body(first_turn[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        second_turn = sc.events(s)
        assert kinds(second_turn)[0] == "TurnStarted", "the queued turn starts right after TurnEnded"
        assert body(second_turn[0])["origin"] == {"Prompt": second["prompt_id"]}
        assert [body(e)["text"] for e in second_turn if kind_name(e["kind"]) == "TextDelta"] == ["second"]
        assert sc.events(s, "StatusChanged")[-1]["kind"] == {"StatusChanged": "Idle"}
        finish(sc)


def test_dequeue() -> None:
    with Serve(["--mock", script("queued")]) as sc:
        s = sc.open()
        sc.prompt(s, "first")
        sc.events(s, "RequestOpened")
        second = sc.prompt(s, "second")["prompt_id"]
        third = sc.prompt(s, "third")
        assert third["kind"] == {"Queued": {"position": 1}}
        assert sc.ok({"cmd": "dequeue", "session": s, "prompt": second}) is None
        assert sc.error({"cmd": "dequeue", "session": s, "prompt": second})["kind"] == "InvalidRequest"
        sc.answer(s, "r1", {"Permission": "AllowOnce"})
        sc.events(s)
        next_turn = sc.events(s)
        assert body(next_turn[0])["origin"] == {"Prompt": third["prompt_id"]}
        finish(sc)


@pytest.mark.parametrize("clear_queue", [True, False])
def test_cancel_with_and_without_clear_queue(clear_queue: bool) -> None:
    with Serve(["--mock", script("queued")]) as sc:
        s = sc.open()
        sc.prompt(s, "first")
        sc.events(s, "RequestOpened")
        sc.prompt(s, "second")
        assert sc.ok({"cmd": "cancel", "session": s, "clear_queue": clear_queue}) is None
        cancelled = sc.events(s)
        assert "RequestClosed" in kinds(cancelled)
        assert body(cancelled[-1])["stop"] == "Cancelled"
        after = sc.events(s, "StatusChanged") if clear_queue else sc.events(s)
        if clear_queue:
            assert after == [after[0]] and after[0]["kind"] == {"StatusChanged": "Idle"}
        else:
            assert kinds(after)[0] == "TurnStarted" and body(after[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        finish(sc)


def test_cancel_names_the_turn() -> None:
    with Serve(["--mock", script("turn")]) as sc:
        s = sc.open()
        turn = sc.prompt(s)["kind"]["Started"]["turn_id"]
        sc.events(s, "RequestOpened")
        assert sc.ok({"cmd": "cancel", "session": s, "turn": "t-other"}) is None  # not the running turn: no-op
        assert sc.ok({"cmd": "info", "session": s})["status"] == "NeedsInput"
        assert sc.ok({"cmd": "cancel", "session": s, "turn": turn}) is None
        assert body(sc.events(s)[-1])["stop"] == "Cancelled"
        finish(sc)


def test_question_answers_are_checked() -> None:
    with Serve(["--mock", script("question")]) as sc:
        s = sc.open()
        sc.prompt(s)
        opened = body(sc.events(s, "RequestOpened")[-1])
        assert opened["Question"]["id"] == "q1"
        invalid = [
            ("q9", {"Question": [{"Choices": ["c-red"]}, {"Text": "Rex"}]}),
            ("q1", {"Permission": "AllowOnce"}),
            ("q1", {"Question": [{"Choices": ["c-red"]}]}),
            ("q1", {"Question": [{"Choices": ["c-green"]}, {"Text": "Rex"}]}),
            ("q1", {"Question": [{"Choices": ["c-red", "c-blue"]}, {"Text": "Rex"}]}),
            ("q1", {"Question": [{"Choices": []}, {"Text": "Rex"}]}),
            ("q1", {"Question": [{"Text": "red"}, {"Text": "Rex"}]}),
            ("q1", {"Deny": {"message": "no"}}),
        ]
        for request, answer in invalid:
            line = sc.answer(s, request, answer)
            assert line.get("error", {}).get("kind") == "InvalidRequest", (answer, line)
        assert sc.ok({"cmd": "info", "session": s})["status"] == "NeedsInput", "the request stays open"
        assert sc.answer(s, "q1", {"Question": [{"Choices": ["c-blue"]}, {"Text": "Rex"}]})["ok"] is None
        rest = sc.events(s)
        assert rest[0]["kind"] == {"RequestClosed": {"request_id": "q1"}} or \
            {"RequestClosed": {"request_id": "q1"}} in [e["kind"] for e in rest]
        assert body(rest[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        assert sc.answer(s, "q1", {"Question": [{"Choices": ["c-blue"]}, {"Text": "Rex"}]})["error"]["kind"] == "InvalidRequest"
        finish(sc)


@pytest.mark.parametrize("answer,ok", [
    ({"Permission": "AllowOnce"}, True),
    ({"Permission": "DenyOnce"}, True),
    ({"Deny": {"message": "not now"}}, True),
    ("Cancel", True),
    ({"Permission": "AllowAlways"}, False),  # not offered
    ({"Question": [{"Text": "x"}]}, False),
])
def test_permission_answers(answer: Any, ok: bool) -> None:
    with Serve(["--mock", script("turn")]) as sc:
        s = sc.open()
        sc.prompt(s)
        sc.events(s, "RequestOpened")
        line = sc.answer(s, "r1", answer)
        if ok:
            assert line["ok"] is None
            rest = sc.events(s)
            assert {"RequestClosed": {"request_id": "r1"}} in [e["kind"] for e in rest]
            assert kinds(rest)[-1] == "TurnEnded"
        else:
            assert line["error"]["kind"] == "InvalidRequest"
        finish(sc)


def test_auto_approve_hides_permission_requests() -> None:
    with Serve(["--mock", script("turn")]) as sc:
        auto = sc.open(permission_mode="AutoApprove")
        edits = sc.open(permission_mode="AcceptEdits")  # an Execute tool still asks
        sc.prompt(auto)
        events = sc.events(auto)
        assert "RequestOpened" not in kinds(events) and "RequestClosed" not in kinds(events)
        assert [body(e)["text"] for e in events if kind_name(e["kind"]) == "TextDelta"] == ["Let me check. ", "Done."]
        assert body(events[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        sc.prompt(edits)
        assert kinds(sc.events(edits, "RequestOpened"))[-1] == "RequestOpened"
        finish(sc)


def test_rollback(tmp_path: Path) -> None:
    with Serve(["--mock", script("rollback-refused")]) as sc:
        s = sc.open()
        assert "Rollback" in sc.ok({"cmd": "info", "session": s})["details"]["capabilities"]["features"]
        sc.prompt(s)
        sc.events(s)
        error = sc.error({"cmd": "rollback", "session": s, "turns": 1, "scope": "Conversation"})
        assert "nothing to rewind past the compaction" in json.dumps(error)
        error = sc.error({"cmd": "rollback", "session": s, "turns": 1, "scope": "ConversationAndFiles"})
        assert error["kind"] == "UnsupportedFeature"
        finish(sc)
    turn = load("turn")["turns"][0]
    with Serve(["--mock", write_script(tmp_path, {"rollback": True, "turns": [turn, turn]})]) as sc:
        s = sc.open()
        sc.prompt(s)
        sc.events(s, "RequestOpened")
        assert sc.error({"cmd": "rollback", "session": s, "turns": 1, "scope": "Conversation"})["kind"] == "SessionBusy"
        sc.answer(s, "r1", {"Permission": "AllowOnce"})
        sc.events(s)
        sc.events(s, "StatusChanged")
        assert sc.ok({"cmd": "rollback", "session": s, "turns": 1, "scope": "Conversation"}) is None
        assert kinds(sc.events(s, "SessionUpdated"))[-1] == "SessionUpdated"
        finish(sc)


def test_resume() -> None:
    with Serve(["--mock", script("resume")]) as sc:
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": DIR})
        assert info["resume_token"] == "mock-token"
        assert "Resume" in info["details"]["capabilities"]["features"]
        error = sc.error({"cmd": "open", "agent": "mock", "dir": DIR, "resume": "mock-token"})
        assert error["kind"] == "ResumeFailed"
        for cmd in ("probe", "plan_usage"):
            assert sc.error({"cmd": cmd, "agent": "mock", "resume": "mock-token"})["kind"] == "InvalidConfiguration"
        sc.prompt(info["id"])
        assert kinds(sc.events(info["id"]))[-1] == "TurnEnded"
        finish(sc)


def test_compact(tmp_path: Path) -> None:
    with Serve(["--mock", script("turn")]) as sc:
        s = sc.open()
        assert sc.error({"cmd": "compact", "session": s})["kind"] == "UnsupportedFeature"
        finish(sc)
    with Serve(["--mock", write_script(tmp_path, {"compact": True, "turns": []})]) as sc:
        s = sc.open()
        assert "Compact" in sc.ok({"cmd": "info", "session": s})["details"]["capabilities"]["features"]
        assert sc.ok({"cmd": "compact", "session": s}) is None
        events = sc.events(s)
        assert kinds(events) == ["TurnStarted", "StatusChanged", "ContextCompacted", "TurnEnded"]
        assert body(events[-1])["stop"] == {"Completed": {"source": "Protocol"}}
        assert sc.events(s, "StatusChanged")[-1]["kind"] == {"StatusChanged": "Idle"}
        finish(sc)


def test_plan_and_plan_exit() -> None:
    with Serve(["--mock", script("plan")]) as sc:
        s = sc.open()
        sc.ok({"cmd": "configure", "session": s, "option": "mode", "value": "plan"})
        assert body(sc.events(s, "SessionUpdated")[-1])["configuration"]["options"]["mode"] == "plan"
        sc.prompt(s)
        first = sc.events(s)
        assert [body(e) for e in first if kind_name(e["kind"]) == "PlanProposed"] == [{"markdown": "1. Add a README"}]
        sc.ok({"cmd": "configure", "session": s, "option": "mode", "value": "default"})
        sc.prompt(s)
        assert [body(e)["text"] for e in sc.events(s) if kind_name(e["kind"]) == "TextDelta"] == ["Done."]
        finish(sc)
    with Serve(["--mock", script("plan-exit")]) as sc:
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": DIR})
        s = info["id"]
        assert info["configuration"]["options"]["mode"] == "plan"
        sc.prompt(s)
        events = sc.events(s, "RequestOpened")
        assert "PlanProposed" in kinds(events)
        request = body(events[-1])["Permission"]
        assert request["id"] == "exit-1" and request["tool"]["title"] == "ExitPlanMode"
        assert request["tool"]["raw"]["name"] == "ExitPlanMode"
        sc.answer(s, "exit-1", {"Permission": "AllowOnce"})
        assert "Kept the plan." in [body(e)["text"] for e in sc.events(s) if kind_name(e["kind"]) == "TextDelta"]
        sc.prompt(s)
        assert body(sc.events(s, "RequestOpened")[-1])["Permission"]["id"] == "r2"
        sc.answer(s, "r2", {"Permission": "DenyOnce"})
        assert kinds(sc.events(s))[-1] == "TurnEnded"
        finish(sc)


def test_live_events_and_subagent_newer_kinds() -> None:
    # These kinds are agentproto's additions: validate against agentproto's schema only.
    with Serve(["--mock", script("live-events")], reference=False) as sc:
        s = sc.open()
        sc.prompt(s)
        events = sc.events(s)
        assert [k for k in kinds(events) if k not in BOOKKEEPING] == [
            "TurnStarted", "ToolUpdated", "ToolProgress", "TurnDiff", "ModelRerouted", "ToolUpdated", "TurnEnded"]
        by_kind = {kind_name(e["kind"]): body(e) for e in events}
        assert by_kind["ToolProgress"] == {"tool_id": "tool-1", "message": "searching", "elapsed_ms": 1500}
        assert by_kind["ModelRerouted"]["to"] == "gpt-5.5-mini"
        assert by_kind["TurnDiff"]["unified"].startswith("--- a/a.txt")
        assert body(events[-1])["background"] == []
        finish(sc)
    with Serve(["--mock", script("subagent")], reference=False) as sc:
        s = sc.open()
        sc.prompt(s)
        events = sc.events(s)
        tools = [e for e in events if kind_name(e["kind"]) == "ToolUpdated"]
        assert [body(t)["subagent"]["summary"] for t in tools] == ["Reading src", "Done"]
        (nested,) = [e for e in events if kind_name(e["kind"]) == "ToolProgress"]
        assert nested["turn_info"]["parent_tool_id"] == "task-1"
        assert all(e["turn_info"]["parent_tool_id"] is None for e in events if e is not nested)
        finish(sc)


@pytest.mark.parametrize("stale,passes", [
    ({"TextDelta": {"message_id": "old", "text": "stale"}}, False),
    ({"Diagnostic": {"level": "Info", "message": "late note"}}, True),
])
def test_stale_before_ack(tmp_path: Path, stale: Any, passes: bool) -> None:
    """Content that arrives before the agent acknowledged a turn is dropped; other kinds pass."""
    path = write_script(tmp_path, {"stale_before_ack": stale, "turns": [
        [{"Emit": {"TextDelta": {"message_id": "m1", "text": "fresh"}}}, {"End": {"Completed": {"source": "Protocol"}}}],
        [{"Emit": {"TextDelta": {"message_id": "m2", "text": "again"}}}, {"End": {"Completed": {"source": "Protocol"}}}],
    ]})
    with Serve(["--mock", path]) as sc:
        s = sc.open()
        for _ in range(2):
            sc.prompt(s)
            events = sc.events(s)
            assert (stale in [e["kind"] for e in events]) is passes
            assert len([e for e in events if kind_name(e["kind"]) == "TextDelta"]) == 1
        finish(sc)


# -- generate, probe, plan_usage -----------------------------------------------------------


def _generate(tmp_path: Path, script_body: dict[str, Any] | None, **args: Any) -> dict[str, Any]:
    argv = ["--mock", write_script(tmp_path, script_body)] if script_body is not None else []
    with Serve(argv, reference=script_body is None or "live" not in json.dumps(script_body)) as sc:
        line = sc.reply(sc.send({"cmd": "generate", "agent": "mock", "dir": DIR, **args}))
        finish(sc)
        assert not any("event" in l or "closed" in l for l in sc.seen), "generate's session is not the app's"
        return line


def _text_turn(*texts: str) -> dict[str, Any]:
    return {"turns": [[*({"Emit": {"TextDelta": {"message_id": "m1", "text": t}}} for t in texts),
                       {"End": {"Completed": {"source": "Protocol"}}}]]}


def test_generate_text(tmp_path: Path) -> None:
    assert _generate(tmp_path, _text_turn("A ", "title"), prompt="x")["ok"] == "A title"


def test_generate_output_schema(tmp_path: Path) -> None:
    schema = {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}},
              "additionalProperties": False}
    good = _generate(tmp_path, _text_turn('{"title": ', '"Fix the parser"}'), prompt="x", output_schema=schema)
    assert json.loads(good["ok"]) == {"title": "Fix the parser"}
    bad = _generate(tmp_path, _text_turn('{"title": 5}'), prompt="x", output_schema=schema)
    assert bad["error"]["kind"] == "ProtocolFailed" and "output_schema" in bad["error"]["message"]
    prose = _generate(tmp_path, _text_turn("Sure! Here it is."), prompt="x", output_schema=schema)
    assert prose["error"]["kind"] == "ProtocolFailed"


def test_generate_tool_attempt_fails(tmp_path: Path) -> None:
    tool = load("live-events")
    line = _generate(tmp_path, tool, prompt="x")
    assert line["error"]["kind"] == "ProtocolFailed" and "tool" in line["error"]["message"]


def test_generate_needs_permissions(tmp_path: Path) -> None:
    line = _generate(tmp_path, {"permissions": False, **_text_turn("hi")}, prompt="x")
    assert line["error"]["kind"] == "UnsupportedFeature"


def test_generate_failed_turn(tmp_path: Path) -> None:
    line = _generate(tmp_path, load("die"), prompt="x")
    assert "error" in line


def test_probe_and_plan_usage(tmp_path: Path) -> None:
    with Serve(["--mock", script("configure")]) as sc:
        details = sc.ok({"cmd": "probe", "agent": "mock", "dir": str(tmp_path)})
        assert_is("AgentDetails", details)
        assert details["auth"] == {"Authenticated": {"kind": "ApiKey", "account": None}}
        assert details["config_options"][0]["id"] == "model"
        assert set(details["capabilities"]["features"]) == {"Questions", "Permissions"}
        error = sc.error({"cmd": "plan_usage", "agent": "mock"})
        assert error["kind"] == "UnsupportedFeature"
        assert sc.error({"cmd": "probe", "agent": "no-such"})["kind"] == "NotInstalled"
        finish(sc)
        assert not any("event" in l or "closed" in l for l in sc.seen)


# -- discover ---------------------------------------------------------------------------


def test_discover_with_a_mock_script_is_mock_only() -> None:
    with Serve(["--mock", script("turn")]) as sc:
        report = sc.ok({"cmd": "discover"})
        assert [a["id"] for a in report["agents"]] == ["mock"]
        assert report["agents"][0]["source"] == "Pinned" and report["missing"] == []
        finish(sc)


def test_discover_catalog_missing_and_env_override(tmp_path: Path) -> None:
    from agentproto.drivers import catalog

    assert catalog.CATALOG, "the catalog has agents"
    fake = tmp_path / "fake-agent"
    fake.write_text("#!/bin/sh\necho 'fake-agent 9.9.9'\n")
    fake.chmod(0o755)
    empty = tmp_path / "bin"
    empty.mkdir()
    overridden = catalog.CATALOG[0]
    env = {"PATH": str(empty), "HOME": str(tmp_path), overridden.env_override: str(fake)}
    with Serve(env=env) as sc:
        report = sc.ok({"cmd": "discover"}, timeout=30)
        finish(sc)
    assert_is("DiscoveryReport", report)
    assert report["agents"][0]["id"] == "mock"
    found = {a["id"]: a for a in report["agents"]}
    missing = {m["id"]: m for m in report["missing"]}
    assert set(found) | set(missing) == {"mock"} | {spec.id for spec in catalog.CATALOG}
    assert not set(found) & set(missing)
    agent = found[overridden.id]
    assert agent["executable_path"] == str(fake) and agent["source"] == "EnvOverride"
    assert agent["version"] == "9.9.9"  # the version number of what --version printed
    for spec in catalog.CATALOG[1:]:
        if spec.id in missing:
            entry = missing[spec.id]
            assert entry["install_hint"] == spec.install_hint and entry["install_hint"]
            assert "PATH" in entry["searched"] and len(entry["searched"]) > 1
    assert missing, "with an empty PATH and HOME, some catalog agents are missing"


def test_discover_survives_an_executable_that_cannot_start(tmp_path: Path) -> None:
    """An override naming a file that exec refuses (no shebang, not a binary) costs only its
    version: discover answers, the sidecar lives on."""
    from agentproto.drivers import catalog

    broken = tmp_path / "broken-agent"
    broken.write_bytes(b"\x00\x01 not a program\n")
    broken.chmod(0o755)
    overridden = catalog.CATALOG[0]
    env = {"PATH": str(tmp_path / "none"), "HOME": str(tmp_path), overridden.env_override: str(broken)}
    with Serve(env=env) as sc:
        report = sc.ok({"cmd": "discover"}, timeout=30)
        agent = {a["id"]: a for a in report["agents"]}[overridden.id]
        assert agent["executable_path"] == str(broken) and agent["version"] is None
        assert any(overridden.id in d["message"] for d in report["diagnostics"])
        assert sc.ok({"cmd": "discover"}, timeout=30)["agents"][0]["id"] == "mock"
        finish(sc)


# -- flow control ---------------------------------------------------------------------------


class RawServe:
    """serve with a reader the test controls: nothing is read unless the test reads."""

    def __init__(self, args: Iterable[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=base_env(), cwd=str(ROOT), bufsize=0,
        )
        self.fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self.buf = b""
        self.lines: list[Any] = []
        self.next_id = 0

    def send(self, cmd: dict[str, Any]) -> int:
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, **cmd}).encode() + b"\n")  # type: ignore[union-attr]
        return self.next_id

    def _read(self, timeout: float) -> bool:
        """Read what is there (waiting up to ``timeout``); False at the end of stdout."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        data = os.read(self.fd, 1 << 20)
        if not data:
            return False
        self.buf += data
        *complete, self.buf = self.buf.split(b"\n")
        self.lines += [json.loads(raw) for raw in complete]
        return True

    def read_until(self, match: Callable[[Any], bool], timeout: float = 30.0) -> Any:
        """Read until a line matching ``match`` has arrived; return it."""
        deadline = time.monotonic() + timeout
        checked = 0
        while True:
            for line in self.lines[checked:]:
                if match(line):
                    return line
            checked = len(self.lines)
            remaining = deadline - time.monotonic()
            assert remaining > 0, "hang guard: the sidecar stopped writing"
            assert self._read(remaining), "stdout ended early"

    def reply(self, frame_id: int) -> Any:
        return self.read_until(lambda l: l.get("id") == frame_id)

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stall(self, seconds: float) -> int:
        """Read nothing for ``seconds``; the largest RSS seen meanwhile (KiB)."""
        peak = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            peak = max(peak, self.rss_kb())
            time.sleep(0.1)
        return max(peak, self.rss_kb())

    def finish(self) -> int:
        """EOF; read to the end of stdout; the exit status."""
        self.proc.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while self._read(max(0.0, deadline - time.monotonic())):
            assert time.monotonic() < deadline, "hang guard: stdout did not end"
        return self.proc.wait(10)


def _deltas(lines: list[Any], session: str) -> list[dict[str, Any]]:
    return [l["event"] for l in lines if "event" in l and l["event"]["session_id"] == session
            and kind_name(l["event"]["kind"]) == "TextDelta"]


def _turn_ended(session: str) -> Callable[[Any], bool]:
    return lambda l: "event" in l and l["event"]["session_id"] == session and kind_name(l["event"]["kind"]) == "TurnEnded"


def _nth_delta(session: str, n: int) -> Callable[[Any], bool]:
    count = [0]

    def match(l: Any) -> bool:
        if "event" in l and l["event"]["session_id"] == session and kind_name(l["event"]["kind"]) == "TextDelta":
            count[0] += 1
        return count[0] >= n

    return match


def test_flood_with_a_stalled_reader_loses_nothing() -> None:
    """flood.json (20,000 deltas); the app stops reading for a while, then reads everything."""
    sc = RawServe(["--mock", script("flood")])
    try:
        sc.read_until(lambda l: "hello" in l)
        s = sc.reply(sc.send({"cmd": "open", "agent": "mock", "dir": DIR}))["ok"]["id"]
        idle = sc.rss_kb()
        sc.send({"cmd": "prompt", "session": s, "text": "go"})
        sc.read_until(_nth_delta(s, 500))
        peak = sc.stall(1.5)
        end = sc.read_until(_turn_ended(s))
        print(f"flood: idle RSS {idle} KiB, peak while stalled {peak} KiB")
        deltas = _deltas(sc.lines, s)
        assert len(deltas) == 20_000 and all(body(d)["text"] == "x" for d in deltas)
        events = [l["event"] for l in sc.lines if "event" in l]
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        assert body(end["event"])["stop"] == {"Completed": {"source": "Protocol"}}
        assert not any("error" in l or "closed" in l for l in sc.lines), "no session was lost"
        assert peak - idle < 16 * 1024, f"RSS grew by {peak - idle} KiB while the reader stalled"
        for line in sc.lines[::250]:
            check_line(line)
        assert sc.finish() == 0
        assert [l["closed"] for l in sc.lines if "closed" in l] == [s]
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
            sc.proc.wait()


def test_rss_stays_bounded_while_the_reader_stalls(tmp_path: Path) -> None:
    """20,000 deltas of 4 KiB (80 MiB if buffered): the sidecar holds only ~1024 of them."""
    big = "y" * 4096
    path = write_script(tmp_path, {"turns": [[
        {"Repeat": {"times": 20_000, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": big}}}]}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]]})
    sc = RawServe(["--mock", path])
    try:
        sc.read_until(lambda l: "hello" in l)
        s = sc.reply(sc.send({"cmd": "open", "agent": "mock", "dir": DIR}))["ok"]["id"]
        idle = sc.rss_kb()
        sc.send({"cmd": "prompt", "session": s, "text": "go"})
        peak = sc.stall(1.5)
        print(f"big flood: idle RSS {idle} KiB, peak while stalled {peak} KiB")
        assert peak - idle < 32 * 1024, f"RSS grew by {peak - idle} KiB: the flood was buffered"
        sc.read_until(_turn_ended(s), timeout=60)
        deltas = _deltas(sc.lines, s)
        assert len(deltas) == 20_000 and all(body(d)["text"] == big for d in deltas)
        events = [l["event"] for l in sc.lines if "event" in l]
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        assert sc.finish() == 0
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
            sc.proc.wait()


def test_stall_timeout_closes_only_the_stalled_session(tmp_path: Path) -> None:
    """Both sessions share stdout, so "not read" means: this session had events waiting while
    the app read nothing for longer than --stall-timeout. That session is closed with a
    session error; an idle session (nothing waiting) lives on and works afterwards."""
    path = write_script(tmp_path, {"turns": [[
        {"Repeat": {"times": 5000, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": "z" * 200}}}]}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]]})
    sc = RawServe(["--mock", path, "--stall-timeout", "2"])
    try:
        sc.read_until(lambda l: "hello" in l)
        a = sc.reply(sc.send({"cmd": "open", "agent": "mock", "dir": DIR}))["ok"]["id"]
        b = sc.reply(sc.send({"cmd": "open", "agent": "mock", "dir": DIR}))["ok"]["id"]
        sc.send({"cmd": "prompt", "session": a, "text": "go"})
        sc.stall(5.0)  # longer than the stall timeout: a's events cannot be written
        sc.read_until(lambda l: l.get("closed") == a)
        error = next(l for l in sc.lines if l.get("session") == a and "error" in l)["error"]
        assert error["kind"] == "ConsumerLagged", "the app stopped reading: the app's fault, not the agent's"
        a_events = [l["event"] for l in sc.lines if "event" in l and l["event"]["session_id"] == a]
        ends = [e for e in a_events if kind_name(e["kind"]) == "TurnEnded"]
        assert len(ends) == 1 and "Failed" in body(ends[0])["stop"]
        assert len(_deltas(sc.lines, a)) < 5000
        i_err = index_of(sc.lines, lambda l: l.get("session") == a)
        assert index_of(sc.lines, lambda l: l.get("closed") == a) > i_err > index_of(
            sc.lines, lambda l: "event" in l and kind_name(l["event"]["kind"]) == "TurnEnded")
        # b was idle: it lives on
        assert sc.reply(sc.send({"cmd": "info", "session": b}))["ok"]["status"] == "Idle"
        sc.send({"cmd": "prompt", "session": b, "text": "go"})
        sc.read_until(_turn_ended(b))
        assert len(_deltas(sc.lines, b)) == 5000
        assert not any(l.get("session") == b for l in sc.lines)
        assert sc.finish() == 0
        assert sorted(l["closed"] for l in sc.lines if "closed" in l) == sorted([a, b])
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
            sc.proc.wait()


# -- every mock script plays as its notes describe (add a script, gain a test) ----------------


def _expected(steps: list[Any]) -> list[tuple[str, Any, Any]]:
    """What a turn's steps should show the app: (kind, payload, parent_tool_id), in order."""
    out: list[tuple[str, Any, Any]] = []
    pending = list(steps)
    usage = None
    calls = 0  # the scripts call tools in one turn only
    while pending:
        step = pending.pop(0)
        if step == "AwaitAnswer":
            continue
        if step == "Die":
            out.append(("End", "Failed", None))
            break
        (tag, value), = step.items()
        if tag == "Emit":
            out.append((kind_name(value), value, None))
        elif tag == "Nested":
            out.append((kind_name(value[1]), value[1], value[0]))
        elif tag == "End":
            out.append(("End", value, usage))
            usage = None
        elif tag == "Usage":
            usage = value
        elif tag == "Repeat":
            pending[:0] = [s for _ in range(value["times"]) for s in value["steps"]]
        elif tag == "CallTool":
            # Opened without tools here: the call fails (tests/tools/test_listener.py has the rest).
            calls += 1
            name, arguments = value["tool"], value.get("arguments", {})
            tool = {
                "id": f"calltool-{calls}", "kind": {"Mcp": {"server": "agentproto", "tool": name}}, "title": name,
                "status": "Running", "input": {"Text": json.dumps(arguments)}, "output": None, "diffs": [],
                "locations": [], "raw": {"name": f"mcp__agentproto__{name}", "input": arguments},
            }
            out.append(("ToolUpdated", {"ToolUpdated": tool}, None))
            failed = {**tool, "status": "Failed", "output": "the session has no tools"}
            out.append(("ToolUpdated", {"ToolUpdated": failed}, None))
    return out


def _answer_for(request: dict[str, Any]) -> Any:
    if "Permission" in request:
        options = request["Permission"]["options"]
        return {"Permission": "AllowOnce" if "AllowOnce" in options else options[0]}
    return {"Question": [{"Choices": [q["choices"][0]["id"]]} if q["choices"] else {"Text": "x"}
                         for q in request["Question"]["questions"]]}


@pytest.mark.parametrize("path", sorted(SCRIPTS.glob("*.json")), ids=lambda p: p.stem)
def test_every_mock_script_plays(path: Path) -> None:
    scr = json.loads(path.read_text())
    text = path.read_text()
    big = "Repeat" in text
    newer = any(k in text for k in ("ToolProgress", "TurnDiff", "ModelRerouted", "Nested", "subagent"))
    with Serve(["--mock", str(path)], sample=200 if big else None, reference=not newer) as sc:
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": DIR})
        s = info["id"]
        assert info["resume_token"] == ("mock-token" if scr.get("resume") else None)
        assert [o["id"] for o in info["details"]["config_options"]] == [o["id"] for o in scr.get("options", [])]
        died = False
        for steps in scr.get("turns", []):
            sc.prompt(s)
            seen: list[tuple[str, Any, Any]] = []
            want = _expected(steps)
            ends = len([w for w in want if w[0] == "End"])  # End then content: the agent's own turn
            cancelled = False
            if not ends:  # a turn that never ends by itself: cancel it once it has played
                want.append(("End", "Cancelled", None))
            while len([x for x in seen if x[0] == "End"]) < max(ends, 1):
                if not ends and not cancelled and len(seen) == len(want) - 1:
                    assert sc.ok({"cmd": "cancel", "session": s}) is None
                    cancelled = True
                event = sc.wait_for(lambda l: "event" in l and l["event"]["session_id"] == s, timeout=30)["event"]
                name = kind_name(event["kind"])
                if name == "TurnEnded":
                    stop = body(event)["stop"]
                    failed = isinstance(stop, dict) and "Failed" in stop
                    seen.append(("End", "Failed" if failed else stop, body(event)["usage"]))
                    continue
                if name in BOOKKEEPING or name == "TurnStarted":
                    continue
                seen.append((name, event["kind"], event["turn_info"]["parent_tool_id"]))
                if name == "RequestOpened":
                    request = body(event)
                    request_id = next(iter(request.values()))["id"]
                    assert sc.answer(s, request_id, _answer_for(request))["ok"] is None
            assert seen == want, f"{path.name}: played {seen[:5]}…, expected {want[:5]}…"
            if "Die" in steps:
                died = True
                error = sc.wait_for(lambda l: l.get("session") == s and "error" in l)["error"]
                assert error["kind"] == "ProcessExited"
                break
        if not died:
            assert sc.ok({"cmd": "close", "session": s}) is None
        sc.wait_for(lambda l: l.get("closed") == s, timeout=30)
        finish(sc)


def test_a_script_that_does_not_load_fails_serve(tmp_path: Path) -> None:
    bad = write_script(tmp_path, {"turns": [], "auth": "x"})
    result = subprocess.run([sys.executable, "-m", "agentproto", "serve", "--mock", bad],
                            input=b"", capture_output=True, env=base_env(), cwd=str(ROOT), timeout=30, check=False)
    assert result.returncode == 1 and b"auth" in result.stderr and result.stdout == b""


# -- inferred turn ends (deterministic: false) ---------------------------------------------------


def test_inferred_turn_end_after_the_quiet_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve has no knob for the quiet window (120 s for prompted turns, 20 s for the agent's
    own), so this runs the engine in-process with the windows shortened."""
    from agentproto.drivers.mock import load_script
    from agentproto.engine.session import EngineSession
    from agentproto.engine.runtime import Engine, Scope
    from agentproto.loopio.loop import Loop

    monkeypatch.setattr(EngineSession, "QUIET_PROMPTED", 0.3)
    monkeypatch.setattr(EngineSession, "QUIET_AGENT", 0.3)
    script_body = {"deterministic": False, "deterministic_agent": False, "turns": [[
        {"Emit": {"TextDelta": {"message_id": "m1", "text": "no end"}}},
    ], [
        {"Emit": {"TextDelta": {"message_id": "m2", "text": "ends"}}},
        {"End": {"Completed": {"source": "Protocol"}}},
        {"Emit": {"TextDelta": {"message_id": "m3", "text": "agent goes on"}}},
    ]]}

    class Sink:
        def __init__(self) -> None:
            self.events: list[dict[str, Any]] = []

        def event(self, session: EngineSession, event: dict[str, Any]) -> None:
            session.delivered(1)
            self.events.append(event)

        def session_error(self, session: EngineSession, error: Any) -> None:
            raise AssertionError(error)

        def session_closed(self, session: EngineSession) -> None:
            pass

    loop = Loop()
    try:
        runtime = Engine(loop, mock_script=load_script(json.dumps(script_body)))
        sink, scope, replies = Sink(), Scope(runtime), []

        def run(name: str, args: dict[str, Any]) -> Any:
            replies.clear()
            runtime.execute(name, args, sink, scope, lambda value, error: replies.append((value, error)))
            loop.run(until=lambda: bool(replies))
            assert replies[0][1] is None, replies[0][1]
            return replies[0][0]

        def ended(count: int) -> Callable[[], bool]:
            return lambda: len([e for e in sink.events if kind_name(e["kind"]) == "TurnEnded"]) >= count

        guard = loop.call_later(20, loop.stop)
        s = run("open", {"agent": "mock", "dir": DIR})["id"]
        run("prompt", {"session": s, "text": "go"})
        loop.run(until=ended(1))
        first = [e for e in sink.events if kind_name(e["kind"]) == "TurnEnded"]
        assert body(first[0])["stop"] == {"Completed": {"source": "Inferred"}}
        run("prompt", {"session": s, "text": "go"})
        loop.run(until=ended(3))
        ends = [e for e in sink.events if kind_name(e["kind"]) == "TurnEnded"]
        assert body(ends[1])["stop"] == {"Completed": {"source": "Protocol"}}
        agent_turn = [e for e in sink.events if kind_name(e["kind"]) == "TurnStarted"][-1]
        assert body(agent_turn)["origin"] == "Agent"
        assert body(ends[2])["stop"] == {"Completed": {"source": "Inferred"}}
        guard.cancel()
    finally:
        loop.close()


# -- the open reply precedes the session's first event, even when the agent talks first -----

class EarlyDriver(MockDriver):
    """A mock that reports events while its session is still opening (as ACP agents do)."""

    delay: float | None = None

    def open(self) -> None:
        self.host.diagnostic("Info", "starting up")
        self.host.emit({"Diagnostic": {"level": "Info", "message": "handshake done"}})
        if self.delay is None:
            MockDriver.open(self)
        else:
            self.host.loop.call_later(self.delay, lambda: MockDriver.open(self))


@pytest.mark.parametrize("delay", [None, 0.05])
def test_open_reply_precedes_events_reported_while_opening(monkeypatch: pytest.MonkeyPatch, delay: float | None) -> None:
    from agentproto.drivers import catalog
    from agentproto.engine.runtime import Engine, Scope
    from agentproto.loopio.loop import Loop

    monkeypatch.setattr(EarlyDriver, "delay", delay)
    monkeypatch.setattr(catalog, "MOCK", catalog.AgentSpec(
        id="mock", name="Mock", commands=(), install_hint="built in", driver=f"{__name__}:EarlyDriver"))
    order: list[Any] = []

    class Sink:
        def event(self, session: Any, event: dict[str, Any]) -> None:
            session.delivered(1)
            order.append(("event", event))

        def session_error(self, session: Any, error: Any) -> None:
            order.append(("error", error))

        def session_closed(self, session: Any) -> None:
            order.append(("closed", session.id))

    loop = Loop()
    try:
        runtime = Engine(loop)
        guard = loop.call_later(10, loop.stop)
        runtime.execute("open", {"agent": "mock", "dir": DIR}, Sink(), Scope(runtime),
                        lambda value, error: order.append(("reply", value, error)))
        loop.run(until=lambda: len(order) >= 3)
        guard.cancel()
    finally:
        loop.close()
    assert order[0][0] == "reply" and order[0][2] is None, order[0]
    events = [item[1] for item in order[1:]]
    assert [e["kind"]["Diagnostic"]["message"] for e in events] == ["starting up", "handshake done"]
    assert [e["sequence"] for e in events] == [1, 2]
    assert all(e["session_id"] == order[0][1]["id"] for e in events)


# -- a request the agent withdraws itself closes for the app too ----------------------------

class WithdrawingDriver(MockDriver):
    """Opens a permission request, then withdraws it (Claude's control_cancel_request)."""

    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        self.host.turn_acknowledged()
        tool = {"id": "t-1", "kind": "Execute", "title": "ls", "status": "Pending", "input": "None",
                "output": None, "diffs": [], "locations": [], "raw": None}
        self.host.emit({"RequestOpened": {"Permission": {"id": "r-1", "tool": tool, "options": ["AllowOnce"], "detail": None}}})
        self.host.loop.call_later(0.01, self._withdraw)

    def _withdraw(self) -> None:
        self.host.request_withdrawn("r-1")
        self.host.request_withdrawn("r-1")  # twice: the second is a no-op
        self.host.request_withdrawn("never-opened")
        self.host.end_turn({"Completed": {"source": "Protocol"}})


def test_a_withdrawn_request_closes_and_the_status_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentproto.drivers import catalog
    from agentproto.loopio.loop import Loop
    from agentproto.engine.runtime import Engine, Scope

    monkeypatch.setattr(catalog, "MOCK", catalog.AgentSpec(
        id="mock", name="Mock", commands=(), install_hint="built in", driver=f"{__name__}:WithdrawingDriver"))
    events: list[dict[str, Any]] = []

    class Sink:
        def event(self, session: Any, event: dict[str, Any]) -> None:
            session.delivered(1)
            events.append(event)

        def session_error(self, session: Any, error: Any) -> None:
            raise AssertionError(error)

        def session_closed(self, session: Any) -> None:
            pass

    loop = Loop()
    try:
        runtime = Engine(loop)
        scope = Scope(runtime)
        guard = loop.call_later(10, loop.stop)
        opened: list[Any] = []
        runtime.execute("open", {"agent": "mock", "dir": DIR}, Sink(), scope, lambda v, e: opened.append(v))
        runtime.execute("prompt", {"session": opened[0]["id"], "text": "go"}, Sink(), scope, lambda v, e: None)
        loop.run(until=lambda: any(kind_name(e["kind"]) == "TurnEnded" for e in events))
        answer: list[Any] = []
        runtime.execute("answer", {"session": opened[0]["id"], "request": "r-1", "answer": {"Permission": "AllowOnce"}},
                        Sink(), scope, lambda v, e: answer.append(e))
        guard.cancel()
    finally:
        loop.close()
    assert [kind_name(e["kind"]) for e in events] == [
        "TurnStarted", "StatusChanged", "RequestOpened", "StatusChanged",
        "RequestClosed", "StatusChanged", "TurnEnded", "StatusChanged",
    ]
    assert [e["kind"]["StatusChanged"] for e in events if kind_name(e["kind"]) == "StatusChanged"] == [
        "Working", "NeedsInput", "Working", "Idle"]
    assert answer[0].kind == "InvalidRequest"  # nothing is open any more


# -- engine and mock edge cases, in process ----------------------------------------------------

def test_an_answer_before_the_mock_awaits_it_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app (or auto-approval) can answer between the RequestOpened step and the
    AwaitAnswer step; the mock keeps that answer for its AwaitAnswer."""
    from agentproto.drivers.base import Launch
    from agentproto.drivers.mock import MockDriver as Mock
    from agentproto.loopio.loop import Loop

    tool = {"id": "t", "kind": "Execute", "title": "x", "status": "Pending", "input": "None",
            "output": None, "diffs": [], "locations": [], "raw": None}
    script = {"turns": [[
        {"Emit": {"RequestOpened": {"Permission": {"id": "r1", "tool": tool, "options": ["AllowOnce"], "detail": None}}}},
        "AwaitAnswer",
        {"Emit": {"TextDelta": {"message_id": "m", "text": "after"}}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]]}
    from agentproto.drivers.mock import load_script

    calls: list[Any] = []

    class Host:
        loop = Loop()
        session_id = "s1"

        def emit(self, kind: Any, extensions: Any = None, parent_tool_id: Any = None) -> None:
            calls.append(kind)
            if "RequestOpened" in kind:
                driver.answer(kind["RequestOpened"], {"Permission": "AllowOnce"})  # at once

        def turn_acknowledged(self) -> None:
            pass

        def end_turn(self, stop: Any, usage: Any = None) -> None:
            calls.append(("end", stop))

    host = Host()
    # The mock takes its script from its launch facts, as every driver takes what it is given.
    launch = Launch(agent_id="mock", installation={}, executable="mock", dir="/", mock_script=load_script(json.dumps(script)))
    driver = Mock(host, launch)  # type: ignore[arg-type]
    try:
        driver.start_turn("t1", "go", [])
        host.loop.run(until=lambda: any(isinstance(c, tuple) for c in calls))
    finally:
        host.loop.close()
    assert calls[1:] == [{"TextDelta": {"message_id": "m", "text": "after"}}, ("end", {"Completed": {"source": "Protocol"}})]


def test_close_from_inside_the_closing_turn_end_does_not_reenter() -> None:
    """A sink that calls close() when it sees the TurnEnded of a closing session (as a
    frontend reacting to events may) gets one clean close, not a recursion."""
    from agentproto.loopio.loop import Loop
    from agentproto.engine.runtime import Engine, Scope

    loop = Loop()
    seen: list[str] = []
    replies: list[Any] = []

    class Sink:
        def event(self, session: Any, event: dict[str, Any]) -> None:
            session.delivered(1)
            seen.append(kind_name(event["kind"]))
            if seen[-1] == "TurnEnded":
                session.close(lambda v, e: replies.append(("inner", e)))

        def session_error(self, session: Any, error: Any) -> None:
            raise AssertionError(error)

        def session_closed(self, session: Any) -> None:
            seen.append("closed")

    try:
        from agentproto.drivers.mock import load_script

        # No turns: every prompt starts a turn that hangs until cancel or close.
        runtime = Engine(loop, mock_script=load_script('{"turns": []}'))
        scope = Scope(runtime)
        opened: list[Any] = []
        runtime.execute("open", {"agent": "mock", "dir": DIR}, Sink(), scope, lambda v, e: opened.append(v))
        session_id = opened[0]["id"]
        runtime.execute("prompt", {"session": session_id, "text": "hang"}, Sink(), scope, lambda v, e: None)
        runtime.execute("close", {"session": session_id}, Sink(), scope, lambda v, e: replies.append(("outer", e)))
        guard = loop.call_later(10, loop.stop)
        loop.run(until=lambda: len(replies) == 2)
        guard.cancel()
    finally:
        loop.close()
    assert seen.count("closed") == 1 and seen[-1] == "closed"
    assert seen.count("TurnEnded") == 1
    assert sorted(replies) == [("inner", None), ("outer", None)]
