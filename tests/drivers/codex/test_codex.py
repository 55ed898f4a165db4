"""The Codex driver end to end: the real pinned ``codex app-server`` against the fake
OpenAI Responses API on 127.0.0.1, through ``serve`` (every line schema-checked by
tests/fakes/sidecar.py) and through the Python client."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest

from agentproto.client import AgentProtoError, Runtime, kind_of
import fake_openai as fo
from fake_mcp import ENV_STDIO_MCP, HttpMcp, cmdlines, wait_for_file
from sidecar import Sidecar, kind_name, kinds


@pytest.fixture
def world(tmp_path):
    w = fo.CodexWorld(str(tmp_path))
    yield w
    w.close()


@pytest.fixture
def sidecar(world):
    sc = Sidecar(env=world.env)
    yield sc
    if sc.proc.poll() is None:
        sc.close()


def open_codex(sc: Sidecar, world: fo.CodexWorld, **options: Any) -> dict[str, Any]:
    return sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, **options}, timeout=60)


def turn(sc: Sidecar, session: str, text: str, timeout: float = 60) -> list[dict[str, Any]]:
    sc.ok({"cmd": "prompt", "session": session, "text": text})
    return sc.events(session, "TurnEnded", timeout=timeout)


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")


def of_kind(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e["kind"][name] for e in events if kind_name(e["kind"]) == name]


def stop_of(events: list[dict[str, Any]]) -> Any:
    return events[-1]["kind"]["TurnEnded"]["stop"]


def next_status(sc: Sidecar, session: str) -> str:
    return sc.events(session, "StatusChanged", timeout=10)[-1]["kind"]["StatusChanged"]


# -- discovery and probe -----------------------------------------------------------------


def test_discover_finds_pinned_codex_with_version(sidecar, world):
    report = sidecar.ok({"cmd": "discover"}, timeout=30)
    codex = next(a for a in report["agents"] if a["id"] == "codex")
    assert codex["executable_path"] == fo.pinned_codex()
    assert codex["source"] == "EnvOverride"
    assert codex["version"] == "0.171.0"  # the number in what `codex --version` printed (codex-cli 0.171.0)


def test_probe_reports_version_options_and_capabilities(sidecar, world):
    details = sidecar.ok({"cmd": "probe", "agent": {"id": "codex", "path": fo.pinned_codex()}, "dir": world.work}, timeout=60)
    assert details["version"] == "0.171.0"
    features = details["capabilities"]["features"]
    for feature in ("Resume", "Fork", "Steer", "Permissions", "Questions", "Compact", "ContextUsage"):
        assert feature in features
    assert set(details["capabilities"]["mcp_transports"]) == {"Stdio", "Http"}
    options = {o["id"]: o for o in details["config_options"]}
    assert set(options) == {"model", "effort", "sandbox", "mode"}
    assert options["model"]["current"] == "fake-model"  # the model of the user's config
    assert len(options["model"]["kind"]["Select"]["choices"]) > 1  # from model/list
    assert [c["value"] for c in options["mode"]["kind"]["Select"]["choices"]] == ["default", "plan"]
    assert world.wait_no_codex() == []


def test_probe_without_openai_login_is_unauthenticated_with_login_steps(tmp_path):
    world = fo.CodexWorld(str(tmp_path))
    try:
        # The built-in OpenAI provider, and no key anywhere.
        with open(os.path.join(world.codex_home, "config.toml"), "w") as f:
            f.write('model = "gpt-6.2-sol"\n')
        with Sidecar(env=world.env) as sc:
            details = sc.ok({"cmd": "probe", "agent": "codex", "dir": world.work}, timeout=60)
            login = details["auth"]["Unauthenticated"]["login"]
            assert {"Terminal": {"command": ["codex", "login"], "env": {}, "description": login[0]["Terminal"]["description"]}} == login[0]
            assert {"EnvVar": {"name": "OPENAI_API_KEY"}} in login
            assert {"EnvVar": {"name": "CODEX_API_KEY"}} in login
            error = sc.error({"cmd": "open", "agent": "codex", "dir": world.work}, timeout=60)
            assert error["kind"] == "AuthRequired" and error["login"] == login
    finally:
        world.close()


# -- turns -------------------------------------------------------------------------------


def test_text_turn_streams_then_ends_before_idle(sidecar, world):
    world.api.script(fo.text("Hello from Codex", chunks=4, reasoning="thinking it over"))
    info = open_codex(sidecar, world)
    assert info["agent"]["id"] == "codex"
    assert info["resume_token"]  # the thread id
    session = info["id"]
    events = turn(sidecar, session, "hi")
    assert text_of(events) == "Hello from Codex"
    assert "".join(r["text"] for r in of_kind(events, "ReasoningDelta")) == "thinking it over"
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}
    assert events[-1]["kind"]["TurnEnded"]["usage"] == {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 10}
    usage = of_kind(events, "ContextUsage")
    assert usage and usage[-1]["used_tokens"] == 110 and usage[-1]["window_tokens"]
    # TurnEnded first, then Idle, whatever order Codex reported them in.
    assert next_status(sidecar, session) == "Idle"
    assert sidecar.ok({"cmd": "info", "session": session})["status"] == "Idle"
    request = world.api.response_requests()[0]
    assert request.user_texts()[-1] == "hi"
    sidecar.ok({"cmd": "close", "session": session}, timeout=30)


def test_escalated_command_allowed_runs_outside_the_sandbox(sidecar, world):
    target = os.path.join(world.outside, "allowed.txt")
    world.api.script(fo.exec_command(f"touch {target} && echo made", escalated=True), fo.text("done"))
    session = open_codex(sidecar, world)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "make the file"})
    opened = sidecar.events(session, "RequestOpened", timeout=60)[-1]["kind"]["RequestOpened"]["Permission"]
    assert opened["tool"]["kind"] == "Execute"
    assert target in opened["tool"]["input"]["Command"]["command"]
    assert opened["detail"] == "needs to write outside the sandbox"
    assert "AllowOnce" in opened["options"] and "DenyOnce" in opened["options"]
    assert not os.path.exists(target)
    sidecar.ok({"cmd": "answer", "session": session, "request": opened["id"], "answer": {"Permission": "AllowOnce"}})
    events = sidecar.events(session, "TurnEnded", timeout=60)
    closed = kinds(events).index("RequestClosed")
    assert events[closed]["kind"]["RequestClosed"]["request_id"] == opened["id"]
    done = [t for t in of_kind(events[closed:], "ToolUpdated") if t["id"] == opened["tool"]["id"]][-1]
    assert done["kind"] == "Execute" and done["status"] == "Completed"
    assert "made" in done["output"]
    assert os.path.exists(target)
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}


def test_escalated_command_declined_leaves_the_file_system_alone(sidecar, world):
    target = os.path.join(world.outside, "declined.txt")
    world.api.script(fo.exec_command(f"touch {target}", escalated=True), fo.text("ok, not doing it"))
    session = open_codex(sidecar, world)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "make the file"})
    opened = sidecar.events(session, "RequestOpened", timeout=60)[-1]["kind"]["RequestOpened"]["Permission"]
    sidecar.ok({"cmd": "answer", "session": session, "request": opened["id"], "answer": {"Permission": "DenyOnce"}})
    events = sidecar.events(session, "TurnEnded", timeout=60)
    tool = [t for t in of_kind(events, "ToolUpdated") if t["id"] == opened["tool"]["id"]][-1]
    assert tool["status"] == "Failed"
    assert text_of(events) == "ok, not doing it"
    assert not os.path.exists(target)
    # Codex told the model the user said no.
    assert "rejected by user" in "\n".join(world.api.response_requests()[-1].input_texts())


def test_patch_outside_the_workspace_asks_and_applies(sidecar, world):
    target = os.path.join(world.outside, "patched.txt")
    patch = fo.add_file_patch(target, "hello\npatch")
    world.api.script(fo.exec_command(f"apply_patch <<'EOF'\n{patch}EOF\n"), fo.text("patched"))
    session = open_codex(sidecar, world)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "patch it"})
    events = sidecar.events(session, "RequestOpened", timeout=60)
    opened = events[-1]["kind"]["RequestOpened"]["Permission"]
    assert opened["tool"]["kind"] == "Edit"
    assert opened["tool"]["diffs"] == [{"path": target, "old_text": None, "new_text": "hello\npatch\n"}]
    assert opened["tool"]["locations"] == [target]
    sidecar.ok({"cmd": "answer", "session": session, "request": opened["id"], "answer": {"Permission": "AllowOnce"}})
    events = sidecar.events(session, "TurnEnded", timeout=60)
    edit = [t for t in of_kind(events, "ToolUpdated") if t["id"] == opened["tool"]["id"]][-1]
    assert edit["status"] == "Completed"
    with open(target) as f:
        assert f.read() == "hello\npatch\n"


def test_accept_edits_approves_patches_and_asks_for_commands(sidecar, world):
    patched = os.path.join(world.outside, "auto.txt")
    ran = os.path.join(world.outside, "ran.txt")
    patch = fo.add_file_patch(patched, "auto")
    world.api.script(
        fo.exec_command(f"apply_patch <<'EOF'\n{patch}EOF\n"),
        fo.exec_command(f"touch {ran}", escalated=True),
        fo.text("both"),
    )
    session = open_codex(sidecar, world, permission_mode="AcceptEdits")["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "go"})
    events = sidecar.events(session, "RequestOpened", timeout=60)
    permissions = of_kind(events, "RequestOpened")
    assert len(permissions) == 1 and permissions[0]["Permission"]["tool"]["kind"] == "Execute"
    assert os.path.exists(patched)  # the edit was approved without asking
    sidecar.ok({"cmd": "answer", "session": session, "request": permissions[0]["Permission"]["id"], "answer": {"Permission": "AllowOnce"}})
    events = sidecar.events(session, "TurnEnded", timeout=60)
    assert os.path.exists(ran)


def test_cancel_mid_turn_then_prompt_again(sidecar, world):
    world.api.script(fo.Hang(), fo.text("after the cancel"))
    session = open_codex(sidecar, world)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "take forever"})
    world.api.wait_requests(1, timeout=30)
    started = time.monotonic()
    sidecar.ok({"cmd": "cancel", "session": session})
    events = sidecar.events(session, "TurnEnded", timeout=15)
    assert stop_of(events) == "Cancelled"
    assert time.monotonic() - started < 5
    events = turn(sidecar, session, "again")
    assert text_of(events) == "after the cancel"
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}


def test_prompt_during_a_turn_steers_it(sidecar, world):
    world.api.script(fo.slow_text("one two three four five six", chunks=6, delay=0.4), fo.text("steered answer"))
    session = open_codex(sidecar, world)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "count"})
    sidecar.events(session, "TextDelta", timeout=60)
    delivery = sidecar.ok({"cmd": "prompt", "session": session, "text": "actually, stop counting"})
    assert "Steered" in delivery["kind"]
    events = sidecar.events(session, "TurnEnded", timeout=60)
    assert "steered answer" in text_of(events)
    assert world.api.response_requests()[-1].user_texts()[-1] == "actually, stop counting"


def test_model_change_reaches_the_next_request(sidecar, world):
    world.api.script(fo.text("first"), fo.text("second"))
    session = open_codex(sidecar, world, configure={"effort": "high"})["id"]
    turn(sidecar, session, "one")
    sidecar.ok({"cmd": "configure", "session": session, "option": "model", "value": "some-unlisted-model"})
    updated = sidecar.events(session, "SessionUpdated", timeout=10)[-1]["kind"]["SessionUpdated"]
    assert updated["configuration"]["options"]["model"] == "some-unlisted-model"
    turn(sidecar, session, "two")
    first, second = world.api.response_requests()
    assert first.model == "fake-model" and first.body["reasoning"]["effort"] == "high"
    assert second.model == "some-unlisted-model"


def test_close_then_resume_sees_the_history(sidecar, world):
    world.api.script(fo.text("noted"), fo.text("it was banana"))
    info = open_codex(sidecar, world)
    token = info["resume_token"]
    turn(sidecar, info["id"], "remember the word banana")
    sidecar.ok({"cmd": "close", "session": info["id"]}, timeout=30)
    # close waited for the process: nothing holds the thread any more.
    assert world.codex_processes() == []
    resumed = open_codex(sidecar, world, resume=token)
    assert resumed["resume_token"] == token
    events = turn(sidecar, resumed["id"], "what was the word?")
    assert text_of(events) == "it was banana"
    history = world.api.response_requests()[-1].input_texts()
    assert "remember the word banana" in history and "noted" in history
    sidecar.ok({"cmd": "close", "session": resumed["id"]}, timeout=30)


def test_fork_starts_a_new_thread_with_the_history(sidecar, world):
    world.api.script(fo.text("noted"), fo.text("forked"))
    info = open_codex(sidecar, world)
    turn(sidecar, info["id"], "the secret is 42")
    sidecar.ok({"cmd": "close", "session": info["id"]}, timeout=30)
    forked = open_codex(sidecar, world, fork=info["resume_token"])
    assert forked["resume_token"] and forked["resume_token"] != info["resume_token"]
    turn(sidecar, forked["id"], "and now?")
    assert "the secret is 42" in world.api.response_requests()[-1].input_texts()


def test_resume_of_an_unknown_thread_fails(sidecar, world):
    error = sidecar.error({"cmd": "open", "agent": "codex", "dir": world.work, "resume": "01a22760-0000-7000-8000-000000000000"}, timeout=60)
    assert error["kind"] == "ResumeFailed"
    assert world.wait_no_codex() == []


def test_generate_answers_in_text_without_tools(sidecar, world):
    world.api.script(fo.text("a one-line title"))
    text = sidecar.ok({"cmd": "generate", "agent": "codex", "dir": world.work, "prompt": "title this"}, timeout=60)
    assert text == "a one-line title"
    request = world.api.response_requests()[-1]
    assert "exec_command" not in request.tool_names()
    assert request.user_texts()[-1] == "title this"
    assert world.wait_no_codex() == []


def test_instructions_and_config_home_reach_codex(sidecar, world, tmp_path):
    home = tmp_path / "explicit-home"
    home.mkdir()
    with open(os.path.join(world.codex_home, "config.toml")) as f:
        (home / "config.toml").write_text(f.read())
    world.api.script(fo.text("ok"))
    instructions = 'Always say "quoted" \\ things\nand more'
    session = open_codex(sidecar, world, config_home=str(home), instructions=instructions)["id"]
    turn(sidecar, session, "hi")
    assert instructions in "\n".join(world.api.response_requests()[-1].input_texts())
    assert (home / "sessions").is_dir()  # Codex used it as CODEX_HOME
    sidecar.ok({"cmd": "close", "session": session}, timeout=30)


def test_missing_config_home_is_created(sidecar, world, tmp_path):
    home = tmp_path / "a" / "b" / "codex"
    info = open_codex(sidecar, world, config_home=str(home), env={"OPENAI_API_KEY": "sk-unused"})
    assert home.is_dir()
    assert info["details"]["auth"] == {"Authenticated": {"kind": "ApiKey", "account": None}}
    sidecar.ok({"cmd": "close", "session": info["id"]}, timeout=30)


def test_mcp_servers_and_args_are_given_to_codex(sidecar, world):
    servers = [
        {"name": "local tools", "connection": {"Stdio": {"command": "/bin/true", "args": ["a \"b\"", "c\\d\n"], "env": {"K": "v=1"}}}},
        {"name": "remote", "connection": {"Http": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "é"}}}},
    ]
    world.api.script(fo.text("ok"))
    session = open_codex(sidecar, world, mcp_servers=servers, args=["-c", 'model="from-args"'])["id"]
    turn(sidecar, session, "hi")
    assert world.api.response_requests()[-1].model == "from-args"


# -- failures ----------------------------------------------------------------------------


def test_unauthorized_fails_the_turn_and_session_with_auth_required(sidecar, world):
    world.api.script(fo.Error(401, "Incorrect API key provided"))
    session = open_codex(sidecar, world)["id"]
    events = turn(sidecar, session, "hi")
    assert "authentication" in stop_of(events)["Failed"]["message"]
    error = sidecar.wait_for(lambda l: l.get("session") == session and "error" in l, timeout=30)["error"]
    assert error["kind"] == "AuthRequired"
    assert {"EnvVar": {"name": "OPENAI_API_KEY"}} in error["login"]
    sidecar.wait_for(lambda l: l.get("closed") == session, timeout=30)
    assert sidecar.ok({"cmd": "discover"}, timeout=30)  # the sidecar lives on
    assert world.wait_no_codex() == []


def test_server_error_fails_the_turn_only(sidecar, world):
    world.api.script(fo.Error(500, "the server broke"), fo.Error(400, "bad field foo"), fo.text("recovered"))
    session = open_codex(sidecar, world)["id"]
    events = turn(sidecar, session, "hi")
    assert stop_of(events)["Failed"]["message"]  # Codex words 500s as "high demand"
    events = turn(sidecar, session, "again")
    assert "bad field foo" in stop_of(events)["Failed"]["message"]
    events = turn(sidecar, session, "again")
    assert text_of(events) == "recovered"


def test_no_progress_fails_the_turn_with_a_clear_message(world):
    world.env["AGENTPROTO_CODEX_STALL_SECS"] = "2"
    world.api.script(fo.Hang(), fo.text("still alive"))
    with Sidecar(env=world.env) as sc:
        session = open_codex(sc, world)["id"]
        started = time.monotonic()
        events = turn(sc, session, "hello?", timeout=30)
        message = stop_of(events)["Failed"]["message"]
        assert "no progress from Codex for 2 s" in message
        assert time.monotonic() - started < 10
        events = turn(sc, session, "again")
        assert text_of(events) == "still alive"


def test_codex_killed_mid_turn_fails_the_session(sidecar, world):
    world.api.script(fo.Hang())
    session = open_codex(sidecar, world)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "hang"})
    world.api.wait_requests(1, timeout=30)
    for pid in world.codex_processes():
        os.kill(pid, signal.SIGKILL)
    events = sidecar.events(session, "TurnEnded", timeout=30)
    assert "Failed" in stop_of(events)
    error = sidecar.wait_for(lambda l: l.get("session") == session and "error" in l, timeout=30)["error"]
    assert error["kind"] == "ProcessExited"
    assert "status" in error and "stderr" in error
    sidecar.wait_for(lambda l: l.get("closed") == session, timeout=30)
    assert world.wait_no_codex() == []


def test_close_leaves_no_codex_process(sidecar, world):
    session = open_codex(sidecar, world)["id"]
    assert len(world.codex_processes()) >= 2  # the npm launcher and the native binary
    sidecar.ok({"cmd": "close", "session": session}, timeout=30)
    left = world.codex_processes()
    assert left == [], world.describe(left)


def test_eof_exits_zero_promptly_with_no_codex_left(world):
    world.api.script(fo.Hang())
    sc = Sidecar(env=world.env)
    session = open_codex(sc, world)["id"]
    sc.ok({"cmd": "prompt", "session": session, "text": "hang"})
    world.api.wait_requests(1, timeout=30)
    started = time.monotonic()
    assert sc.close(timeout=15) == 0
    assert time.monotonic() - started < 10
    assert world.wait_no_codex(5) == []


# -- the Python client -------------------------------------------------------------------


def test_python_client_turn_permission_and_close(world):
    target = os.path.join(world.outside, "client.txt")
    world.api.script(fo.exec_command(f"touch {target}", escalated=True), fo.text("client done"))
    env = dict(os.environ, **world.env)
    with Runtime.start(env=env) as rt:
        session = rt.open("codex", dir=world.work)
        assert session.info["agent"]["id"] == "codex"
        session.prompt("make it")
        text = ""
        for event in session.events(timeout=60):
            kind = kind_of(event)
            if kind == "RequestOpened":
                request = event["kind"]["RequestOpened"]["Permission"]
                session.answer(request["id"], {"Permission": "AllowAlways"})
            elif kind == "TextDelta":
                text += event["kind"]["TextDelta"]["text"]
            elif kind == "TurnEnded":
                break
        assert text == "client done" and os.path.exists(target)
        assert rt.generate("codex", "say hi", dir=world.work) == "ok"
        session.close()
        with pytest.raises(AgentProtoError) as failure:
            rt.open("codex", dir=world.work, resume="not-a-thread")
        assert failure.value.kind == "ResumeFailed"
    assert world.wait_no_codex() == []


def test_question_from_request_user_input_is_answered(sidecar, world):
    questions = {"questions": [{"id": "color", "header": "Color", "question": "Which color?",
                                "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]}]}
    world.api.script(fo._envelope([fo.function_call_item("request_user_input", questions)]), fo.text("blue it is"))
    session = open_codex(sidecar, world, configure={"mode": "plan"})["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "ask me"})
    opened = sidecar.events(session, "RequestOpened", timeout=60)[-1]["kind"]["RequestOpened"]["Question"]
    assert opened["questions"][0]["text"] == "Which color?"
    assert [c["label"] for c in opened["questions"][0]["choices"]] == ["Red", "Blue"]
    sidecar.ok({"cmd": "answer", "session": session, "request": opened["id"], "answer": {"Question": [{"Choices": ["Blue"]}]}})
    events = sidecar.events(session, "TurnEnded", timeout=60)
    assert text_of(events) == "blue it is"
    assert "Blue" in "\n".join(world.api.response_requests()[-1].input_texts())


def test_compact_summarizes_the_thread(sidecar, world):
    world.api.script(fo.text("first"), fo.text("summary of it all"), fo.text("after"))
    session = open_codex(sidecar, world)["id"]
    turn(sidecar, session, "one")
    sidecar.ok({"cmd": "compact", "session": session})
    events = sidecar.events(session, "TurnEnded", timeout=60)
    assert kinds(events).count("ContextCompacted") == 1
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}
    events = turn(sidecar, session, "two")
    assert text_of(events) == "after"
    assert "summary of it all" in "\n".join(world.api.response_requests()[-1].input_texts())


# -- secrets off the command line (issue 13) -------------------------------------------------

SECRETS = {
    "env": "sk-test-SECRET-env-1234",
    "auth": "sk-test-SECRET-bearer-5678",
    "header": "sk-test-SECRET-header-9012",
}


def test_mcp_secrets_never_reach_a_command_line_and_still_reach_the_servers(sidecar, world, tmp_path):
    http = HttpMcp()
    try:
        dump = tmp_path / "server-env.json"
        script = tmp_path / "env_mcp.py"
        script.write_text(ENV_STDIO_MCP)
        tests_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fakes")
        servers = [
            {"name": "envdump", "connection": {"Stdio": {
                "command": "python3", "args": [str(script), str(dump), tests_dir],
                "env": {"MCP_SECRET": SECRETS["env"], "MCP_MODE": "plain words"}}}},
            {"name": "web", "connection": {"Http": {
                "url": http.url, "headers": {"Authorization": f"Bearer {SECRETS['auth']}", "X-Team": SECRETS["header"]}}}},
        ]
        session = open_codex(sidecar, world, mcp_servers=servers)["id"]
        # The stdio server has its env under the real names, and nothing of our relay.
        env = json.loads(wait_for_file(str(dump)))
        assert env["MCP_SECRET"] == SECRETS["env"] and env["MCP_MODE"] == "plain words"
        assert not [name for name in env if name.startswith("AGENTPROTO_MCP_")]
        # The HTTP server got its headers.
        _method, headers, _body = http.wait_for("initialize")
        assert headers["authorization"] == f"Bearer {SECRETS['auth']}" and headers["x-team"] == SECRETS["header"]
        # No process of the world (npm launcher, native codex, the MCP server) has a value on its command line.
        pids = world.processes()
        assert len(world.codex_processes()) >= 2
        for pid, cmdline in cmdlines(pids).items():
            for secret in SECRETS.values():
                assert secret.encode() not in cmdline, (pid, cmdline)
        sidecar.ok({"cmd": "close", "session": session}, timeout=30)
    finally:
        http.close()


def test_an_mcp_env_name_a_shell_cannot_set_is_invalid_configuration(sidecar, world):
    servers = [{"name": "odd", "connection": {"Stdio": {"command": "/bin/true", "env": {"A-B": "1"}}}}]
    body = sidecar.error({"cmd": "open", "agent": "codex", "dir": world.work, "mcp_servers": servers}, 30)
    assert body["kind"] == "InvalidConfiguration" and "mcp_servers" in body["detail"] and "A-B" in body["detail"]
