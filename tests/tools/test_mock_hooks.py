"""The mock's ``Hook`` step fires one of the app's hooks through the listener, as an agent
whose hooks are commands does; a session opened with ``hooks`` and no ``tools`` gets its
hook URLs (``SessionInfo.hook_urls``); a cancelled ``Sleep`` does not hold the next turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from listener_support import InThread, closed_requests, opened_request, post
from ops_support import Proc, result_of, write_script
from sidecar import ROOT, Sidecar, kind_name, script

from agentproto.drivers.mock import ScriptError, load_script


def test_hooks_without_tools_still_get_their_urls(tmp_path: Path) -> None:
    """Regression: the hook URLs were reachable only through tools_url (null without tools),
    so an app that asked for hooks alone had no URL to give its hook commands. They hold the
    session's token: a record has them redacted."""
    record = tmp_path / "run.ndjson"
    with Sidecar(["--db", "off", "--mock", script("hook"), "--record", str(record)], reference=False) as car:
        info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "hooks": ["Stop"]})
        assert info["tools_url"] is None and set(info["hook_urls"]) == {"Stop"}
        url = info["hook_urls"]["Stop"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/hook/Stop")
        held = InThread(lambda: post(url, {"reason": "done"}))
        hook = opened_request(car, info["id"], "Hook")["kind"]["RequestOpened"]["Hook"]
        assert hook["event"] == "Stop" and hook["input"] == {"reason": "done"}
        car.ok({"cmd": "answer", "session": info["id"], "request": hook["id"], "answer": {"HookResult": {"continue": 1}}})
        assert held.result().json() == {"continue": 1}
        # Without hooks, no hook_urls; info and SessionUpdated carry the same.
        plain = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT)})
        assert "hook_urls" not in plain
        assert car.ok({"cmd": "info", "session": info["id"]})["hook_urls"] == info["hook_urls"]
        assert car.close() == 0
    token = url.split("/")[3]
    assert len(token) >= 16 and "/hook/Stop" in record.read_text() and token not in record.read_text()


def test_the_mock_fires_its_hooks_through_the_listener_and_waits_for_the_answers() -> None:
    with Sidecar(["--db", "off", "--mock", script("hook")], reference=False) as car:
        info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "hooks": ["PreToolUse", "Stop"]})
        sid = info["id"]
        car.ok({"cmd": "prompt", "session": sid, "text": "test it"})
        pre = opened_request(car, sid, "Hook")
        body = pre["kind"]["RequestOpened"]["Hook"]
        assert body["event"] == "PreToolUse" and body["input"]["tool_input"] == {"command": "make test"}
        assert pre["turn_info"]["id"] == "t1"
        # The turn waits for the answer: nothing after the hook step has played.
        texts = [line["event"]["kind"]["TextDelta"]["text"] for line in car.seen
                 if "event" in line and kind_name(line["event"]["kind"]) == "TextDelta"]  # fmt: skip
        assert texts == ["About to run the tests."]
        car.ok({"cmd": "answer", "session": sid, "request": body["id"], "answer": {"HookResult": {"decision": "allow"}}})
        stop = opened_request(car, sid, "Hook")["kind"]["RequestOpened"]["Hook"]
        assert stop["event"] == "Stop"
        car.ok({"cmd": "answer", "session": sid, "request": stop["id"], "answer": "Cancel"})
        events = car.events(sid, until="TurnEnded")
        assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        assert closed_requests(car.seen, body["id"]) == 1 and closed_requests(car.seen, stop["id"]) == 1


def test_a_hook_the_app_did_not_ask_for_is_skipped() -> None:
    p = Proc(["agent", "--db", "off", "--mock", script("hook")])
    try:
        p.request({"op": "open", "agent": "mock", "dir": str(ROOT), "hooks": ["Stop"]})
        waiting = result_of(p.request({"op": "prompt", "text": "go"}))
        assert waiting["waiting"]["Hook"]["event"] == "Stop"  # PreToolUse was not asked for
        done = result_of(p.request({"op": "answer", "request": waiting["waiting"]["Hook"]["id"], "answer": "Cancel"}))
        assert done["stop"] == {"Completed": {"source": "Protocol"}}
        p.request({"op": "open", "agent": "mock", "dir": str(ROOT)})
        assert result_of(p.request({"op": "prompt", "text": "go"}))["stop"] == {"Completed": {"source": "Protocol"}}
    finally:
        p.stop()


@pytest.mark.parametrize(("step", "why"), [
    ({"Hook": {"event": "Stop", "input": []}}, "input: an object"),
    ({"Hook": {"input": {}}}, "Hook takes {event, input}"),
    ({"Hook": {"event": "Stop", "extra": 1}}, "Hook takes {event, input}"),
    ({"Hook": {"event": "PostToolUse"}}, "a Hook step fires PostToolUse, which is not in hook_events"),
    ({"Repeat": {"times": 2, "steps": [{"Hook": {"event": "Nope"}}]}}, "fires Nope"),
])  # fmt: skip
def test_a_bad_hook_step_is_a_script_error_naming_it(step: Any, why: str) -> None:
    with pytest.raises(ScriptError, match=why.replace("{", r"\{").replace("}", r"\}")):
        load_script(json.dumps({"hook_events": ["Stop"], "turns": [[step]]}))


def test_a_cancelled_sleep_ends_at_once_and_the_next_turn_starts_at_its_first_step(tmp_path: Path) -> None:
    """Regression: cancel cleared the steps but left the Sleep's alarm armed, so the next
    turn waited out the cancelled sleep (here 10 minutes) before its first step."""
    slow = [{"Emit": {"TextDelta": {"message_id": "m1", "text": "wait"}}}, {"Sleep": 600_000},
            {"End": {"Completed": {"source": "Protocol"}}}]  # fmt: skip
    quick = [{"Emit": {"TextDelta": {"message_id": "m2", "text": "next"}}}, {"End": {"Completed": {"source": "Protocol"}}}]
    with Sidecar(["--db", "off", "--mock", write_script(tmp_path, "sleepy", [slow, quick])]) as car:
        sid = car.open(dir=str(tmp_path))
        car.ok({"cmd": "prompt", "session": sid, "text": "one"})
        car.events(sid, until="TextDelta")
        car.ok({"cmd": "cancel", "session": sid})
        assert car.events(sid, until="TurnEnded")[-1]["kind"]["TurnEnded"]["stop"] == "Cancelled"
        car.ok({"cmd": "prompt", "session": sid, "text": "two"})
        ended = car.events(sid, until="TurnEnded", timeout=20)  # not 10 minutes
        assert ended[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        assert any(kind_name(e["kind"]) == "TextDelta" and e["kind"]["TextDelta"]["text"] == "next" for e in ended)
