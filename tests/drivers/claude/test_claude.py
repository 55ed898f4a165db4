"""The Claude Code driver end to end: protocol 1 frames -> agentproto serve -> the real,
pinned ``claude`` CLI -> a fake Anthropic Messages API on 127.0.0.1.

The sidecar starts with no ANTHROPIC_* variable; the CLI gets its endpoint and key only
through the session's ``env`` and its state dir through ``config_home``, so a test cannot
pass by reaching anything real.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from fake_anthropic import (
    FakeAnthropic,
    claude_bin,
    error,
    pinned_claude_version,
    plan_file,
    processes_with_env,
    text,
    thinking,
    tool_search,
    tool_use,
)
from fake_mcp import ENV_STDIO_MCP, HttpMcp, cmdlines, wait_for_file
from sidecar import Sidecar, kind_name, kinds


@pytest.fixture
def api():
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def world(api, tmp_path):
    """A workspace, a CLI state dir and a sidecar; checks no claude process outlives it."""
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "config"
    config.mkdir()
    sidecar = Sidecar(env={"AGENTPROTO_CLAUDE_BIN": claude_bin()})
    w = World(api, sidecar, work, config)
    try:
        yield w
    finally:
        sidecar.close()
        deadline = time.monotonic() + 5
        while processes_with_env(str(config)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = processes_with_env(str(config))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"claude processes left behind: {left}"


class World:
    def __init__(
        self, api: FakeAnthropic, sidecar: Sidecar, work: Path, config: Path
    ) -> None:
        self.api = api
        self.sc = sidecar
        self.work = work
        self.config = config

    def env(self, **extra: str) -> dict[str, str]:
        env = self.api.cli_env(str(self.config))
        del env["CLAUDE_CONFIG_DIR"]  # given as config_home instead
        env.update(extra)
        return env

    def options(self, **options: Any) -> dict[str, Any]:
        base = {
            "agent": "claude",
            "dir": str(self.work),
            "env": self.env(),
            "config_home": str(self.config),
        }
        base.update(options)
        return base

    def open(self, **options: Any) -> dict[str, Any]:
        return self.sc.ok({"cmd": "open", **self.options(**options)}, timeout=60)

    def turn(
        self, session: str, prompt: str, timeout: float = 60
    ) -> list[dict[str, Any]]:
        self.sc.ok({"cmd": "prompt", "session": session, "text": prompt})
        return self.sc.events(session, "TurnEnded", timeout)

    def until(
        self, session: str, predicate, timeout: float = 60
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.sc.wait_for(
                lambda l: "event" in l and l["event"]["session_id"] == session,
                max(0.01, deadline - time.monotonic()),
            )
            out.append(line["event"])
            if predicate(line["event"]):
                return out

    def close(self, session: str) -> None:
        self.sc.ok({"cmd": "close", "session": session}, timeout=30)
        self.sc.wait_for(lambda l: l.get("closed") == session, 10)


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e["kind"][name] for e in events if kind_name(e["kind"]) == name]


def joined_text(events: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for delta in of(events, "TextDelta"):
        out[delta["message_id"]] = out.get(delta["message_id"], "") + delta["text"]
    return out


def is_kind(name: str):
    return lambda e: kind_name(e["kind"]) == name


# -- discovery and probe -------------------------------------------------------------------


def test_discover_finds_claude_with_its_version(world):
    report = world.sc.ok({"cmd": "discover"}, timeout=30)
    claude = next(a for a in report["agents"] if a["id"] == "claude")
    assert claude["executable_path"] == claude_bin()
    assert claude["source"] == "EnvOverride"
    assert claude["version"] == pinned_claude_version()


def test_discover_reports_missing_claude_with_install_hint(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    with Sidecar(env={"PATH": str(empty), "HOME": str(tmp_path)}) as sc:
        report = sc.ok({"cmd": "discover"}, timeout=30)
        missing = next(m for m in report["missing"] if m["id"] == "claude")
        assert missing["install_hint"] == "npm install -g @anthropic-ai/claude-code"
        error_body = sc.error({"cmd": "open", "agent": "claude", "dir": str(tmp_path)})
        assert error_body["kind"] == "NotInstalled" and error_body["agent"] == "claude"


def test_probe_reports_version_auth_and_options(world):
    details = world.sc.ok({"cmd": "probe", **world.options()}, timeout=60)
    assert details["version"] == pinned_claude_version()
    assert details["auth"] == {"Authenticated": {"kind": "ApiKey", "account": None}}
    options = {o["id"]: o for o in details["config_options"]}
    models = [c["value"] for c in options["model"]["kind"]["Select"]["choices"]]
    assert "default" in models and "sonnet" in models
    assert options["mode"]["current"] == "default"
    assert {"Permissions", "Questions", "Resume", "Compact"} <= set(
        details["capabilities"]["features"]
    )
    assert world.api.main_requests() == []  # probing costs no model call


def test_probe_without_credentials_is_unauthenticated(world):
    env = world.env()
    del env["ANTHROPIC_API_KEY"]
    details = world.sc.ok({"cmd": "probe", **world.options(env=env)}, timeout=60)
    login = details["auth"]["Unauthenticated"]["login"]
    assert login[0]["Terminal"]["command"][-1] == "/login"
    assert {"EnvVar": {"name": "ANTHROPIC_API_KEY"}} in login


def test_open_without_credentials_is_auth_required(world):
    env = world.env()
    del env["ANTHROPIC_API_KEY"]
    body = world.sc.error({"cmd": "open", **world.options(env=env)}, timeout=60)
    assert body["kind"] == "AuthRequired"
    assert body["login"][0]["Terminal"]["command"] == [claude_bin(), "/login"]
    assert {"EnvVar": {"name": "ANTHROPIC_API_KEY"}} in body["login"]


# -- turns ---------------------------------------------------------------------------------


def test_text_turn_streams_deltas_that_join_to_the_message(world):
    world.api.push(text("Hello there, streaming world!", chunk=3, delay=0.02))
    info = world.open()
    assert info["resume_token"]
    sid = info["id"]
    events = world.turn(sid, "say hello")
    texts = joined_text(events)
    assert list(texts.values()) == ["Hello there, streaming world!"]
    assert len(of(events, "TextDelta")) > 3
    (message_id,) = texts
    assert {"message_id": message_id} in of(events, "MessageEnded")
    (ended,) = of(events, "TurnEnded")
    assert ended["stop"] == {"Completed": {"source": "Protocol"}}
    assert ended["usage"]["output_tokens"] == 7
    usage = of(events, "ContextUsage")[-1]
    assert usage["cost_usd"] > 0 and usage["window_tokens"]
    (request,) = world.api.main_requests()
    assert "say hello" in request.last_user_text()
    world.close(sid)


def test_thinking_streams_as_reasoning(world):
    world.api.push(thinking("Let me think about it.", "The answer is 4."))
    sid = world.open()["id"]
    events = world.turn(sid, "2+2?")
    assert (
        "".join(d["text"] for d in of(events, "ReasoningDelta"))
        == "Let me think about it."
    )
    assert list(joined_text(events).values()) == ["The answer is 4."]
    world.close(sid)


def test_tool_allowed_runs_only_after_the_answer(world):
    world.api.push(
        tool_use(
            "Bash", {"command": "echo made > made.txt", "description": "Make a file"}
        ),
        text("Made it."),
    )
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "make a file"})
    events = world.until(sid, is_kind("RequestOpened"))
    (request,) = of(events, "RequestOpened")
    permission = request["Permission"]
    assert permission["tool"]["kind"] == "Execute"
    assert permission["tool"]["input"] == {
        "Command": {"command": "echo made > made.txt", "cwd": None}
    }
    assert "AllowOnce" in permission["options"]
    assert any(
        u["kind"] == "Execute" and u["status"] == "Pending"
        for u in of(events, "ToolUpdated")
    )
    time.sleep(0.5)
    assert not (world.work / "made.txt").exists()  # nothing ran before the answer
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": permission["id"],
            "answer": {"Permission": "AllowOnce"},
        }
    )
    rest = world.sc.events(sid, "TurnEnded", 60)
    assert of(rest, "RequestClosed")[0] == {"request_id": permission["id"]}
    done = [u for u in of(rest, "ToolUpdated") if u["status"] == "Completed"]
    assert done and done[0]["id"] == permission["tool"]["id"]
    assert (world.work / "made.txt").read_text() == "made\n"
    assert of(rest, "TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}
    world.close(sid)


def test_tool_denied_does_not_run_and_the_turn_goes_on(world):
    world.api.push(
        tool_use("Write", {"file_path": str(world.work / "nope.txt"), "content": "x"}),
        text("Understood."),
    )
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "write a file"})
    events = world.until(sid, is_kind("RequestOpened"))
    permission = of(events, "RequestOpened")[0]["Permission"]
    assert permission["tool"]["kind"] == "Edit"
    assert permission["tool"]["diffs"] == [
        {"path": str(world.work / "nope.txt"), "old_text": None, "new_text": "x"}
    ]
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": permission["id"],
            "answer": {"Deny": {"message": "Not today."}},
        }
    )
    rest = world.sc.events(sid, "TurnEnded", 60)
    assert not (world.work / "nope.txt").exists()
    failed = [u for u in of(rest, "ToolUpdated") if u["status"] == "Failed"]
    assert failed and "Not today." in failed[0]["output"]
    assert of(rest, "TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}
    assert (
        "Not today." in world.api.main_requests()[-1].last_user_text()
    )  # the model was told
    world.close(sid)


def test_auto_approve_runs_tools_without_asking(world):
    world.api.push(tool_use("Bash", {"command": "touch auto.txt"}), text("ok"))
    sid = world.open(permission_mode="AutoApprove")["id"]
    events = world.turn(sid, "go")
    assert of(events, "RequestOpened") == []
    assert (world.work / "auto.txt").exists()
    world.close(sid)


def test_question_is_a_question_request(world):
    questions = {
        "questions": [
            {
                "question": "Which color?",
                "header": "Color",
                "options": [
                    {"label": "Red", "description": "warm"},
                    {"label": "Blue", "description": "cool"},
                ],
                "multiSelect": False,
            }
        ]
    }
    world.api.push(tool_use("AskUserQuestion", questions), text("Blue it is."))
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "ask me"})
    events = world.until(sid, is_kind("RequestOpened"))
    question = of(events, "RequestOpened")[0]["Question"]
    (q,) = question["questions"]
    assert q["text"] == "Which color?" and [c["label"] for c in q["choices"]] == [
        "Red",
        "Blue",
    ]
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": question["id"],
            "answer": {"Question": [{"Choices": ["Blue"]}]},
        }
    )
    world.sc.events(sid, "TurnEnded", 60)
    assert 'Which color?\\"=\\"Blue' in world.api.main_requests()[-1].last_user_text()
    world.close(sid)


def test_cancel_mid_turn_then_a_new_prompt(world):
    world.api.push(text("This answer never finishes", hang=30), text("Second answer."))
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "long"})
    world.until(sid, is_kind("TextDelta"))
    started = time.monotonic()
    world.sc.ok({"cmd": "cancel", "session": sid})
    events = world.sc.events(sid, "TurnEnded", 30)
    assert of(events, "TurnEnded")[0]["stop"] == "Cancelled"
    assert time.monotonic() - started < 5
    events = world.turn(sid, "again")
    assert list(joined_text(events).values()) == ["Second answer."]
    assert of(events, "TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}
    world.close(sid)


def test_prompts_during_a_turn_are_queued_and_run_in_order(world):
    world.api.push(text("one", delay=0.2), text("two"), text("three"))
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "first"})
    second = world.sc.ok({"cmd": "prompt", "session": sid, "text": "second"})
    third = world.sc.ok({"cmd": "prompt", "session": sid, "text": "third"})
    assert "Queued" in second["kind"] and "Queued" in third["kind"]
    answers = []
    for _ in range(3):
        answers += list(joined_text(world.sc.events(sid, "TurnEnded", 60)).values())
    assert answers == ["one", "two", "three"]
    sent = [r.last_user_text() for r in world.api.main_requests()]
    assert ["first" in sent[0], "second" in sent[1], "third" in sent[2]] == [
        True,
        True,
        True,
    ]
    world.close(sid)


def test_live_model_and_mode_changes(world):
    world.api.push(text("before"), text("after"))
    sid = world.open()["id"]
    world.turn(sid, "one")
    world.sc.ok(
        {
            "cmd": "configure",
            "session": sid,
            "option": "model",
            "value": "claude-custom-test-1",
        }
    )
    updated = world.until(sid, is_kind("SessionUpdated"), 10)[-1]["kind"][
        "SessionUpdated"
    ]
    assert updated["configuration"]["options"]["model"] == "claude-custom-test-1"
    world.sc.ok(
        {"cmd": "configure", "session": sid, "option": "mode", "value": "acceptEdits"}
    )
    world.sc.ok(
        {"cmd": "configure", "session": sid, "option": "effort", "value": "high"}
    )
    world.turn(sid, "two")
    first, second = world.api.main_requests()
    assert first.model != "claude-custom-test-1"
    assert second.model == "claude-custom-test-1"
    assert second.body["output_config"]["effort"] == "high"
    world.close(sid)


def test_configure_at_open_passes_a_model_through(world):
    world.api.push(text("hi"))
    info = world.open(configure={"model": "claude-unlisted-model-9"})
    assert info["configuration"]["options"]["model"] == "claude-unlisted-model-9"
    world.turn(info["id"], "hello")
    assert world.api.main_requests()[0].model == "claude-unlisted-model-9"
    world.close(info["id"])


def test_instructions_and_args_reach_the_cli(world):
    world.api.push(text("hi"))
    sid = world.open(
        instructions="Always answer like a pirate.",
        args=["--disallowedTools", "WebSearch"],
    )["id"]
    world.turn(sid, "hello")
    request = world.api.main_requests()[0]
    assert "Always answer like a pirate." in json.dumps(request.body["system"])
    assert "WebSearch" not in [t.get("name") for t in request.body["tools"]]
    world.close(sid)


def test_resume_and_fork_a_closed_session(world):
    world.api.push(
        text("I will remember 4711."), text("You said 4711."), text("Forked.")
    )
    first = world.open()
    token = first["resume_token"]
    world.turn(first["id"], "remember the number 4711")
    world.close(first["id"])
    resumed = world.open(resume=token)
    assert resumed["resume_token"] == token
    world.turn(resumed["id"], "what was the number?")
    history = json.dumps(world.api.main_requests()[1].body["messages"])
    assert "remember the number 4711" in history and "I will remember 4711." in history
    world.close(resumed["id"])
    forked = world.open(resume=token, fork=token)
    assert forked["resume_token"] and forked["resume_token"] != token
    world.turn(forked["id"], "and now?")
    assert "You said 4711." in json.dumps(world.api.main_requests()[2].body["messages"])
    world.close(forked["id"])


def test_compact(world):
    world.api.push(
        text("one"), text("two"), text("three"), text("<summary>We talked.</summary>")
    )
    sid = world.open()["id"]
    for prompt in ("a", "b", "c"):
        world.turn(sid, prompt)
    world.sc.ok({"cmd": "compact", "session": sid})
    events = world.sc.events(sid, "TurnEnded", 60)
    assert "ContextCompacted" in kinds(events)
    assert of(events, "TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}
    world.close(sid)


def test_api_errors_fail_the_turn_and_retries_are_diagnostics(world):
    world.api.push(
        error(400, "invalid_request_error", "bad thing here"),
        error(529, "overloaded_error", "Overloaded"),
        text("recovered"),
    )
    sid = world.open(env=world.env(CLAUDE_CODE_MAX_RETRIES="1"))["id"]
    events = world.turn(sid, "one")
    assert of(events, "TurnEnded")[0]["stop"] == {
        "Failed": {"message": "API Error: 400 bad thing here"}
    }
    assert joined_text(events) == {}
    events = world.turn(sid, "two")
    assert any("529" in d["message"] for d in of(events, "Diagnostic"))
    assert list(joined_text(events).values()) == ["recovered"]
    world.close(sid)


def test_mcp_server_tool_called_by_the_model(world, tmp_path):
    server = tmp_path / "echo_mcp.py"
    server.write_text(ECHO_MCP)
    world.api.push(
        tool_search("mcp__echo__shout"),
        tool_use("mcp__echo__shout", {"text": "hello mcp"}),
        text("The server shouted."),
    )
    sid = world.open(
        mcp_servers=[
            {
                "name": "echo",
                "connection": {
                    "Stdio": {"command": "python3", "args": [str(server)], "env": {}}
                },
            }
        ]
    )["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "use the server"})
    events = world.until(sid, is_kind("RequestOpened"))
    permission = of(events, "RequestOpened")[0]["Permission"]
    assert permission["tool"]["kind"] == {"Mcp": {"server": "echo", "tool": "shout"}}
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": permission["id"],
            "answer": {"Permission": "AllowOnce"},
        }
    )
    rest = world.sc.events(sid, "TurnEnded", 60)
    done = [u for u in of(rest, "ToolUpdated") if u["status"] == "Completed"]
    assert done and "HELLO MCP" in done[0]["output"]
    # Named to the model at first, its schema brought in by the ToolSearch call.
    first, loaded = world.api.main_requests()[:2]
    assert "mcp__echo__shout" in json.dumps(first.body)
    assert "mcp__echo__shout" in [t["name"] for t in loaded.body["tools"]]
    world.close(sid)


def test_generate_answers_with_tools_disabled(world):
    world.api.push(text("Generated answer."))
    answer = world.sc.ok(
        {"cmd": "generate", "prompt": "one line please", **world.options()}, timeout=60
    )
    assert answer == "Generated answer."
    (request,) = world.api.main_requests()
    assert not request.body.get("tools")
    deadline = time.monotonic() + 5
    while processes_with_env(str(world.config)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_env(str(world.config)) == []


def test_killed_cli_fails_the_turn_and_closes(world):
    world.api.push(text("This answer never finishes", hang=30))
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "long"})
    world.until(sid, is_kind("TextDelta"))
    (pid,) = [p for p in processes_with_env(str(world.config)) if _is_group_leader(p)]
    os.kill(pid, signal.SIGKILL)
    events = world.sc.events(sid, "TurnEnded", 30)
    assert "Failed" in of(events, "TurnEnded")[0]["stop"]
    line = world.sc.wait_for(lambda l: l.get("session") == sid and "error" in l, 10)
    assert (
        line["error"]["kind"] == "ProcessExited"
        and line["error"]["status"] == "SIGKILL"
    )
    world.sc.wait_for(lambda l: l.get("closed") == sid, 10)
    body = world.sc.error({"cmd": "prompt", "session": sid, "text": "hello?"})
    assert body["kind"] == "SessionClosed"


def test_close_mid_turn_leaves_nothing_and_prompts_after_close_fail(world):
    world.api.push(text("This answer never finishes", hang=30))
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "long"})
    world.until(sid, is_kind("TextDelta"))
    started = time.monotonic()
    world.close(sid)
    assert time.monotonic() - started < 10
    assert processes_with_env(str(world.config)) == []
    assert (
        world.sc.error({"cmd": "prompt", "session": sid, "text": "x"})["kind"]
        == "SessionClosed"
    )


def test_a_garbled_line_is_a_diagnostic(world, tmp_path):
    wrapper = tmp_path / "claude-noisy"
    noise = "echo 'this is {not json'\necho '{\"type\":\"from_a_future_cli\",\"x\":1}'\necho '[1,2]'\n"
    wrapper.write_text(f'#!/bin/sh\n{noise}exec {claude_bin()} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    world.api.push(text("still fine"))
    info = world.sc.ok(
        {"cmd": "open", **world.options(agent={"id": "claude", "path": str(wrapper)})},
        timeout=60,
    )
    sid = info["id"]
    events = world.turn(sid, "hi")
    assert any("not JSON" in d["message"] for d in of(events, "Diagnostic")) or any(
        "not JSON" in d["message"] for d in of(world_events(world, sid), "Diagnostic")
    )
    assert list(joined_text(events).values()) == ["still fine"]
    world.close(sid)


def world_events(world: World, session: str) -> list[dict[str, Any]]:
    return [
        l["event"]
        for l in world.sc.seen
        if "event" in l and l["event"]["session_id"] == session
    ]


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


#: A stdio MCP server (newline-delimited JSON-RPC) with one tool, ``shout``.
ECHO_MCP = r"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "echo", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "shout", "description": "Upper-cases text",
                             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                             "required": ["text"]}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": msg["params"]["arguments"]["text"].upper()}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": method}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def test_allow_always_and_deny_always_stop_asking(world):
    world.api.push(
        tool_use("Bash", {"command": "mkdir -p d1"}),
        tool_use("Bash", {"command": "mkdir -p d1"}),
        tool_use("Write", {"file_path": str(world.work / "w1.txt"), "content": "1"}),
        tool_use("Write", {"file_path": str(world.work / "w2.txt"), "content": "2"}),
        text("done"),
    )
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    first = of(world.until(sid, is_kind("RequestOpened")), "RequestOpened")[0][
        "Permission"
    ]
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": first["id"],
            "answer": {"Permission": "AllowAlways"},
        }
    )
    events = world.until(sid, is_kind("RequestOpened"))
    write = of(events, "RequestOpened")[0]["Permission"]
    assert write["tool"]["kind"] == "Edit"  # the second Bash ran without asking
    assert (world.work / "d1").is_dir()
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": write["id"],
            "answer": {"Permission": "DenyAlways"},
        }
    )
    rest = world.sc.events(sid, "TurnEnded", 60)
    assert of(rest, "RequestOpened") == []  # the second Write was denied without asking
    assert [u["status"] for u in of(rest, "ToolUpdated") if u["kind"] == "Edit"][
        -1
    ] == "Denied"
    assert not (world.work / "w1.txt").exists() and not (world.work / "w2.txt").exists()
    world.close(sid)


def test_subagent_events_carry_their_parent_tool(world):
    world.api.push(
        tool_use(
            "Agent",
            {
                "description": "Sub job",
                "prompt": "do sub work",
                "subagent_type": "general-purpose",
                # In the foreground: the Agent call ends with the subagent's answer.
                "run_in_background": False,
            },
        ),
        text("sub answer", match=lambda request: "do sub work" in request.last_user_text()),
        text("main done"),
    )
    sid = world.open(permission_mode="AutoApprove")["id"]
    events = world.turn(sid, "delegate")
    (task,) = {u["id"] for u in of(events, "ToolUpdated") if u["kind"] == "Subagent"}
    nested = [e for e in events if e["turn_info"]["parent_tool_id"] == task]
    assert {
        "UserMessage": {
            "message_id": nested[0]["kind"]["UserMessage"]["message_id"],
            "text": "do sub work",
        }
    } == nested[0]["kind"]
    done = [
        u
        for u in of(events, "ToolUpdated")
        if u["id"] == task and u["status"] == "Completed"
    ]
    assert done and "sub answer" in done[0]["output"]
    world.close(sid)


def test_a_background_subagent_and_the_turn_the_cli_runs_when_it_is_done(world):
    # Claude Code 2.1.332 runs an Agent in the background by default: the call ends at once,
    # the subagent's output carries its tool as parent, and when it is done the CLI tells the
    # model in a turn nobody prompted. That turn (origin Agent) ends with its result.
    world.api.push(
        tool_use("Agent", {"description": "Sub job", "prompt": "do sub work", "subagent_type": "general-purpose"}),
        text("sub answer", match=lambda request: "do sub work" in request.last_user_text()),
        text("main waits", match=lambda request: "Async agent launched" in request.last_user_text()),
        text("main saw it", match=lambda request: "SYSTEM NOTIFICATION" in request.last_user_text()),
        text("next answer"),
    )
    sid = world.open(permission_mode="AutoApprove")["id"]
    events = world.turn(sid, "delegate")
    (task,) = {u["id"] for u in of(events, "ToolUpdated") if u["kind"] == "Subagent"}
    first = events[-1]["turn_info"]["id"]
    own = world.until(sid, lambda e: is_kind("TurnEnded")(e) and (e["turn_info"] or {}).get("id") != first)
    everything = events + own
    nested = [e for e in everything if (e["turn_info"] or {}).get("parent_tool_id") == task]
    # Its prompt (from the CLI's task_started: no user message of its own comes) and answer.
    assert [m["text"] for m in of(nested, "UserMessage")] == ["do sub work"]
    assert list(joined_text(nested).values()) == ["sub answer"]
    assert of(own, "TurnStarted") == [{"origin": "Agent"}]
    assert list(joined_text(own).values())[-1] == "main saw it"
    assert of(own, "TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}
    # The session is idle again: the next prompt is a turn of its own.
    assert list(joined_text(world.turn(sid, "next")).values()) == ["next answer"]
    world.close(sid)


def test_accept_edits_mode_edits_without_asking_but_asks_for_commands(world):
    world.api.push(
        tool_use(
            "Write", {"file_path": str(world.work / "edited.txt"), "content": "hi\n"}
        ),
        tool_use("Bash", {"command": "python3 -c \"open('cmd.txt', 'w')\""}),
        text("done"),
    )
    info = world.open(permission_mode="AcceptEdits")
    assert info["configuration"]["options"]["mode"] == "acceptEdits"
    sid = info["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    events = world.until(sid, is_kind("RequestOpened"))
    assert (world.work / "edited.txt").read_text() == "hi\n"
    permission = of(events, "RequestOpened")[0]["Permission"]
    assert permission["tool"]["kind"] == "Execute"
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": permission["id"],
            "answer": {"Permission": "DenyOnce"},
        }
    )
    world.sc.events(sid, "TurnEnded", 60)
    assert not (world.work / "cmd.txt").exists()
    world.close(sid)


def test_cancel_while_a_permission_is_open(world):
    world.api.push(tool_use("Bash", {"command": "touch never.txt"}), text("after"))
    sid = world.open()["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    permission = of(world.until(sid, is_kind("RequestOpened")), "RequestOpened")[0][
        "Permission"
    ]
    world.sc.ok({"cmd": "cancel", "session": sid})
    events = world.sc.events(sid, "TurnEnded", 30)
    assert {"request_id": permission["id"]} in of(events, "RequestClosed")
    assert of(events, "TurnEnded")[0]["stop"] == "Cancelled"
    assert not (world.work / "never.txt").exists()
    assert list(joined_text(world.turn(sid, "again")).values()) == ["after"]
    world.close(sid)


def test_fork_at_a_message(world):
    world.api.push(
        text("First answer."), text("Second answer."), text("Forked answer.")
    )
    info = world.open()
    sid, token = info["id"], info["resume_token"]
    first = world.turn(sid, "first question")
    world.turn(sid, "second question")
    world.close(sid)
    (ended,) = [e for e in first if kind_name(e["kind"]) == "MessageEnded"]
    at = ended["extensions"]["claude"]["uuid"]
    forked = world.open(resume=token, fork=token, fork_at=at)
    world.turn(forked["id"], "third question")
    history = json.dumps(world.api.main_requests()[-1].body["messages"])
    assert "First answer." in history and "second question" not in history
    world.close(forked["id"])


def test_plan_mode_proposal_and_the_cli_leaving_plan_mode(world):
    # Claude Code 2.1.332: the model writes its plan to the plan file plan mode names, and
    # ExitPlanMode (a deferred tool, loaded first) takes no plan: the CLI reads the file.
    world.api.push(
        tool_search("ExitPlanMode"),
        lambda request: tool_use(
            "Write", {"file_path": plan_file(request), "content": "1. do a\n2. do b"}
        ),
        tool_use("ExitPlanMode", {}),
        text("Going."),
    )
    info = world.open(configure={"mode": "plan"})
    assert info["configuration"]["options"]["mode"] == "plan"
    sid = info["id"]
    world.sc.ok({"cmd": "prompt", "session": sid, "text": "plan it"})
    events = world.until(sid, is_kind("RequestOpened"))
    assert of(events, "PlanProposed") == [{"markdown": "1. do a\n2. do b"}]
    permission = of(events, "RequestOpened")[0]["Permission"]
    world.sc.ok(
        {
            "cmd": "answer",
            "session": sid,
            "request": permission["id"],
            "answer": {"Permission": "AllowOnce"},
        }
    )
    rest = world.sc.events(sid, "TurnEnded", 60)
    updated = of(rest, "SessionUpdated")[-1]
    assert updated["configuration"]["options"]["mode"] == "default"
    mode = next(o for o in updated["details"]["config_options"] if o["id"] == "mode")
    assert mode["current"] == "default"
    world.close(sid)


def test_a_rejected_key_mid_session_is_auth_required(world):
    world.api.push(error(401, "authentication_error", "invalid x-api-key"))
    sid = world.open()["id"]
    events = world.turn(sid, "hello")
    assert "Failed" in of(events, "TurnEnded")[0]["stop"]
    line = world.sc.wait_for(lambda l: l.get("session") == sid and "error" in l, 10)
    assert line["error"]["kind"] == "AuthRequired"
    assert {"EnvVar": {"name": "ANTHROPIC_API_KEY"}} in line["error"]["login"]
    world.sc.wait_for(lambda l: l.get("closed") == sid, 15)


def test_attachments_reach_the_model(world, tmp_path):
    png = tmp_path / "dot.png"
    png.write_bytes(
        bytes.fromhex(
            "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
            "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
        )
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("the secret word is teal")
    world.api.push(text("Seen."))
    sid = world.open()["id"]
    world.sc.ok(
        {
            "cmd": "prompt",
            "session": sid,
            "text": "look",
            "attachments": [str(png), str(notes)],
        }
    )
    world.sc.events(sid, "TurnEnded", 60)
    (user,) = [
        m for m in world.api.main_requests()[0].body["messages"] if m["role"] == "user"
    ]
    content = user["content"]
    assert any(
        b.get("type") == "image" and b["source"]["media_type"] == "image/png"
        for b in content
    )
    assert "the secret word is teal" in json.dumps(content)
    world.close(sid)


# -- secrets and private files (issue 13) --------------------------------------------------

SECRETS = {
    "env": "sk-test-SECRET-env-1234",
    "auth": "sk-test-SECRET-bearer-5678",
    "header": "sk-test-SECRET-header-9012",
}


@pytest.fixture
def private_world(api, tmp_path):
    """``world`` with the sidecar's temp dir (TMPDIR) in tmp_path, to watch its private area."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "config"
    config.mkdir()
    sidecar = Sidecar(env={"AGENTPROTO_CLAUDE_BIN": claude_bin(), "TMPDIR": str(tmp)})
    w = World(api, sidecar, work, config)
    w.tmp = tmp  # type: ignore[attr-defined]
    http = HttpMcp()
    w.http = http  # type: ignore[attr-defined]
    try:
        yield w
    finally:
        sidecar.close()
        http.close()
        for pid in processes_with_env(str(config)):
            os.kill(pid, signal.SIGKILL)


