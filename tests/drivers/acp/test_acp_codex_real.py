"""The real pinned Codex ACP adapter (``codex-acp``, @zed-industries/codex-acp 0.16.0, Codex
built in) through ``serve``, against the fake Responses API on 127.0.0.1
(tests/fakes/fake_openai.py) as a custom model provider in ``CODEX_HOME/config.toml``: probe,
a streamed turn, a command behind a permission (allowed; denied, which codex-acp can only
say as "Abort", so the turn ends Cancelled), reading, creating and overwriting files,
cancel mid-stream and while a permission is pending, close and EOF with no process left,
the app's own tool with no permission asked.

Codex's sandbox cannot start in this container: the commands ask to run outside it
(``sandbox_permissions: require_escalated``), which is what asks the permission.
"""

from __future__ import annotations

import json

import pytest

from acp_real_support import CodexAcpWorld, stop_of, texts
from fake_openai import FakeOpenAI, add_file_patch, apply_patch, exec_command, mcp_call, text
from listener_support import LOOKUP, text_result
from sidecar import kind_name


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def world(api, tmp_path):
    w = CodexAcpWorld(tmp_path, api)
    try:
        yield w
    finally:
        w.close()


def test_probe_names_the_pinned_version(world):
    details = world.sc.ok({"cmd": "probe", "agent": world.agent, "dir": str(world.work)}, timeout=120)
    assert details["version"] == "0.16.0"
    assert world.wait_gone() == []


def test_a_streamed_text_turn_then_close_leaves_no_process(world, api):
    api.script(text("Hello from the fake Codex", chunks=4))
    session = world.open()["id"]
    world.prompt(session, "say hello")
    events = world.turn(session)
    assert len([e for e in events if kind_name(e["kind"]) == "TextDelta"]) >= 4
    assert texts(events) == "Hello from the fake Codex"
    assert stop_of(events) == "Completed"
    assert "say hello" in api.response_requests()[0].user_texts()[-1]
    world.close_session(session)
    assert world.wait_gone() == []


@pytest.mark.parametrize("allow", [True, False])
def test_a_command_behind_a_permission(world, api, allow):
    api.script(exec_command("echo made > made.txt", escalated=True), text("ran"))
    session = world.open()["id"]
    world.prompt(session, "make the file")
    permission = world.request(session)["Permission"]
    assert permission["tool"]["kind"] == "Execute"
    assert permission["tool"]["title"] == "echo made > made.txt"
    world.answer(session, permission["id"], {"Permission": "AllowOnce" if allow else "DenyOnce"})
    events = world.turn(session)
    made = world.work / "made.txt"
    if allow:
        assert made.read_text() == "made\n"
        assert stop_of(events) == "Completed" and texts(events) == "ran"
    else:
        assert not made.exists()
        assert stop_of(events) == "Cancelled"  # codex-acp's only "no" is Abort


def test_reading_a_file(world, api):
    (world.work / "notes.txt").write_text("the secret word is kumquat\n")
    api.script(exec_command("cat notes.txt", escalated=True), text("read it"))
    session = world.open()["id"]
    world.prompt(session, "read notes.txt")
    world.answer(session, world.request(session)["Permission"]["id"], {"Permission": "AllowOnce"})
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert "kumquat" in json.dumps(api.response_requests()[1].function_outputs())


def test_creating_a_new_file_and_overwriting_one(world, api):
    """apply_patch runs in Codex's sandbox unless the preset is Full Access (which asks
    nothing): the sandbox cannot start here, so this is Full Access."""
    (world.work / "old.txt").write_text("old content\n")
    patch = (
        add_file_patch("new.txt", "brand new")[: -len("*** End Patch\n")]
        + "*** Update File: old.txt\n@@\n-old content\n+new content\n*** End Patch\n"
    )
    api.script(apply_patch(patch), text("wrote both"))
    session = world.open(configure={"mode": "full-access"})["id"]
    world.prompt(session, "write the files")
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    edits = [e["kind"]["ToolUpdated"] for e in events if kind_name(e["kind"]) == "ToolUpdated"]
    assert edits[-1]["kind"] == "Edit" and edits[-1]["status"] == "Completed"
    assert {d["path"]: d["old_text"] for d in edits[-1]["diffs"]} == {
        str(world.work / "old.txt"): "old content\n",
        str(world.work / "new.txt"): None,
    }
    assert (world.work / "new.txt").read_text() == "brand new\n"
    assert (world.work / "old.txt").read_text() == "new content\n"


def test_cancel_mid_stream(world, api):
    api.script(text("partial answer", chunks=2, delay=120), text("after the cancel"))
    session = world.open()["id"]
    world.prompt(session, "talk slowly")
    assert world.next_event(session, "TextDelta")["kind"]["TextDelta"]["text"] == "partial"
    world.sc.ok({"cmd": "cancel", "session": session})
    assert stop_of(world.turn(session)) == "Cancelled"
    world.prompt(session, "again")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "after the cancel"


def test_cancel_while_a_permission_is_pending(world, api):
    api.script(exec_command("echo no > never.txt", escalated=True), text("next"))
    session = world.open()["id"]
    world.prompt(session, "make the file")
    world.request(session)
    world.sc.ok({"cmd": "cancel", "session": session})
    events = world.turn(session)
    assert stop_of(events) == "Cancelled"
    assert "RequestClosed" in [kind_name(e["kind"]) for e in events]
    assert not (world.work / "never.txt").exists()
    world.prompt(session, "again")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "next"


def test_eof_on_stdin_ends_every_process(world, api):
    session = world.open()["id"]
    world.prompt(session, "hi")
    world.turn(session)
    assert world.processes()
    world.sc.close_stdin()
    world.sc.drain(60)
    assert world.sc.proc.wait(30) == 0
    assert world.wait_gone() == []


def test_the_apps_tool_is_called_with_no_permission_asked(world, api):
    api.script(mcp_call("agentproto", "lookup", {"word": "codex"}), text("looked up"))
    session = world.open(tools=[LOOKUP])["id"]
    world.prompt(session, "look codex up")
    request = world.request(session)
    assert list(request) == ["ToolCall"], request
    assert request["ToolCall"]["tool"] == "lookup" and request["ToolCall"]["arguments"] == {"word": "codex"}
    world.answer(session, request["ToolCall"]["id"], text_result("a coding agent"))
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert "mcp__agentproto" in api.response_requests()[0].namespaces()
    assert "a coding agent" in json.dumps(api.response_requests()[1].function_outputs())

