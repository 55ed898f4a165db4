"""The real pinned opencode (``opencode acp``, opencode-ai 1.18.33) through ``serve``, against
the fake Chat Completions API on 127.0.0.1 (tests/fakes/fake_chat.py) as an
OpenAI-compatible provider (``options.baseURL``) in the temp HOME's
``~/.config/opencode/opencode.json``: probe, a streamed turn, a shell command behind a
permission (allowed, denied), reading a file, creating and overwriting files through
agentproto's fs/*, cancel mid-stream and while a permission is pending, close and EOF with
no process left, the app's own tool with no permission asked.

opencode allows every tool by default: the config asks for ``bash`` and ``edit``. It runs
commands itself and reads files itself. Its title generator (a second model call at the
first prompt) is told apart by its system prompt: the fake takes only opencode's own.
"""

from __future__ import annotations

import json

import pytest

from acp_real_support import OpencodeWorld, stop_of, texts
from fake_chat import FakeChat, call, text
from listener_support import LOOKUP, text_result
from sidecar import kind_name


@pytest.fixture
def api():
    with FakeChat() as fake:
        yield fake


@pytest.fixture
def world(api, tmp_path):
    w = OpencodeWorld(tmp_path, api)
    try:
        yield w
    finally:
        w.close()


def test_probe_names_the_pinned_version(world):
    details = world.sc.ok({"cmd": "probe", "agent": world.agent, "dir": str(world.work)}, timeout=120)
    assert details["version"] == "1.18.33"
    assert world.wait_gone() == []


def test_a_streamed_text_turn_then_close_leaves_no_process(world, api):
    api.script(text("Hello from the fake opencode", chunks=4))
    session = world.open()["id"]
    world.prompt(session, "say hello")
    events = world.turn(session)
    assert len([e for e in events if kind_name(e["kind"]) == "TextDelta"]) >= 2
    assert texts(events) == "Hello from the fake opencode"
    assert stop_of(events) == "Completed"
    assert events[-1]["kind"]["TurnEnded"]["usage"]["output_tokens"] == 7
    world.close_session(session)
    assert world.wait_gone() == []


@pytest.mark.parametrize("allow", [True, False])
def test_a_shell_command_behind_a_permission(world, api, allow):
    api.script(call("bash", {"command": "echo made > made.txt", "description": "make a file"}), text("ran"))
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
    api.script(call("read", {"filePath": str(world.work / "notes.txt")}), text("read it"))
    session = world.open()["id"]
    world.prompt(session, "read notes.txt")
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert "kumquat" in json.dumps(api.turns()[1].tool_results())


def test_creating_a_new_file_and_overwriting_one_through_fs(world, api):
    (world.work / "old.txt").write_text("old content\n")
    api.script(
        call("write", {"filePath": str(world.work / "new.txt"), "content": "brand new\n"}),
        call("read", {"filePath": str(world.work / "old.txt")}),
        call("write", {"filePath": str(world.work / "old.txt"), "content": "new content\n"}),
        text("wrote both"),
    )
    session = world.open()["id"]
    world.prompt(session, "write the files")
    asked = 0
    while True:
        event = world.next_event(session, "RequestOpened", "TurnEnded")
        if kind_name(event["kind"]) == "TurnEnded":
            break
        asked += 1
        permission = event["kind"]["RequestOpened"]["Permission"]
        assert permission["tool"]["kind"] == "Edit"
        world.answer(session, permission["id"], {"Permission": "AllowOnce"})
    assert asked == 2
    assert kind_name(event["kind"]["TurnEnded"]["stop"]) == "Completed"
    assert (world.work / "new.txt").read_text() == "brand new\n"
    assert (world.work / "old.txt").read_text() == "new content\n"


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
    api.script(call("bash", {"command": "echo no > never.txt", "description": "x"}), text("next"))
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
    api.script(call("agentproto_lookup", {"word": "opencode"}), text("looked up"))
    session = world.open(tools=[LOOKUP])["id"]
    world.prompt(session, "look opencode up")
    request = world.request(session)
    assert list(request) == ["ToolCall"], request
    assert request["ToolCall"]["tool"] == "lookup" and request["ToolCall"]["arguments"] == {"word": "opencode"}
    world.answer(session, request["ToolCall"]["id"], text_result("an open agent"))
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert "agentproto_lookup" in api.turns()[0].tool_names()
    assert "an open agent" in json.dumps(api.turns()[1].tool_results())


def test_the_apps_tool_is_not_asked_about_when_every_tool_asks(api, tmp_path):
    """With ``"permission": {"*": "ask"}`` opencode asks for the app's tool too, titled
    ``agentproto_<tool>``: agentproto answers it itself (it used to ask the app)."""
    world = OpencodeWorld(tmp_path, api, permission={"*": "ask"})
    try:
        api.script(call("agentproto_lookup", {"word": "opencode"}), text("looked up"))
        session = world.open(tools=[LOOKUP])["id"]
        world.prompt(session, "look opencode up")
        request = world.request(session)
        assert list(request) == ["ToolCall"], request
        world.answer(session, request["ToolCall"]["id"], text_result("an open agent"))
        assert stop_of(world.turn(session)) == "Completed"
        assert "an open agent" in json.dumps(api.turns()[1].tool_results())
    finally:
        world.close()


def test_discover_finds_the_pinned_acp_agents_through_their_overrides(tmp_path):
    from acp_real_support import acp_agent_bin
    from sidecar import Sidecar

    home = tmp_path / "home"
    home.mkdir()
    commands = {"gemini": "gemini", "claude-acp": "claude-agent-acp", "codex-acp": "codex-acp",
                "qwen": "qwen", "opencode": "opencode"}  # fmt: skip
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    for agent_id, command in commands.items():
        env[f"AGENTPROTO_{agent_id.upper().replace('-', '_')}_BIN"] = acp_agent_bin(command)
    with Sidecar(env=env) as sc:
        report = sc.ok({"cmd": "discover"}, 120)
    agents = {a["id"]: a for a in report["agents"]}
    versions = {agent_id: agents[agent_id]["version"] for agent_id in commands}
    # The two adapters answer no --version (probe reads theirs from ACP's initialize).
    assert versions == {"gemini": "0.61.0", "claude-acp": None, "codex-acp": None, "qwen": "0.24.4",
                        "opencode": "1.18.33"}  # fmt: skip
    assert all(agents[agent_id]["executable_path"] == env[f"AGENTPROTO_{agent_id.upper().replace('-', '_')}_BIN"]
               for agent_id in commands)  # fmt: skip
    assert agents["qwen"]["acp_args"] == ["--acp"] and agents["opencode"]["acp_args"] == ["acp"]
    assert all(agents[agent_id]["source"] == "EnvOverride" for agent_id in commands)
