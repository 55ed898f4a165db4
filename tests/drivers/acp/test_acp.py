"""The ACP driver end to end: ``serve`` frames against the SDK-built test agent.

tests/fakes/acp_test_agent.py is a real ACP agent (the PyPI `agent-client-protocol` SDK); every
test here speaks protocol 1 to a real ``python -m agentproto serve``, whose every line
the Sidecar helper validates against the schemas.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar import Sidecar, kind_name

AGENT_SCRIPT = Path(__file__).resolve().parents[2] / "fakes" / "acp_test_agent.py"

try:
    import acp  # noqa: F401
except ImportError:  # pragma: no cover - the message is the point
    pytest.fail(
        "the ACP test agent needs the `agent-client-protocol` SDK: run `.ci/run` "
        "(or pip install agent-client-protocol)",
        pytrace=False,
    )


def agent_ref(**extra: Any) -> dict[str, Any]:
    # The script itself is the path: it runs through its shebang, as an {"acp"} path must.
    return {"acp": {"name": "acp-test", "path": str(AGENT_SCRIPT), "args": [], **extra}}


@pytest.fixture
def sidecar():
    with Sidecar() as sc:
        yield sc


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def open_session(sc: Sidecar, workdir: Path, **options: Any) -> dict[str, Any]:
    return sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), **options}, timeout=30)


def turn(sc: Sidecar, session: str, text: str, timeout: float = 20) -> list[dict[str, Any]]:
    sc.ok({"cmd": "prompt", "session": session, "text": text})
    return sc.events(session, "TurnEnded", timeout)


def texts(events: list[dict[str, Any]], kind: str = "TextDelta") -> str:
    return "".join(e["kind"][kind]["text"] for e in events if kind_name(e["kind"]) == kind)


def of_kind(events: list[dict[str, Any]], kind: str) -> list[Any]:
    return [e["kind"][kind] for e in events if kind_name(e["kind"]) == kind]


def close(sc: Sidecar, session: str) -> None:
    sc.ok({"cmd": "close", "session": session}, timeout=20)
    sc.wait_for(lambda line: line.get("closed") == session, 20)


# -- handshake and session -----------------------------------------------------------------


def test_open_reports_details_config_and_commands(sidecar: Sidecar, workdir: Path) -> None:
    info = open_session(sidecar, workdir)
    details = info["details"]
    assert details["version"] == "9.8.7"
    assert details["auth"] == "Unknown"
    assert set(details["capabilities"]["features"]) >= {"Permissions", "Plan", "Images", "Resume"}
    assert details["capabilities"]["mcp_transports"] == ["Stdio", "Http"]
    options = {o["id"]: o for o in details["config_options"]}
    # Well-known ids by ACP category: model and mode, whatever the agent calls them.
    assert options["model"]["current"] == "small-1"
    assert [c["value"] for c in options["model"]["kind"]["Select"]["choices"]] == ["small-1", "large-2"]
    assert options["mode"]["current"] == "ask"
    assert options["fast"]["kind"] == "Boolean"
    assert info["configuration"]["options"] == {"mode": "ask", "model": "small-1", "fast": False}
    assert info["resume_token"] == "sess-1"
    # available_commands_update arrives after session/new: a SessionUpdated carries it.
    updated = sidecar.wait_for(
        lambda line: "event" in line and kind_name(line["event"]["kind"]) == "SessionUpdated", 10
    )
    commands = updated["event"]["kind"]["SessionUpdated"]["details"]["commands"]
    assert commands == [
        {"name": "review", "description": "Review the diff", "input_hint": "what to review"},
        {"name": "clear", "description": "Clear the context", "input_hint": None},
    ]
    assert "SlashCommands" in updated["event"]["kind"]["SessionUpdated"]["details"]["capabilities"]["features"]
    close(sidecar, info["id"])


def test_turn_maps_chunks_thoughts_plan_usage_title(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, "chunks")
    assert texts(events) == "Hello, world"
    assert texts(events, "ReasoningDelta") == "thinking..."
    thought_id = of_kind(events, "ReasoningDelta")[0]["message_id"]
    text_ids = {d["message_id"] for d in of_kind(events, "TextDelta")}
    assert len(text_ids) == 1 and thought_id not in text_ids
    ended = [m["message_id"] for m in of_kind(events, "MessageEnded")]
    assert ended == [thought_id, *text_ids]
    assert of_kind(events, "PlanUpdated") == [
        {
            "entries": [
                {"text": "look", "status": "Completed"},
                {"text": "answer", "status": "InProgress"},
                {"text": "rest", "status": "Pending"},
            ]
        }
    ]
    assert of_kind(events, "ContextUsage") == [{"used_tokens": 1234, "window_tokens": 200000, "cost_usd": 0.25}]
    titles = [u["title"] for u in of_kind(events, "SessionUpdated")]
    assert titles[-1] == "Greeting the world"
    end = of_kind(events, "TurnEnded")[0]
    assert end["stop"] == {"Completed": {"source": "Protocol"}}
    assert end["usage"] == {"input_tokens": 20, "cached_input_tokens": 5, "output_tokens": 10}
    info = sidecar.ok({"cmd": "info", "session": session})
    assert info["title"] == "Greeting the world"
    close(sidecar, session)


@pytest.mark.parametrize(
    ("text", "stop", "warning"),
    [
        ("refuse", "Refused", None),
        ("max", {"Completed": {"source": "Protocol"}}, "max_tokens"),
        ("turns", {"Completed": {"source": "Protocol"}}, "max_turn_requests"),
    ],
)
def test_stop_reasons(sidecar: Sidecar, workdir: Path, text: str, stop: Any, warning: str | None) -> None:
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, text)
    assert of_kind(events, "TurnEnded")[0]["stop"] == stop
    diagnostics = [d["message"] for d in of_kind(events, "Diagnostic")]
    if warning:
        assert any(warning in m for m in diagnostics), diagnostics
    else:
        assert not diagnostics
    close(sidecar, session)


# -- permissions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "option", "status"),
    [
        ({"Permission": "AllowOnce"}, "zz-yes-1", "Completed"),
        ({"Permission": "AllowAlways"}, "zz-always", "Completed"),
        ({"Permission": "DenyOnce"}, "zz-no", "Failed"),
        ({"Permission": "DenyAlways"}, "zz-never", "Failed"),
        ({"Deny": {"message": "not now"}}, "zz-no", "Failed"),
    ],
)
def test_permission_answer_selects_the_option_by_kind(
    sidecar: Sidecar, workdir: Path, answer: Any, option: str, status: str
) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "tool"})
    opened = sidecar.events(session, "RequestOpened", 20)
    first_tool = of_kind(opened, "ToolUpdated")
    assert first_tool[0]["kind"] == "Edit" and first_tool[0]["status"] == "Pending"
    assert first_tool[0]["input"] == {"Path": str(workdir / "edited.txt")}
    assert first_tool[0]["locations"] == [str(workdir / "edited.txt")]
    request = opened[-1]["kind"]["RequestOpened"]["Permission"]
    # Offered in the agent's order, by kind; the unusual ids never leak.
    assert request["options"] == ["DenyAlways", "AllowOnce", "AllowAlways", "DenyOnce"]
    assert request["tool"]["title"] == "Edit edited.txt (needs approval)"
    assert request["tool"]["id"] == "call-1"
    sidecar.ok({"cmd": "answer", "session": session, "request": request["id"], "answer": answer})
    events = sidecar.events(session, "TurnEnded", 20)
    assert f"outcome: {option}" in texts(events)
    final = of_kind(events, "ToolUpdated")[-1]
    assert final["status"] == status
    if status == "Completed":
        assert final["diffs"] == [{"path": str(workdir / "edited.txt"), "old_text": "a", "new_text": "b"}]
        assert final["output"] == "edited"
        assert final["raw"]["output"] == {"ok": True}
        assert final["raw"]["input"] == {"file_path": str(workdir / "edited.txt"), "new": "b"}
    close(sidecar, session)


def test_permission_cancel_answer_sends_cancelled(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "tool"})
    request = sidecar.events(session, "RequestOpened", 20)[-1]["kind"]["RequestOpened"]["Permission"]
    sidecar.ok({"cmd": "answer", "session": session, "request": request["id"], "answer": "Cancel"})
    events = sidecar.events(session, "TurnEnded", 20)
    assert "outcome: cancelled" in texts(events)
    close(sidecar, session)


def test_auto_approve_mode_answers_through_the_driver(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir, permission_mode="AutoApprove")["id"]
    events = turn(sidecar, session, "tool")
    assert "outcome: zz-yes-1" in texts(events)
    assert not of_kind(events, "RequestOpened")
    close(sidecar, session)


# -- cancel --------------------------------------------------------------------------------


def test_cancel_ends_a_slow_turn_cancelled(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "slow"})
    sidecar.events(session, "TextDelta", 20)
    sidecar.ok({"cmd": "cancel", "session": session})
    events = sidecar.events(session, "TurnEnded", 10)
    assert of_kind(events, "TurnEnded")[0]["stop"] == "Cancelled"
    # The session goes on.
    events = turn(sidecar, session, "chunks")
    assert texts(events) == "Hello, world"
    close(sidecar, session)


def test_cancel_answers_pending_permission_cancelled(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "slow-permission"})
    opened = sidecar.events(session, "RequestOpened", 20)
    request = opened[-1]["kind"]["RequestOpened"]["Permission"]
    assert request["tool"]["input"] == {"Command": {"command": "rm -rf build", "cwd": None}}
    assert request["tool"]["kind"] == "Execute"
    sidecar.ok({"cmd": "cancel", "session": session})
    events = sidecar.events(session, "TurnEnded", 10)
    assert {"request_id": request["id"]} in of_kind(events, "RequestClosed")
    assert of_kind(events, "TurnEnded")[0]["stop"] == "Cancelled"
    # The unfinished tool call is marked cancelled, as the spec asks of the client.
    assert of_kind(events, "ToolUpdated")[-1]["status"] == "Cancelled"
    close(sidecar, session)


# -- fs ------------------------------------------------------------------------------------


def test_fs_is_served_inside_dir_only(sidecar: Sidecar, tmp_path: Path, workdir: Path) -> None:
    (workdir / "notes.txt").write_text("one\ntwo\r\nthree\nfour\n")
    (tmp_path / "outside.txt").write_text("secret outside")
    (workdir / "escape").symlink_to(tmp_path)  # a link out of the session dir
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, "fs notes.txt")
    report = texts(events).splitlines()
    assert report[0] == "read='two\\r\\nthree\\n'"  # line 2, two lines, endings kept
    assert report[1] == "write=ok"
    assert (workdir / "notes.txt.out").read_text() == "written\nby agent\n"
    # ../outside.txt and escape/secret.txt (through the symlink) are refused both ways.
    assert report[2:] == [
        "outside-refused=-32602",
        "outside-write-refused=-32602",
        "outside-refused=-32602",
        "outside-write-refused=-32602",
    ]
    assert (tmp_path / "outside.txt").read_text() == "secret outside"
    assert not (tmp_path / "secret.txt").exists()
    close(sidecar, session)


# -- terminals -----------------------------------------------------------------------------


def test_terminal_runs_a_real_child_and_streams_its_output(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, "terminal")
    report = texts(events)
    head, _, output = report.partition("\n")
    assert head == "exit=7 truncated=True len=49 killed=SIGKILL released=gone"
    # The kept output is the last 50 bytes, cut forward to a character boundary.
    assert output == "é" * 24 + "\n"
    # The app saw the whole output stream, as ToolOutputDelta of the tool call.
    streamed = "".join(d["text"] for d in of_kind(events, "ToolOutputDelta") if d["tool_id"] == "call-t")
    assert streamed == f"hello from 42 {workdir}\n" + "é" * 40 + "\n"
    tool = of_kind(events, "ToolUpdated")[0]
    assert tool["kind"] == "Execute" and tool["input"] == {"Command": {"command": "python -c ...", "cwd": None}}
    close(sidecar, session)


# -- errors --------------------------------------------------------------------------------


def test_auth_required_at_session_new(workdir: Path) -> None:
    with Sidecar(env={"ACP_TEST_AUTH": "new"}) as sc:
        error = sc.error({"cmd": "open", "agent": agent_ref(), "dir": str(workdir)}, timeout=30)
        assert error["kind"] == "AuthRequired"
        assert "Terminal login" in error["message"] and "API key" in error["message"]
        assert error["login"] == [
            {
                "Terminal": {
                    "command": [str(AGENT_SCRIPT), "--login"],
                    "env": {"LOGIN": "1"},
                    "description": "Terminal login",
                }
            },
            {"EnvVar": {"name": "TEST_AGENT_KEY"}},
        ]
        # probe reports the auth state instead of failing.
        details = sc.ok({"cmd": "probe", "agent": agent_ref(), "dir": str(workdir)}, timeout=30)
        assert details["auth"] == {"Unauthenticated": {"login": error["login"]}}


def test_auth_required_at_prompt_fails_the_session(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "auth"})
    events = sidecar.events(session, "TurnEnded", 20)
    assert "Failed" in of_kind(events, "TurnEnded")[0]["stop"]
    error = sidecar.wait_for(lambda line: line.get("session") == session and "error" in line, 10)["error"]
    assert error["kind"] == "AuthRequired"
    assert error["login"][1] == {"EnvVar": {"name": "TEST_AGENT_KEY"}}
    sidecar.wait_for(lambda line: line.get("closed") == session, 10)


def test_agent_death_is_process_exited(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "die"})
    events = sidecar.events(session, "TurnEnded", 20)
    assert "Failed" in of_kind(events, "TurnEnded")[0]["stop"]
    error = sidecar.wait_for(lambda line: line.get("session") == session and "error" in line, 10)["error"]
    assert error["kind"] == "ProcessExited"
    assert error["status"] == "3"
    assert "the test agent dies" in error["stderr"]
    sidecar.wait_for(lambda line: line.get("closed") == session, 10)


def test_garbled_line_is_a_diagnostic(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, "garbage")
    assert any("not JSON" in d["message"] for d in of_kind(events, "Diagnostic"))
    assert texts(events) == "after garbage"
    close(sidecar, session)


def test_turn_timeout_bounds_a_prompt_that_never_answers(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir, env={"AGENTPROTO_ACP_TURN_TIMEOUT": "1"})["id"]
    started = time.monotonic()
    events = turn(sidecar, session, "hang", timeout=20)
    stop = of_kind(events, "TurnEnded")[0]["stop"]
    assert "did not answer" in stop["Failed"]["message"]
    assert time.monotonic() - started < 10
    close(sidecar, session)


def test_spawn_failure(sidecar: Sidecar, workdir: Path, tmp_path: Path) -> None:
    not_executable = tmp_path / "agent.txt"
    not_executable.write_text("not a program")
    error = sidecar.error(
        {"cmd": "open", "agent": {"acp": {"name": "x", "path": str(not_executable)}}, "dir": str(workdir)}
    )
    assert error["kind"] == "NotInstalled"


# -- configure, modes, resume, MCP, env ------------------------------------------------------


def test_configure_model_and_dependent_options(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "configure", "session": session, "option": "model", "value": "large-2"})
    updated = sidecar.wait_for(
        lambda line: (
            "event" in line
            and kind_name(line["event"]["kind"]) == "SessionUpdated"
            and line["event"]["kind"]["SessionUpdated"]["configuration"]["options"].get("model") == "large-2"
        ),
        10,
    )["event"]["kind"]["SessionUpdated"]
    options = {o["id"]: o["current"] for o in updated["details"]["config_options"]}
    assert options == {"mode": "code", "model": "large-2", "fast": False}  # the agent moved mode too
    sidecar.ok({"cmd": "configure", "session": session, "option": "fast", "value": True})
    error = sidecar.error({"cmd": "configure", "session": session, "option": "model", "value": "huge"})
    assert error["kind"] == "InvalidConfiguration"
    info = sidecar.ok({"cmd": "info", "session": session})
    assert info["configuration"]["options"]["fast"] is True
    close(sidecar, session)


def test_configure_at_open_and_agent_side_changes(sidecar: Sidecar, workdir: Path) -> None:
    info = open_session(sidecar, workdir, configure={"model": "large-2", "mode": "plan"})
    assert info["configuration"]["options"]["model"] == "large-2"
    assert info["configuration"]["options"]["mode"] == "plan"
    session = info["id"]
    error = sidecar.error({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), "configure": {"nope": "x"}}, 30)
    assert error["kind"] == "InvalidConfiguration"
    sidecar.ok({"cmd": "configure", "session": session, "option": "mode", "value": "ask"})
    events = turn(sidecar, session, "mode")
    last = of_kind(events, "SessionUpdated")[-1]
    assert last["configuration"]["options"]["mode"] == "plan"
    assert last["configuration"]["options"]["model"] == "large-2"
    close(sidecar, session)


def test_resume_uses_session_load_and_skips_the_replay(sidecar: Sidecar, workdir: Path) -> None:
    info = open_session(sidecar, workdir, resume="sess-old")
    assert info["resume_token"] == "sess-old"
    session = info["id"]
    events = turn(sidecar, session, "chunks")
    assert "old answer" not in texts(events)
    assert texts(events) == "Hello, world"
    close(sidecar, session)


def test_resume_prefers_session_resume(workdir: Path) -> None:
    with Sidecar(env={"ACP_TEST_RESUME": "1"}) as sc:
        info = sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), "resume": "sess-9"}, timeout=30)
        assert info["resume_token"] == "sess-9"
        close(sc, info["id"])


def test_fork_is_unsupported_without_session_fork(sidecar: Sidecar, workdir: Path) -> None:
    error = sidecar.error({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), "fork": "sess-1"}, 30)
    assert error["kind"] == "UnsupportedFeature"


def test_mcp_servers_are_passed_in_acp_form(sidecar: Sidecar, workdir: Path) -> None:
    servers = [
        {"name": "files", "connection": {"Stdio": {"command": "/bin/mcp", "args": ["-v"], "env": {"A": "1"}}}},
        {"name": "web", "connection": {"Http": {"url": "http://127.0.0.1:1/mcp", "headers": {"X": "y"}}}},
    ]
    session = open_session(sidecar, workdir, mcp_servers=servers)["id"]
    got = json.loads(texts(turn(sidecar, session, "mcp")))
    assert got == [
        {"args": ["-v"], "command": "/bin/mcp", "env": [{"name": "A", "value": "1"}], "name": "files"},
        {"headers": [{"name": "X", "value": "y"}], "name": "web", "type": "http", "url": "http://127.0.0.1:1/mcp"},
    ]
    close(sidecar, session)
    sse = [{"name": "old", "connection": {"Sse": {"url": "http://127.0.0.1:1/sse"}}}]
    error = sidecar.error({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), "mcp_servers": sse}, 30)
    assert error["kind"] == "UnsupportedFeature"


def test_agent_inherits_env_plus_session_env(workdir: Path) -> None:
    with Sidecar(env={"FROM_SIDECAR": "outer"}) as sc:
        info = sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), "env": {"FROM_SESSION": "inner"}}, 30)
        events = turn(sc, info["id"], "env FROM_SIDECAR FROM_SESSION")
        assert texts(events) == "FROM_SIDECAR=outer FROM_SESSION=inner"
        close(sc, info["id"])


def test_attachments_become_resource_links_and_images(sidecar: Sidecar, workdir: Path) -> None:
    (workdir / "a.txt").write_text("x")
    (workdir / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    session = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "look", "attachments": ["a.txt", "pic.png"]})
    events = sidecar.events(session, "TurnEnded", 20)
    assert texts(events) == "echo: look link: a.txt image: image/png"
    close(sidecar, session)


# -- process groups ------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; it has no running code.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_close_leaves_no_process_behind(sidecar: Sidecar, workdir: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, f"children {pid_file}")
    child = int(pid_file.read_text())
    assert texts(events) == f"child {child}"
    assert _alive(child)
    close(sidecar, session)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the agent's child (which ignores SIGTERM) outlived close"


def test_grandchild_is_killed_even_after_the_agent_exited(sidecar: Sidecar, workdir: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    session = open_session(sidecar, workdir)["id"]
    turn(sidecar, session, f"children {pid_file}")
    child = int(pid_file.read_text())
    sidecar.ok({"cmd": "prompt", "session": session, "text": "die"})
    sidecar.wait_for(lambda line: line.get("closed") == session, 20)
    assert not _alive(child), "the agent died; its child must not outlive the session"


def test_eof_closes_sessions_and_their_processes(workdir: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    sc = Sidecar()
    info = sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(workdir)}, 30)
    turn(sc, info["id"], f"children {pid_file}")
    child = int(pid_file.read_text())
    assert sc.close(20) == 0
    assert not _alive(child)


def test_flood_loses_nothing(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir)["id"]
    events = turn(sidecar, session, "flood 3000", timeout=60)
    assert texts(events) == "".join(f"{i} " for i in range(3000))
    close(sidecar, session)


# -- the Python client ---------------------------------------------------------------------


def test_python_client_drives_an_acp_agent(workdir: Path) -> None:
    from agentproto.client import AgentProtoError, Runtime, kind_of

    with Runtime.start() as rt:
        session = rt.open(agent_ref(), dir=str(workdir))
        assert session.info["details"]["version"] == "9.8.7"
        session.prompt("tool")
        text = []
        for event in session.events(timeout=20):
            kind = kind_of(event)
            if kind == "RequestOpened":
                request = event["kind"]["RequestOpened"]["Permission"]
                session.answer(request["id"], {"Permission": "AllowAlways"})
            elif kind == "TextDelta":
                text.append(event["kind"]["TextDelta"]["text"])
            elif kind == "TurnEnded":
                assert event["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
                break
        assert "".join(text) == "outcome: zz-always"
        session.configure("model", "large-2")
        assert session.refresh()["configuration"]["options"]["model"] == "large-2"
        session.close()
        details = rt.probe(agent_ref(), dir=str(workdir))
        assert details["auth"] == "Unknown" and details["version"] == "9.8.7"
    env = {**os.environ, "ACP_TEST_AUTH": "new"}
    with Runtime.start(env=env) as rt:
        with pytest.raises(AgentProtoError) as raised:
            rt.open(agent_ref(), dir=str(workdir))
        assert raised.value.kind == "AuthRequired"
        assert raised.value.login[1] == {"EnvVar": {"name": "TEST_AGENT_KEY"}}


def test_resume_is_unsupported_without_load_or_resume(workdir: Path) -> None:
    with Sidecar(env={"ACP_TEST_NO_LOAD": "1"}) as sc:
        info = sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(workdir)}, 30)
        assert "Resume" not in info["details"]["capabilities"]["features"]
        close(sc, info["id"])
        error = sc.error({"cmd": "open", "agent": agent_ref(), "dir": str(workdir), "resume": "sess-1"}, 30)
        assert error["kind"] == "UnsupportedFeature"


def test_instructions_lead_the_first_prompt_only(sidecar: Sidecar, workdir: Path) -> None:
    session = open_session(sidecar, workdir, instructions="Be brief.")["id"]
    assert texts(turn(sidecar, session, "hello")) == "echo: Be brief. hello"
    assert texts(turn(sidecar, session, "again")) == "echo: again"
    close(sidecar, session)


def test_generate_returns_the_text(sidecar: Sidecar, workdir: Path) -> None:
    text = sidecar.ok({"cmd": "generate", "agent": agent_ref(), "dir": str(workdir), "prompt": "chunks"}, 30)
    assert text == "Hello, world"
    # An agent that reaches for a tool fails generate.
    error = sidecar.error({"cmd": "generate", "agent": agent_ref(), "dir": str(workdir), "prompt": "tool"}, 30)
    assert error["kind"] == "ProtocolFailed"


def test_discover_lists_missing_acp_agents_with_hints(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path), "NPM_CONFIG_PREFIX": str(tmp_path / "npm")}
    with Sidecar(env=env) as sc:
        report = sc.ok({"cmd": "discover"}, 30)
    missing = {m["id"]: m for m in report["missing"]}
    for agent_id, hint in [
        ("gemini", "@google/gemini-cli"),
        ("claude-acp", "@zed-industries/claude-agent-acp"),
        ("codex-acp", "@zed-industries/codex-acp"),
        ("cursor", "cursor.com/install"),
        ("qwen", "@qwen-code/qwen-code"),
        ("kiro", "kiro"),
        ("opencode", "opencode"),
        ("goose", "goose"),
    ]:
        assert agent_id in missing, f"{agent_id} should be missing here"
        assert hint in missing[agent_id]["install_hint"]
        assert "PATH" in missing[agent_id]["searched"]
    assert str(tmp_path / ".local" / "bin" / "cursor-agent") in missing["cursor"]["searched"]


def test_handshake_timeout_and_exit_during_open(sidecar: Sidecar, workdir: Path) -> None:
    silent = {"acp": {"name": "silent", "path": "/bin/sleep", "args": ["30"]}}
    started = time.monotonic()
    error = sidecar.error(
        {"cmd": "open", "agent": silent, "dir": str(workdir), "env": {"AGENTPROTO_ACP_HANDSHAKE_TIMEOUT": "1"}}, 20
    )
    assert error["kind"] == "HandshakeTimeout"
    assert time.monotonic() - started < 10
    quitter = {"acp": {"name": "quitter", "path": "/bin/false", "args": []}}
    error = sidecar.error({"cmd": "open", "agent": quitter, "dir": str(workdir)}, 20)
    assert error["kind"] == "ProcessExited" and error["status"] == "1"


def test_record_wire_keeps_the_acp_conversation(sidecar: Sidecar, workdir: Path, tmp_path: Path) -> None:
    record = tmp_path / "wire.jsonl"
    session = open_session(sidecar, workdir, record_wire=str(record))["id"]
    turn(sidecar, session, "chunks")
    close(sidecar, session)
    entries = [json.loads(line) for line in record.read_text().splitlines() if '"line"' in line]
    sent = [json.loads(e["line"]).get("method") for e in entries if e["dir"] == "to_agent"]
    assert sent[:3] == ["initialize", "session/new", "session/prompt"]
    assert any('"agent_message_chunk"' in e["line"] for e in entries if e["dir"] == "from_agent")


def test_qwen_starts_with_acp_not_the_deprecated_flag(tmp_path: Path, workdir: Path) -> None:
    # qwen-code 0.24.4 warns that --experimental-acp is deprecated: the catalog starts it with
    # --acp. A `qwen` on PATH that notes its arguments, then is the test agent.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv = tmp_path / "argv"
    qwen = bin_dir / "qwen"
    qwen.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\nexec {AGENT_SCRIPT}\n')
    qwen.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    with Sidecar(env=env) as sc:
        info = sc.ok({"cmd": "open", "agent": "qwen", "dir": str(workdir)}, 30)
        sc.ok({"cmd": "close", "session": info["id"]}, 20)
    assert argv.read_text().split() == ["--acp"]