def _secret_servers(world: World, dump: Path) -> list[dict[str, Any]]:
    tests_dir = str(Path(__file__).resolve().parents[2] / "fakes")
    script = dump.parent / "env_mcp.py"
    script.write_text(ENV_STDIO_MCP)
    return [
        {"name": "envdump", "connection": {"Stdio": {
            "command": "python3", "args": [str(script), str(dump), tests_dir], "env": {"MCP_SECRET": SECRETS["env"]}}}},
        {"name": "web", "connection": {"Http": {
            "url": world.http.url,  # type: ignore[attr-defined]
            "headers": {"Authorization": f"Bearer {SECRETS['auth']}", "X-Team": SECRETS["header"]}}}},
    ]


def _leader(world: World) -> int:
    (pid,) = [p for p in processes_with_env(str(world.config)) if _is_group_leader(p)]
    return pid


def _mcp_config_path(pid: int) -> Path:
    argv = cmdlines([pid])[pid].split(b"\0")
    return Path(argv[argv.index(b"--mcp-config") + 1].decode())


def test_mcp_secrets_never_reach_a_command_line_and_still_reach_the_servers(private_world, tmp_path):
    world = private_world
    dump = tmp_path / "server-env.json"
    sid = world.open(mcp_servers=_secret_servers(world, dump))["id"]
    # The servers got their values: the stdio one in its environment, the HTTP one as headers.
    assert json.loads(wait_for_file(str(dump)))["MCP_SECRET"] == SECRETS["env"]
    _method, headers, _body = world.http.wait_for("initialize")
    assert headers["authorization"] == f"Bearer {SECRETS['auth']}" and headers["x-team"] == SECRETS["header"]
    # No process of the session (the CLI, its MCP servers) shows one on its command line.
    pids = processes_with_env(str(world.config))
    assert len(pids) >= 2
    for pid, cmdline in cmdlines(pids).items():
        for secret in SECRETS.values():
            assert secret.encode() not in cmdline, (pid, cmdline)
    # --mcp-config is a 0600 file in a 0700 session directory of the sidecar's 0700 area.
    config = _mcp_config_path(_leader(world))
    area = config.parent.parent
    assert stat.S_IMODE(config.lstat().st_mode) == 0o600 and config.is_file() and not config.is_symlink()
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(area.stat().st_mode) == 0o700
    assert area.parent == world.tmp and area.name.startswith("agentproto-")  # type: ignore[attr-defined]
    world.close(sid)
    assert not config.parent.exists()  # gone with the session's process
    assert world.sc.close() == 0
    assert not area.exists()  # and the whole area at exit


def test_the_private_mcp_config_goes_when_the_cli_dies_or_never_starts(private_world, tmp_path):
    world = private_world
    servers = [{"name": "none", "connection": {"Stdio": {"command": "/bin/true", "env": {"K": SECRETS["env"]}}}}]
    sid = world.open(mcp_servers=servers)["id"]
    leader = _leader(world)
    config = _mcp_config_path(leader)
    assert config.exists()
    os.kill(leader, signal.SIGKILL)
    world.sc.wait_for(lambda l: l.get("closed") == sid, 15)
    assert not config.parent.exists()

    broken = tmp_path / "claude-broken"
    broken.write_text("#!/bin/sh\necho 'not today' >&2\nexit 3\n")
    broken.chmod(0o755)
    body = world.sc.error({"cmd": "open", **world.options(agent={"id": "claude", "path": str(broken)}, mcp_servers=servers)}, 30)
    assert body["kind"] == "SpawnFailed"
    area = config.parent.parent
    assert list(area.iterdir()) == []  # the failed session's directory went too
