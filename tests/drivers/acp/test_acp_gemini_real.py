"""The real pinned Gemini CLI (``gemini --acp``, @google/gemini-cli 0.61.0) through
``serve``, against the fake Gemini API on 127.0.0.1 (tests/fakes/fake_gemini.py): probe, a
streamed turn, a shell command behind a permission (allowed, denied), reading a file,
creating and overwriting files through agentproto's fs/*, cancel mid-stream and while a
permission is pending, close and EOF with no process left, the app's own tool with no
permission asked, and folder trust (the tests trust folders only inside their temp HOME).

Gemini runs shell commands itself (no terminal/*); it reads and writes files through fs/*.
"""

from __future__ import annotations

import json
import pytest

from acp_real_support import GeminiWorld, stop_of, texts
from fake_gemini import FakeGemini, Hang, call, text
from listener_support import LOOKUP, text_result
from sidecar import kind_name


@pytest.fixture
def api():
    with FakeGemini() as fake:
        yield fake


@pytest.fixture
def world(api, tmp_path):
    w = GeminiWorld(tmp_path, api)
    try:
        yield w
    finally:
        w.close()


def test_probe_names_the_pinned_version(world):
    details = world.sc.ok({"cmd": "probe", "agent": world.agent, "dir": str(world.work)}, timeout=120)
    assert details["version"] == "0.61.0"
    assert "Permissions" in details["capabilities"]["features"]
    assert world.wait_gone() == []


def test_a_streamed_text_turn_then_close_leaves_no_process(world, api):
    api.script(text("Hello from the fake Gemini", chunks=3))
    session = world.open()["id"]
    assert world.processes()
    world.prompt(session, "say hello")
    events = world.turn(session)
    deltas = [e for e in events if kind_name(e["kind"]) == "TextDelta"]
    assert len(deltas) >= 2  # streamed, not one block
    assert texts(events) == "Hello from the fake Gemini"
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
    assert "echo made > made.txt" in permission["tool"]["title"]
    world.answer(session, permission["id"], {"Permission": "AllowOnce" if allow else "DenyOnce"})
    events = world.turn(session)
    made = world.work / "made.txt"
    if allow:
        assert made.read_text() == "made\n"
        assert stop_of(events) == "Completed"
        assert texts(events).endswith("ran")
    else:
        assert not made.exists()
        assert stop_of(events) in ("Completed", "Cancelled")


def test_reading_a_file(world, api):
    (world.work / "notes.txt").write_text("the secret word is kumquat\n")
    api.script(call("read_file", {"file_path": str(world.work / "notes.txt")}), text("read it"))
    session = world.open()["id"]
    world.prompt(session, "read notes.txt")
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    responses = api.turns()[1].function_responses()
    assert "kumquat" in json.dumps(responses)


def test_creating_a_new_file_and_overwriting_one_through_fs(world, api):
    """Gemini reads a file before writing it: a missing file must come back as ACP's
    "Resource not found" (-32002), or it fails the write before asking (issue 22)."""
    (world.work / "old.txt").write_text("old content\n")
    api.script(
        call("write_file", {"file_path": str(world.work / "new.txt"), "content": "brand new\n"}),
        call("write_file", {"file_path": str(world.work / "old.txt"), "content": "new content\n"}),
        text("wrote both"),
    )
    session = world.open()["id"]
    world.prompt(session, "write the files")
    for _ in range(2):
        permission = world.request(session)["Permission"]
        assert permission["tool"]["kind"] == "Edit"
        world.answer(session, permission["id"], {"Permission": "AllowOnce"})
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert (world.work / "new.txt").read_text() == "brand new\n"
    assert (world.work / "old.txt").read_text() == "new content\n"
    # Each write reached the model as a success, not an error.
    responses = json.dumps(api.turns()[-1].function_responses())
    assert "error" not in responses.lower()


def test_cancel_mid_stream(world, api):
    api.script(Hang("partial answer"), text("after the cancel"))
    session = world.open()["id"]
    world.prompt(session, "talk slowly")
    world.next_event(session, "TextDelta")
    world.sc.ok({"cmd": "cancel", "session": session})
    assert stop_of(world.turn(session)) == "Cancelled"
    # The session goes on.
    world.prompt(session, "again")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "after the cancel"


def test_cancel_while_a_permission_is_pending(world, api):
    api.script(call("run_shell_command", {"command": "echo no > never.txt", "description": "x"}), text("next"))
    session = world.open()["id"]
    world.prompt(session, "make the file")
    world.request(session)["Permission"]
    world.sc.ok({"cmd": "cancel", "session": session})
    events = world.turn(session)
    assert stop_of(events) == "Cancelled"
    assert "RequestClosed" in [kind_name(e["kind"]) for e in events]
    assert not (world.work / "never.txt").exists()
    world.prompt(session, "again")
    assert stop_of(world.turn(session)) == "Completed"


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
    api.script(call("mcp_agentproto_lookup", {"word": "gemini"}), text("looked up"))
    info = world.open(tools=[LOOKUP])
    session = info["id"]
    world.prompt(session, "look gemini up")
    request = world.request(session)
    assert list(request) == ["ToolCall"], request  # never a Permission for the app's own tool
    assert request["ToolCall"]["tool"] == "lookup" and request["ToolCall"]["arguments"] == {"word": "gemini"}
    world.answer(session, request["ToolCall"]["id"], text_result("a command-line agent"))
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert "mcp_agentproto_lookup" in api.turns()[0].tool_names()
    assert "a command-line agent" in json.dumps(api.turns()[1].function_responses())


def test_tools_in_an_untrusted_folder_fail_naming_the_fix(api, tmp_path):
    world = GeminiWorld(tmp_path, api, trust=False)
    try:
        error = world.open_error(tools=[LOOKUP])
        assert error["kind"] == "UnsupportedFeature", error
        assert "does not trust" in error["message"] and "TRUST_FOLDER" in error["message"]
        assert str(world.trust_file) in error["message"]
        assert not world.trust_file.exists()  # agentproto never trusts a folder itself
        assert world.processes() == []  # refused before any process started
        # Declared MCP servers would be dropped alike.
        server = {"name": "notes", "connection": {"Stdio": {"command": "/bin/true", "args": [], "env": {}}}}
        assert world.open_error(mcp_servers=[server])["kind"] == "UnsupportedFeature"
        # Without tools the session opens: nothing would be lost.
        session = world.open()["id"]
        world.prompt(session, "hi")
        assert stop_of(world.turn(session)) == "Completed"
        assert not world.trust_file.exists()
    finally:
        world.close()


def test_a_distrusted_subfolder_of_a_trusted_one_is_refused(api, tmp_path):
    world = GeminiWorld(tmp_path, api)
    try:
        world.trust_file.write_text(json.dumps({str(tmp_path): "TRUST_FOLDER", str(world.work): "DO_NOT_TRUST"}))
        assert world.open_error(tools=[LOOKUP])["kind"] == "UnsupportedFeature"
        # The session's env can trust it instead (Gemini's own variable).
        info = world.open(tools=[LOOKUP], env={"GEMINI_CLI_TRUST_WORKSPACE": "true"})
        assert info["tools_url"]
    finally:
        world.close()
