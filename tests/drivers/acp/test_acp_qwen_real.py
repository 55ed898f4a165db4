"""The real pinned Qwen Code (``qwen --acp``, @qwen-code/qwen-code 0.24.4) through ``serve``,
against the fake Chat Completions API on 127.0.0.1 (tests/fakes/fake_chat.py;
``OPENAI_BASE_URL``/``OPENAI_API_KEY``/``OPENAI_MODEL``): probe, a streamed turn, a shell
command behind a permission (allowed, denied), reading a file, creating and overwriting
files through agentproto's fs/*, cancel mid-stream and while a permission is pending, close
and EOF with no process left, and what becomes of the app's tools.

Qwen runs shell commands itself (no terminal/*) and reads and writes through fs/*. Its
memory-extraction subagent (a second model call after each turn) is turned off in the
temp HOME's settings; the fake also takes only requests with Qwen Code's own system prompt
as the conversation's.
"""

from __future__ import annotations

import json

import pytest

from acp_real_support import QwenWorld, stop_of, texts
from fake_chat import FakeChat, call, text
from listener_support import LOOKUP, text_result
from sidecar import kind_name


@pytest.fixture
def api():
    with FakeChat() as fake:
        yield fake


@pytest.fixture
def world(api, tmp_path):
    w = QwenWorld(tmp_path, api)
    try:
        yield w
    finally:
        w.close()


def test_probe_names_the_pinned_version(world):
    details = world.sc.ok({"cmd": "probe", "agent": world.agent, "dir": str(world.work)}, timeout=120)
    assert details["version"] == "0.24.4"
    assert world.wait_gone() == []


def test_a_streamed_text_turn_then_close_leaves_no_process(world, api):
    api.script(text("Hello from the fake Qwen", chunks=4))
    session = world.open()["id"]
    world.prompt(session, "say hello")
    events = world.turn(session)
    assert len([e for e in events if kind_name(e["kind"]) == "TextDelta"]) >= 2
    assert texts(events) == "Hello from the fake Qwen"
    assert stop_of(events) == "Completed"
    assert "say hello" in api.turns()[0].user_texts()[-1]
    world.close_session(session)
    assert world.wait_gone() == []


@pytest.mark.parametrize("allow", [True, False])
def test_a_shell_command_behind_a_permission(world, api, allow):
    api.script(call("run_shell_command", {"command": "echo made > made.txt", "description": "make a file"}), text("ran"))
    session = world.open()["id"]
    world.prompt(session, "make the file")
    permission = world.request(session)["Permission"]
    assert permission["tool"]["kind"] == "Execute"
    world.answer(session, permission["id"], {"Permission": "AllowOnce" if allow else "DenyOnce"})
    events = world.turn(session)
    made = world.work / "made.txt"
    assert made.exists() == allow
    if allow:
        assert made.read_text() == "made\n"
        assert stop_of(events) == "Completed" and texts(events) == "ran"


def test_reading_a_file(world, api):
    (world.work / "notes.txt").write_text("the secret word is kumquat\n")
    api.script(call("read_file", {"file_path": str(world.work / "notes.txt")}), text("read it"))
    session = world.open()["id"]
    world.prompt(session, "read notes.txt")
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert "kumquat" in json.dumps(api.turns()[1].tool_results())


def test_creating_a_new_file_and_overwriting_one_through_fs(world, api):
    """Qwen overwrites only a file it read in the session; in its default mode it asks for
    neither write here (a new file, a file it has read, inside the workspace)."""
    (world.work / "old.txt").write_text("old content\n")
    api.script(
        call("write_file", {"file_path": str(world.work / "new.txt"), "content": "brand new\n"}),
        call("read_file", {"file_path": str(world.work / "old.txt")}),
        call("write_file", {"file_path": str(world.work / "old.txt"), "content": "new content\n"}),
        text("wrote both"),
    )
    session = world.open()["id"]
    world.prompt(session, "write the files")
    while True:
        event = world.next_event(session, "RequestOpened", "TurnEnded")
        if kind_name(event["kind"]) == "TurnEnded":
            break
        world.answer(session, event["kind"]["RequestOpened"]["Permission"]["id"], {"Permission": "AllowOnce"})
    assert kind_name(event["kind"]["TurnEnded"]["stop"]) == "Completed"
    assert (world.work / "new.txt").read_text() == "brand new\n"
    assert (world.work / "old.txt").read_text() == "new content\n"
    results = json.dumps(api.turns()[-1].tool_results())
    assert "Successfully created" in results and "old content" in results


def test_cancel_mid_stream(world, api):
    api.script(text("partial answer", chunks=2, hang=True), text("after the cancel"))
    session = world.open()["id"]
    world.prompt(session, "talk slowly")
    world.next_event(session, "TextDelta")
    world.sc.ok({"cmd": "cancel", "session": session})
    assert stop_of(world.turn(session)) == "Cancelled"
    world.prompt(session, "again")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "after the cancel"


def test_cancel_while_a_permission_is_pending(world, api):
    api.script(call("run_shell_command", {"command": "echo no > never.txt", "description": "x"}), text("next"))
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


def test_the_apps_tool_is_deferred_and_unannounced_yet_reaches_the_app_with_no_permission(world, api):
    """Qwen 0.24.4 connects to the listener and registers the app's tool as a *deferred*
    tool (behind its tool_search), but announces it nowhere: neither its name nor its
    schema is in any model request, so a model has no reason to look for it (asserted as
    it is, docs/agents.md; the day Qwen announces it this fails). Found with tool_search or
    called by its name ``mcp__agentproto__<tool>``, it reaches the app as a ToolCall, with
    no permission asked (titled ``<tool> (agentproto MCP Server)``, Gemini's spelling)."""
    api.script(
        text("no tool here"),
        call("tool_search", {"query": "lookup"}),
        call("mcp__agentproto__lookup", {"word": "qwen"}),
        text("looked up"),
    )
    session = world.open(tools=[LOOKUP])["id"]
    world.prompt(session, "look qwen up")
    assert stop_of(world.turn(session)) == "Completed"
    first = api.turns()[0]
    assert not [name for name in first.tool_names() if "lookup" in name] and "tool_search" in first.tool_names()
    assert "Look a word up" not in json.dumps(first.body)
    world.prompt(session, "search for it, then call it")
    request = world.request(session)
    assert list(request) == ["ToolCall"], request
    assert request["ToolCall"]["tool"] == "lookup" and request["ToolCall"]["arguments"] == {"word": "qwen"}
    world.answer(session, request["ToolCall"]["id"], text_result("a coding agent"))
    assert stop_of(world.turn(session)) == "Completed"
    results = json.dumps(api.turns()[-1].tool_results())
    assert "mcp__agentproto__lookup" in results and "Look a word up" in results  # what tool_search found
    assert "a coding agent" in results
