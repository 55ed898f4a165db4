"""The pinned real ACP agents (tests/acp-agents, installed into .cache/acp-agents), each
through ``serve`` against a fake model API on 127.0.0.1: the scenarios they share, each
run for every agent it holds for, in that agent's world (tests/fakes/acp_real_support.py:
its temp HOME and config, its fake model, its tool names, and what the pinned agent is
known to do where agents differ).

probe, a streamed turn then close, a shell command behind a permission (allowed, denied),
reading a file, creating and overwriting files, cancel mid-stream and while a permission is
pending, EOF on stdin, each with no process left behind; the app's own tool with no
permission asked; discover. What is one agent's own (a pinned bug of the agent, Gemini's
folder trust, Qwen's deferred tools, ...) is in test_acp_<agent>_real.py.
"""

from __future__ import annotations

import pytest

from acp_real_support import (
    WORLDS,
    AcpWorld,
    ClaudeAcpWorld,
    CodexAcpWorld,
    GeminiWorld,
    OpencodeWorld,
    QwenWorld,
    acp_agent_bin,
    running,
    stop_of,
    texts,
)
from listener_support import LOOKUP, text_result
from sidecar import Sidecar, kind_name


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path):
    with running(request.param, tmp_path) as w:
        yield w


def agents(*worlds: type[AcpWorld]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("world", worlds, indirect=True, ids=[w.ID for w in worlds])


EVERY_AGENT = agents(*WORLDS)
#: claude-agent-acp 0.23.1 answers the prompts after a cancel late: its cancel scenarios
#: pin that (test_acp_claude_real.py).
CANCEL_AGENTS = agents(GeminiWorld, CodexAcpWorld, QwenWorld, OpencodeWorld)
#: Qwen Code 0.24.4 never announces the app's tools (test_acp_qwen_real.py).
APP_TOOL_AGENTS = agents(GeminiWorld, ClaudeAcpWorld, CodexAcpWorld, OpencodeWorld)


@EVERY_AGENT
def test_probe_names_the_pinned_version(world):
    details = world.sc.ok({"cmd": "probe", "agent": world.agent, "dir": str(world.work)}, timeout=120)
    assert details["version"] == world.VERSION
    assert "Permissions" in details["capabilities"]["features"]
    assert world.wait_gone() == []


@EVERY_AGENT
def test_a_streamed_text_turn_then_close_leaves_no_process(world):
    answer = f"Hello from the fake model of {world.ID}"
    world.script(world.stream(answer))
    session = world.open()["id"]
    assert world.processes()
    world.prompt(session, "say hello")
    events = world.turn(session)
    assert len([e for e in events if kind_name(e["kind"]) == "TextDelta"]) >= world.STREAMED_DELTAS  # streamed
    assert texts(events) == answer
    assert stop_of(events) == "Completed"
    assert events[-1]["kind"]["TurnEnded"].get("usage") == world.TURN_USAGE
    assert "say hello" in world.user_texts(0)[-1]
    assert world.processes()
    world.close_session(session)
    assert world.wait_gone() == []


@pytest.mark.parametrize("allow", [True, False], ids=["allowed", "denied"])
@EVERY_AGENT
def test_a_shell_command_behind_a_permission(world, allow):
    command = "echo made > made.txt"
    world.script(world.shell(command), world.say("ran"))
    session = world.open()["id"]
    world.prompt(session, "make the file")
    permission = world.request(session)["Permission"]
    assert permission["tool"]["kind"] == "Execute"
    assert permission["tool"]["title"] == world.shell_title(command)
    assert permission["tool"]["input"] == world.shell_input(command)
    world.answer(session, permission["id"], {"Permission": "AllowOnce" if allow else "DenyOnce"})
    events = world.turn(session)
    made = world.work / "made.txt"
    if allow:
        assert made.read_text() == "made\n"
        assert stop_of(events) == "Completed" and texts(events) == "ran"
    else:
        assert not made.exists()
        assert stop_of(events) in world.DENIED_STOPS


@EVERY_AGENT
def test_reading_a_file(world):
    notes = world.work / "notes.txt"
    notes.write_text("the secret word is kumquat\n")
    world.script(world.read(notes), world.say("read it"))
    session = world.open()["id"]
    world.prompt(session, "read notes.txt")
    events, asked = world.turn_allowing(session)
    assert [p["tool"]["kind"] for p in asked] == list(world.READ_ASKS)
    assert stop_of(events) == "Completed"
    assert "kumquat" in world.tool_results(1)


@EVERY_AGENT
def test_creating_a_new_file_and_overwriting_one(world):
    new, old = world.work / "new.txt", world.work / "old.txt"
    old.write_text("old content\n")
    world.script(*world.write_both(new, "brand new\n", old, "new content\n"), world.say("wrote both"))
    session = world.open(**world.WRITE_OPTIONS)["id"]
    world.prompt(session, "write the files")
    events, asked = world.turn_allowing(session)
    assert stop_of(events) == "Completed"
    assert new.read_text() == "brand new\n"
    assert old.read_text() == "new content\n"
    asked_for = [(p["tool"]["kind"], [d["path"] for d in p["tool"]["diffs"]]) for p in asked]
    assert asked_for == ([("Edit", [str(new)]), ("Edit", [str(old)])] if world.WRITES_ASK else [])
    # The edits as the app saw them: each file's diff (the last one shown of it).
    updates = [e["kind"]["ToolUpdated"] for e in events if kind_name(e["kind"]) == "ToolUpdated"]
    assert updates[-1]["kind"] == "Edit" and updates[-1]["status"] == "Completed"
    shown = [u for u in updates if u["kind"] == "Edit" and (u["status"] == "Completed" or not world.DIFFS_ON_COMPLETION)]
    diffs = {d["path"]: (d["old_text"], d["new_text"]) for u in shown for d in u["diffs"]}
    created, overwritten = world.diff_old_texts("old content\n")
    assert diffs == {str(new): (created, "brand new\n"), str(old): (overwritten, "new content\n")}
    # Each write reached the model as a success, not an error.
    results = world.tool_results(-1)
    assert all(said in results for said in world.WRITE_RESULTS), results
    assert "error" not in results.lower()


@CANCEL_AGENTS
def test_cancel_mid_stream(world):
    world.script(world.hang("partial answer"), world.say("after the cancel"))
    session = world.open()["id"]
    world.prompt(session, "talk slowly")
    assert world.next_event(session, "TextDelta")["kind"]["TextDelta"]["text"] == "partial"
    world.sc.ok({"cmd": "cancel", "session": session})
    assert stop_of(world.turn(session)) == "Cancelled"
    world.prompt(session, "again")  # the session goes on
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == "after the cancel"


@CANCEL_AGENTS
def test_cancel_while_a_permission_is_pending(world):
    world.script(world.shell("echo no > never.txt"), world.say("next"))
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


@EVERY_AGENT
def test_eof_on_stdin_ends_every_process(world):
    session = world.open()["id"]
    world.prompt(session, "hi")
    world.turn(session)
    assert world.processes()
    world.sc.close_stdin()
    world.sc.drain(60)
    assert world.sc.proc.wait(30) == 0
    assert world.wait_gone() == []


@APP_TOOL_AGENTS
def test_the_apps_tool_is_called_with_no_permission_asked(world):
    world.script(world.app_tool("lookup", {"word": world.ID}), world.say("looked up"))
    session = world.open(tools=[LOOKUP])["id"]
    world.prompt(session, f"look {world.ID} up")
    request = world.request(session)
    assert list(request) == ["ToolCall"], request  # never a Permission for the app's own tool
    assert request["ToolCall"]["tool"] == "lookup" and request["ToolCall"]["arguments"] == {"word": world.ID}
    world.answer(session, request["ToolCall"]["id"], text_result(f"{world.ID}, a coding agent"))
    events = world.turn(session)
    assert stop_of(events) == "Completed"
    assert world.APP_LOOKUP in world.offered(0)
    assert f"{world.ID}, a coding agent" in world.tool_results(1)


def test_discover_finds_the_pinned_acp_agents_through_their_overrides(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    commands = {w.ID: w.COMMAND for w in WORLDS}
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
